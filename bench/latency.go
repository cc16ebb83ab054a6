package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfanout/pgq/client"
)

func init() { register(40, latencyScenario{}) }

// The latency baseline: a plain table with the same statement-level NOTIFY
// trigger pgq uses, drained by the classic SKIP LOCKED delete-queue.
const (
	latPlainTrigger = `CREATE FUNCTION bench_notify() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN PERFORM pg_notify('bench_plain', ''); RETURN NULL; END $$;
CREATE TRIGGER bench_notify AFTER INSERT ON bench_plain FOR EACH STATEMENT EXECUTE FUNCTION bench_notify()`
	latPlainDelete = `DELETE FROM bench_plain WHERE id IN
  (SELECT id FROM bench_plain ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED) RETURNING payload`
)

type latencyScenario struct{}

func (latencyScenario) Name() string { return "latency" }
func (latencyScenario) Title() string {
	return "4. end-to-end latency publish→handler with NOTIFY wake-up (client package), and polling with notify=>false"
}

// latPayload carries the send time; pad brings it near a real message size.
type latPayload struct {
	T   int64  `json:"t"`
	Seq int    `json:"seq"`
	Pad string `json:"pad"`
}

var emptyObject = json.RawMessage(`{}`) // pgq's default headers

const latPad = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func latMessage(seq int) json.RawMessage {
	b := make([]byte, 0, 160)
	b = append(b, `{"t":`...)
	b = strconv.AppendInt(b, time.Now().UnixNano(), 10)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, int64(seq), 10)
	b = append(b, `,"pad":"`+latPad+`"}`...)
	return b
}

// latRecorder collects publish→handler latencies.
type latRecorder struct {
	mu      sync.Mutex
	samples []time.Duration
	skip    int // warm-up: ignore seq < skip
	count   atomic.Int64
}

func (r *latRecorder) record(payload []byte) error {
	now := time.Now()
	var p latPayload
	if err := json.Unmarshal(payload, &p); err != nil {
		return err
	}
	if p.Seq >= r.skip {
		r.mu.Lock()
		r.samples = append(r.samples, now.Sub(time.Unix(0, p.T)))
		r.mu.Unlock()
	}
	r.count.Add(1)
	return nil
}

