package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Inbox scenarios: the cost of the delivery controls against the
// same operation without them, in the same run.
func init() {
	register(120, inboxDedupeScenario{})
	register(121, inboxDelayScenario{})
	register(122, inboxSequenceScenario{})
	register(123, inboxGapsScenario{})
	register(124, inboxDelayedBacklogScenario{})
}

// inboxDedupeScenario: publish with a dedupe key (every key new) vs plain
// publish, 1 message per transaction and publish_batch of 100.
type inboxDedupeScenario struct{}

func (inboxDedupeScenario) Name() string { return "inbox-dedupe" }
func (inboxDedupeScenario) Title() string {
	return "12a. publish with dedupe_key vs plain publish (1 msg/txn, 4 clients; batch of 100, 1 client)"
}

func (inboxDedupeScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	db, err := env.NewDB(ctx, "inbox_dedupe", 0)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	for _, sql := range []string{
		`SELECT fanout.create_topic('bench.inbox.plain')`,
		`SELECT fanout.create_topic('bench.inbox.dedupe')`,
	} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			return nil, fmt.Errorf("%s: %w", sql, err)
		}
	}
	env.Baseline("plain publish", "SELECT fanout.publish(topic, payload, headers);  -- / publish_batch(topic, payloads[]) of 100")
	var keys atomic.Int64
	key := func() string { return fmt.Sprintf("evt-%d", keys.Add(1)) }
	one := []variant{
		{"publish", func(ctx context.Context, _ int) (int, error) {
			_, err := db.Pool.Exec(ctx, `SELECT fanout.publish('bench.inbox.plain', $1::jsonb, $2::jsonb)`,
				benchPayload, benchHeaders)
			return 1, err
		}},
		{"publish dedupe_key", func(ctx context.Context, _ int) (int, error) {
			_, err := db.Pool.Exec(ctx, `SELECT fanout.publish('bench.inbox.dedupe', $1::jsonb, $2::jsonb, dedupe_key => $3)`,
				benchPayload, benchHeaders, key())
			return 1, err
		}},
	}
	const size = 100
	payloads := make([]json.RawMessage, size)
	for i := range payloads {
		payloads[i] = benchPayload
	}
	batch := []variant{
		{"publish_batch", func(ctx context.Context, _ int) (int, error) {
			_, err := db.Pool.Exec(ctx, `SELECT fanout.publish_batch('bench.inbox.plain', $1::jsonb[])`, payloads)
			return size, err
		}},
		{"publish_batch dedupe_keys", func(ctx context.Context, _ int) (int, error) {
			ks := make([]string, size)
			for i := range ks {
				ks[i] = key()
			}
			_, err := db.Pool.Exec(ctx, `SELECT fanout.publish_batch('bench.inbox.dedupe', $1::jsonb[], dedupe_keys => $2)`,
				payloads, ks)
			return size, err
		}},
	}
	// Each side runs 6 s in all, as 10 adjacent pairs of slices; the ratio
	// is the median of the pairs' ratios (see abPaired), the throughputs
	// are over all slices.
	d := env.Dur(6*time.Second, 1200*time.Millisecond)
	r1, err := abPaired(ctx, env, 4, d, 10, one[0], one[1])
	if err != nil {
		return nil, err
	}
	rb, err := abPaired(ctx, env, 1, d, 10, batch[0], batch[1])
	if err != nil {
		return nil, err
	}
	row := func(name string, p pairedAB) Result {
		r := throughputRow("inbox-dedupe", name, "msg/s", p.Variant, p.Base, "plain publish", 0.80)
		r.Ratio = p.Median()
		r.Pass = boolp(r.Ratio >= 0.80)
		r.Note = "ratio: median of 10 adjacent pairs"
		r.Details = map[string]any{"pair_ratios": p.Ratios, "ratio_of_totals": ratio(p.Variant, p.Base)}
		return r
	}
	return []Result{
		row("publish dedupe_key, 1 msg/txn, 4 clients", r1),
		row("publish_batch(100) dedupe_keys, 1 client", rb),
	}, nil
}

