package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

func init() { register(160, maintScenario{}) }

// maintScenario (maint5000): the cost of maintenance over many topics.
// 5,000 pubsub topics (500 with -quick) with 1-minute partitions, 3 groups
// each, one message each; then one maintenance round as the pgq-scheduler
// sidecar runs it, 2 minutes later (every topic's partition due for
// rotation): every function fanout.maint_operations(now) lists, each called
// again while it returns > 0. Reported: the longest single call (the
// sidecar's job timeout bounds one call, and every call is one
// transaction holding its locks) and the whole round; target: no call over
// 1 s. A second round right after (nothing due) is reported too.
type maintScenario struct{}

func (maintScenario) Name() string { return "maint5000" }
func (maintScenario) Title() string {
	return "16. maintenance over many topics: 5,000 topics × 3 groups, one round's longest call and whole time"
}

type maintRound struct {
	calls    int
	longest  time.Duration
	longFunc string
	total    time.Duration
	perFunc  map[string]time.Duration
}

// runMaintRound runs one round at now, as the sidecar does.
func runMaintRound(ctx context.Context, conn *pgx.Conn, now time.Time) (maintRound, error) {
	r := maintRound{perFunc: map[string]time.Duration{}}
	start := time.Now()
	rows, err := conn.Query(ctx, `SELECT func FROM fanout.maint_operations($1) WHERE arg IS NULL`, now)
	if err != nil {
		return r, fmt.Errorf("maint_operations: %w", err)
	}
	funcs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return r, fmt.Errorf("maint_operations: %w", err)
	}
	for _, f := range funcs {
		for i := 0; i < 100000; i++ {
			t0 := time.Now()
			var n int64
			if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT %s(p_now => $1)`, f), now).Scan(&n); err != nil {
				return r, fmt.Errorf("%s: %w", f, err)
			}
			d := time.Since(t0)
			r.calls++
			r.perFunc[f] += d
			if d > r.longest {
				r.longest, r.longFunc = d, f
			}
			if n == 0 {
				break
			}
		}
	}
	r.total = time.Since(start)
	return r, nil
}

func (maintScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	n := env.N(5000, 500)
	db, err := env.NewDB(ctx, "maint", 4)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	var made atomic.Int64
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const workers = 2
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := func() error {
				for i := w; i < n; i += workers {
					topic := fmt.Sprintf("m.t%05d", i)
					if _, err := db.Pool.Exec(gctx, `SELECT fanout.create_topic($1, 'pubsub', partition_interval => '1 minute')`, topic); err != nil {
						return fmt.Errorf("create %s: %w", topic, err)
					}
					if _, err := db.Pool.Exec(gctx, `SELECT fanout.subscribe($1, g) FROM unnest(ARRAY['g1', 'g2', 'g3']) g`, topic); err != nil {
						return fmt.Errorf("subscribe %s: %w", topic, err)
					}
					if _, err := db.Pool.Exec(gctx, `SELECT fanout.publish($1, '{"n":1}')`, topic); err != nil {
						return fmt.Errorf("publish %s: %w", topic, err)
					}
					if k := made.Add(1); k%500 == 0 {
						env.Logf("maint5000: %d topics made (%s)", k, time.Since(t0).Round(time.Second))
					}
				}
				return nil
			}(); err != nil {
				errc <- err
				cancel()
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return nil, err
	}
	env.Logf("maint5000: %d topics × 3 groups made in %s", n, time.Since(t0).Round(time.Second))

	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	// The first round makes every topic's next partition (ready ahead).
	var settle time.Time
	if err := conn.QueryRow(ctx, `SELECT now()`).Scan(&settle); err != nil {
		return nil, err
	}
	first, err := runMaintRound(ctx, conn.Conn(), settle)
	if err != nil {
		return nil, err
	}
	// Two minutes on: every topic's open partition is due for rotation.
	due, err := runMaintRound(ctx, conn.Conn(), settle.Add(2*time.Minute))
	if err != nil {
		return nil, err
	}
	idle, err := runMaintRound(ctx, conn.Conn(), settle.Add(2*time.Minute+time.Second))
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, c := range []struct {
		name string
		r    maintRound
	}{{"first round (next partitions)", first}, {"round with every partition due", due}, {"round with nothing due", idle}} {
		pass := c.r.longest <= time.Second
		per := map[string]any{}
		for f, d := range c.r.perFunc {
			per[f] = float64(d.Microseconds()) / 1000
		}
		env.Logf("maint5000: %s: %d calls, longest %s (%s), whole round %s", c.name, c.r.calls,
			c.r.longest.Round(time.Millisecond), c.r.longFunc, c.r.total.Round(time.Millisecond))
		out = append(out, Result{
			Scenario: "maint5000", Case: fmt.Sprintf("%d topics × 3 groups: %s", n, c.name), Unit: "ms",
			Value: float64(c.r.longest.Microseconds()) / 1000, HigherIsBetter: false,
			Target: "longest call ≤ 1 s", Pass: boolp(pass),
			ValueText: fmt.Sprintf("longest %s ms (%s), round %s ms, %d calls",
				fmtMs(float64(c.r.longest.Microseconds())/1000), c.r.longFunc,
				fmtMs(float64(c.r.total.Microseconds())/1000), c.r.calls),
			Details: map[string]any{"calls": c.r.calls, "round_ms": float64(c.r.total.Microseconds()) / 1000,
				"longest_func": c.r.longFunc, "per_func_ms": per},
		})
	}
	longest := max(first.longest, due.longest, idle.longest)
	env.SetSummary(sumMaintLongest, float64(longest.Microseconds())/1000)
	env.SetSummary(sumMaintRound, float64(due.total.Microseconds())/1000)
	return out, nil
}