func (r *latRecorder) waitFor(n int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for r.count.Load() < int64(n) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

func (latencyScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	db, err := env.NewDB(ctx, "latency", 0)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	for _, sql := range []string{
		`SELECT fanout.create_topic('lat.notify')`,
		`SELECT fanout.create_topic('lat.poll', notify => false)`,
		plainDDL,
		latPlainTrigger,
	} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			return nil, fmt.Errorf("%s: %w", sql, err)
		}
	}
	env.Baseline("plain NOTIFY + SKIP LOCKED queue",
		"table as for \"plain INSERT\", plus\n"+latPlainTrigger+";\npublish: "+plainInsert+
			";\nconsumer: LISTEN bench_plain on its own connection; on each notification (or every 1 s) repeat\n"+
			latPlainDelete+"\nuntil it returns < 100 rows")

	const pollInterval = 50 * time.Millisecond
	d := env.Dur(15*time.Second, 2*time.Second)
	var out []Result
	for _, rate := range []float64{100, 1000} {
		base, err := measurePlainLatency(ctx, db, rate, d)
		if err != nil {
			return nil, fmt.Errorf("baseline latency at %.0f/s: %w", rate, err)
		}
		env.Logf("baseline   %5.0f msg/s: %s", rate, base)
		for _, mode := range []struct {
			name, topic string
			poll        time.Duration
		}{
			{"NOTIFY (defaults)", "lat.notify", 0},
			{fmt.Sprintf("notify=>false, poll %s", pollInterval), "lat.poll", pollInterval},
		} {
			sum, achieved, st, err := measurePgqLatency(ctx, db, mode.topic, mode.poll, rate, d)
			if err != nil {
				return nil, fmt.Errorf("latency %s at %.0f/s: %w", mode.name, rate, err)
			}
			env.Logf("pgq %-28s %5.0f msg/s (achieved %.0f): %s", mode.name, rate, achieved, sum)
			r := Result{Scenario: "latency", Case: fmt.Sprintf("e2e %s, %.0f msg/s", mode.name, rate), Unit: "ms",
				Value: sum.P99, Baseline: base.P99, BaseName: "plain NOTIFY + SKIP LOCKED queue",
				Ratio: ratio(sum.P99, base.P99), ValueText: sum.String(), BaseText: base.String(),
				Details: map[string]any{"pgq": sum, "baseline": base, "rate_target": rate, "rate_achieved": achieved,
					"reads": st.Reads, "empty_reads": st.EmptyReads, "notifications": st.Notifications,
					"poll_interval_ms": ms(pollIntervalOrDefault(mode.poll))},
				Note: "ratio = p99 / baseline p99"}
			if achieved < 0.95*rate {
				r.Note = fmt.Sprintf("publishers achieved only %.0f of %.0f msg/s; ", achieved, rate) + r.Note
			}
			if mode.poll == 0 {
				r.Target = "p50 ≤ 5 ms, p99 ≤ 25 ms"
				r.Pass = boolp(sum.P50 <= 5 && sum.P99 <= 25)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

func pollIntervalOrDefault(d time.Duration) time.Duration {
	if d == 0 {
		return client.DefaultPollInterval
	}
	return d
}

const latPublishers = 8

// measurePgqLatency publishes at rate for d (latPublishers connections) while
// one client.Consumer with default settings (except poll) handles topic.
func measurePgqLatency(ctx context.Context, db *DB, topic string, poll time.Duration, rate float64, d time.Duration) (
	LatencySummary, float64, client.Stats, error) {
	rec := &latRecorder{skip: int(rate / 2)} // first 0.5 s is warm-up
	c, err := client.NewConsumer(db.Pool, client.Config{Topic: topic, Consumer: "lat", PollInterval: poll, Logger: quietLog},
		func(_ context.Context, d *client.Delivery) error { return rec.record(d.Payload) })
	if err != nil {
		return LatencySummary{}, 0, client.Stats{}, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	stop := func() error { cancel(); return <-done }
	// Wait until the consumer is idle (it LISTENs and read an empty page).
	for c.Stats().EmptyReads == 0 {
		select {
		case err := <-done:
			return LatencySummary{}, 0, client.Stats{}, fmt.Errorf("consumer stopped: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	pub := client.NewPublisher(db.Pool)
	sent, achieved, err := pacer(ctx, rate, d, latPublishers, func(ctx context.Context, seq int) error {
		_, err := pub.Publish(ctx, topic, client.Message{Payload: latMessage(seq)})
		return err
	})
	if err != nil {
		_ = stop()
		return LatencySummary{}, 0, client.Stats{}, err
	}
	ok := rec.waitFor(sent, 10*time.Second)
	if err := stop(); err != nil {
		return LatencySummary{}, 0, client.Stats{}, err
	}
	if !ok {
		return LatencySummary{}, 0, c.Stats(), fmt.Errorf("only %d of %d messages delivered", rec.count.Load(), sent)
	}
	return summarize(rec.samples), achieved, c.Stats(), nil
}

// measurePlainLatency is the same measurement against the baseline queue.
func measurePlainLatency(ctx context.Context, db *DB, rate float64, d time.Duration) (LatencySummary, error) {
	rec := &latRecorder{skip: int(rate / 2)}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wake := make(chan struct{}, 1)
	ready := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // listener, as in the client: its own connection
		defer wg.Done()
		conn, err := db.Conn(rctx)
		if err == nil {
			_, err = conn.Exec(rctx, "LISTEN bench_plain")
		}
		ready <- err
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		for {
			if _, err := conn.WaitForNotification(rctx); err != nil {
				return
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}()
	if err := <-ready; err != nil {
		cancel()
		wg.Done()
		wg.Wait()
		return LatencySummary{}, err
	}
	consumeErr := make(chan error, 1)
	go func() { // consumer: drain, then wait for a notification or 1 s
		defer wg.Done()
		for rctx.Err() == nil {
			for {
				rows, err := db.Pool.Query(rctx, latPlainDelete)
				if err != nil {
					if rctx.Err() == nil {
						consumeErr <- err
					}
					return
				}
				payloads, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
				if err != nil {
					if rctx.Err() == nil {
						consumeErr <- err
					}
					return
				}
				for _, p := range payloads {
					if err := rec.record(p); err != nil {
						consumeErr <- err
						return
					}
				}
				if len(payloads) < 100 {
					break
				}
			}
			select {
			case <-rctx.Done():
			case <-wake:
			case <-time.After(time.Second):
			}
		}
	}()
	sent, _, err := pacer(ctx, rate, d, latPublishers, func(ctx context.Context, seq int) error {
		var id int64
		return db.Pool.QueryRow(ctx, plainInsert, emptyObject, nil, latMessage(seq)).Scan(&id)
	})
	if err == nil && !rec.waitFor(sent, 10*time.Second) {
		err = fmt.Errorf("only %d of %d messages delivered", rec.count.Load(), sent)
	}
	cancel()
	wg.Wait()
	select {
	case cerr := <-consumeErr:
		if err == nil {
			err = cerr
		}
	default:
	}
	return summarize(rec.samples), err
}