// inboxDelayScenario: 1,000 delayed messages per second (deliver_at 1 s
// ahead), read by 2 pollers (100 ms apart when idle); lateness is read time
// minus deliver_at, both on the server's clock.
type inboxDelayScenario struct{}

func (inboxDelayScenario) Name() string { return "inbox-delay" }
func (inboxDelayScenario) Title() string {
	return "12b. delayed delivery: lateness (read time - deliver_at) at 1,000 delayed msg/s"
}

func (inboxDelayScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	db, err := env.NewDB(ctx, "inbox_delay", 0)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var table string
	if err := db.Pool.QueryRow(ctx, `SELECT fanout.create_topic('bench.inbox.later', notify => false)`).Scan(new(int64)); err != nil {
		return nil, err
	}
	if err := db.Pool.QueryRow(ctx, `SELECT data_table FROM fanout.topic WHERE topic = 'bench.inbox.later'`).Scan(&table); err != nil {
		return nil, err
	}
	latQuery := fmt.Sprintf(`
		WITH r AS (SELECT * FROM fanout.read('bench.inbox.later', consumer => $1, max_messages => 1000))
		SELECT r.lease_id, extract(epoch FROM clock_timestamp() - m.deliver_at)::float8
		FROM r JOIN LATERAL (SELECT x.deliver_at FROM fanout_data.%s x WHERE x.id = r.message_id) m ON true`,
		pgx.Identifier{table}.Sanitize())
	const rate = 1000.0
	d := env.Dur(10*time.Second, 3*time.Second)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var samples []time.Duration
	var published atomic.Int64
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	// Publisher: batches of 10 every 10 ms, each message due 1 s later.
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Duration(float64(time.Second) * 10 / rate))
		defer tick.Stop()
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if _, err := db.Pool.Exec(ctx, `SELECT fanout.publish_batch('bench.inbox.later',
				array_fill('{"k":1}'::jsonb, ARRAY[10]), deliver_at => clock_timestamp() + interval '1 second')`); err != nil {
				errs <- err
				return
			}
			published.Add(10)
		}
	}()
	// Pollers: lateness computed on the server from the stored deliver_at.
	var got atomic.Int64
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			deadline := time.Now().Add(d + 5*time.Second)
			for time.Now().Before(deadline) {
				if ctx.Err() != nil {
					return
				}
				rows, err := db.Pool.Query(ctx, latQuery, fmt.Sprintf("p%d", w))
				if err != nil {
					errs <- err
					return
				}
				var lease int64
				var n int
				var lat []time.Duration
				for rows.Next() {
					var s float64
					if err := rows.Scan(&lease, &s); err != nil {
						rows.Close()
						errs <- err
						return
					}
					lat = append(lat, time.Duration(s*float64(time.Second)))
					n++
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					errs <- err
					return
				}
				if n == 0 {
					if published.Load() > 0 && got.Load() >= published.Load() && time.Now().After(deadline.Add(-5*time.Second)) {
						return
					}
					time.Sleep(100 * time.Millisecond)
					continue
				}
				if _, err := db.Pool.Exec(ctx, `SELECT fanout.ack($1)`, lease); err != nil {
					errs <- err
					return
				}
				got.Add(int64(n))
				mu.Lock()
				samples = append(samples, lat...)
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return nil, err
		}
	}
	s := summarize(samples)
	env.Logf("delayed: %d published, %d delivered, lateness p50 %.0f ms p99 %.0f ms",
		published.Load(), got.Load(), s.P50, s.P99)
	pass := s.N > 0 && s.P99 <= 1000 && got.Load() == published.Load()
	return []Result{{
		Scenario: "inbox-delay",
		Case: fmt.Sprintf("delayed delivery lateness, 1,000 msg/s asked (%.0f published), 2 pollers (100 ms idle sleep)",
			float64(published.Load())/d.Seconds()),
		Unit: "ms", Value: s.P99, HigherIsBetter: false, Ratio: ratio(0, 0),
		Target: "p99 ≤ 1000 ms, every message delivered", Pass: boolp(pass),
		ValueText: fmt.Sprintf("p50 %.0f ms, p99 %.0f ms (n=%d of %d)", s.P50, s.P99, s.N, published.Load()),
		Details:   map[string]any{"lateness": s},
	}}, nil
}

