package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

func init() { register(160, maintScenario{}) }

// maintScenario (maint5000): the cost of maintenance over many topics.
// MAINT_TOPICS pubsub topics (default 1,000; 200 with -quick; the issue's
// figure is 5,000, measured with MAINT_TOPICS=5000: bench/NOTES.md) with
// 1-minute partitions and 1-minute retention, 3 groups each, one message
// each, and a bytes quota on their grant (so usage is measured). Then
// maintenance rounds as the pgq-scheduler sidecar runs them: every function
// fanout.maint_operations(now) lists, each called again while it returns
// > 0, at these clocks:
//   - now: every topic's next partition is made (creation, refresh);
//   - 2 minutes after that round ends: every topic's open partition is
//     due for rotation;
//   - a minute after that round began: nothing due (partition management
//     passes once);
//   - an hour after that: every group has missed its heartbeats (3 of 5
//     minutes kill it) and dies, and then no group pins the closed
//     partitions, which are past retention: dropped (their unread message
//     counted lost).
//
// (Each round's clock is taken when it begins: partitions open and close on
// the real clock. The groups' heartbeats are their creation: at thousands
// of topics on a loaded machine, making them takes longer than 5 minutes,
// and the first groups miss heartbeats in the first rounds already.)
//
// Reported per round: the longest single call (the sidecar's job timeout
// bounds one call, and every call is one transaction holding its locks),
// the longest call of each function, and the whole round; target: no call
// over 1 s. When the server runs on this machine, also the backend's CPU
// time per call (/proc/<pid>/stat, 10 ms ticks) and the load average at the
// round's end: on a shared machine the wall time of a call is mostly
// waiting for a CPU or for the disk (a partition creation syncs one file
// per index it builds), and the CPU time is what a quiet machine would show.
type maintScenario struct{}

func (maintScenario) Name() string { return "maint5000" }
func (maintScenario) Title() string {
	return "16. maintenance over many topics (MAINT_TOPICS, 5,000 in the issue) × 3 groups: one round's longest call and whole time"
}

type maintRound struct {
	calls    int
	longest  time.Duration
	longFunc string
	total    time.Duration
	perFunc  map[string]time.Duration // all calls
	perMax   map[string]time.Duration // the longest call
	perCalls map[string]int
	cpuKnown bool                     // the backend's /proc/<pid>/stat was readable
	cpuMax   time.Duration            // the most CPU time one call took
	cpuTotal time.Duration            // CPU time of every call
	perCPU   map[string]time.Duration // the most CPU time one call of each function took
	load     string                   // load average at the round's end
}

// backendCPU is the user+system CPU time of process pid (a backend of a
// server on this machine), false when /proc/<pid>/stat cannot be read.
func backendCPU(pid uint32) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	k, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+k) * 10 * time.Millisecond, true // USER_HZ 100 on Linux
}

