package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgfanout/pgq/client"
)

func init() { register(65, pgqScenario{}) }

// pgqScenario puts Skytools PgQ (the `pgq` extension, Debian's
// postgresql-<major>-pgq3, which `make bench` installs when run as root)
// side by side with pgq on the same server in the same run:
//
//   - publish 100 per transaction: fanout.publish_batch of 100 vs 100
//     pgq.insert_event calls in one transaction, both as one statement and
//     as 100 statements (pipelined: one round trip);
//   - 8-group fan-out of the same backlog: 8 fanout groups reading pages of
//     B (read+ack) vs 8 PgQ consumers, PgQ ticked so that each batch holds
//     exactly B events (B = 100 and 1,000); each PgQ batch costs
//     pgq.next_batch + pgq.get_batch_events + pgq.finish_batch.
//
// Without the extension on the server the rows say "not measured" and the
// table's header says why.
type pgqScenario struct{}

func (pgqScenario) Name() string { return "pgq" }
func (pgqScenario) Title() string {
	return "6b. Skytools PgQ side by side: publish 100/txn vs insert_event 100/txn; 8-group fan-out, PgQ batches = our page (100, 1,000)"
}

// PgQ statements of the baseline.
const (
	pgqInsert100 = `SELECT count(pgq.insert_event($1, 'order', d, $2, NULL, NULL, NULL)) FROM unnest($3::text[]) d`
	pgqInsert1   = `SELECT pgq.insert_event($1, 'order', $2, $3, NULL, NULL, NULL)`
	pgqNextBatch = `SELECT pgq.next_batch($1, $2)`
	pgqGetEvents = `SELECT ev_id, ev_time, ev_type, ev_data, ev_extra1 FROM pgq.get_batch_events($1)`
	pgqFinish    = `SELECT pgq.finish_batch($1)`
)

var pgqBatchSizes = []int{100, 1000}

func (pgqScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	db, err := env.NewDB(ctx, "pgq", 0)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var version *string
	if err := db.Pool.QueryRow(ctx, `SELECT default_version FROM pg_available_extensions WHERE name = 'pgq'`).
		Scan(&version); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	if version == nil {
		why := "NOT MEASURED: the PgQ extension (pgq) is not available on this server; " +
			"install Debian's postgresql-<major>-pgq3 (make bench does, when run as root on its own cluster)"
		env.SetPgQStatus(why)
		env.Logf("%s", why)
		return pgqNotMeasured(env), nil
	}
	if _, err := db.Pool.Exec(ctx, `CREATE EXTENSION pgq`); err != nil {
		why := "NOT MEASURED: CREATE EXTENSION pgq failed: " + err.Error()
		env.SetPgQStatus(why)
		env.Logf("%s", why)
		return pgqNotMeasured(env), nil
	}
	env.SetPgQStatus("Skytools PgQ " + *version + " (extension pgq), same server, same run")
	env.Baseline("PgQ insert_event x100",
		"SELECT pgq.create_queue('pub');\n"+pgqInsert100+
			";  -- $1 = 'pub', $2 = the headers, $3 = 100 payloads: 100 events in one statement, one transaction")
	env.Baseline("PgQ insert_event, 100 statements",
		pgqInsert1+";  -- 100 times, sent as one pipelined batch (one round trip, one implicit transaction)")
	env.Baseline("PgQ 8 consumers, batch = page",
		"SELECT pgq.create_queue(q); pgq.set_queue_config(q, 'ticker_max_count', '1') (and max_lag/idle_period '1 day', "+
			"so that a tick happens exactly when the bench calls pgq.ticker); 8 × pgq.register_consumer(q, c);\n"+
			"fill: one client, "+pgqInsert100+" per transaction, SELECT pgq.ticker(q) after every B/100 transactions "+
			"(so every batch holds exactly B events);\n"+
			"each of the 8 consumers (own connection), until next_batch returns NULL:\n"+
			pgqNextBatch+";\n"+pgqGetEvents+";\n"+pgqFinish+";  -- autocommit each")

	var out []Result
	// Publish 100 per transaction.
	pub, err := pgqPublish(ctx, env, db)
	if err != nil {
		return nil, err
	}
	out = append(out, pub...)

	// Fan-out with equal batch sizes; the order alternates so that drift
	// hits both sides alike.
	n := env.N(100_000, 20_000)
	for i, b := range pgqBatchSizes {
		topic, queue := fmt.Sprintf("fan.pgq.b%d", b), fmt.Sprintf("fan_b%d", b)
		groups, lo, hi, err := pgqPrepareTopic(ctx, db, topic, n)
		if err != nil {
			return nil, err
		}
		consumers, evLo, err := pgqPrepareQueue(ctx, db, queue, n, b)
		if err != nil {
			return nil, err
		}
		if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
			return nil, err
		}
		var got, base float64
		var st client.Stats
		var ps pgqStats
		ours := func() error {
			got, st, err = drainGroups(ctx, db, topic, groups, lo, hi, 1, b)
			return err
		}
		theirs := func() error {
			base, ps, err = pgqDrain(ctx, db, queue, consumers, evLo, n)
			return err
		}
		first, second := ours, theirs
		if i%2 == 1 {
			first, second = theirs, ours
		}
		if err := first(); err != nil {
			return nil, err
		}
		if err := second(); err != nil {
			return nil, err
		}
		env.Logf("fan-out 8 groups x %d, page/batch %d: pgq %.0f deliveries/s (%d reads), PgQ %.0f events/s (%d batches of %d..%d)",
			n, b, got, st.Reads, base, ps.Batches, ps.MinBatch, ps.MaxBatch)
		r := throughputRow("pgq", fmt.Sprintf("offset fan-out 8 groups x %s, page %d vs PgQ batch %d", fmtNum(float64(n)), b, b),
			"deliv/s", got, base, "PgQ 8 consumers, batch = page", 1.0)
		r.Details = map[string]any{"messages": n, "groups": fanoutGroups, "page": b, "reads": st.Reads,
			"empty_reads": st.EmptyReads, "pgq_batches": ps.Batches, "pgq_batch_min": ps.MinBatch, "pgq_batch_max": ps.MaxBatch}
		r.Note = "target ≥ 1.0 (consume-path target); order of the two sides alternates between batch sizes"
		env.SetSummary(map[int]string{100: sumFanoutPgq100, 1000: sumFanoutPgq1000}[b], r.Ratio)
		out = append(out, r)
	}
	return out, nil
}