// inboxSequenceScenario: drain of N messages over N/10 aggregates with
// sequence_ordering vs the same messages on a plain topic; 4 members
// reading pages of 100 and acking each page. Published round-robin over the
// aggregates (sequence 1 of every aggregate, then 2, ...).
type inboxSequenceScenario struct{}

func (inboxSequenceScenario) Name() string { return "inbox-sequence" }
func (inboxSequenceScenario) Title() string {
	return "12c. sequence-ordered drain (100k messages over 10k aggregates) vs unordered drain"
}

func (inboxSequenceScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	n := env.N(100000, 10000)
	aggs := n / 10
	db, err := env.NewDB(ctx, "inbox_seq", 0)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	for _, sql := range []string{
		`SELECT fanout.create_topic('bench.seq', sequence_ordering => true, notify => false)`,
		`SELECT fanout.create_topic('bench.unordered', notify => false)`,
	} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			return nil, err
		}
	}
	env.Baseline("unordered drain", "the same messages (message_group = aggregate) on a topic without sequence_ordering, drained the same way")
	for s := 1; s <= 10; s++ {
		for lo := 0; lo < aggs; lo += 1000 {
			hi := min(lo+1000, aggs)
			for _, q := range []string{
				`SELECT count(*) FROM fanout.publish_batch('bench.seq', array_fill('{"k":1}'::jsonb, ARRAY[$2::int - $1::int]),
					message_groups => ARRAY(SELECT 'agg-' || i FROM generate_series($1::int, $2::int - 1) i),
					sequences => array_fill($3::bigint, ARRAY[$2::int - $1::int]))`,
				`SELECT count(*) FROM fanout.publish_batch('bench.unordered', array_fill('{"k":1}'::jsonb, ARRAY[$2::int - $1::int]),
					message_groups => ARRAY(SELECT 'agg-' || i FROM generate_series($1::int, $2::int - 1) i)) WHERE $3::int > 0`,
			} {
				if _, err := db.Pool.Exec(ctx, q, lo, hi, s); err != nil {
					return nil, fmt.Errorf("fill: %w", err)
				}
			}
		}
	}
	plain, err := drainTopic(ctx, env, db, "bench.unordered", n)
	if err != nil {
		return nil, err
	}
	ordered, err := drainTopic(ctx, env, db, "bench.seq", n)
	if err != nil {
		return nil, err
	}
	r := throughputRow("inbox-sequence", fmt.Sprintf("sequence-ordered drain, %d msgs / %d aggregates, 4 members", n, aggs),
		"msg/s", ordered, plain, "unordered drain", 0)
	r.Note = "ratio reported (no target): one message per aggregate in flight"
	return []Result{r}, nil
}

// inboxGapsScenario: SELECT * FROM fanout.sequence_gaps with N waiting
// messages (100k aggregates x 10 waiters each behind a missing sequence 1;
// every tenth aggregate also misses sequence 7 among its waiters, so both
// kinds of gap are computed). The waiting state is written directly (what N
// published and read messages would leave), so the figure is the view alone.
type inboxGapsScenario struct{}

func (inboxGapsScenario) Name() string { return "inbox-gaps" }
func (inboxGapsScenario) Title() string {
	return "12d. fanout.sequence_gaps over 1M waiting messages"
}

