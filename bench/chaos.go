package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

func init() { register(80, chaosScenario{}) }

// chaosScenario: the seed's kill-and-resurrect test. A reference-mode pubsub
// topic with 3 groups at a steady publish rate; one group's consumer stops
// (no unsubscribe) with heartbeat_timeout 2 s and dead_after_misses 3;
// fanout.run_maintenance() runs every second (plus a partition rotation and
// fanout._cleanup_partitions with the clock 2 h ahead so that retention
// (1 minute) is no obstacle and cleanup can reclaim). Measured: time from the
// kill to status 'dead', storage growth while dead, the longest gap between
// deliveries of the two healthy groups, and resurrection
// (fanout.resurrect_group with backfill, since in reference mode a heartbeat
// revives the group without backfill): time until caught up and the backfill
// rows processed vs max_backfill.
type chaosScenario struct{}

func (chaosScenario) Name() string { return "chaos" }
func (chaosScenario) Title() string {
	return "8. kill-and-resurrect: dead detection, storage while dead, others never stall, bounded backfill"
}

const (
	chaosRate        = 100.0
	chaosMaxBackfill = 50_000
)

type chaosGroup struct {
	name     string
	running  atomic.Bool
	last     atomic.Int64 // unix nanos of the last non-empty page
	maxGap   atomic.Int64
	received atomic.Int64
}