// runMaintRound runs one round at now, as the sidecar does.
func runMaintRound(ctx context.Context, conn *pgx.Conn, now time.Time) (maintRound, error) {
	r := maintRound{perFunc: map[string]time.Duration{}, perMax: map[string]time.Duration{}, perCalls: map[string]int{},
		perCPU: map[string]time.Duration{}}
	pid := conn.PgConn().PID()
	_, r.cpuKnown = backendCPU(pid)
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
			c0, _ := backendCPU(pid)
			t0 := time.Now()
			var n int64
			if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT %s(p_now => $1)`, f), now).Scan(&n); err != nil {
				return r, fmt.Errorf("%s: %w", f, err)
			}
			d := time.Since(t0)
			if c1, ok := backendCPU(pid); ok && r.cpuKnown {
				c := c1 - c0
				r.cpuTotal += c
				r.cpuMax = max(r.cpuMax, c)
				r.perCPU[f] = max(r.perCPU[f], c)
			}
			r.calls++
			r.perFunc[f] += d
			r.perCalls[f]++
			r.perMax[f] = max(r.perMax[f], d)
			if d > r.longest {
				r.longest, r.longFunc = d, f
			}
			if n == 0 {
				break
			}
		}
	}
	r.total = time.Since(start)
	r.load = loadAvg()
	return r, nil
}

// perFuncText is "func longest/calls" for each function of the round,
// longest first.
func (r maintRound) perFuncText() string {
	fs := make([]string, 0, len(r.perMax))
	for f := range r.perMax {
		fs = append(fs, f)
	}
	sort.Slice(fs, func(i, j int) bool { return r.perMax[fs[i]] > r.perMax[fs[j]] })
	var b strings.Builder
	for i, f := range fs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s ms max/%d calls/%s ms", strings.TrimPrefix(f, "fanout."),
			fmtMs(float64(r.perMax[f].Microseconds())/1000), r.perCalls[f],
			fmtMs(float64(r.perFunc[f].Microseconds())/1000))
	}
	return b.String()
}

// maintTopics is MAINT_TOPICS, else the default.
func maintTopics(env *Env) (int, error) {
	n := env.N(1000, 200)
	if v := os.Getenv("MAINT_TOPICS"); v != "" {
		k, err := strconv.Atoi(v)
		if err != nil || k < 1 {
			return 0, fmt.Errorf("MAINT_TOPICS=%q: want an integer ≥ 1", v)
		}
		n = k
	}
	return n, nil
}

// makeMaintTopics creates topics lo..hi-1 (names m.t00000...) in one
// transaction through the real functions: create_topic, subscribe of g1..g3,
// one publish each.
func makeMaintTopics(ctx context.Context, db *DB, lo, hi int) error {
	return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		const name = `'m.t' || lpad(i::text, 5, '0')`
		for _, q := range []string{
			`SELECT count(fanout.create_topic(` + name + `, 'pubsub', retention => '1 minute',
			        zero_subscription_retention => '1 minute', partition_interval => '1 minute'))
			 FROM generate_series($1::int, $2::int - 1) i`,
			`SELECT count(*) FROM generate_series($1::int, $2::int - 1) i, unnest(ARRAY['g1', 'g2', 'g3']) g,
			        LATERAL fanout.subscribe(` + name + `, g) s`,
			`SELECT count(fanout.publish(` + name + `, '{"n":1}')) FROM generate_series($1::int, $2::int - 1) i`,
		} {
			if _, err := tx.Exec(ctx, q, lo, hi); err != nil {
				return fmt.Errorf("topics %d..%d: %w", lo, hi-1, err)
			}
		}
		return nil
	})
}

func (maintScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	n, err := maintTopics(env)
	if err != nil {
		return nil, err
	}
	db, err := env.NewDB(ctx, "maint", 4)
	if err != nil {
		return nil, err
	}
	// A bytes quota on the topics' grant: maintenance measures their usage
	// (fanout._measure_usage), far under it.
	if _, err := db.Pool.Exec(ctx, `SELECT fanout.grant_topic('m.%', current_user::regrole, 'admin'),
		fanout.set_quota('m.%', current_user::regrole, 'admin', max_bytes => 1000000000000)`); err != nil {
		return nil, fmt.Errorf("quota: %w", err)
	}
	t0 := time.Now()
	var next, made atomic.Int64
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const workers, batch = 2, 25
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				lo := int(next.Add(batch)) - batch
				if lo >= n {
					return
				}
				hi := min(lo+batch, n)
				if err := makeMaintTopics(gctx, db, lo, hi); err != nil {
					errc <- err
					cancel()
					return
				}
				if k := made.Add(int64(hi - lo)); k%500 < batch {
					env.Logf("maint5000: %d topics made (%s)", k, time.Since(t0).Round(time.Second))
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return nil, err
	}
	made3 := time.Since(t0)
	env.Logf("maint5000: %d topics × 3 groups made in %s", n, made3.Round(time.Second))

	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	// Each round's clock is the database's clock when the round begins plus
	// its offset: partitions open and close on the real clock, and at
	// thousands of topics on a loaded machine a round takes minutes, so
	// offsets from one start would leave most partitions not yet due two
	// minutes on (they were opened during the first round).
	rounds := []struct {
		name string
		at   time.Duration
		r    maintRound
	}{
		{name: "first round (next partitions)"},
		// every open partition was opened before this round began
		{name: "round with every partition due", at: 2 * time.Minute},
		// a minute after the round before began: every partition it opened
		// is younger than the 1-minute interval
		{name: "round with nothing due", at: time.Minute},
		{name: "round with every group dead and every closed partition dropped", at: time.Hour},
	}
	var begun time.Time // when the round before began (database clock)
	for i := range rounds {
		var now time.Time
		if err := conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
			return nil, err
		}
		at := now.Add(rounds[i].at)
		if i == 2 {
			at = begun.Add(rounds[i].at)
		}
		begun = now
		if rounds[i].r, err = runMaintRound(ctx, conn.Conn(), at); err != nil {
			return nil, fmt.Errorf("%s: %w", rounds[i].name, err)
		}
	}
	var dead, dropped int64
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM fanout.consumer_group WHERE status = 'dead'),
		(SELECT count(*) FROM fanout.topic t WHERE NOT EXISTS (SELECT 1 FROM fanout.partition p
		 WHERE p.topic_id = t.topic_id AND p.part_no = 0))`).Scan(&dead, &dropped); err != nil {
		return nil, err
	}
	env.Logf("maint5000: after the last round %d groups dead (of %d), %d topics' first partition dropped (of %d)",
		dead, 3*n, dropped, n)

	var out []Result
	var longest time.Duration
	for _, c := range rounds {
		pass := c.r.longest <= time.Second
		per, perMax := map[string]any{}, map[string]any{}
		for f, d := range c.r.perFunc {
			per[f] = float64(d.Microseconds()) / 1000
			perMax[f] = float64(c.r.perMax[f].Microseconds()) / 1000
		}
		env.Logf("maint5000: %s: %d calls, longest %s (%s), whole round %s; per function: %s", c.name, c.r.calls,
			c.r.longest.Round(time.Millisecond), c.r.longFunc, c.r.total.Round(time.Millisecond), c.r.perFuncText())
		if c.r.cpuKnown {
			env.Logf("maint5000: %s: backend CPU time: most in one call %s, all calls %s (load average %s)", c.name,
				c.r.cpuMax, c.r.cpuTotal, c.r.load)
		}
		longest = max(longest, c.r.longest)
		out = append(out, Result{
			Scenario: "maint5000", Case: fmt.Sprintf("%d topics × 3 groups: %s", n, c.name), Unit: "ms",
			Value: float64(c.r.longest.Microseconds()) / 1000, HigherIsBetter: false,
			Target: "longest call ≤ 1 s", Pass: boolp(pass),
			ValueText: fmt.Sprintf("longest %s ms (%s), round %s ms, %d calls",
				fmtMs(float64(c.r.longest.Microseconds())/1000), c.r.longFunc,
				fmtMs(float64(c.r.total.Microseconds())/1000), c.r.calls),
			Details: map[string]any{"topics": n, "calls": c.r.calls, "round_ms": float64(c.r.total.Microseconds()) / 1000,
				"longest_func": c.r.longFunc, "per_func_ms": per, "per_func_longest_ms": perMax,
				"per_func_calls": c.r.perCalls, "setup_s": made3.Seconds(), "loadavg": c.r.load},
		})
		if c.r.cpuKnown {
			cpuMax := map[string]any{}
			for f, d := range c.r.perCPU {
				cpuMax[f] = float64(d.Milliseconds())
			}
			d := out[len(out)-1].Details
			d["cpu_longest_call_ms"] = float64(c.r.cpuMax.Milliseconds())
			d["cpu_round_ms"] = float64(c.r.cpuTotal.Milliseconds())
			d["per_func_cpu_longest_ms"] = cpuMax
		}
	}
	env.SetSummary(sumMaintLongest, float64(longest.Microseconds())/1000)
	env.SetSummary(sumMaintRound, float64(rounds[1].r.total.Microseconds())/1000)
	return out, nil
}
