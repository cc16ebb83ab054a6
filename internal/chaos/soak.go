package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// fault is one scheduled fault of the soak.
type fault struct {
	at   time.Duration
	kind string // restart, terminate, kill, stop, leader, event:<kind> (events.go)
}

// schedule spreads the configured faults over the soak: restarts evenly,
// the others evenly with their own offsets, all between 10 % and 85 % of
// the duration so that the end of the run sees every kind recovered from.
func schedule(cfg Config) []fault {
	var fs []fault
	spread := func(kind string, n int, offset float64) {
		for i := range n {
			frac := 0.1 + 0.75*(float64(i)+offset)/float64(n)
			fs = append(fs, fault{at: time.Duration(frac * float64(cfg.Duration)), kind: kind})
		}
	}
	spread("restart", cfg.Restarts, 0.5)
	spread("terminate", cfg.Terminates, 0.25)
	spread("kill", cfg.Kills, 0.1)
	spread("leader", cfg.LeaderKills, 0.7)
	spread("stop", cfg.Stops, 0.4)
	if !cfg.NoEvents {
		for _, e := range soakEvents {
			fs = append(fs, fault{at: time.Duration(e.at * float64(cfg.Duration)), kind: "event:" + e.kind})
		}
	}
	slices.SortStableFunc(fs, func(a, b fault) int { return int(a.at - b.at) })
	return fs
}

