package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

func init() { register(110, contentionScenario{}) }

// contentionScenario: backfill vs OLTP (seed). A pgbench-style OLTP load
// (2 clients, each operation = UPDATE one row of a 10,000-row plain table by
// primary key + SELECT another, autocommit) measured alone, then while a
// reference-mode backfill runs flat out: a late group subscribes with
// start_position 'earliest' to a topic holding N pending messages (another
// group has not acked them), and fanout._bitmap_step() is called in a loop
// with simple adaptive throttling (after a step that took > 10 ms, sleep as
// long as it took). Pass when the OLTP p95 stays < 2 × the baseline.
type contentionScenario struct{}

func (contentionScenario) Name() string { return "contention" }
func (contentionScenario) Title() string {
	return "11. backfill vs OLTP: pgbench-style OLTP p95 alone vs during an aggressive reference-mode backfill"
}

const oltpRows = 10_000

// oltpSample is one OLTP operation: when it ended and how long it took.
type oltpSample struct {
	end time.Time
	lat time.Duration
}

// oltpLoad runs 2 OLTP clients until stop is closed and returns every
// operation.
func oltpLoad(ctx context.Context, db *DB, stop <-chan struct{}) ([]oltpSample, int64, error) {
	var mu sync.Mutex
	var lats []oltpSample
	var ops atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []oltpSample
			defer func() { mu.Lock(); lats = append(lats, local...); mu.Unlock() }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				if _, err := db.Pool.Exec(ctx, `UPDATE oltp_accounts SET balance = balance + 1 WHERE id = $1`,
					1+rand.IntN(oltpRows)); err != nil {
					errc <- err
					return
				}
				var b int64
				if err := db.Pool.QueryRow(ctx, `SELECT balance FROM oltp_accounts WHERE id = $1`, 1+rand.IntN(oltpRows)).
					Scan(&b); err != nil {
					errc <- err
					return
				}
				now := time.Now()
				local = append(local, oltpSample{now, now.Sub(t0)})
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errc)
	return lats, ops.Load(), <-errc
}

