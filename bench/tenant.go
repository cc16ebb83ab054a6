package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgfanout/pgq/client"
)

func init() { register(100, tenantScenario{}) }

// tenantScenario: multi-tenant isolation (seed). A cold pubsub topic at
// 10 msg/s with 2 groups, each drained by its own read+ack loop (5 ms poll
// when empty): its fetch latency and delivery lag (receipt − published_at)
// first alone, then while a hot queue topic is published at full speed
// (2 publishers, publish_batch of 100) and drained by one consumer.
type tenantScenario struct{}

func (tenantScenario) Name() string { return "tenant" }
func (tenantScenario) Title() string {
	return "10. multi-tenant isolation: a cold topic (10 msg/s, 2 groups) alone vs beside a hot topic at full speed"
}

type coldStats struct {
	fetch, lag []time.Duration
	delivered  int
}

// runCold drives the cold topic for d (publisher + 2 group loops).
func runCold(ctx context.Context, db *DB, topic string, groups []string, d time.Duration) (coldStats, error) {
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	var mu sync.Mutex
	var st coldStats
	var wg sync.WaitGroup
	errc := make(chan error, len(groups))
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cctx.Err() == nil {
				now := func() time.Time { return time.Now() }
				var lags []time.Duration
				r, err := readAck(cctx, db.Pool, topic, g, g+"-1", 100, func(_ int64, pub time.Time) {
					lags = append(lags, now().Sub(pub))
				})
				if err != nil {
					if cctx.Err() == nil {
						errc <- err
					}
					return
				}
				mu.Lock()
				st.fetch = append(st.fetch, r.Fetch)
				st.lag = append(st.lag, lags...)
				st.delivered += r.N
				mu.Unlock()
				if r.N == 0 {
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	_, _, perr := pacer(cctx, 10, d, 1, func(ctx context.Context, _ int) error {
		_, err := db.Pool.Exec(ctx, `SELECT fanout.publish($1, $2::jsonb, $3::jsonb)`, topic, string(benchPayload), string(benchHeaders))
		return err
	})
	time.Sleep(200 * time.Millisecond) // let the last messages arrive
	stop()
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return st, err
	}
	if perr != nil && ctx.Err() == nil {
		return st, fmt.Errorf("cold publish: %w", perr)
	}
	return st, ctx.Err()
}

func (tenantScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	d := env.Dur(10*time.Second, 4*time.Second)
	db, err := env.NewDB(ctx, "tenant", 16)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	const cold, hot = "cold", "hot"
	if _, err := db.Pool.Exec(ctx, `SELECT fanout.create_topic($1, semantics => 'pubsub')`, cold); err != nil {
		return nil, err
	}
	if _, err := db.Pool.Exec(ctx, `SELECT fanout.create_topic($1)`, hot); err != nil {
		return nil, err
	}
	groups := []string{"billing", "audit"}
	for _, g := range groups {
		if _, err := db.Pool.Exec(ctx, `SELECT * FROM fanout.subscribe($1, $2)`, cold, g); err != nil {
			return nil, err
		}
	}
	env.Baseline("cold topic alone", fmt.Sprintf("the same cold topic (10 msg/s, 2 groups, read+ack loops polling every 5 ms "+
		"when empty) for %s with nothing else running, measured just before the hot phase", d))
	// Warm-up, then the baseline.
	if _, err := runCold(ctx, db, cold, groups, time.Second); err != nil {
		return nil, err
	}
	alone, err := runCold(ctx, db, cold, groups, d)
	if err != nil {
		return nil, fmt.Errorf("cold alone: %w", err)
	}
	// Hot phase: 2 publishers with publish_batch(100) at full speed + 1 consumer.
	hctx, stopHot := context.WithCancel(ctx)
	var hwg sync.WaitGroup
	var hotPub, hotRead atomic.Int64
	herr := make(chan error, 3)
	pub := client.NewPublisher(db.Pool)
	batch := make([]client.Message, 100)
	for i := range batch {
		batch[i] = client.Message{Payload: benchPayload, Headers: benchHeaders}
	}
	for w := 0; w < 2; w++ {
		hwg.Add(1)
		go func() {
			defer hwg.Done()
			for hctx.Err() == nil {
				if _, err := pub.PublishBatch(hctx, hot, batch); err != nil {
					if hctx.Err() == nil {
						herr <- err
					}
					return
				}
				hotPub.Add(100)
			}
		}()
	}
	hwg.Add(1)
	go func() {
		defer hwg.Done()
		for hctx.Err() == nil {
			r, err := readAck(hctx, db.Pool, hot, "", "hot-1", 100, nil)
			if err != nil {
				if hctx.Err() == nil {
					herr <- err
				}
				return
			}
			hotRead.Add(int64(r.N))
			if r.N == 0 {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	time.Sleep(500 * time.Millisecond)
	t0 := time.Now()
	p0 := hotPub.Load()
	busy, cerr := runCold(ctx, db, cold, groups, d)
	hotRate := float64(hotPub.Load()-p0) / time.Since(t0).Seconds()
	stopHot()
	hwg.Wait()
	close(herr)
	if cerr != nil {
		return nil, fmt.Errorf("cold beside hot: %w", cerr)
	}
	if err := <-herr; err != nil {
		return nil, fmt.Errorf("hot topic: %w", err)
	}
	fa, fb := summarize(alone.fetch), summarize(busy.fetch)
	la, lb := summarize(alone.lag), summarize(busy.lag)
	env.Logf("cold alone: fetch %s; lag %s (%d delivered)", fa, la, alone.delivered)
	env.Logf("cold beside hot (%.0f msg/s published, %d read): fetch %s; lag %s (%d delivered)", hotRate, hotRead.Load(), fb, lb,
		busy.delivered)
	details := map[string]any{"fetch_alone": fa, "fetch_hot": fb, "lag_alone": la, "lag_hot": lb, "hot_publish_rate": hotRate,
		"hot_read": hotRead.Load(), "seconds": d.Seconds()}
	note := fmt.Sprintf("hot topic published at %s msg/s (2 x publish_batch(100)) and drained by 1 consumer during the cold phase",
		fmtNum(hotRate))
	return []Result{
		{Scenario: "tenant", Case: "cold topic fetch p95 (beside hot vs alone)", Unit: "ms", Value: fb.P95, Baseline: fa.P95,
			BaseName: "cold topic alone", Ratio: ratio(fb.P95, fa.P95),
			ValueText: fmt.Sprintf("p50 %s / p95 %s ms", fmtMs(fb.P50), fmtMs(fb.P95)),
			BaseText:  fmt.Sprintf("p50 %s / p95 %s ms", fmtMs(fa.P50), fmtMs(fa.P95)), Details: details, Note: note},
		{Scenario: "tenant", Case: "cold topic delivery lag p95 (beside hot vs alone)", Unit: "ms", Value: lb.P95, Baseline: la.P95,
			BaseName: "cold topic alone", Ratio: ratio(lb.P95, la.P95),
			ValueText: fmt.Sprintf("p50 %s / p95 %s ms", fmtMs(lb.P50), fmtMs(lb.P95)),
			BaseText:  fmt.Sprintf("p50 %s / p95 %s ms", fmtMs(la.P50), fmtMs(la.P95)),
			Note:      "lag = receipt by the consumer − published_at (transaction start of the publish), including ≤ 5 ms poll slack"},
	}, nil
}