func (inboxGapsScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	n := env.N(1000000, 100000)
	db, err := env.NewDB(ctx, "inbox_gaps", 0)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	for _, sql := range []string{
		`SELECT fanout.create_topic('bench.gaps', sequence_ordering => true)`,
		`INSERT INTO fanout.seq_state (group_id, message_group, next_seq)
		 SELECT g.group_id, 'agg-' || i, 1 FROM fanout.consumer_group g, generate_series(1, $1 / 10) i`,
		`INSERT INTO fanout.seq_wait (group_id, message_group, seq, message_id, txid, parked_at)
		 SELECT g.group_id, 'agg-' || (i / 10 + 1),
		        i % 10 + 2 + CASE WHEN (i / 10) % 10 = 0 AND i % 10 >= 5 THEN 1 ELSE 0 END,
		        i, '1', now() - interval '1 minute'
		 FROM fanout.consumer_group g, generate_series(0, $1 - 1) i`,
		`ANALYZE fanout.seq_wait`,
		`ANALYZE fanout.seq_state`,
	} {
		var err error
		if sqlHasParam(sql) {
			_, err = db.Pool.Exec(ctx, sql, n)
		} else {
			_, err = db.Pool.Exec(ctx, sql)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sql, err)
		}
	}
	env.Baseline("scan of the waiters", "SELECT count(*), min(parked_at) FROM fanout.seq_wait;  -- every waiting row once, same run")
	var scan time.Duration
	for i := 0; i < 3; i++ {
		start := time.Now()
		if _, err := db.Pool.Exec(ctx, `SELECT count(*), min(parked_at) FROM fanout.seq_wait`); err != nil {
			return nil, err
		}
		if el := time.Since(start); i == 0 || el < scan {
			scan = el
		}
	}
	var best time.Duration
	var gaps int64
	for i := 0; i < 3; i++ {
		start := time.Now()
		rows, err := db.Pool.Query(ctx, `SELECT * FROM fanout.sequence_gaps`)
		if err != nil {
			return nil, err
		}
		k := int64(0)
		for rows.Next() {
			k++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		el := time.Since(start)
		if i == 0 || el < best {
			best = el
		}
		gaps = k
	}
	ms := float64(best.Microseconds()) / 1000
	base := float64(scan.Microseconds()) / 1000
	env.Logf("sequence_gaps over %d waiting: %d gaps in %.0f ms (scan of the waiters %.0f ms)", n, gaps, ms, base)
	pass := ms < 1000 && gaps == int64(n/10+n/100)
	return []Result{{
		Scenario: "inbox-gaps", Case: fmt.Sprintf("SELECT * FROM fanout.sequence_gaps, %d waiting messages", n),
		Unit: "ms", Value: ms, Baseline: base, BaseName: "scan of the waiters", HigherIsBetter: false,
		Ratio: ratio(ms, base), Target: "< 1000 ms", Pass: boolp(pass),
		Note: fmt.Sprintf("%d gaps returned (best of 3)", gaps),
	}}, nil
}

// inboxDelayedBacklogScenario: 10,000 messages delayed by an hour spread
// through a backlog of N undelayed ones (100 delayed after every 1,000),
// drained by 4 members, vs the same undelayed backlog alone. The delayed
// ones are passed by each page and parked until due (fanout.retry); the
// ratio shows what that costs the reads of the others.
type inboxDelayedBacklogScenario struct{}

func (inboxDelayedBacklogScenario) Name() string { return "inbox-delayed-backlog" }
func (inboxDelayedBacklogScenario) Title() string {
	return "12e. drain of undelayed messages with 10,000 delayed ones among them vs without"
}

