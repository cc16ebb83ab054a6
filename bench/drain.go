package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgfanout/pgq/client"
)

func init() { register(30, drainScenario{}) }

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// plainWalk is the read baseline: a keyset page walk over a plain copy of
// the same rows, scanned into the same Go types as client.Delivery.
const plainWalk = `SELECT id, payload, headers, message_group, published_at FROM %s
WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3`

type drainScenario struct{}

func (drainScenario) Name() string { return "drain" }
func (drainScenario) Title() string {
	return "3. queue drain: read+ack in pages of 100 vs a plain SELECT ... ORDER BY id LIMIT 100 page walk"
}

func (drainScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	n := env.N(100_000, 20_000)
	db, err := env.NewDB(ctx, "drain", 0)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	env.Baseline("plain SELECT page walk",
		"CREATE TABLE <copy> (txid xid8, id bigint PRIMARY KEY, published_at timestamptz, message_group text, headers jsonb, payload jsonb)"+
			" filled with INSERT ... SELECT from the topic's message table;\n"+
			fmt.Sprintf(plainWalk, "<copy>")+
			"  -- $3 = 100; k readers walk k disjoint id ranges")
	env.Baseline("SKIP LOCKED queue",
		"a copy of the topic's rows as for \"plain SELECT page walk\"; k consumers each repeat, until a page comes back empty:\n"+
			fmt.Sprintf(skipLockedDelete, "<copy>", "<copy>")+";  -- $1 = 100, autocommit\n"+
			"(the delete-queue of the latency baseline \"plain NOTIFY + SKIP LOCKED queue\", the one the consume-path targets are measured against: "+
			"one statement per page; the page is gone when it is handed out)")
	env.Baseline("SKIP LOCKED queue, lock then DELETE",
		"a copy as above; k consumers each repeat, until a page comes back empty:\n"+
			"BEGIN; "+fmt.Sprintf(skipLockedRead, "<copy>")+";  -- $1 = 100\n"+
			fmt.Sprintf(skipLockedAck, "<copy>")+";  -- the page's ids\nCOMMIT;\n"+
			"(the at-least-once SKIP LOCKED queue: the row lock is the lease, the DELETE the ack; report only)")
	rounds := env.N(3, 2)
	var out []Result
	for _, consumers := range []int{1, 4} {
		// Best of `rounds` fresh backlogs for all sides: on a shared
		// machine the least disturbed run is the most telling.
		var got, base, skip, skipTx, pubRate, gotParts float64
		var st client.Stats
		for r := 0; r < rounds; r++ {
			topic := fmt.Sprintf("drain.c%d.r%d", consumers, r)
			pr, err := fillTopic(ctx, db, topic, "", n)
			if err != nil {
				return nil, err
			}
			copyTable, lo, hi, err := copyToPlain(ctx, db, topic)
			if err != nil {
				return nil, err
			}
			queueTable, txTable := copyTable+"_q", copyTable+"_qtx"
			for _, t := range []string{queueTable, txTable} {
				if err := copyTableLike(ctx, db, copyTable, t); err != nil {
					return nil, err
				}
			}
			baselines := func() error {
				b, err := pageWalk(ctx, db, copyTable, lo, hi, consumers, 1, 100)
				if err != nil {
					return fmt.Errorf("baseline walk: %w", err)
				}
				base = max(base, b)
				q, err := skipLockedDrain(ctx, db, queueTable, hi-lo, consumers, 100, false)
				if err != nil {
					return fmt.Errorf("baseline SKIP LOCKED queue: %w", err)
				}
				skip = max(skip, q)
				q, err = skipLockedDrain(ctx, db, txTable, hi-lo, consumers, 100, true)
				if err != nil {
					return fmt.Errorf("baseline SKIP LOCKED queue, lock then DELETE: %w", err)
				}
				skipTx = max(skipTx, q)
				return nil
			}
			if r%2 == 0 {
				if err := baselines(); err != nil {
					return nil, err
				}
			}
			g, s, err := drainGroups(ctx, db, topic, []string{""}, lo, hi, consumers, 100)
			if err != nil {
				return nil, err
			}
			if r%2 == 1 {
				if err := baselines(); err != nil {
					return nil, err
				}
			}
			if consumers > 1 {
				// The same backlog on a queue topic with key partitions: one
				// cursor per partition instead of one for the queue, so the
				// consumers do not take turns on one group row (report only).
				pt := topic + ".p"
				if _, err := fillTopic(ctx, db, pt, ", partitions => 8", n); err != nil {
					return nil, err
				}
				plo, phi, err := idRange(ctx, db, pt)
				if err != nil {
					return nil, err
				}
				gp, _, err := drainGroups(ctx, db, pt, []string{""}, plo, phi, consumers, 100)
				if err != nil {
					return nil, err
				}
				gotParts = max(gotParts, gp)
				env.Logf("drain %d consumer(s), round %d, partitions => 8: pgq %.0f msg/s", consumers, r+1, gp)
			}
			env.Logf("drain %d consumer(s), round %d: pgq %.0f msg/s (%d reads, %d empty); best so far: plain walk %.0f msg/s, "+
				"SKIP LOCKED queue %.0f msg/s (lock then DELETE %.0f msg/s)", consumers, r+1, g, s.Reads, s.EmptyReads, base, skip, skipTx)
			if g > got {
				got, st = g, s
			}
			pubRate = max(pubRate, pr)
		}
		details := map[string]any{"messages": n, "rounds": rounds, "reads": st.Reads, "empty_reads": st.EmptyReads,
			"publish_batch_1000_msg_per_s": pubRate}
		note := fmt.Sprintf("best of %d rounds (fresh backlog each) for pgq and for each baseline", rounds)
		r := throughputRow("drain", fmt.Sprintf("drain %s msgs, read+ack/100, %d consumer(s)", fmtNum(float64(n)), consumers),
			"msg/s", got, base, "plain SELECT page walk", 0)
		r.Details, r.Note = details, note
		q := throughputRow("drain", fmt.Sprintf("drain %s msgs, read+ack/100, %d consumer(s), vs SKIP LOCKED", fmtNum(float64(n)), consumers),
			"msg/s", got, skip, "SKIP LOCKED queue", 0.5)
		q.Details, q.Note = details, note
		env.SetSummary(map[int]string{1: sumDrain1c, 4: sumDrain4c}[consumers], q.Ratio)
		tx := throughputRow("drain", fmt.Sprintf("drain %s msgs, read+ack/100, %d consumer(s), vs SKIP LOCKED lock+DELETE", fmtNum(float64(n)), consumers),
			"msg/s", got, skipTx, "SKIP LOCKED queue, lock then DELETE", 0)
		tx.Details, tx.Note = details, note
		out = append(out, r, q, tx)
		if consumers > 1 {
			p := throughputRow("drain", fmt.Sprintf("drain %s msgs, read+ack/100, %d consumer(s), partitions => 8, vs SKIP LOCKED",
				fmtNum(float64(n)), consumers), "msg/s", gotParts, skip, "SKIP LOCKED queue", 0)
			p.Details = map[string]any{"messages": n, "rounds": rounds, "partitions": 8}
			p.Note = note + "; report only: the same queue created with partitions => 8 (one cursor per key partition, " +
				"each consumer owning some: consumers of an unpartitioned queue take turns on its one position)"
			out = append(out, p)
		}
	}
	return out, nil
}

