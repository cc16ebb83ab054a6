package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgfanout/pgq/client"
)

func init() { register(50, xminScenario{}) }

// xminScenario: steady publish + drain on a queue topic, first clean, then
// while another session holds an xid open (so vacuum and HOT pruning cannot
// remove anything newer): throughput ratio and what it does to the tables.
type xminScenario struct{}

func (xminScenario) Name() string { return "xmin" }
func (xminScenario) Title() string {
	return "5. held xmin: publish+drain throughput with a transaction holding an xid open vs without"
}

// tableStats is one pg_stat_user_tables row (plus size).
type tableStats struct {
	Upd, Del, Dead, HotUpd, Bytes int64
}

func readTableStats(ctx context.Context, db *DB) (map[string]tableStats, error) {
	// Stats are flushed by busy backends at most once a second.
	if _, err := db.Pool.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return nil, err
	}
	rows, err := db.Pool.Query(ctx, `
		SELECT CASE WHEN schemaname = 'fanout_data' THEN 'fanout_data.*' ELSE schemaname || '.' || relname END,
		       sum(n_tup_upd)::bigint, sum(n_tup_del)::bigint, sum(n_dead_tup)::bigint, sum(n_tup_hot_upd)::bigint,
		       sum(pg_total_relation_size(relid))::bigint
		FROM pg_stat_user_tables WHERE schemaname IN ('fanout', 'fanout_data')
		GROUP BY 1`)
	if err != nil {
		return nil, err
	}
	out := map[string]tableStats{}
	for rows.Next() {
		var name string
		var s tableStats
		if err := rows.Scan(&name, &s.Upd, &s.Del, &s.Dead, &s.HotUpd, &s.Bytes); err != nil {
			return nil, err
		}
		out[name] = s
	}
	return out, rows.Err()
}

type phaseLoad struct {
	published atomic.Int64
	phase     atomic.Int32 // index into samples
	mu        sync.Mutex
	samples   [3][]time.Duration // warm-up, clean, held
}

