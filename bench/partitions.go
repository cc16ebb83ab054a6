package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
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
// Every member holds its own connection and acks each page with its next
// read (read(..., ack => lease): one commit per page, as the shipped client
// does by pipelining the ack with the next read; until this turn the bench
// acked in a second autocommit call, two WAL flushes per page);
// an idle member of the member storm waits a second before reading again,
// as the shipped consumers do (pStormIdle). Throughput is messages acked per
// second while the backlog lasts (each case gets its own topic; the member
// storm's backlog is 2n at pages of 10 and 10n at pages of 100, see
// stormN), from the moment every member has made its first read (see
// pDrain). The server's CPU per 1,000
// messages (from /proc, when the server runs on this machine) is logged and
// noted: it depends less on the machine's other load than the rates.
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

// pStormIdle is how long an idle member of the member storm waits before
// reading again after an empty read: what the shipped consumers do when no
// notification comes (client.Config.PollInterval, default 1 s; the Node and
// Python examples poll once a second too), and none comes while a backlog
// drains. The earlier figures were with 100 ms, ten times the polls of a
// real consumer: at pages of 100 the 86 members that own nothing (150
// members, 64 partitions) made 450 reads a second against 200 pages. The
// ordered fan-out keeps 100 ms.
const pStormIdle = time.Second

type pRun struct {
	rate  float64
	read  LatencySummary // reads on the clock
	first LatencySummary // each member's first read (before the clock)
	acked int64
	pages int64 // reads on the clock that returned a page
	empty int64 // reads on the clock that returned nothing
	// cpuPerK: server CPU (user + system time of the database's backends,
	// from /proc) per 1,000 messages acked on the clock; 0 when the server
	// is not on this machine. Less sensitive to the machine's other load
	// than the rate.
	cpuPerK time.Duration
}

// serverCPU samples the user + system CPU time of the backends connected to
// the pool's database, from /proc/<pid>/stat, by pid (false when a
// backend's stat is not readable: the server runs elsewhere).
func serverCPU(ctx context.Context, db *DB) (map[int]time.Duration, bool) {
	rows, err := db.Pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return nil, false
	}
	var pids []int
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) == nil {
			pids = append(pids, pid)
		}
	}
	rows.Close()
	out := make(map[int]time.Duration, len(pids))
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return nil, false
		}
		// Fields after the command name (which may hold spaces) start at
		// state; utime and stime are fields 14 and 15 of the line.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			return nil, false
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		out[pid] = time.Duration(u+st) * 10 * time.Millisecond // USER_HZ = 100 on Linux
	}
	return out, true
}

// cpuSpent is the CPU the backends of sample b spent since sample a (all of
// it for a backend that started in between; a backend that exited in
// between is lost).
func cpuSpent(a, b map[int]time.Duration) time.Duration {
	var d time.Duration
	for pid, t := range b {
		d += t - a[pid]
	}
	return d
}