// The queue-drain baselines: the classic delete-queue (one statement per
// page, as in the latency baseline) and the at-least-once form (lock the
// page, DELETE it when done, one transaction).
const (
	skipLockedDelete = `DELETE FROM %s WHERE id IN
  (SELECT id FROM %s ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING id, payload, headers, message_group, published_at`
	skipLockedRead = `SELECT id, payload, headers, message_group, published_at FROM %s
ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`
	skipLockedAck = `DELETE FROM %s WHERE id = ANY($1)`
)

// copyTableLike makes dst a copy of src (columns, primary key and rows),
// vacuumed and analyzed.
func copyTableLike(ctx context.Context, db *DB, src, dst string) error {
	for _, sql := range []string{
		`CREATE TABLE ` + dst + ` (LIKE ` + src + ` INCLUDING ALL)`,
		`INSERT INTO ` + dst + ` SELECT * FROM ` + src,
		`VACUUM ANALYZE ` + dst,
	} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	return nil
}

// skipLockedDrain empties table (n rows) with `consumers` SKIP LOCKED
// consumers in pages of `page` and returns messages/s: skipLockedDelete per
// page, or with lockThenDelete skipLockedRead + skipLockedAck in one
// transaction per page.
func skipLockedDrain(ctx context.Context, db *DB, table string, n int64, consumers, page int, lockThenDelete bool) (float64, error) {
	read, ack := fmt.Sprintf(skipLockedRead, table), fmt.Sprintf(skipLockedAck, table)
	if !lockThenDelete {
		read, ack = fmt.Sprintf(skipLockedDelete, table, table), ""
	}
	var total atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, consumers)
	start := time.Now()
	for c := 0; c < consumers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var d client.Delivery
			var group pgtype.Text
			ids := make([]int64, 0, page)
			scan := func(rows pgx.Rows) error {
				ids = ids[:0]
				for rows.Next() {
					if err := rows.Scan(&d.ID, &d.Payload, &d.Headers, &group, &d.PublishedAt); err != nil {
						rows.Close()
						return err
					}
					ids = append(ids, d.ID)
				}
				return rows.Err()
			}
			for {
				k, err := func() (int, error) {
					if !lockThenDelete { // one autocommit statement
						rows, err := db.Pool.Query(ctx, read, page)
						if err != nil {
							return 0, err
						}
						err = scan(rows)
						return len(ids), err
					}
					tx, err := db.Pool.Begin(ctx)
					if err != nil {
						return 0, err
					}
					defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit: a no-op
					rows, err := tx.Query(ctx, read, page)
					if err != nil {
						return 0, err
					}
					if err := scan(rows); err != nil || len(ids) == 0 {
						return 0, err
					}
					if _, err := tx.Exec(ctx, ack, ids); err != nil {
						return 0, err
					}
					return len(ids), tx.Commit(ctx)
				}()
				if err != nil {
					errc <- err
					return
				}
				if k == 0 {
					return
				}
				total.Add(int64(k))
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	close(errc)
	if err := <-errc; err != nil {
		return 0, err
	}
	if total.Load() != n {
		return 0, fmt.Errorf("SKIP LOCKED queue delivered %d rows, want %d", total.Load(), n)
	}
	return float64(n) / el.Seconds(), nil
}