func (xminScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	db, err := env.NewDB(ctx, "xmin", 0)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if _, err := db.Pool.Exec(ctx, `SELECT fanout.create_topic('xmin.q')`); err != nil {
		return nil, err
	}
	const publishers, consumers = 2, 2
	held := env.Dur(60*time.Second, 15*time.Second)
	clean := env.Dur(60*time.Second, 8*time.Second)
	warm := env.Dur(5*time.Second, 2*time.Second)

	load := &phaseLoad{}
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var wg sync.WaitGroup
	errc := make(chan error, publishers+consumers)
	var cs []*client.Consumer
	for i := 0; i < consumers; i++ {
		c, err := client.NewConsumer(db.Pool, client.Config{Topic: "xmin.q", Consumer: fmt.Sprintf("x%d", i), Logger: quietLog},
			func(_ context.Context, d *client.Delivery) error {
				now := time.Now()
				var p latPayload
				if t, ok := parseT(d.Payload, &p); ok {
					load.mu.Lock()
					k := load.phase.Load()
					load.samples[k] = append(load.samples[k], now.Sub(t))
					load.mu.Unlock()
				}
				return nil
			})
		if err != nil {
			return nil, err
		}
		cs = append(cs, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(lctx); err != nil {
				errc <- err
			}
		}()
	}
	acked := func() int64 {
		var n int64
		for _, c := range cs {
			n += c.Stats().Acked
		}
		return n
	}
	pub := client.NewPublisher(db.Pool)
	for i := 0; i < publishers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Publishers stop between publishes (never cancelled mid-way:
			// an aborted insert would leave a dead tuple in the message table).
			for seq := 0; lctx.Err() == nil; seq++ {
				if _, err := pub.Publish(ctx, "xmin.q", client.Message{Payload: latMessage(seq)}); err != nil {
					if lctx.Err() == nil {
						errc <- err
					}
					return
				}
				load.published.Add(1)
			}
		}()
	}
	fail := func(err error) ([]Result, error) {
		stopLoad()
		wg.Wait()
		return nil, err
	}
	sleep := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errc:
			return fmt.Errorf("load: %w", err)
		case <-time.After(d):
			return nil
		}
	}

	if err := sleep(warm); err != nil {
		return fail(err)
	}
	// Clean phase.
	s0, err := readTableStats(ctx, db)
	if err != nil {
		return fail(err)
	}
	load.phase.Store(1)
	p0, a0, t0 := load.published.Load(), acked(), time.Now()
	if err := sleep(clean); err != nil {
		return fail(err)
	}
	p1, a1, t1 := load.published.Load(), acked(), time.Now()

	// Held phase: another session holds an xid open.
	holder, err := db.Conn(ctx)
	if err != nil {
		return fail(err)
	}
	defer holder.Close(context.WithoutCancel(ctx))
	tx, err := holder.Begin(ctx)
	if err != nil {
		return fail(err)
	}
	var xid string
	if err := tx.QueryRow(ctx, "SELECT pg_current_xact_id()::text").Scan(&xid); err != nil {
		return fail(err)
	}
	s1, err := readTableStats(ctx, db)
	if err != nil {
		return fail(err)
	}
	load.phase.Store(2)
	p2, a2, t2 := load.published.Load(), acked(), time.Now()
	if err := sleep(held); err != nil {
		return fail(err)
	}
	p3, a3, t3 := load.published.Load(), acked(), time.Now()
	// How far the held xid fell behind: every xid younger than it is
	// invisible to vacuum and HOT pruning.
	var xidAge int64
	_ = db.Pool.QueryRow(ctx, `SELECT coalesce(age(backend_xid), -1) FROM pg_stat_activity WHERE pid = $1`,
		holder.PgConn().PID()).Scan(&xidAge)
	stopLoad()
	wg.Wait()
	select {
	case err := <-errc:
		return nil, fmt.Errorf("load: %w", err)
	default:
	}
	time.Sleep(1200 * time.Millisecond) // let the last table stats arrive
	s2, err := readTableStats(ctx, db)
	if err != nil {
		return nil, err
	}
	_ = tx.Rollback(ctx)

	cleanPub := float64(p1-p0) / t1.Sub(t0).Seconds()
	cleanAck := float64(a1-a0) / t1.Sub(t0).Seconds()
	heldPub := float64(p3-p2) / t3.Sub(t2).Seconds()
	heldAck := float64(a3-a2) / t3.Sub(t2).Seconds()
	latClean, latHeld := summarize(load.samples[1]), summarize(load.samples[2])
	env.Logf("clean: publish %.0f/s, drain %.0f/s, e2e %s", cleanPub, cleanAck, latClean)
	env.Logf("held (xid %s, %d xids behind at the end): publish %.0f/s, drain %.0f/s, e2e %s", xid, xidAge, heldPub, heldAck, latHeld)

	dur := fmt.Sprintf("%.0f s", held.Seconds())
	load2 := fmt.Sprintf("%d publishers (1 msg/txn) + %d consumers (pages of 100), closed loop", publishers, consumers)
	var out []Result
	r := throughputRow("xmin", "held xid "+dur+": drain (acked) msg/s, held / clean", "msg/s", heldAck, cleanAck,
		"same load without the open transaction", 0.9)
	r.Note = load2 + fmt.Sprintf("; clean phase %.0f s, held phase %.0f s", clean.Seconds(), held.Seconds())
	out = append(out, r)
	out = append(out, throughputRow("xmin", "held xid "+dur+": publish msg/s, held / clean", "msg/s", heldPub, cleanPub,
		"same load without the open transaction", 0))
	out = append(out, Result{Scenario: "xmin", Case: "held xid " + dur + ": e2e latency", Unit: "ms",
		Value: latHeld.P95, Baseline: latClean.P95, BaseName: "same load without the open transaction",
		Ratio: ratio(latHeld.P95, latClean.P95), ValueText: latHeld.String(), BaseText: latClean.String(),
		Note: "ratio = p95 held / p95 clean", Details: map[string]any{"held": latHeld, "clean": latClean,
			"held_xid": xid, "held_xid_age_at_end": xidAge}})

	data0, data1, data2 := s0["fanout_data.*"], s1["fanout_data.*"], s2["fanout_data.*"]
	upd, del, dead := data2.Upd-data0.Upd, data2.Del-data0.Del, data2.Dead
	out = append(out, Result{Scenario: "xmin", Case: "fanout_data tables: n_dead_tup / n_tup_upd / n_tup_del", Unit: "rows",
		Value: float64(dead + upd + del), Ratio: ratio(0, 0), HigherIsBetter: false,
		ValueText: fmt.Sprintf("%d / %d / %d", dead, upd, del), Target: "all 0 (append-only)",
		Note:    "n_dead_tup would also count rolled-back publishes; the harness never aborts one",
		Pass:    boolp(dead == 0 && upd == 0 && del == 0),
		Details: map[string]any{"bytes_growth_held": data2.Bytes - data1.Bytes}})

	details := map[string]any{}
	var catText string
	for _, name := range []string{"fanout.lease", "fanout.consumer_group", "fanout.member", "fanout.retry"} {
		a, b, c := s0[name], s1[name], s2[name]
		details[name] = map[string]any{
			"updates_clean": b.Upd - a.Upd, "updates_held": c.Upd - b.Upd,
			"dead_tuples_after_clean": b.Dead, "dead_tuples_after_held": c.Dead,
			"bytes_after_clean": b.Bytes, "bytes_after_held": c.Bytes,
		}
		if name == "fanout.lease" || name == "fanout.consumer_group" {
			if catText != "" {
				catText += ", "
			}
			catText += fmt.Sprintf("%s %d→%d dead, %s→%s", name[len("fanout."):], b.Dead, c.Dead,
				fmtBytes(b.Bytes), fmtBytes(c.Bytes))
		}
	}
	out = append(out, Result{Scenario: "xmin", Case: "catalog tables during the held phase (info)", Unit: "rows",
		Ratio: ratio(0, 0), ValueText: catText, Details: details,
		Note: "the consume path updates lease and group rows; their dead versions cannot be pruned while the xid is held"})
	return out, nil
}

func fmtBytes(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.0f kB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

// parseT reads the send time out of a bench payload.
func parseT(payload []byte, p *latPayload) (time.Time, bool) {
	if err := json.Unmarshal(payload, p); err != nil || p.T == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, p.T), true
}