// pDrain runs members × groups readers (read + ack) until n messages per
// group were acked or d passed, and returns the aggregate rate. Every member
// holds its own connection (as a consumer process does) and makes its first
// read before the clock starts: a backend's first call compiles pgq's
// functions and plans their statements, which for 150 new backends at once
// on 2 cores takes seconds; that cost is reported as the first-read
// latency, not mixed into the throughput. Messages of the first reads are
// acked but not counted. (Until the harness held a connection per member,
// every call took whichever pooled connection was free: a member's first
// read warmed some backend, and most of a 150-member storm's page reads ran
// on backends that had served few pages, their statements planned anew:
// the cold-backend cost the clock is meant to leave out.)
func pDrain(ctx context.Context, db *DB, topic string, groups []string, members, page, n int,
	d, idle time.Duration) (pRun, error) {
	var acked, warm, pages, empty atomic.Int64
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
				conn, err := db.Pool.Acquire(dctx)
				if err != nil {
					ready.Done()
					errc <- err
					return
				}
				defer conn.Release()
				res, err := readAck(dctx, conn, topic, g, name, page, nil)
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
				// Each page is acked by the member's next read (readChained):
				// one commit per page, as the shipped client does.
				var prev int64
				var prevN int
				for dctx.Err() == nil && warm.Load()+acked.Load() < target {
					res, lease, err := readChained(dctx, conn, topic, g, name, page, prev)
					if err != nil {
						if dctx.Err() == nil {
							errc <- err
						}
						return
					}
					acked.Add(int64(prevN))
					prev, prevN = lease, res.N
					local = append(local, res.Fetch)
					if res.N == 0 {
						empty.Add(1)
						time.Sleep(idle) // an idle member backs off (see pStormIdle)
						continue
					}
					pages.Add(1)
				}
				if warm.Load()+acked.Load() >= target {
					cancel()
				}
			}(g, fmt.Sprintf("m%d", m))
		}
	}
	ready.Wait()
	cpu0, cpuOK := serverCPU(ctx, db)
	start = time.Now()
	timer := time.AfterFunc(d, cancel)
	defer timer.Stop()
	close(startc)
	wg.Wait()
	el := time.Since(start)
	cpu1, cpuOK1 := serverCPU(ctx, db)
	close(errc)
	if err := <-errc; err != nil {
		return pRun{}, err
	}
	r := pRun{rate: float64(acked.Load()) / el.Seconds(), read: summarize(lats), first: summarize(firsts),
		acked: acked.Load(), pages: pages.Load(), empty: empty.Load()}
	if cpuOK && cpuOK1 && r.acked > 0 {
		r.cpuPerK = cpuSpent(cpu0, cpu1) * 1000 / time.Duration(r.acked)
	}
	return r, nil
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
	newTopic := func(opts string, groups []string, n int) (string, error) {
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
	run := func(opts string, groups []string, members, page, n int, idle time.Duration) (pRun, error) {
		t, err := newTopic(opts, groups, n)
		if err != nil {
			return pRun{}, err
		}
		r, err := pDrain(ctx, db, t, groups, members, page, n, d, idle)
		env.Logf("%s%s: %d groups × %d members, page %d: %.0f msg/s (%d acked), %d pages + %d empty reads, server CPU %s per 1,000 messages, read %s; first read %s",
			t, opts, len(groups), members, page, r.rate, r.acked, r.pages, r.empty, r.cpuPerK.Round(time.Millisecond), r.read, r.first)
		return r, err
	}

	// The member storm's backlog: 2n messages at pages of 10, 10n at pages
	// of 100. With n at pages of 100 (600 pages, about 9 per key partition)
	// 4 members drained the backlog in 1.3-3 s on a quiet machine, so the
	// ratio measured the assignment settling and the drain's tail (the last,
	// largest partitions go one page at a time) more than throughput. With
	// 5n each of the 64 owners of the 150-member case served about 45 pages
	// on the clock, so a backend's costs beyond its first read were a large
	// share of the run: perf put 9.5 % of its CPU in TLB-flush interrupts
	// of copy-on-write faults (a young backend writing memory inherited from
	// the postmaster) against none for 4 warm backends; 10n halves that
	// share (runs on one cluster: 0.72-0.90 with 5n, 0.82-1.13 with 10n).
	// At pages of 10 the same holds with n (about 94 pages per owner):
	// 0.73-0.90 with n, 0.83-1.10 with 2n.
	stormN := func(page int) int {
		if page >= 100 {
			return 10 * n
		}
		return 2 * n
	}
	env.Baseline("4 members, P = 64", "one group of 4 members draining the same keyed backlog of a topic with partitions => 64, same page size")
	env.Baseline("8 × 4 unpartitioned", "8 groups × 4 members draining the same keyed backlog of an unpartitioned topic (no per-key order)")
	// With 4 kB pages each backend faults in every shared buffer it touches
	// for the first time: 150 members reading different partitions touch
	// far more (backend, buffer) pairs than 4 (see docs/architecture.md, "Member storm").
	var pid int
	if err := db.Pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return nil, err
	}
	shm := sharedMemoryPages(pid)
	one := []string{"g"}
	for _, page := range []int{10, 100} {
		few, err := run(", partitions => 64", one, 4, page, stormN(page), pStormIdle)
		if err != nil {
			return nil, err
		}
		many, err := run(", partitions => 64", one, 150, page, stormN(page), pStormIdle)
		if err != nil {
			return nil, err
		}
		r := throughputRow("partitions", fmt.Sprintf("member storm P = 64, page %d: 150 vs 4 members", page), "msg/s",
			many.rate, few.rate, "4 members, P = 64", 0.8)
		r.Details = map[string]any{"read_150": many.read, "read_4": few.read, "first_read_150": many.first,
			"first_read_4": few.first, "cpu_ms_per_1000_150": many.cpuPerK.Milliseconds(), "shared_memory_pages": shm,
			"cpu_ms_per_1000_4": few.cpuPerK.Milliseconds(), "empty_reads_150": many.empty, "pages_150": many.pages}
		r.Note = fmt.Sprintf("read p99 %s ms (150) vs %s ms (4); first read of a member (cold backend, before the clock) p99 %s ms (150) vs %s ms (4); server CPU per 1,000 messages %d ms (150) vs %d ms (4); server shared memory pages: %s",
			fmtMs(many.read.P99), fmtMs(few.read.P99), fmtMs(many.first.P99), fmtMs(few.first.P99),
			many.cpuPerK.Milliseconds(), few.cpuPerK.Milliseconds(), shm)
		out = append(out, r)
		uFew, err := run("", one, 4, page, stormN(page), pStormIdle)
		if err != nil {
			return nil, err
		}
		uMany, err := run("", one, 150, page, stormN(page), pStormIdle)
		if err != nil {
			return nil, err
		}
		ru := throughputRow("partitions", fmt.Sprintf("member storm unpartitioned, page %d: 150 vs 4 (info)", page),
			"msg/s", uMany.rate, uFew.rate, "4 members, unpartitioned", 0)
		ru.Note = fmt.Sprintf("read p99 %s ms (150) vs %s ms (4)", fmtMs(uMany.read.P99), fmtMs(uFew.read.P99))
		out = append(out, ru)
	}

	groups := []string{"g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8"}
	ord, err := run(", partitions => 16", groups, 4, 100, n, 100*time.Millisecond)
	if err != nil {
		return nil, err
	}
	unord, err := run("", groups, 4, 100, n, 100*time.Millisecond)
	if err != nil {
		return nil, err
	}
	r := throughputRow("partitions", "ordered fan-out 8 groups × 4 members, P = 16 vs unpartitioned", "msg/s",
		ord.rate, unord.rate, "8 × 4 unpartitioned", 0)
	r.Note = fmt.Sprintf("read p99 %s ms (P = 16) vs %s ms (unpartitioned)", fmtMs(ord.read.P99), fmtMs(unord.read.P99))
	out = append(out, r)
	return out, nil
}