// fillTopic creates topic with createOpts (", notify => false", ...; "-" =
// it exists already) and publishes n messages with publish_batch of 1000
// from 2 clients. It returns the publish rate.
func fillTopic(ctx context.Context, db *DB, topic, createOpts string, n int) (float64, error) {
	if createOpts != "-" {
		sql := "SELECT fanout.create_topic($1" + createOpts + ")"
		if _, err := db.Pool.Exec(ctx, sql, topic); err != nil {
			return 0, fmt.Errorf("create topic %s: %w", topic, err)
		}
	}
	const batch = 1000
	pub := client.NewPublisher(db.Pool)
	msgs := make([]client.Message, batch)
	for i := range msgs {
		msgs[i] = client.Message{Payload: benchPayload, Headers: benchHeaders}
	}
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				done := next.Add(batch) - batch
				if done >= int64(n) {
					return
				}
				k := min(batch, n-int(done))
				if _, err := pub.PublishBatch(ctx, topic, msgs[:k]); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return 0, fmt.Errorf("fill %s: %w", topic, err)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// copyToPlain copies a topic's messages into a plain table with a primary
// key on id, vacuums and analyzes both, and returns the copy's name and the
// id range (lo, hi].
func copyToPlain(ctx context.Context, db *DB, topic string) (string, int64, int64, error) {
	var table string
	if err := db.Pool.QueryRow(ctx, `SELECT data_table FROM fanout.topic WHERE topic = $1`, topic).Scan(&table); err != nil {
		return "", 0, 0, fmt.Errorf("data table of %s: %w", topic, err)
	}
	src := pgx.Identifier{"fanout_data", table}.Sanitize()
	cp := "bench_copy_" + table
	for _, sql := range []string{
		`CREATE TABLE ` + cp + ` (txid xid8 NOT NULL, id bigint PRIMARY KEY, published_at timestamptz NOT NULL,
		     message_group text, headers jsonb NOT NULL, payload jsonb NOT NULL)`,
		`INSERT INTO ` + cp + ` SELECT txid, id, published_at, message_group, headers, payload FROM ` + src,
		`VACUUM ANALYZE ` + cp,
		`VACUUM ANALYZE ` + src,
	} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			return "", 0, 0, fmt.Errorf("%s: %w", sql, err)
		}
	}
	var lo, hi int64
	if err := db.Pool.QueryRow(ctx, `SELECT min(id) - 1, max(id) FROM `+cp).Scan(&lo, &hi); err != nil {
		return "", 0, 0, err
	}
	return cp, lo, hi, nil
}

