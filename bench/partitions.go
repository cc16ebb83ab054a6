package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

func init() { register(115, partitionsScenario{}) }

// partitionsScenario: partitioned topics (key partitions).
//
//   - Member storm: one group reading a backlog of keyed messages with 150
//     members vs 4 members, pages of 10 and 100, on a topic with P = 64 key
//     partitions (members claim on their partitions' rows, never on the
//     group row). Target: 150 members ≥ 0.8 × 4 members. The same pair on
//     an unpartitioned topic is reported for comparison (info), and read
//     p99 of every case.
//   - Ordered fan-out: 8 groups × 4 members on P = 16 (per-key order, one
//     page per partition at a time) vs the same load unpartitioned (no
//     order): throughput ratio reported.
//
// Every member reads and acks in autocommit; throughput is messages acked
// per second while the backlog lasts (each case gets its own topic), from
// the moment every member has made its first read (see pDrain).
type partitionsScenario struct{}

func (partitionsScenario) Name() string { return "partitions" }
func (partitionsScenario) Title() string {
	return "12. partitioned topics: member storm (150 vs 4 members, P = 64) and ordered fan-out (8 groups × 4, P = 16)"
}

// pFill publishes n messages with message_group 'k<i mod keys>' in batches.
func pFill(ctx context.Context, db *DB, topic string, n, keys int) error {
	const batch = 5000
	for done := 0; done < n; done += batch {
		k := min(batch, n-done)
		if _, err := db.Pool.Exec(ctx, `SELECT fanout.publish_batch($1, array_agg('{"o": 1}'::jsonb),
			message_groups => array_agg('k' || ((i + $2) % $3))) FROM generate_series(1, $4) i`,
			topic, done, keys, k); err != nil {
			return fmt.Errorf("fill %s: %w", topic, err)
		}
	}
	return nil
}

type pRun struct {
	rate  float64
	read  LatencySummary // reads on the clock
	first LatencySummary // each member's first read (before the clock)
	acked int64
}

// pDrain runs members × groups readers (read + ack) until n messages per
// group were acked or d passed, and returns the aggregate rate. Every member
// connects and makes its first read before the clock starts: a backend's
// first call compiles pgq's functions and plans their statements, which for
// 150 new backends at once on 2 cores takes seconds; that cost is reported
// as the first-read latency, not mixed into the throughput. Messages of the
// first reads are acked but not counted.
func pDrain(ctx context.Context, db *DB, topic string, groups []string, members, page, n int,
	d time.Duration) (pRun, error) {
	var acked, warm atomic.Int64
	var mu sync.Mutex
	var lats, firsts []time.Duration
	target := int64(n * len(groups))
	var wg, ready sync.WaitGroup
	errc := make(chan error, members*len(groups))
	var start time.Time
	startc := make(chan struct{})
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, g := range groups {
		for m := 0; m < members; m++ {
			wg.Add(1)
			ready.Add(1)
			go func(g, name string) {
				defer wg.Done()
				var local []time.Duration
				defer func() { mu.Lock(); lats = append(lats, local...); mu.Unlock() }()
				res, err := readAck(dctx, db.Pool, topic, g, name, page, nil)
				ready.Done()
				if err != nil {
					errc <- err
					return
				}
				mu.Lock()
				firsts = append(firsts, res.Fetch)
				mu.Unlock()
				warm.Add(int64(res.N))
				<-startc
				for dctx.Err() == nil && warm.Load()+acked.Load() < target {
					res, err := readAck(dctx, db.Pool, topic, g, name, page, nil)
					if err != nil {
						if dctx.Err() == nil {
							errc <- err
						}
						return
					}
					local = append(local, res.Fetch)
					if res.N == 0 {
						time.Sleep(100 * time.Millisecond) // an idle member backs off (the Go client polls every second)
						continue
					}
					acked.Add(int64(res.N))
				}
				if warm.Load()+acked.Load() >= target {
					cancel()
				}
			}(g, fmt.Sprintf("m%d", m))
		}
	}
	ready.Wait()
	start = time.Now()
	timer := time.AfterFunc(d, cancel)
	defer timer.Stop()
	close(startc)
	wg.Wait()
	el := time.Since(start)
	close(errc)
	if err := <-errc; err != nil {
		return pRun{}, err
	}
	return pRun{rate: float64(acked.Load()) / el.Seconds(), read: summarize(lats), first: summarize(firsts),
		acked: acked.Load()}, nil
}

