package main

// Helpers shared by the fan-out scenarios (matrix, chaos, backlog, tenant,
// contention): a raw read+ack call with its fetch latency, partition
// rotation and cleanup driven with a shifted clock, and table statistics.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// readAckResult is one fanout.read (+ fanout.ack) call.
type readAckResult struct {
	N      int           // messages in the page
	Fetch  time.Duration // fanout.read round trip (rows consumed)
	MaxID  int64         // highest message id in the page
	MinPub time.Time     // oldest published_at in the page
}

// querier is a pool or one connection held from it.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// readAck claims up to max messages for (topic, group, consumer) with
// fanout.read and acks the lease with fanout.ack, both autocommit.
// onRow, when not nil, sees each message's id and published_at.
func readAck(ctx context.Context, pool querier, topic, group, consumer string, max int,
	onRow func(id int64, published time.Time)) (readAckResult, error) {
	var res readAckResult
	var grp any
	if group != "" {
		grp = group
	}
	t0 := time.Now()
	rows, err := pool.Query(ctx, `SELECT lease_id, message_id, published_at FROM fanout.read($1, $2, $3, $4)`,
		topic, grp, consumer, max)
	if err != nil {
		return res, fmt.Errorf("read %s/%s: %w", topic, group, err)
	}
	var lease int64
	for rows.Next() {
		var id int64
		var pub time.Time
		if err := rows.Scan(&lease, &id, &pub); err != nil {
			rows.Close()
			return res, err
		}
		res.N++
		res.MaxID = max64(res.MaxID, id)
		if res.MinPub.IsZero() || pub.Before(res.MinPub) {
			res.MinPub = pub
		}
		if onRow != nil {
			onRow(id, pub)
		}
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("read %s/%s: %w", topic, group, err)
	}
	res.Fetch = time.Since(t0)
	if res.N > 0 {
		for attempt := 1; ; attempt++ {
			_, err := pool.Exec(ctx, `SELECT fanout.ack($1)`, lease)
			var pe *pgconn.PgError
			if err != nil && errors.As(err, &pe) && pe.Code == "40P01" && attempt < 10 {
				// ack is idempotent and the lease is still ours: retry, and count it.
				ackDeadlocks.Add(1)
				continue
			}
			if err != nil {
				return res, fmt.Errorf("ack %s/%s: %w", topic, group, err)
			}
			break
		}
	}
	return res, nil
}