// pageWalk reads rows (lo, hi] of table `passes` times over with `readers`
// readers per pass (each pass split into disjoint id ranges), pages of
// `page`, all passes concurrently. It returns rows/s.
func pageWalk(ctx context.Context, db *DB, table string, lo, hi int64, readers, passes, page int) (float64, error) {
	sql := fmt.Sprintf(plainWalk, table)
	var total atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, readers*passes)
	start := time.Now()
	span := (hi - lo + int64(readers) - 1) / int64(readers)
	for p := 0; p < passes; p++ {
		for r := 0; r < readers; r++ {
			from, to := lo+int64(r)*span, min(lo+int64(r+1)*span, hi)
			wg.Add(1)
			go func() {
				defer wg.Done()
				cur := from
				var d client.Delivery
				var group pgtype.Text
				for cur < to {
					rows, err := db.Pool.Query(ctx, sql, cur, to, page)
					if err != nil {
						errc <- err
						return
					}
					n := 0
					for rows.Next() {
						if err := rows.Scan(&d.ID, &d.Payload, &d.Headers, &group, &d.PublishedAt); err != nil {
							rows.Close()
							errc <- err
							return
						}
						n++
						cur = d.ID
					}
					if err := rows.Err(); err != nil {
						errc <- err
						return
					}
					total.Add(int64(n))
					if n == 0 {
						break
					}
				}
			}()
		}
	}
	wg.Wait()
	el := time.Since(start)
	close(errc)
	if err := <-errc; err != nil {
		return 0, err
	}
	if want := (hi - lo) * int64(passes); total.Load() != want {
		return 0, fmt.Errorf("page walk read %d rows, want %d", total.Load(), want)
	}
	return float64(total.Load()) / el.Seconds(), nil
}

// drainGroups runs membersPerGroup client.Consumers for each group of
// topic (groups = [""] for a queue topic) until every group got every
// message id in (lo, hi], and returns deliveries/s (until the last page was
// acked) and summed stats. A duplicate delivery is a harness error.
func drainGroups(ctx context.Context, db *DB, topic string, groups []string, lo, hi int64, membersPerGroup, page int) (
	float64, client.Stats, error) {
	n := hi - lo
	total := n * int64(len(groups))
	var count, dups atomic.Int64
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var cs []*client.Consumer
	for _, g := range groups {
		seen := make([]atomic.Uint32, n)
		h := func(_ context.Context, d *client.Delivery) error {
			i := d.ID - lo - 1
			if i < 0 || i >= n {
				return nil
			}
			if seen[i].Add(1) > 1 {
				dups.Add(1)
				return nil
			}
			if count.Add(1) == total {
				cancel()
			}
			return nil
		}
		for m := 0; m < membersPerGroup; m++ {
			c, err := client.NewConsumer(db.Pool, client.Config{Topic: topic, Group: g,
				Consumer: fmt.Sprintf("%s-%d", topicOrGroup(topic, g), m), MaxMessages: page, Logger: quietLog}, h)
			if err != nil {
				return 0, client.Stats{}, err
			}
			cs = append(cs, c)
		}
	}
	errc := make(chan error, len(cs))
	timeout := time.AfterFunc(10*time.Minute, cancel)
	defer timeout.Stop()
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(rctx); err != nil {
				errc <- err
				cancel()
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	close(errc)
	var sum client.Stats
	for _, c := range cs {
		s := c.Stats()
		sum.Reads += s.Reads
		sum.EmptyReads += s.EmptyReads
		sum.Delivered += s.Delivered
		sum.Acked += s.Acked
		sum.Errors += s.Errors
	}
	if err := <-errc; err != nil {
		return 0, sum, fmt.Errorf("drain %s: %w", topic, err)
	}
	if ctx.Err() != nil {
		return 0, sum, ctx.Err()
	}
	if dups.Load() > 0 {
		return 0, sum, fmt.Errorf("drain %s: %d duplicate deliveries", topic, dups.Load())
	}
	if count.Load() != total {
		return 0, sum, errors.New("drain " + topic + ": timed out")
	}
	return float64(total) / el.Seconds(), sum, nil
}

func topicOrGroup(topic, group string) string {
	if group != "" {
		return group
	}
	return topic
}

// idRange returns the id range (lo, hi] of topic's messages, after a VACUUM
// ANALYZE of its message table (as copyToPlain does for its copies).
func idRange(ctx context.Context, db *DB, topic string) (int64, int64, error) {
	var table string
	if err := db.Pool.QueryRow(ctx, `SELECT data_table FROM fanout.topic WHERE topic = $1`, topic).Scan(&table); err != nil {
		return 0, 0, fmt.Errorf("data table of %s: %w", topic, err)
	}
	src := pgx.Identifier{"fanout_data", table}.Sanitize()
	if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE `+src); err != nil {
		return 0, 0, fmt.Errorf("vacuum %s: %w", src, err)
	}
	var lo, hi int64
	if err := db.Pool.QueryRow(ctx, `SELECT min(id) - 1, max(id) FROM `+src).Scan(&lo, &hi); err != nil {
		return 0, 0, err
	}
	return lo, hi, nil
}
