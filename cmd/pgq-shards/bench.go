package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfanout/pgq/client"
	"github.com/pgfanout/pgq/orchestrator"
	"github.com/pgfanout/pgq/shards"
)

// The measurement of `make shards` (scripts/shards.sh starts the clusters
// and their cgroups): for N = 1, 2, 4 shards, each its own cluster capped
// to the same CPU share (-cpu per -period), 8 producers (4 publishing
// batches of 100, 4 single messages; each with one call in flight per
// shard) over 4×N pubsub topics placed round-robin on the shards, 4 groups
// draining every topic (one consumer per group and shard), for -seconds;
// the rate is published plus consumed messages per second, printed with
// each shard's CPU. Capped, a saturation check: N = 1 with the N = 4 run's
// 32 producer streams. Then
// the caps are lifted until every group has every published message (lost
// = published messages a group never got). The same again uncapped (the
// control). Then the PL/Proxy path against the direct one: 8 producers
// publishing batches of 100 to one capped shard, through
// fanout_proxy.publish_batch in the directory database vs directly. Last,
// kill-one: N = 4 (capped when the others were) for -seconds, then the 4th
// shard cluster stopped at once (-kill-cmd) and -seconds more: the other
// three shards' rate after the kill over their rate before it.

type benchOpts struct {
	directoryURL string        // maintenance database of the directory cluster
	shardURLs    []string      // maintenance databases of the shard clusters (4)
	cgroupKind   string        // v1, v2 or none
	cgroupDirs   []string      // one per shard cluster
	capNote      string        // why not capped (kind none)
	cpu          float64       // each shard's CPU share when capped
	period       time.Duration // the cap's period (cfs_period_us, cpu.max's period)
	seconds      int
	drain        time.Duration
	killCmd      string // stops the last shard cluster at once (the kill-one run); "" skips that run
}