// pgqNotMeasured is the rows without PgQ.
func pgqNotMeasured(env *Env) []Result {
	var out []Result
	for _, c := range []int{1, 4} {
		for _, form := range []string{"insert_event x100 in 1 statement", "100 insert_event statements/txn"} {
			out = append(out, Result{Scenario: "pgq", Case: fmt.Sprintf("publish_batch(100) vs PgQ %s, %d client(s)", form, c),
				Ratio: ratio(0, 0), ValueText: "not measured", Note: "PgQ is not installed (see the header)"})
		}
	}
	for _, b := range pgqBatchSizes {
		out = append(out, Result{Scenario: "pgq", Case: fmt.Sprintf("offset fan-out 8 groups x %s, page %d vs PgQ batch %d",
			fmtNum(float64(env.N(100_000, 20_000))), b, b), Ratio: ratio(0, 0), ValueText: "not measured",
			Note: "PgQ is not installed (see the header)"})
	}
	return out
}

// pgqPublish: publish_batch(100) vs 100 insert_event in one statement, 1
// and 4 clients, interleaved rounds.
func pgqPublish(ctx context.Context, env *Env, db *DB) ([]Result, error) {
	const size = 100
	for _, sql := range []string{
		`SELECT fanout.create_topic('pgq.pub')`,
		`SELECT fanout.create_topic('pgq.pub.quiet', notify => false)`,
		`SELECT pgq.create_queue('pub')`,
	} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			return nil, fmt.Errorf("%s: %w", sql, err)
		}
	}
	p := client.NewPublisher(db.Pool)
	msgs := make([]client.Message, size)
	payloads := make([]string, size)
	for i := range msgs {
		msgs[i] = client.Message{Payload: benchPayload, Headers: benchHeaders}
		payloads[i] = string(benchPayload)
	}
	vs := []variant{
		{"fanout.publish_batch", func(ctx context.Context, _ int) (int, error) {
			ids, err := p.PublishBatch(ctx, "pgq.pub", msgs)
			return len(ids), err
		}},
		{"fanout.publish_batch notify=>false", func(ctx context.Context, _ int) (int, error) {
			ids, err := p.PublishBatch(ctx, "pgq.pub.quiet", msgs)
			return len(ids), err
		}},
		{"PgQ insert_event x100", func(ctx context.Context, _ int) (int, error) {
			var k int
			err := db.Pool.QueryRow(ctx, pgqInsert100, "pub", string(benchHeaders), payloads).Scan(&k)
			return k, err
		}},
		{"PgQ insert_event, 100 statements", func(ctx context.Context, _ int) (int, error) {
			// One pipelined batch: one round trip, one implicit transaction.
			var batch pgx.Batch
			for _, p := range payloads {
				batch.Queue(pgqInsert1, "pub", p, string(benchHeaders))
			}
			if err := db.Pool.SendBatch(ctx, &batch).Close(); err != nil {
				return 0, err
			}
			return len(payloads), nil
		}},
	}
	var out []Result
	d := env.Dur(5*time.Second, 1200*time.Millisecond)
	for _, clients := range []int{1, 4} {
		r, err := abRounds(ctx, env, clients, d, 3, vs)
		if err != nil {
			return nil, err
		}
		details := map[string]any{"publish_batch_notify_false_msg_per_s": r["fanout.publish_batch notify=>false"],
			"notify_false_vs_pgq_1_statement":    ratioOrNil(r["fanout.publish_batch notify=>false"], r["PgQ insert_event x100"]),
			"notify_false_vs_pgq_100_statements": ratioOrNil(r["fanout.publish_batch notify=>false"], r["PgQ insert_event, 100 statements"])}
		one := throughputRow("pgq", fmt.Sprintf("publish_batch(100) vs PgQ insert_event x100 in 1 statement, %d client(s)", clients),
			"msg/s", r["fanout.publish_batch"], r["PgQ insert_event x100"], "PgQ insert_event x100", 0)
		many := throughputRow("pgq", fmt.Sprintf("publish_batch(100) vs PgQ 100 insert_event statements/txn, %d client(s)", clients),
			"msg/s", r["fanout.publish_batch"], r["PgQ insert_event, 100 statements"], "PgQ insert_event, 100 statements", 0)
		one.Details, many.Details = details, details
		out = append(out, one, many)
	}
	out[0].Note = "pgq's figure is the default topic (NOTIFY on); PgQ sends no notification: details hold notify=>false, like for like"
	return out, nil
}