func (contentionScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	n := env.N(200_000, 50_000)
	d := env.Dur(6*time.Second, 3*time.Second)
	db, err := env.NewDB(ctx, "contention", 16)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	for _, sql := range []string{
		`CREATE TABLE oltp_accounts (id int PRIMARY KEY, balance bigint NOT NULL DEFAULT 0, filler text NOT NULL)`,
		fmt.Sprintf(`INSERT INTO oltp_accounts SELECT g, 0, repeat('x', 80) FROM generate_series(1, %d) g`, oltpRows),
		`VACUUM ANALYZE oltp_accounts`,
		`SELECT fanout.create_topic('ref', semantics => 'pubsub', completion => 'reference')`,
		`SELECT * FROM fanout.subscribe('ref', 'early')`,
	} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			return nil, fmt.Errorf("%s: %w", sql, err)
		}
	}
	if _, err := fillTopic(ctx, db, "ref", "-", n); err != nil {
		return nil, err
	}
	if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		return nil, err
	}
	env.Baseline("OLTP alone", fmt.Sprintf("2 clients, each op = UPDATE oltp_accounts SET balance = balance + 1 WHERE id = $1 "+
		"+ SELECT balance FROM oltp_accounts WHERE id = $2 (10,000 rows, autocommit), for %s with nothing else running", d))
	// Warm-up, then the baseline.
	run := func(dur time.Duration) ([]oltpSample, int64, error) {
		stop := make(chan struct{})
		time.AfterFunc(dur, func() { close(stop) })
		return oltpLoad(ctx, db, stop)
	}
	if _, _, err := run(time.Second); err != nil {
		return nil, err
	}
	baseLats, baseOps, err := run(d)
	if err != nil {
		return nil, fmt.Errorf("oltp baseline: %w", err)
	}
	// Late group: backfill over the whole retained topic.
	var bfStatus string
	if err := db.Pool.QueryRow(ctx, `SELECT backfill_status FROM fanout.subscribe('ref', 'late', start_position => 'earliest')`).
		Scan(&bfStatus); err != nil {
		return nil, fmt.Errorf("subscribe late: %w", err)
	}
	stop := make(chan struct{})
	type oltpOut struct {
		lats []oltpSample
		ops  int64
		err  error
	}
	oc := make(chan oltpOut, 1)
	go func() {
		l, o, err := oltpLoad(ctx, db, stop)
		oc <- oltpOut{l, o, err}
	}()
	start := time.Now()
	var steps, examined, throttled int64
	var stepLats []time.Duration
	var stepErr error
	idle := 0
	for {
		t0 := time.Now()
		var k int64
		if err := db.Pool.QueryRow(ctx, `SELECT fanout._bitmap_step()`).Scan(&k); err != nil {
			stepErr = fmt.Errorf("_bitmap_step: %w", err)
			break
		}
		took := time.Since(t0)
		steps++
		stepLats = append(stepLats, took)
		examined += k
		if k == 0 {
			var st string
			if err := db.Pool.QueryRow(ctx, `SELECT backfill_status FROM fanout.groups WHERE topic = 'ref' AND group_name = 'late'`).
				Scan(&st); err != nil {
				stepErr = err
				break
			}
			if st != "in_progress" && st != "not_started" {
				break
			}
			idle++
			if idle > 500 {
				stepErr = fmt.Errorf("backfill still %s after 500 idle steps", st)
				break
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if took > 10*time.Millisecond {
			throttled++
			time.Sleep(took)
		}
		if time.Since(start) > env.Dur(5*time.Minute, 90*time.Second) {
			stepErr = fmt.Errorf("backfill not finished after %s", time.Since(start))
			break
		}
	}
	bfTime := time.Since(start)
	close(stop)
	o := <-oc
	if stepErr != nil {
		return nil, stepErr
	}
	if o.err != nil {
		return nil, fmt.Errorf("oltp during backfill: %w", o.err)
	}
	var processed, total *int64
	var st string
	if err := db.Pool.QueryRow(ctx, `SELECT backfill_status, backfill_processed, backfill_total FROM fanout.groups
		WHERE topic = 'ref' AND group_name = 'late'`).Scan(&st, &processed, &total); err != nil {
		return nil, err
	}
	// Only operations that ended while the backfill ran count as "during".
	var baseD, duringD []time.Duration
	for _, x := range baseLats {
		baseD = append(baseD, x.lat)
	}
	bfEnd := start.Add(bfTime)
	for _, x := range o.lats {
		if !x.end.Before(start) && x.end.Before(bfEnd) {
			duringD = append(duringD, x.lat)
		}
	}
	base, during := summarize(baseD), summarize(duringD)
	sl := summarize(stepLats)
	var p, t int64
	if processed != nil {
		p = *processed
	}
	if total != nil {
		t = *total
	}
	env.Logf("OLTP alone: %s (%d ops); during backfill: %s (%d ops)", base, baseOps, during, len(duringD))
	env.Logf("backfill of %s messages: %s in %.1f s (%.0f msg/s), %d steps (%d throttled), step %s, status %s %d/%d",
		fmtNum(float64(n)), fmtNum(float64(examined)), bfTime.Seconds(), float64(examined)/bfTime.Seconds(), steps, throttled,
		sl, st, p, t)
	r := Result{Scenario: "contention", Case: fmt.Sprintf("OLTP p95 during backfill of %s msgs (vs alone)", fmtNum(float64(n))),
		Unit: "ms", Value: during.P95, Baseline: base.P95, BaseName: "OLTP alone", Ratio: ratio(during.P95, base.P95),
		ValueText: fmt.Sprintf("p50 %s / p95 %s ms", fmtMs(during.P50), fmtMs(during.P95)),
		BaseText:  fmt.Sprintf("p50 %s / p95 %s ms", fmtMs(base.P50), fmtMs(base.P95)),
		Target:    "p95 < 2 × alone", Pass: boolp(base.N > 0 && during.N > 0 && during.P95 < 2*base.P95),
		Details: map[string]any{"oltp_alone": base, "oltp_during": during, "backfill_seconds": bfTime.Seconds(),
			"backfill_examined": examined, "steps": steps, "throttled_steps": throttled, "step": sl,
			"backfill_status": st, "backfill_processed": p, "backfill_total": t},
		Note: "OLTP op = UPDATE by pk + SELECT by pk; the backfill loop sleeps as long as a step took when it took > 10 ms"}
	rb := Result{Scenario: "contention", Case: "backfill rate under OLTP (info)", Unit: "msg/s",
		Value: float64(examined) / bfTime.Seconds(), Ratio: ratio(0, 0), HigherIsBetter: true,
		ValueText: fmt.Sprintf("%s msg/s (%s in %.1f s, %d steps, step p95 %s ms)", fmtNum(float64(examined)/bfTime.Seconds()),
			fmtNum(float64(examined)), bfTime.Seconds(), steps, fmtMs(sl.P95))}
	return []Result{r, rb}, nil
}