const (
	dbName     = "pgq_shards"
	tplName    = "pgq_shards_tpl"
	dirDBName  = "pgq_shards_directory"
	groupCount = 4
	producers  = 8
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o benchOpts
	var shardURLs, cgDirs string
	fs.StringVar(&o.directoryURL, "directory-url", "", "URL of the directory cluster's maintenance database")
	fs.StringVar(&shardURLs, "shard-urls", "", "comma-separated URLs of the 4 shard clusters' maintenance databases")
	fs.StringVar(&o.cgroupKind, "cgroup-kind", "none", "v1 (cpu.cfs_quota_us), v2 (cpu.max) or none")
	fs.StringVar(&cgDirs, "cgroup-dirs", "", "comma-separated cgroup folders, one per shard cluster")
	fs.StringVar(&o.capNote, "cap-note", "", "why the clusters are not capped (with -cgroup-kind none)")
	fs.Float64Var(&o.cpu, "cpu", 0.1, "each shard's CPU share when capped (cores)")
	fs.DurationVar(&o.period, "period", 10*time.Millisecond, "the cap's period: a capped shard runs cpu×period, then waits for the next period")
	fs.IntVar(&o.seconds, "seconds", 10, "length of each measured run")
	fs.DurationVar(&o.drain, "drain", 3*time.Minute, "longest wait for the groups to drain after a run")
	fs.StringVar(&o.killCmd, "kill-cmd", "", "shell command that stops the 4th shard cluster at once (pg_ctl -m immediate): the kill-one run, last")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.shardURLs = splitList(shardURLs)
	o.cgroupDirs = splitList(cgDirs)
	if o.directoryURL == "" || len(o.shardURLs) < 4 {
		return errors.New("bench: -directory-url and 4 -shard-urls are needed")
	}
	if o.cgroupKind != "none" && len(o.cgroupDirs) < 4 {
		return errors.New("bench: -cgroup-dirs needs one folder per shard cluster")
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	b := &bench{o: o, out: stdout}
	defer b.uncap()
	if err := b.prepare(ctx); err != nil {
		return err
	}
	capped := o.cgroupKind != "none"
	if capped {
		fmt.Fprintf(stdout, "shards: each shard cluster capped to %.2f CPU (cgroup %s, %s per %s); directory/proxy and load generator uncapped, beside them\n",
			o.cpu, o.cgroupKind, time.Duration(o.cpu*float64(o.period)), o.period)
	} else {
		fmt.Fprintf(stdout, "shards: NOT capped: %s\n", o.capNote)
	}
	rates := map[string]float64{}
	pubRates := map[string]float64{} // published only; consumed is rates - pubRates
	var lost int64
	// Uncapped first: a freshly made cluster's first minute (autovacuum's
	// first passes over the new database, catalog caches, the first
	// connections) does not fit in a tenth of a core, and a capped run
	// that starts there measures that, not the shards (bench/NOTES.md).
	modes := []bool{false}
	if capped {
		modes = []bool{false, true}
	}
	for _, cap := range modes {
		for _, n := range []int{1, 2, 4} {
			r, err := b.fanoutRun(ctx, n, cap, false, 1)
			if err != nil {
				return err
			}
			rates[fmt.Sprintf("%v/%d", cap, n)] = r.rate
			pubRates[fmt.Sprintf("%v/%d", cap, n)] = r.pubRate
			lost += r.lost
		}
	}
	// The saturation check: N = 1 with as many calls in flight as N = 4
	// (4 streams per producer). About the N = 1 rate means one shard was
	// already the bound with 8 streams, so the gain at N = 4 is the
	// shards', not the extra streams'.
	if capped {
		r, err := b.fanoutRun(ctx, 1, true, false, 4)
		if err != nil {
			return err
		}
		lost += r.lost
		fmt.Fprintf(stdout, "shards: saturation check: N=1 capped with the N=4 run's 32 producer streams: %.0f msg/s, %.2f of N=1's\n",
			r.rate, r.rate/rates["true/1"])
	}
	proxy, err := b.proxyRun(ctx, capped)
	if err != nil {
		return err
	}
	x := func(cap bool, n int) float64 {
		return rates[fmt.Sprintf("%v/%d", cap, n)] / rates[fmt.Sprintf("%v/1", cap)]
	}
	// Last: the kill-one run stops a shard cluster for good (the script
	// stops every cluster afterwards).
	killOne := "n/a (no -kill-cmd)"
	if o.killCmd != "" {
		r, err := b.fanoutRun(ctx, 4, capped, true, 1)
		if err != nil {
			return err
		}
		lost += r.lost
		killOne = fmt.Sprintf("%.2f", r.killRatio)
	}
	if capped {
		fmt.Fprintf(stdout, "shards (uncapped control, %d cores shared): x2 %.2f, x4 %.2f\n", runtime.NumCPU(), x(false, 2), x(false, 4))
	}
	// The two halves of the rate apart: consumers fall behind in capped
	// runs, so a shard's CPU can go to cheap batch publishes instead of
	// consumption; the consume half alone says whether fan-out scales.
	half := func(cap bool, n int, consume bool) float64 {
		k, k1 := fmt.Sprintf("%v/%d", cap, n), fmt.Sprintf("%v/1", cap)
		if consume {
			return (rates[k] - pubRates[k]) / (rates[k1] - pubRates[k1])
		}
		return pubRates[k] / pubRates[k1]
	}
	fmt.Fprintf(stdout, "shards: halves: publish x2 %.2f, x4 %.2f; consume x2 %.2f, x4 %.2f\n",
		half(capped, 2, false), half(capped, 4, false), half(capped, 2, true), half(capped, 4, true))
	fmt.Fprintf(stdout, "shards: x2 %.2f, x4 %.2f, proxy %.2f, lost %d, kill-one %s\n", x(capped, 2), x(capped, 4), proxy, lost, killOne)
	return nil
}

type bench struct {
	o   benchOpts
	out io.Writer
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// setCap caps (or uncaps) shard clusters 0..3. Capped, their parent group
// weighs as much as 64 tasks against the rest of the machine (else a busy
// machine gives all shards together one task's share and no cap binds);
// uncapped, one task's weight again, so that the control run does not take
// the machine from everything else.
func (b *bench) setCap(on bool) error {
	if len(b.o.cgroupDirs) > 0 {
		parent := filepath.Dir(b.o.cgroupDirs[0])
		file, val := filepath.Join(parent, "cpu.shares"), "1024"
		if b.o.cgroupKind == "v2" {
			file, val = filepath.Join(parent, "cpu.weight"), "100"
		}
		if on {
			val = map[bool]string{true: "6400", false: "65536"}[b.o.cgroupKind == "v2"]
		}
		if err := os.WriteFile(file, []byte(val), 0o644); err != nil {
			return fmt.Errorf("bench: cgroup weight %s: %w", file, err)
		}
	}
	for _, d := range b.o.cgroupDirs {
		var file, val string
		period := int(b.o.period / time.Microsecond)
		quota := int(b.o.cpu * float64(period))
		switch b.o.cgroupKind {
		case "v1":
			file, val = filepath.Join(d, "cpu.cfs_quota_us"), "-1"
			if on {
				val = fmt.Sprint(quota)
			}
			if err := os.WriteFile(filepath.Join(d, "cpu.cfs_period_us"), []byte(fmt.Sprint(period)), 0o644); err != nil {
				return fmt.Errorf("bench: cgroup period: %w", err)
			}
		case "v2":
			file, val = filepath.Join(d, "cpu.max"), fmt.Sprintf("max %d", period)
			if on {
				val = fmt.Sprintf("%d %d", quota, period)
			}
		default:
			return nil
		}
		if err := os.WriteFile(file, []byte(val), 0o644); err != nil {
			return fmt.Errorf("bench: cgroup %s: %w", file, err)
		}
	}
	return nil
}

func (b *bench) uncap() { _ = b.setCap(false) }

func admin(ctx context.Context, u string, stmts ...string) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

func withDB(u, db string) string {
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		return u
	}
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", cfg.Host, cfg.Port, cfg.User, db)
}

// prepare migrates a template database on every shard cluster once.
func (b *bench) prepare(ctx context.Context) error {
	for _, u := range b.o.shardURLs {
		if err := admin(ctx, u, "DROP DATABASE IF EXISTS "+tplName+" WITH (FORCE)", "CREATE DATABASE "+tplName); err != nil {
			return fmt.Errorf("bench: template: %w", err)
		}
		if _, err := orchestrator.MigrateURL(ctx, withDB(u, tplName)); err != nil {
			return fmt.Errorf("bench: template: %w", err)
		}
	}
	return nil
}

// setup makes fresh databases: n shards (from the template) and the
// directory with the proxy; places topic i on shard i mod n.
func (b *bench) setup(ctx context.Context, n int, topics []string) (string, error) {
	for i := 0; i < n; i++ {
		if err := admin(ctx, b.o.shardURLs[i], "DROP DATABASE IF EXISTS "+dbName+" WITH (FORCE)",
			"CREATE DATABASE "+dbName+" TEMPLATE "+tplName); err != nil {
			return "", fmt.Errorf("bench: shard %d: %w", i, err)
		}
	}
	if err := admin(ctx, b.o.directoryURL, "DROP DATABASE IF EXISTS "+dirDBName+" WITH (FORCE)",
		"CREATE DATABASE "+dirDBName); err != nil {
		return "", fmt.Errorf("bench: directory: %w", err)
	}
	dirURL := withDB(b.o.directoryURL, dirDBName)
	conn, err := pgx.Connect(ctx, dirURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := shards.MigrateDirectory(ctx, conn); err != nil {
		return "", err
	}
	if _, err := shards.MigrateProxy(ctx, conn); err != nil {
		return "", err
	}
	for i := 0; i < n; i++ {
		if _, err := shards.AddShard(ctx, conn, fmt.Sprintf("s%d", i), withDB(b.o.shardURLs[i], dbName)); err != nil {
			return "", err
		}
	}
	for i, t := range topics {
		if _, err := shards.Place(ctx, conn, t, fmt.Sprintf("s%d", i%n)); err != nil {
			return "", err
		}
	}
	return dirURL, nil
}

func newClient(ctx context.Context, dirURL string) (*client.Sharded, error) {
	return client.NewSharded(ctx, dirURL, client.WithShardPoolConfig(func(_ string, c *pgxpool.Config) {
		c.MaxConns = 32
	}))
}

func payload(p, k int) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"p":%d,"k":%d}`, p, k)) }

// runResult is what fanoutRun measured.
type runResult struct {
	rate      float64 // published + consumed messages per second
	pubRate   float64 // published messages per second (consumed: rate - pubRate)
	lost      int64   // published messages a group never got (the killed shard's topics not counted)
	killRatio float64 // kill-one run: the other shards' rate after the kill / before it
}

// fanoutRun is one measured run with n shards, each producer with streams
// calls in flight per shard (1 but for the saturation check). With kill, it runs -seconds,
// stops the last shard cluster at once (-kill-cmd), and runs -seconds more:
// killRatio compares the other shards' rates (their topics' published +
// consumed messages per second) in the two halves; the seconds the stop
// command takes count in neither.
func (b *bench) fanoutRun(ctx context.Context, n int, capped, kill bool, streams int) (runResult, error) {
	topics := make([]string, 4*n)
	for i := range topics {
		topics[i] = fmt.Sprintf("bench.t%02d", i)
	}
	dirURL, err := b.setup(ctx, n, topics)
	if err != nil {
		return runResult{}, err
	}
	sc, err := newClient(ctx, dirURL)
	if err != nil {
		return runResult{}, err
	}
	defer sc.Close()
	for _, t := range topics {
		if _, err := sc.CreateTopic(ctx, t, "pubsub"); err != nil {
			return runResult{}, err
		}
		for g := 0; g < groupCount; g++ {
			if _, err := sc.Subscribe(ctx, t, fmt.Sprintf("g%d", g)); err != nil {
				return runResult{}, err
			}
		}
	}
	if err := b.setCap(capped); err != nil {
		return runResult{}, err
	}

	published := make([]atomic.Int64, len(topics))
	var pubTotal, singleTotal, conTotal, errs, downErrs atomic.Int64
	counting := atomic.Bool{}
	counting.Store(true)
	// The kill-one run's per-shard counts: phase 0 before the kill, 1 after
	// it, 2 while the stop command runs (not counted).
	var phase atomic.Int32
	var perShard, perShardCon [3][]atomic.Int64
	for i := range perShard {
		perShard[i] = make([]atomic.Int64, n)
		perShardCon[i] = make([]atomic.Int64, n)
	}
	// failed counts a failed call; one to the killed shard is expected (no
	// log line each).
	failed := func(what string, err error) {
		if kill && errors.Is(err, client.ErrShardUnreachable) {
			downErrs.Add(1)
			return
		}
		errs.Add(1)
		slog.Warn(what, "err", err)
	}

	// Each producer writes to every shard at once: one stream (one call in
	// flight) per shard, over that shard's topics. With one sequential loop
	// over all topics, a producer waits on whichever shard is throttled at
	// the moment (a capped cluster runs its quota, then stands still for
	// the rest of the period) and the other shards idle meanwhile: at N = 4
	// the 8 producers, not the shards, were the bound. At N = 1 a producer
	// has one stream, as before.
	prodCtx, stopProd := context.WithCancel(ctx)
	var pw sync.WaitGroup
	for p := 0; p < producers; p++ {
		for st := 0; st < n*streams; st++ {
			s := st % n
			pw.Add(1)
			go func(p, s int) {
				defer pw.Done()
				perShardTopics := (len(topics) - s + n - 1) / n
				for k := 0; prodCtx.Err() == nil; k++ {
					ti := s + ((p+k)%perShardTopics)*n
					var got int
					var err error
					if p < producers/2 {
						msgs := make([]client.Message, 100)
						for i := range msgs {
							msgs[i] = client.Message{Payload: payload(p, k*100+i)}
						}
						var ids []int64
						ids, err = sc.PublishBatch(prodCtx, topics[ti], msgs)
						got = len(ids)
					} else {
						_, err = sc.Publish(prodCtx, topics[ti], client.Message{Payload: payload(p, k)})
						got = 1
					}
					if err != nil {
						if prodCtx.Err() == nil {
							failed("publish", err)
							if errors.Is(err, client.ErrShardUnreachable) {
								// the killed shard: fails at once, so this
								// stream would spin; it tries again later
								select {
								case <-prodCtx.Done():
								case <-time.After(100 * time.Millisecond):
								}
							}
						}
						continue
					}
					published[ti].Add(int64(got))
					if counting.Load() {
						pubTotal.Add(int64(got))
						if p >= producers/2 {
							singleTotal.Add(1)
						}
						perShard[phase.Load()][ti%n].Add(int64(got))
					}
				}
			}(p, s)
		}
	}

	// consumers: one per group and shard, over that shard's topics;
	// consumed[g][t] is the set of message ids group g acked of topic t.
	consumed := make([][]map[int64]struct{}, groupCount)
	distinct := make([][]atomic.Int64, groupCount) // len(consumed[g][t]), readable while consumers run
	conCtx, stopCon := context.WithCancel(ctx)
	var cw sync.WaitGroup
	for g := 0; g < groupCount; g++ {
		consumed[g] = make([]map[int64]struct{}, len(topics))
		distinct[g] = make([]atomic.Int64, len(topics))
		for t := range topics {
			consumed[g][t] = map[int64]struct{}{}
		}
		for s := 0; s < n; s++ {
			cw.Add(1)
			go func(g, s int) {
				defer cw.Done()
				group := fmt.Sprintf("g%d", g)
				for conCtx.Err() == nil {
					// A round of the shard's topics that found no full page
					// waits 20 ms before the next (a polling consumer's
					// interval): reads of nearly empty topics would cost the
					// capped shard more than the messages they hand out.
					idle := true
					for ti := s; ti < len(topics); ti += n {
						page, err := sc.Read(conCtx, topics[ti], client.ReadOptions{Group: group, Consumer: fmt.Sprintf("c%d", s), MaxMessages: 100})
						if err != nil {
							if conCtx.Err() == nil {
								failed("read", err)
							}
							continue
						}
						if len(page.Messages) == 0 {
							continue
						}
						if len(page.Messages) == 100 {
							idle = false
						}
						if _, err := sc.Ack(conCtx, page.Lease); err != nil {
							if conCtx.Err() == nil {
								failed("ack", err)
							}
							continue // the lease expires; the messages come back
						}
						for _, m := range page.Messages {
							if _, seen := consumed[g][ti][m.ID]; !seen {
								consumed[g][ti][m.ID] = struct{}{}
								distinct[g][ti].Add(1)
							}
						}
						if counting.Load() {
							conTotal.Add(int64(len(page.Messages)))
							ph := phase.Load()
							perShard[ph][ti%n].Add(int64(len(page.Messages)))
							perShardCon[ph][ti%n].Add(int64(len(page.Messages)))
						}
					}
					if idle {
						select {
						case <-conCtx.Done():
						case <-time.After(20 * time.Millisecond):
						}
					}
				}
			}(g, s)
		}
	}

	start := time.Now()
	cpu0 := b.shardCPU(n)
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(b.o.seconds) * time.Second):
	}
	killed := -1 // the killed shard
	var killRatio float64
	if kill {
		before := time.Since(start).Seconds()
		phase.Store(2)
		killed = n - 1
		cpuK0 := b.shardCPU(killed)
		out, err := exec.CommandContext(ctx, "sh", "-c", b.o.killCmd).CombinedOutput()
		if err != nil {
			stopProd()
			pw.Wait()
			stopCon()
			cw.Wait()
			return runResult{}, fmt.Errorf("bench: -kill-cmd %q: %w: %s", b.o.killCmd, err, out)
		}
		phase.Store(1)
		t1 := time.Now()
		cpuK1 := b.shardCPU(killed)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(b.o.seconds) * time.Second):
		}
		after := time.Since(t1).Seconds()
		cpuE := b.shardCPU(killed)
		var r0, r1, c0, c1 int64
		for sh := 0; sh < killed; sh++ {
			r0 += perShard[0][sh].Load()
			r1 += perShard[1][sh].Load()
			c0 += perShardCon[0][sh].Load()
			c1 += perShardCon[1][sh].Load()
		}
		killRatio = (float64(r1) / after) / (float64(r0) / before)
		// the three shards' mean CPU (cores) before and after
		cpuNote := ""
		if cpu0 != nil && cpuK0 != nil && cpuK1 != nil && cpuE != nil {
			var u0, u1 float64
			for sh := 0; sh < killed; sh++ {
				u0 += (cpuK0[sh] - cpu0[sh]) / before / float64(killed)
				u1 += (cpuE[sh] - cpuK1[sh]) / after / float64(killed)
			}
			cpuNote = fmt.Sprintf("; shard CPU %.3f before, %.3f after", u0, u1)
		}
		fmt.Fprintf(b.out, "shards: kill-one: shards 0..%d %.0f msg/s (consume %.0f/s) before shard %d stopped, %.0f msg/s (consume %.0f/s) after (%.2f)%s; calls to it failed at once: %d\n",
			killed-1, float64(r0)/before, float64(c0)/before, killed, float64(r1)/after, float64(c1)/after, killRatio, cpuNote, downErrs.Load())
	}
	counting.Store(false)
	elapsed := time.Since(start).Seconds()
	cpuNote := ""
	if cpu1 := b.shardCPU(n); cpu0 != nil && cpu1 != nil && !kill {
		// the shards' processes' CPU time over the run, in cores
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf("%.3f", (cpu1[i]-cpu0[i])/elapsed)
		}
		cpuNote = ", shard CPU " + strings.Join(parts, "/")
	}
	stopProd()
	pw.Wait()
	rate := float64(pubTotal.Load()+conTotal.Load()) / elapsed
	pubRate := float64(pubTotal.Load()) / elapsed

	// Drain uncapped; the consumers' maps are read only after they stopped.
	if err := b.setCap(false); err != nil {
		stopCon()
		cw.Wait()
		return runResult{}, err
	}
	deadline := time.Now().Add(b.o.drain)
	var pending int64
	for {
		pending = 0
		for g := 0; g < groupCount; g++ {
			for ti := range topics {
				if ti%n == killed {
					continue // down for good
				}
				if d := published[ti].Load() - distinct[g][ti].Load(); d > 0 {
					pending += d
				}
			}
		}
		if pending == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopCon()
	cw.Wait()
	var lost int64
	for g := 0; g < groupCount; g++ {
		for ti := range topics {
			if ti%n == killed {
				continue
			}
			if d := published[ti].Load() - int64(len(consumed[g][ti])); d > 0 {
				lost += d
			}
		}
	}
	mode := "uncapped"
	if capped {
		mode = "capped"
	}
	if kill {
		mode += "/kill"
	}
	fmt.Fprintf(b.out, "shards: N=%d %-8s %2d topics: %8.0f msg/s (publish %7.0f/s, %5.0f/s of them single, consume %7.0f/s)%s, errors %d, lost %d%s\n",
		n, mode, len(topics), rate, pubRate, float64(singleTotal.Load())/elapsed, rate-pubRate, cpuNote, errs.Load(), lost, drainNote(pending))
	return runResult{rate: rate, pubRate: pubRate, lost: lost, killRatio: killRatio}, nil
}

func drainNote(pending int64) string {
	if pending > 0 {
		return fmt.Sprintf(" (NOT drained: %d left when the drain wait ran out)", pending)
	}
	return ""
}

// proxyRun measures publish_batch of 100 through the proxy against the
// direct path, on one (capped) shard, and returns proxy / direct.
func (b *bench) proxyRun(ctx context.Context, capped bool) (float64, error) {
	topics := []string{"bench.p0", "bench.p1", "bench.p2", "bench.p3"}
	dirURL, err := b.setup(ctx, 1, topics)
	if err != nil {
		return 0, err
	}
	sc, err := newClient(ctx, dirURL)
	if err != nil {
		return 0, err
	}
	defer sc.Close()
	for _, t := range topics {
		if _, err := sc.CreateTopic(ctx, t, "queue"); err != nil {
			return 0, err
		}
	}
	pc, err := pgxpool.ParseConfig(dirURL)
	if err != nil {
		return 0, err
	}
	pc.MaxConns = 2 * producers
	dir, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return 0, err
	}
	defer dir.Close()
	if err := b.setCap(capped); err != nil {
		return 0, err
	}
	defer b.uncap()
	measure := func(viaProxy bool) (float64, error) {
		runCtx, cancel := context.WithTimeout(ctx, time.Duration(b.o.seconds)*time.Second)
		defer cancel()
		var total atomic.Int64
		var firstErr error
		var once sync.Once
		var w sync.WaitGroup
		start := time.Now()
		for p := 0; p < producers; p++ {
			w.Add(1)
			go func(p int) {
				defer w.Done()
				payloads := make([]string, 100)
				msgs := make([]client.Message, 100)
				for k := 0; runCtx.Err() == nil; k++ {
					t := topics[(p+k)%len(topics)]
					var err error
					if viaProxy {
						for i := range payloads {
							payloads[i] = string(payload(p, k*100+i))
						}
						var c int64
						err = dir.QueryRow(runCtx, `SELECT count(*) FROM fanout_proxy.publish_batch($1, $2::jsonb[])`, t, payloads).Scan(&c)
						if err == nil && c != 100 {
							err = fmt.Errorf("proxy publish_batch returned %d ids", c)
						}
					} else {
						for i := range msgs {
							msgs[i] = client.Message{Payload: payload(p, k*100+i)}
						}
						_, err = sc.PublishBatch(runCtx, t, msgs)
					}
					if err != nil {
						if runCtx.Err() == nil {
							once.Do(func() { firstErr = err })
						}
						continue
					}
					total.Add(100)
				}
			}(p)
		}
		w.Wait()
		if firstErr != nil {
			return 0, fmt.Errorf("bench: proxy run (via proxy %v): %w", viaProxy, firstErr)
		}
		return float64(total.Load()) / time.Since(start).Seconds(), nil
	}
	direct, err := measure(false)
	if err != nil {
		return 0, err
	}
	proxied, err := measure(true)
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(b.out, "shards: publish_batch of 100, 8 producers, 1 shard: direct %.0f msg/s, via fanout_proxy %.0f msg/s\n",
		direct, proxied)
	return proxied / direct, nil
}

// shardCPU is the CPU time (seconds) of shard clusters 0..n-1 so far: the
// user and system time of the processes in each cluster's cgroup, with
// that of their exited children (backends the postmaster reaped). nil
// without cgroups or when /proc cannot be read.
func (b *bench) shardCPU(n int) []float64 {
	if len(b.o.cgroupDirs) < n {
		return nil
	}
	const ticks = 100 // USER_HZ
	out := make([]float64, n)
	for i := 0; i < n; i++ {
		procs, err := os.ReadFile(filepath.Join(b.o.cgroupDirs[i], "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, pid := range strings.Fields(string(procs)) {
			stat, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
			if err != nil {
				continue // exited meanwhile: its time is in the postmaster's
			}
			// after "(comm) ": state, then utime is the 12th field.
			f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
			if len(f) < 15 {
				continue
			}
			for _, v := range f[11:15] { // utime, stime, cutime, cstime
				var t float64
				if _, err := fmt.Sscan(v, &t); err == nil {
					out[i] += t / ticks
				}
			}
		}
	}
	return out
}