func (inboxDelayedBacklogScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	n := env.N(100000, 20000)
	const delayed = 10000
	chunks := n / 1000
	db, err := env.NewDB(ctx, "inbox_delayed_backlog", 0)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	env.Baseline("no delayed messages", "the same undelayed backlog on a topic without delayed messages, drained the same way (4 members, read 100 + ack)")
	fill := func(topic string, withDelayed bool) error {
		if _, err := db.Pool.Exec(ctx, `SELECT fanout.create_topic($1, notify => false)`, topic); err != nil {
			return err
		}
		for c := 0; c < chunks; c++ {
			if _, err := db.Pool.Exec(ctx, `SELECT count(*) FROM fanout.publish_batch($1, array_fill('{"k":1}'::jsonb, ARRAY[1000]))`, topic); err != nil {
				return err
			}
			if withDelayed {
				if _, err := db.Pool.Exec(ctx, `SELECT count(*) FROM fanout.publish_batch($1, array_fill('{"k":2}'::jsonb, ARRAY[$2::int]),
					delay => interval '1 hour')`, topic, delayed/chunks); err != nil {
					return err
				}
			}
		}
		return nil
	}
	// Best of `rounds` fresh backlogs, the order alternating.
	var best, base float64
	for r := 0; r < env.N(2, 1); r++ {
		with, without := fmt.Sprintf("bench.delayed.r%d", r), fmt.Sprintf("bench.undelayed.r%d", r)
		if err := fill(with, true); err != nil {
			return nil, fmt.Errorf("fill: %w", err)
		}
		if err := fill(without, false); err != nil {
			return nil, fmt.Errorf("fill: %w", err)
		}
		order := []string{without, with}
		if r%2 == 1 {
			order = []string{with, without}
		}
		for _, topic := range order {
			rate, err := drainTopic(ctx, env, db, topic, n)
			if err != nil {
				return nil, err
			}
			if topic == with {
				best = max(best, rate)
			} else {
				base = max(base, rate)
			}
		}
		var scheduled int64
		if err := db.Pool.QueryRow(ctx, `SELECT scheduled FROM fanout.topics WHERE topic = $1`, with).Scan(&scheduled); err != nil {
			return nil, err
		}
		if scheduled != int64(delayed/chunks*chunks) {
			return nil, fmt.Errorf("%s: %d scheduled after the drain, want %d", with, scheduled, delayed/chunks*chunks)
		}
	}
	r := throughputRow("inbox-delayed-backlog", fmt.Sprintf("drain of %d undelayed msgs with %d delayed (1 h) among them, 4 members", n, delayed/chunks*chunks),
		"msg/s", best, base, "no delayed messages", 0.80)
	r.Note = "the delayed messages are still scheduled after the drain (checked)"
	return []Result{r}, nil
}

// drainTopic drains n messages of a queue topic with 4 members, each
// reading pages of 100 and acking each page; it returns messages/s.
func drainTopic(ctx context.Context, env *Env, db *DB, topic string, n int) (float64, error) {
	var done atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			idle := 0
			for done.Load() < int64(n) && idle < 200 {
				var lease *int64
				var k int64
				err := db.Pool.QueryRow(ctx, `SELECT max(lease_id), count(*) FROM fanout.read($1, consumer => $2, max_messages => 100)`,
					topic, fmt.Sprintf("w%d", w)).Scan(&lease, &k)
				if err != nil {
					errs <- err
					return
				}
				if k == 0 {
					idle++
					time.Sleep(2 * time.Millisecond)
					continue
				}
				idle = 0
				if _, err := db.Pool.Exec(ctx, `SELECT fanout.ack($1)`, *lease); err != nil {
					errs <- err
					return
				}
				done.Add(k)
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return 0, err
	}
	if done.Load() != int64(n) {
		return 0, fmt.Errorf("%s: drained %d of %d", topic, done.Load(), n)
	}
	rate := float64(n) / time.Since(start).Seconds()
	env.Logf("%-24s drain %d: %10.0f msg/s", topic, n, rate)
	return rate, nil
}

func sqlHasParam(sql string) bool {
	for i := 0; i+1 < len(sql); i++ {
		if sql[i] == '$' && sql[i+1] == '1' {
			return true
		}
	}
	return false
}
