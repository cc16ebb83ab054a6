package main

// Helpers shared by the fan-out scenarios (matrix, chaos, backlog, tenant,
// contention): a raw read+ack call with its fetch latency, partition
// rotation and cleanup driven with a shifted clock, and table statistics.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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

// readAck claims up to max messages for (topic, group, consumer) with
// fanout.read and acks the lease with fanout.ack, both autocommit.
// onRow, when not nil, sees each message's id and published_at.
func readAck(ctx context.Context, pool *pgxpool.Pool, topic, group, consumer string, max int,
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
// had passed: fanout._manage_partitions with the clock 2 hours ahead, twice,
// each call its own transaction (step 1 creates the next partition, step 2
// jumps the sequence into it once that creation committed).
func rotate(ctx context.Context, pool *pgxpool.Pool) error {
	for i := 0; i < 2; i++ {
		if _, err := pool.Exec(ctx, `SELECT fanout._manage_partitions(now() + interval '2 hours')`); err != nil {
			return fmt.Errorf("rotate: %w", err)
		}
	}
	return nil
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