// runSoak is scenario 1: load, faults on a schedule, drain, verify.
func runSoak(ctx context.Context, cfg Config, out io.Writer) (*verdict, error) {
	log := cfg.Logger.With("scenario", "soak")
	cl := &cluster{root: cfg.Root, name: cfg.Cluster, port: cfg.Port}
	admin, err := cl.start(ctx)
	if err != nil {
		return nil, err
	}
	const dbName = "chaos_soak"
	dbURL, err := freshDatabase(ctx, admin, dbName)
	if err != nil {
		return nil, err
	}
	sup := &supervisor{runDir: cfg.RunDir, log: log, restartDelay: 2 * time.Second}
	f := &fleet{cfg: cfg, url: dbURL, adminDB: dbURL, dbName: dbName, topics: soakTopics(cfg), sup: sup}
	defer sup.stopAll(context.Background(), 10*time.Second)
	// The fault timeline: with its S line the verifier allows a
	// redelivery of a handled message only when a recorded fault explains it.
	if f.timeline, err = newRecorder(filepath.Join(cfg.RunDir, "harness.rec")); err != nil {
		return nil, err
	}
	defer f.timeline.Close()
	if err := f.timeline.write(line("S", time.Now().UnixNano())); err != nil {
		return nil, fmt.Errorf("soak: timeline: %w", err)
	}
	if err := f.setup(ctx); err != nil {
		return nil, err
	}
	if err := f.startSchedulers(2); err != nil {
		return nil, err
	}
	if err := f.startWorkers(); err != nil {
		return nil, err
	}
	if err := f.startProducers(ctx); err != nil {
		return nil, err
	}
	log.Info("soak running", "duration", cfg.Duration, "rate_txn_s", cfg.Rate, "workers", len(f.workers),
		"records", cfg.RunDir)
	var fc faultCounts
	var el eventLog
	kills := 0
	start := time.Now()
	for _, ft := range schedule(cfg) {
		select {
		case <-ctx.Done():
			f.stopProducers()
			return nil, ctx.Err()
		case <-time.After(time.Until(start.Add(ft.at))):
		}
		var err error
		switch ft.kind {
		case "restart":
			log.Info("fault: pg_ctl stop -m immediate")
			if err = cl.crash(ctx); err == nil {
				time.Sleep(2 * time.Second)
				if _, err = cl.start(ctx); err == nil {
					err = waitReady(ctx, dbURL, 60*time.Second)
					fc.Restarts++
					log.Info("fault: server restarted")
				}
			}
		case "terminate":
			var n int
			n, err = f.terminate(ctx, 3)
			fc.Terminated += n
			log.Info("fault: pg_terminate_backend", "backends", n)
		case "kill":
			if kills++; kills%2 == 0 && len(f.rejoin) > 0 {
				f.killWorkerIn(f.rejoin, &fc)
			} else {
				f.killWorker(&fc)
			}
		case "leader":
			err = f.killLeader(ctx, &fc)
		case "stop":
			f.stopClient(&fc)
		default:
			if e, ok := strings.CutPrefix(ft.kind, "event:"); ok {
				f.event(ctx, e, &el)
			}
		}
		if err != nil {
			if ft.kind == "restart" {
				f.stopProducers()
				return nil, fmt.Errorf("soak: restart: %w", err)
			}
			log.Warn("fault not injected", "fault", ft.kind, "error", err)
		}
	}
	select {
	case <-ctx.Done():
		f.stopProducers()
		return nil, ctx.Err()
	case <-time.After(time.Until(start.Add(cfg.Duration))):
	}
	f.stopProducers()
	log.Info("producers stopped; draining", "committed_txns", f.prod.committed.Load(),
		"rolled_back", f.prod.rolledBack.Load(), "unknown", f.prod.unknown.Load(), "messages", f.prod.messages.Load(),
		"kinds_committed_txns", f.kprod.committed.Load(), "kinds_rolled_back", f.kprod.rolledBack.Load(),
		"kinds_unknown", f.kprod.unknown.Load(), "kinds_messages", f.kprod.messages.Load(),
		"sequence_gaps_filled", f.kprod.filled())
	took, derr := f.drain(ctx)
	if derr != nil {
		log.Error("drain incomplete (verifying anyway)", "error", derr)
	} else {
		log.Info("drained", "took", took.Round(time.Millisecond))
	}
	stopping := time.Now()
	sup.stopAll(ctx, 10*time.Second)
	log.Info("children stopped", "took", time.Since(stopping).Round(time.Millisecond))
	v, err := verify(ctx, dbURL, cfg.RunDir, f.topics)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "\n== soak: %s, %d producer transactions/s, %d workers, 2 schedulers; drained in %s\n", cfg.Duration,
		int(cfg.Rate), len(f.workers), took.Round(100*time.Millisecond))
	fmt.Fprintf(out, "faults: %d immediate restarts, %d backends terminated, %d consumers SIGKILLed mid-page "+
		"(+%d while idle), %d scheduler leaders SIGKILLed, late acks up to %d per SQL consumer, %d client workers "+
		"shut down (mid-page when a handler ran), handlers over the lease up to %d per client worker; "+
		"unplanned child exits %d\n", fc.Restarts, fc.Terminated, fc.KilledMidPage, fc.KilledOther, fc.LeaderKills,
		cfg.LateAcks, fc.Stopped, cfg.Overruns, sup.failures())
	if len(el.done)+len(el.failed) > 0 {
		fmt.Fprintln(out, el.String())
	}
	v.print(out)
	if derr != nil {
		fmt.Fprintf(out, "drain: %v\n", derr)
	}
	if len(el.failed) > 0 {
		return v, fmt.Errorf("soak: scripted events failed: %s", strings.Join(el.failed, "; "))
	}
	if f.kprod != nil && !f.kprod.filled() {
		return v, errors.New("soak: the sequence producer could not fill its gaps at the end")
	}
	if v.Overruns == 0 && cfg.Overruns > 0 {
		return v, errors.New("soak: no client handler ran longer than the lease")
	}
	if v.Stops == 0 && cfg.Stops > 0 {
		return v, errors.New("soak: no client worker was shut down mid-page")
	}
	if fc.Restarts < cfg.Restarts || fc.KilledMidPage+fc.KilledOther < min(cfg.Kills, 1) {
		return v, fmt.Errorf("soak: faults not injected as planned: %+v", fc)
	}
	return v, nil
}