func (partitionsScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	n := env.N(60_000, 15_000)
	d := env.Dur(20*time.Second, 8*time.Second)
	db, err := env.NewDB(ctx, "partitions", 170)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var out []Result
	topicNo := 0
	newTopic := func(opts string, groups []string) (string, error) {
		topicNo++
		t := fmt.Sprintf("p%d", topicNo)
		if _, err := db.Pool.Exec(ctx, `SELECT fanout.create_topic($1, semantics => 'pubsub'`+opts+`)`, t); err != nil {
			return "", err
		}
		for _, g := range groups {
			if _, err := db.Pool.Exec(ctx, `SELECT fanout.subscribe($1, $2, start_position => 'earliest')`, t, g); err != nil {
				return "", err
			}
		}
		if err := pFill(ctx, db, t, n, 1000); err != nil {
			return "", err
		}
		_, err := db.Pool.Exec(ctx, `VACUUM ANALYZE`)
		return t, err
	}
	run := func(opts string, groups []string, members, page int) (pRun, error) {
		t, err := newTopic(opts, groups)
		if err != nil {
			return pRun{}, err
		}
		r, err := pDrain(ctx, db, t, groups, members, page, n, d)
		env.Logf("%s%s: %d groups × %d members, page %d: %.0f msg/s (%d acked), read %s; first read %s",
			t, opts, len(groups), members, page, r.rate, r.acked, r.read, r.first)
		return r, err
	}

	env.Baseline("4 members, P = 64", "one group of 4 members draining the same keyed backlog of a topic with partitions => 64, same page size")
	env.Baseline("8 × 4 unpartitioned", "8 groups × 4 members draining the same keyed backlog of an unpartitioned topic (no per-key order)")
	one := []string{"g"}
	for _, page := range []int{10, 100} {
		few, err := run(", partitions => 64", one, 4, page)
		if err != nil {
			return nil, err
		}
		many, err := run(", partitions => 64", one, 150, page)
		if err != nil {
			return nil, err
		}
		r := throughputRow("partitions", fmt.Sprintf("member storm P = 64, page %d: 150 vs 4 members", page), "msg/s",
			many.rate, few.rate, "4 members, P = 64", 0.8)
		r.Details = map[string]any{"read_150": many.read, "read_4": few.read, "first_read_150": many.first,
			"first_read_4": few.first}
		r.Note = fmt.Sprintf("read p99 %s ms (150) vs %s ms (4); first read of a member (cold backend, before the clock) p99 %s ms (150) vs %s ms (4)",
			fmtMs(many.read.P99), fmtMs(few.read.P99), fmtMs(many.first.P99), fmtMs(few.first.P99))
		out = append(out, r)
		uFew, err := run("", one, 4, page)
		if err != nil {
			return nil, err
		}
		uMany, err := run("", one, 150, page)
		if err != nil {
			return nil, err
		}
		ru := throughputRow("partitions", fmt.Sprintf("member storm unpartitioned, page %d: 150 vs 4 (info)", page),
			"msg/s", uMany.rate, uFew.rate, "4 members, unpartitioned", 0)
		ru.Note = fmt.Sprintf("read p99 %s ms (150) vs %s ms (4)", fmtMs(uMany.read.P99), fmtMs(uFew.read.P99))
		out = append(out, ru)
	}

	groups := []string{"g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8"}
	ord, err := run(", partitions => 16", groups, 4, 100)
	if err != nil {
		return nil, err
	}
	unord, err := run("", groups, 4, 100)
	if err != nil {
		return nil, err
	}
	r := throughputRow("partitions", "ordered fan-out 8 groups × 4 members, P = 16 vs unpartitioned", "msg/s",
		ord.rate, unord.rate, "8 × 4 unpartitioned", 0)
	r.Note = fmt.Sprintf("read p99 %s ms (P = 16) vs %s ms (unpartitioned)", fmtMs(ord.read.P99), fmtMs(unord.read.P99))
	out = append(out, r)
	return out, nil
}