// pgqPrepareTopic creates a pubsub (offset mode) topic with 8 groups
// subscribed at the start and n messages, and returns the groups and the
// id range (lo, hi].
func pgqPrepareTopic(ctx context.Context, db *DB, topic string, n int) ([]string, int64, int64, error) {
	if _, err := db.Pool.Exec(ctx, `SELECT fanout.create_topic($1, semantics => 'pubsub')`, topic); err != nil {
		return nil, 0, 0, fmt.Errorf("create %s: %w", topic, err)
	}
	groups := make([]string, fanoutGroups)
	for g := range groups {
		groups[g] = fmt.Sprintf("g%d", g+1)
		if _, err := db.Pool.Exec(ctx, `SELECT * FROM fanout.subscribe($1, $2, start_position => 'earliest')`,
			topic, groups[g]); err != nil {
			return nil, 0, 0, fmt.Errorf("subscribe %s/%s: %w", topic, groups[g], err)
		}
	}
	if _, err := fillTopic(ctx, db, topic, "-", n); err != nil {
		return nil, 0, 0, err
	}
	var table string
	if err := db.Pool.QueryRow(ctx, `SELECT data_table FROM fanout.topic WHERE topic = $1`, topic).Scan(&table); err != nil {
		return nil, 0, 0, err
	}
	var lo, hi int64
	if err := db.Pool.QueryRow(ctx, `SELECT min(id) - 1, max(id) FROM `+pgx.Identifier{"fanout_data", table}.Sanitize()).
		Scan(&lo, &hi); err != nil {
		return nil, 0, 0, err
	}
	if hi-lo != int64(n) {
		return nil, 0, 0, fmt.Errorf("%s holds ids (%d, %d], want %d messages", topic, lo, hi, n)
	}
	return groups, lo, hi, nil
}