func (chaosScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	db, err := env.NewDB(ctx, "chaos", 16)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	const topic = "chaos"
	if _, err := db.Pool.Exec(ctx, `SELECT fanout.create_topic($1, semantics => 'pubsub', completion => 'reference',
		retention => '1 minute', partition_interval => '1 minute', zero_subscription_retention => '1 minute')`, topic); err != nil {
		return nil, err
	}
	groups := []*chaosGroup{{name: "healthy1"}, {name: "healthy2"}, {name: "victim"}}
	for _, g := range groups {
		if _, err := db.Pool.Exec(ctx, `SELECT * FROM fanout.subscribe($1, $2, heartbeat_timeout => '2 seconds',
			dead_after_misses => 3, max_backfill => $3)`, topic, g.name, chaosMaxBackfill); err != nil {
			return nil, err
		}
	}
	warm := env.Dur(5*time.Second, 2*time.Second)
	deadPhase := env.Dur(10*time.Second, 5*time.Second)
	env.Baseline("chaos: healthy run",
		fmt.Sprintf("reference-mode topic, 3 groups, %g msg/s (1 msg/txn); heartbeat_timeout 2 s, dead_after_misses 3 "+
			"(dead expected ≈ 6 s after the last sign of life, + ≤ 1 s maintenance tick); warm-up %s, dead phase %s after detection",
			chaosRate, warm, deadPhase))

	cctx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 8)
	var wg sync.WaitGroup
	for _, g := range groups {
		g.running.Store(true)
		g.last.Store(time.Now().UnixNano())
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cctx.Err() == nil {
				if !g.running.Load() {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				r, err := readAck(cctx, db.Pool, topic, g.name, g.name+"-1", 100, nil)
				if err != nil {
					if cctx.Err() == nil {
						errc <- err
					}
					return
				}
				if r.N == 0 {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				now := time.Now().UnixNano()
				if gap := now - g.last.Swap(now); gap > g.maxGap.Load() {
					g.maxGap.Store(gap)
				}
				g.received.Add(int64(r.N))
			}
		}()
	}
	// Maintenance every second.
	var maintRounds atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
			}
			if _, err := db.Pool.Exec(cctx, `SELECT fanout.run_maintenance()`); err != nil {
				if cctx.Err() == nil {
					errc <- fmt.Errorf("run_maintenance: %w", err)
				}
				return
			}
			if err := rotate(cctx, db.Pool); err != nil {
				if cctx.Err() == nil {
					errc <- err
				}
				return
			}
			if _, err := db.Pool.Exec(cctx, `SELECT fanout._cleanup_partitions(now() + interval '2 hours')`); err != nil {
				if cctx.Err() == nil {
					errc <- fmt.Errorf("cleanup: %w", err)
				}
				return
			}
			maintRounds.Add(1)
		}
	}()
	pub := startPublisher(cctx, db.Pool, topic, chaosRate, 2)
	fail := func(err error) ([]Result, error) {
		_ = pub.Stop()
		stop()
		wg.Wait()
		return nil, err
	}
	sleepOrErr := func(d time.Duration) error {
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return pub.Err()
		}
	}
	status := func(g string) (st string, lag int64, bfStatus string, bfProcessed, bfTotal *int64, err error) {
		err = db.Pool.QueryRow(ctx, `SELECT status, lag_messages, backfill_status, backfill_processed, backfill_total
			FROM fanout.groups WHERE topic = $1 AND group_name = $2`, topic, g).Scan(&st, &lag, &bfStatus, &bfProcessed, &bfTotal)
		return
	}
	if err := sleepOrErr(warm); err != nil {
		return fail(err)
	}
	// Kill the victim (it stops reading; no unsubscribe).
	victim := groups[2]
	victim.running.Store(false)
	killAt := time.Now()
	var detect time.Duration
	for {
		if err := sleepOrErr(100 * time.Millisecond); err != nil {
			return fail(err)
		}
		st, _, _, _, _, err := status(victim.name)
		if err != nil {
			return fail(err)
		}
		if st == "dead" {
			detect = time.Since(killAt)
			break
		}
		if time.Since(killAt) > 60*time.Second {
			return fail(fmt.Errorf("victim not dead 60 s after the kill (status %s)", st))
		}
	}
	msgs0, bytes0, err := topicSize(ctx, db.Pool, topic)
	if err != nil {
		return fail(err)
	}
	if err := sleepOrErr(deadPhase); err != nil {
		return fail(err)
	}
	msgs1, bytes1, err := topicSize(ctx, db.Pool, topic)
	if err != nil {
		return fail(err)
	}
	// Resurrect with backfill, restart its consumer, wait until caught up.
	var newStatus string
	if err := db.Pool.QueryRow(ctx, `SELECT fanout.resurrect_group($1, $2, backfill => true)`, topic, victim.name).
		Scan(&newStatus); err != nil {
		return fail(fmt.Errorf("resurrect_group: %w", err))
	}
	resAt := time.Now()
	victim.running.Store(true)
	var catchUp time.Duration
	var bfStatus string
	var bfProcessed, bfTotal *int64
	for {
		if err := sleepOrErr(100 * time.Millisecond); err != nil {
			return fail(err)
		}
		var st string
		var lag int64
		st, lag, bfStatus, bfProcessed, bfTotal, err = status(victim.name)
		if err != nil {
			return fail(err)
		}
		if st == "active" && lag == 0 && bfStatus != "in_progress" && bfStatus != "not_started" {
			catchUp = time.Since(resAt)
			break
		}
		if time.Since(resAt) > env.Dur(120*time.Second, 30*time.Second) {
			catchUp = -1
			break
		}
	}
	perr := pub.Stop() // before cancelling its context: in-flight publishes finish
	stop()
	wg.Wait()
	select {
	case err := <-errc:
		return nil, err
	default:
	}
	if perr != nil {
		return nil, fmt.Errorf("publish: %w", perr)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	maxGap := time.Duration(max(groups[0].maxGap.Load(), groups[1].maxGap.Load()))
	growMsgs := 100 * (float64(msgs1) - float64(msgs0)) / float64(max(msgs0, 1))
	growBytes := 100 * (float64(bytes1) - float64(bytes0)) / float64(max(bytes0, 1))
	processed, total := int64(0), int64(0)
	if bfProcessed != nil {
		processed = *bfProcessed
	}
	if bfTotal != nil {
		total = *bfTotal
	}
	env.Logf("dead after %.1f s; storage at detection %d msgs / %s, at end of dead phase %d msgs / %s (%+.0f %% msgs, %+.0f %% bytes); "+
		"healthy groups max delivery gap %s ms; resurrected (%s), caught up in %.1f s, backfill %s %d/%d (max_backfill %d); "+
		"%d maintenance rounds, ack deadlocks retried so far %d",
		detect.Seconds(), msgs0, fmtBytes(bytes0), msgs1, fmtBytes(bytes1), growMsgs, growBytes, fmtMs(ms(maxGap)), newStatus,
		catchUp.Seconds(), bfStatus, processed, total, chaosMaxBackfill, maintRounds.Load(), ackDeadlocks.Load())
	details := map[string]any{"detect_s": detect.Seconds(), "msgs_at_detection": msgs0, "bytes_at_detection": bytes0,
		"msgs_end_dead": msgs1, "bytes_end_dead": bytes1, "healthy_max_gap_ms": ms(maxGap), "catch_up_s": catchUp.Seconds(),
		"backfill_status": bfStatus, "backfill_processed": processed, "backfill_total": total, "max_backfill": chaosMaxBackfill,
		"dead_phase_s": deadPhase.Seconds(), "rate": chaosRate}
	var out []Result
	out = append(out, Result{Scenario: "chaos", Case: "dead detection time (kill → status dead)", Unit: "s", Value: detect.Seconds(),
		Ratio: ratio(0, 0), ValueText: fmt.Sprintf("%.1f s", detect.Seconds()), Target: "≤ 8 s (2 s × 3 misses + tick)",
		Pass: boolp(detect <= 8*time.Second), Details: details})
	growth := max(growMsgs, growBytes)
	out = append(out, Result{Scenario: "chaos", Case: fmt.Sprintf("storage growth while dead (%s)", deadPhase), Unit: "%",
		Value: growth, Ratio: ratio(0, 0),
		ValueText: fmt.Sprintf("%+.0f %% msgs (%d → %d), %+.0f %% bytes (%s → %s)", growMsgs, msgs0, msgs1, growBytes,
			fmtBytes(bytes0), fmtBytes(bytes1)),
		Target: "< 10 %", Pass: boolp(growth < 10),
		Note: "fanout.topics messages and bytes when the group was detected dead vs at the end of the dead phase"})
	out = append(out, Result{Scenario: "chaos", Case: "healthy groups: longest gap between deliveries", Unit: "ms", Value: ms(maxGap),
		Ratio: ratio(0, 0), Target: "< 1000 ms (never stalled)", Pass: boolp(maxGap < time.Second),
		Note: fmt.Sprintf("at %g msg/s a page arrives every ~10-50 ms; a gap ≥ 1 s counts as a stall", chaosRate)})
	cu := Result{Scenario: "chaos", Case: "resurrection: caught up after resurrect_group(backfill)", Unit: "s",
		Value: catchUp.Seconds(), Ratio: ratio(0, 0),
		ValueText: fmt.Sprintf("%.1f s, backfill %s %s/%s rows", catchUp.Seconds(), bfStatus, fmtNum(float64(processed)), fmtNum(float64(total))),
		Target:    fmt.Sprintf("caught up; backfill ≤ max_backfill %s", fmtNum(chaosMaxBackfill)),
		Pass:      boolp(catchUp >= 0 && processed <= chaosMaxBackfill && total <= chaosMaxBackfill)}
	if catchUp < 0 {
		cu.ValueText = fmt.Sprintf("not caught up in time, backfill %s %d/%d", bfStatus, processed, total)
	}
	out = append(out, cu)
	return out, nil
}