// ackDeadlocks counts fanout.ack calls that failed with deadlock_detected
// (40P01) and were retried (a finding to report, not a harness error).
var ackDeadlocks atomic.Int64

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// rotate closes every topic's open partition now, as if partition_interval
// had passed: fanout._manage_partitions with the clock 2 hours ahead, each
// call its own transaction (step 1 creates the next partition, step 2 jumps
// the sequence into it once that creation committed). Step 2 also waits for
// the transactions that held the topic's table when the creation committed
// (publishers and readers in flight at that instant, recorded on its first
// look), so it usually jumps only on a later call: calling twice closed a
// partition every other tick, which made the matrix's cleanup rate look
// half the production rate on alternate ticks. So it calls again (every
// 5 ms, at most 2 s) until every topic has closed a partition in this call
// (a topic whose open partition is empty is not rotated: it waits the 2 s).
func rotate(ctx context.Context, pool *pgxpool.Pool) error {
	var since time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&since); err != nil {
		return fmt.Errorf("rotate: %w", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; ; i++ {
		if _, err := pool.Exec(ctx, `SELECT fanout._manage_partitions(now() + interval '2 hours')`); err != nil {
			return fmt.Errorf("rotate: %w", err)
		}
		if i < 1 {
			continue
		}
		var stale bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM fanout.topic t
			WHERE NOT EXISTS (SELECT 1 FROM fanout.partition p WHERE p.topic_id = t.topic_id AND p.closed_at >= $1))`,
			since).Scan(&stale); err != nil {
			return fmt.Errorf("rotate: %w", err)
		}
		if !stale || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// topicSize is what fanout.topics says about one topic.
func topicSize(ctx context.Context, pool *pgxpool.Pool, topic string) (msgs, bytes int64, err error) {
	err = pool.QueryRow(ctx, `SELECT messages, bytes FROM fanout.topics WHERE topic = $1`, topic).Scan(&msgs, &bytes)
	return
}

// bloat is n_dead_tup / (n_live_tup + n_dead_tup) summed over the topic's
// message partitions and over fanout.lease and fanout.consumer_group.
type bloatSample struct {
	Pct       float64 `json:"pct"`
	MsgDead   int64   `json:"message_tables_dead"`
	MsgLive   int64   `json:"message_tables_live"`
	LeaseDead int64   `json:"lease_dead"`
	LeaseLive int64   `json:"lease_live"`
	GroupDead int64   `json:"consumer_group_dead"`
	GroupLive int64   `json:"consumer_group_live"`
}

func sampleBloat(ctx context.Context, pool *pgxpool.Pool, topic string) (bloatSample, error) {
	var b bloatSample
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return b, err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return b, err
	}
	err = conn.QueryRow(ctx, `
		SELECT coalesce(sum(n_dead_tup) FILTER (WHERE schemaname = 'fanout_data'), 0)::bigint,
		       coalesce(sum(n_live_tup) FILTER (WHERE schemaname = 'fanout_data'), 0)::bigint,
		       coalesce(sum(n_dead_tup) FILTER (WHERE relname = 'lease' AND schemaname = 'fanout'), 0)::bigint,
		       coalesce(sum(n_live_tup) FILTER (WHERE relname = 'lease' AND schemaname = 'fanout'), 0)::bigint,
		       coalesce(sum(n_dead_tup) FILTER (WHERE relname = 'consumer_group' AND schemaname = 'fanout'), 0)::bigint,
		       coalesce(sum(n_live_tup) FILTER (WHERE relname = 'consumer_group' AND schemaname = 'fanout'), 0)::bigint
		FROM pg_stat_user_tables s
		WHERE (s.schemaname = 'fanout' AND s.relname IN ('lease', 'consumer_group'))
		   OR (s.schemaname = 'fanout_data' AND s.relname IN (
		          SELECT p.relname FROM fanout.partition p JOIN fanout.topic t USING (topic_id) WHERE t.topic = $1))`,
		topic).Scan(&b.MsgDead, &b.MsgLive, &b.LeaseDead, &b.LeaseLive, &b.GroupDead, &b.GroupLive)
	if err != nil {
		return b, fmt.Errorf("bloat: %w", err)
	}
	dead := b.MsgDead + b.LeaseDead + b.GroupDead
	all := dead + b.MsgLive + b.LeaseLive + b.GroupLive
	if all > 0 {
		b.Pct = 100 * float64(dead) / float64(all)
	}
	return b, nil
}

func walLSN(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var v int64
	err := pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&v)
	return v, err
}

// steadyPublisher publishes one message per transaction at a fixed rate
// from a few goroutines until stop is closed; Count is the number committed.
type steadyPublisher struct {
	Count atomic.Int64
	err   atomic.Pointer[error]
	wg    sync.WaitGroup
	stop  chan struct{}
}

func startPublisher(ctx context.Context, pool *pgxpool.Pool, topic string, rate float64, workers int) *steadyPublisher {
	p := &steadyPublisher{stop: make(chan struct{})}
	jobs := make(chan struct{}, workers*4)
	for w := 0; w < workers; w++ {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for range jobs {
				if p.err.Load() != nil {
					continue
				}
				if _, err := pool.Exec(ctx, `SELECT fanout.publish($1, $2::jsonb, $3::jsonb)`, topic,
					string(benchPayload), string(benchHeaders)); err != nil {
					p.err.CompareAndSwap(nil, &err)
					continue
				}
				p.Count.Add(1)
			}
		}()
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(jobs)
		interval := time.Duration(float64(time.Second) / rate)
		start := time.Now()
		for seq := 0; ; seq++ {
			if wait := time.Until(start.Add(time.Duration(seq) * interval)); wait > 0 {
				select {
				case <-p.stop:
					return
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
			select {
			case <-p.stop:
				return
			case jobs <- struct{}{}:
			}
		}
	}()
	return p
}

// Stop ends publishing and returns the first error.
func (p *steadyPublisher) Stop() error {
	close(p.stop)
	p.wg.Wait()
	if e := p.err.Load(); e != nil {
		return *e
	}
	return nil
}

// Err is the first publish error so far.
func (p *steadyPublisher) Err() error {
	if e := p.err.Load(); e != nil {
		return *e
	}
	return nil
}

// bloatBytesFn is the bench's own helper (created in a matrix database by
// setupBloatBytes): pgstattuple over every ordinary table of the schemas
// fanout (the catalog) and fanout_data (the topics' partitions and side
// tables; a matrix database has one topic). A table dropped between the
// catalog look-up and its scan (a partition dropped by maintenance) is
// skipped.
const bloatBytesFn = `CREATE FUNCTION bench_bloat_bytes(OUT rel text, OUT is_message boolean, OUT table_len bigint,
    OUT dead_len bigint, OUT free_len bigint)
RETURNS SETOF record LANGUAGE plpgsql AS $$
DECLARE
    r record;
    s record;
BEGIN
    FOR r IN SELECT c.oid, n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname IN ('fanout', 'fanout_data') AND c.relkind = 'r' ORDER BY 2, 3 LOOP
        BEGIN
            SELECT * INTO s FROM pgstattuple(r.oid);
        EXCEPTION WHEN OTHERS THEN
            CONTINUE;
        END;
        rel := format('%I.%I', r.nspname, r.relname);
        is_message := r.nspname = 'fanout_data';
        table_len := s.table_len;
        dead_len := s.dead_tuple_len;
        free_len := s.free_space;
        RETURN NEXT;
    END LOOP;
END $$`

// setupBloatBytes installs pgstattuple and bench_bloat_bytes in db; an
// error means byte bloat cannot be measured on this server.
func setupBloatBytes(ctx context.Context, pool *pgxpool.Pool) error {
	for _, sql := range []string{`CREATE EXTENSION IF NOT EXISTS pgstattuple`, bloatBytesFn} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", strings.SplitN(sql, "(", 2)[0], err)
		}
	}
	return nil
}

// bloatBytes is one pgstattuple sample: bytes of dead tuples and free space
// over all bytes of the tables, for the message tables and the catalog.
type bloatBytes struct {
	Pct        float64             `json:"pct"`
	MsgPct     float64             `json:"message_tables_pct"`
	CatalogPct float64             `json:"catalog_pct"`
	Total      int64               `json:"total_bytes"`
	Dead       int64               `json:"dead_bytes"`
	Free       int64               `json:"free_bytes"`
	Tables     map[string][3]int64 `json:"tables,omitempty"` // rel -> [total, dead, free], tables > 0 bytes
}

func sampleBloatBytes(ctx context.Context, pool *pgxpool.Pool) (bloatBytes, error) {
	var b bloatBytes
	rows, err := pool.Query(ctx, `SELECT rel, is_message, table_len, dead_len, free_len FROM bench_bloat_bytes()`)
	if err != nil {
		return b, fmt.Errorf("bloat (bytes): %w", err)
	}
	defer rows.Close()
	var msgAll, msgWaste, catAll, catWaste int64
	b.Tables = map[string][3]int64{}
	for rows.Next() {
		var rel string
		var isMsg bool
		var total, dead, free int64
		if err := rows.Scan(&rel, &isMsg, &total, &dead, &free); err != nil {
			return b, err
		}
		if isMsg {
			msgAll, msgWaste = msgAll+total, msgWaste+dead+free
		} else {
			catAll, catWaste = catAll+total, catWaste+dead+free
		}
		b.Total += total
		b.Dead += dead
		b.Free += free
		if total > 0 {
			b.Tables[rel] = [3]int64{total, dead, free}
		}
	}
	if err := rows.Err(); err != nil {
		return b, fmt.Errorf("bloat (bytes): %w", err)
	}
	pct := func(waste, all int64) float64 {
		if all == 0 {
			return 0
		}
		return 100 * float64(waste) / float64(all)
	}
	b.Pct, b.MsgPct, b.CatalogPct = pct(b.Dead+b.Free, b.Total), pct(msgWaste, msgAll), pct(catWaste, catAll)
	return b, nil
}

// readChained claims up to max messages with fanout.read and acks the
// caller's previous page (prev, 0 for none) in the same call (read(...,
// ack => prev)): one round trip and one commit per page, as the shipped
// client does (it pipelines the ack with the next read). It returns the new
// page's lease (0 when the page is empty), to be acked by the next call. A
// deadlock (40P01) rolls the whole call back and is retried, and counted.
func readChained(ctx context.Context, q querier, topic, group, consumer string, max int, prev int64) (
	readAckResult, int64, error) {
	var grp, ack any
	if group != "" {
		grp = group
	}
	if prev != 0 {
		ack = prev
	}
	for attempt := 1; ; attempt++ {
		var res readAckResult
		var lease int64
		t0 := time.Now()
		rows, err := q.Query(ctx, `SELECT lease_id, message_id, published_at FROM fanout.read($1, $2, $3, $4, ack => $5)`,
			topic, grp, consumer, max, ack)
		if err == nil {
			for rows.Next() {
				var id int64
				var pub time.Time
				if err = rows.Scan(&lease, &id, &pub); err != nil {
					break
				}
				res.N++
				res.MaxID = max64(res.MaxID, id)
				if res.MinPub.IsZero() || pub.Before(res.MinPub) {
					res.MinPub = pub
				}
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		var pe *pgconn.PgError
		if err != nil && errors.As(err, &pe) && pe.Code == "40P01" && attempt < 10 {
			ackDeadlocks.Add(1)
			continue
		}
		if err != nil {
			return res, 0, fmt.Errorf("read %s/%s (ack %d): %w", topic, group, prev, err)
		}
		res.Fetch = time.Since(t0)
		return res, lease, nil
	}
}