// pgqPrepareQueue creates a PgQ queue with 8 consumers and n events, ticked
// after every `batch` events, and returns the consumer names and the
// lowest event id minus one.
func pgqPrepareQueue(ctx context.Context, db *DB, queue string, n, batch int) ([]string, int64, error) {
	const perTxn = 100
	for _, sql := range []string{
		`SELECT pgq.create_queue($1)`,
		// A tick whenever pgq.ticker(q) is called and there is a new event:
		// the bench decides where batches end.
		`SELECT pgq.set_queue_config($1, 'ticker_max_count', '1')`,
		`SELECT pgq.set_queue_config($1, 'ticker_max_lag', '1 day')`,
		`SELECT pgq.set_queue_config($1, 'ticker_idle_period', '1 day')`,
	} {
		if _, err := db.Pool.Exec(ctx, sql, queue); err != nil {
			return nil, 0, fmt.Errorf("%s: %w", sql, err)
		}
	}
	consumers := make([]string, fanoutGroups)
	for c := range consumers {
		consumers[c] = fmt.Sprintf("c%d", c+1)
		if _, err := db.Pool.Exec(ctx, `SELECT pgq.register_consumer($1, $2)`, queue, consumers[c]); err != nil {
			return nil, 0, fmt.Errorf("register %s/%s: %w", queue, consumers[c], err)
		}
	}
	payloads := make([]string, perTxn)
	for i := range payloads {
		payloads[i] = string(benchPayload)
	}
	for done := 0; done < n; {
		k := min(perTxn, n-done)
		var got int
		if err := db.Pool.QueryRow(ctx, pgqInsert100, queue, string(benchHeaders), payloads[:k]).Scan(&got); err != nil {
			return nil, 0, fmt.Errorf("fill %s: %w", queue, err)
		}
		done += k
		if done%batch == 0 || done == n {
			var tick *int64
			if err := db.Pool.QueryRow(ctx, `SELECT pgq.ticker($1)`, queue).Scan(&tick); err != nil {
				return nil, 0, fmt.Errorf("tick %s: %w", queue, err)
			}
			if tick == nil {
				return nil, 0, fmt.Errorf("tick %s after %d events: pgq.ticker made no tick", queue, done)
			}
		}
	}
	// The queue's events: the parent table pgq.event_<id> (inheritance).
	var pfx string
	if err := db.Pool.QueryRow(ctx, `SELECT queue_data_pfx FROM pgq.queue WHERE queue_name = $1`, queue).Scan(&pfx); err != nil {
		return nil, 0, err
	}
	var lo, hi, count int64
	if err := db.Pool.QueryRow(ctx, `SELECT min(ev_id) - 1, max(ev_id), count(*) FROM `+pfx).Scan(&lo, &hi, &count); err != nil {
		return nil, 0, fmt.Errorf("event ids of %s: %w", queue, err)
	}
	if count != int64(n) || hi-lo != int64(n) {
		return nil, 0, fmt.Errorf("%s holds %d events with ids (%d, %d], want %d", queue, count, lo, hi, n)
	}
	return consumers, lo, nil
}

type pgqStats struct {
	Batches            int64
	MinBatch, MaxBatch int64
}

// pgqDrain runs one goroutine per PgQ consumer until next_batch returns
// NULL, and checks that each got all n events exactly once. It returns
// events/s summed over the consumers.
func pgqDrain(ctx context.Context, db *DB, queue string, consumers []string, lo int64, n int) (float64, pgqStats, error) {
	var st pgqStats
	var mu sync.Mutex
	st.MinBatch = -1
	var total atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, len(consumers))
	start := time.Now()
	for _, c := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := db.Pool.Acquire(ctx)
			if err != nil {
				errc <- err
				return
			}
			defer conn.Release()
			seen := make([]bool, n)
			got := 0
			var d client.Delivery
			var evType, extra pgtype.Text
			for {
				var batch *int64
				if err := conn.QueryRow(ctx, pgqNextBatch, queue, c).Scan(&batch); err != nil {
					errc <- fmt.Errorf("next_batch %s/%s: %w", queue, c, err)
					return
				}
				if batch == nil {
					break
				}
				rows, err := conn.Query(ctx, pgqGetEvents, *batch)
				if err != nil {
					errc <- fmt.Errorf("get_batch_events %s/%s: %w", queue, c, err)
					return
				}
				var k int64
				for rows.Next() {
					if err := rows.Scan(&d.ID, &d.PublishedAt, &evType, &d.Payload, &extra); err != nil {
						rows.Close()
						errc <- err
						return
					}
					i := d.ID - lo - 1
					if i < 0 || i >= int64(n) || seen[i] {
						rows.Close()
						errc <- fmt.Errorf("PgQ %s/%s: event %d twice or out of range (%d, %d]", queue, c, d.ID, lo, lo+int64(n))
						return
					}
					seen[i] = true
					k++
				}
				if err := rows.Err(); err != nil {
					errc <- err
					return
				}
				if _, err := conn.Exec(ctx, pgqFinish, *batch); err != nil {
					errc <- fmt.Errorf("finish_batch %s/%s: %w", queue, c, err)
					return
				}
				total.Add(k)
				mu.Lock()
				st.Batches++
				st.MaxBatch = max(st.MaxBatch, k)
				if st.MinBatch < 0 || k < st.MinBatch {
					st.MinBatch = k
				}
				mu.Unlock()
				got += int(k)
			}
			if got != n {
				errc <- fmt.Errorf("PgQ %s/%s got %d events, want %d", queue, c, got, n)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	close(errc)
	if err := <-errc; err != nil {
		return 0, st, err
	}
	return float64(total.Load()) / el.Seconds(), st, nil
}

// ratioOrNil is a/b, or nil (JSON null) when there is no ratio.
func ratioOrNil(a, b float64) *float64 {
	r := ratio(a, b)
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return nil
	}
	return &r
}
