package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/client"
	"github.com/pgfanout/pgq/internal/testdb"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func setup(t *testing.T) (*testdb.Bundle, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return testdb.New(t), ctx
}

func createTopic(t *testing.T, ctx context.Context, db client.DB, topic string, opts ...string) {
	t.Helper()
	sql := "SELECT fanout.create_topic($1"
	for _, o := range opts {
		sql += ", " + o
	}
	_, err := db.Exec(ctx, sql+")", topic)
	require.NoError(t, err)
}

// collector records what a handler saw.
type collector struct {
	mu   sync.Mutex
	seen []client.Delivery
	got  chan struct{}
}

func newCollector() *collector { return &collector{got: make(chan struct{}, 1_000_000)} }

func (c *collector) handle(_ context.Context, d *client.Delivery) error {
	c.mu.Lock()
	c.seen = append(c.seen, *d)
	c.mu.Unlock()
	c.got <- struct{}{}
	return nil
}

// wait blocks until n more deliveries were seen or the timeout passes.
func (c *collector) wait(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for i := 0; i < n; i++ {
		select {
		case <-c.got:
		case <-deadline:
			t.Fatalf("saw %d of %d deliveries within %s", i, n, timeout)
		}
	}
}

func (c *collector) ids() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]int64, len(c.seen))
	for i, d := range c.seen {
		out[i] = d.ID
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// run starts c.Run in the background; the returned func stops it and returns Run's error.
func run(t *testing.T, ctx context.Context, c *client.Consumer) func() error {
	t.Helper()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	var once sync.Once
	var err error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				err = errors.New("Run did not return within 30 s of cancel")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func eventually(t *testing.T, cond func() bool, timeout time.Duration, msg string) {
	t.Helper()
	require.Eventually(t, cond, timeout, 5*time.Millisecond, msg)
}

func TestPublishConsumeRoundTrip(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "orders")
	pub := client.NewPublisher(b.Pool)

	var want []int64
	id, err := pub.Publish(ctx, "orders", client.Message{
		Payload: json.RawMessage(`{"order":1}`), Headers: json.RawMessage(`{"k":"v"}`), MessageGroup: "cust-1"})
	require.NoError(t, err)
	want = append(want, id)

	batch := make([]client.Message, 5)
	for i := range batch {
		batch[i] = client.Message{Payload: json.RawMessage(fmt.Sprintf(`{"batch":%d}`, i))}
	}
	batch[2].Headers = json.RawMessage(`{"x":2}`)
	batch[3].MessageGroup = "g3"
	ids, err := pub.PublishBatch(ctx, "orders", batch)
	require.NoError(t, err)
	require.Len(t, ids, 5)
	require.IsIncreasing(t, ids, "ids in input order")
	want = append(want, ids...)

	// Transactional outbox: committed is delivered, rolled back is not.
	tx, err := b.Pool.Begin(ctx)
	require.NoError(t, err)
	id, err = pub.WithTx(tx).Publish(ctx, "orders", client.Message{Payload: json.RawMessage(`{"tx":"commit"}`)})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	want = append(want, id)
	tx, err = b.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = pub.WithTx(tx).Publish(ctx, "orders", client.Message{Payload: json.RawMessage(`{"tx":"rollback"}`)})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))

	col := newCollector()
	c, err := client.NewConsumer(b.Pool, client.Config{Topic: "orders", Consumer: "w1", MaxMessages: 3, Logger: quiet},
		col.handle)
	require.NoError(t, err)
	stop := run(t, ctx, c)
	col.wait(t, len(want), 10*time.Second)
	eventually(t, func() bool { return c.Stats().Acked == int64(len(want)) }, 5*time.Second, "all acked")
	require.NoError(t, stop())

	require.Equal(t, want, col.ids())
	byID := map[int64]client.Delivery{}
	for _, d := range col.seen {
		byID[d.ID] = d
		require.Equal(t, 1, d.Attempt)
		require.False(t, d.PublishedAt.IsZero())
	}
	first := byID[want[0]]
	require.JSONEq(t, `{"order":1}`, string(first.Payload))
	require.JSONEq(t, `{"k":"v"}`, string(first.Headers))
	require.Equal(t, "cust-1", first.MessageGroup)
	require.JSONEq(t, `{"x":2}`, string(byID[ids[2]].Headers))
	require.JSONEq(t, `{}`, string(byID[ids[0]].Headers))
	require.Equal(t, "g3", byID[ids[3]].MessageGroup)

	st := c.Stats()
	require.Equal(t, int64(len(want)), st.Delivered)
	require.Zero(t, st.Nacked)
	// Acked for real: nothing is left open on the server.
	var open int
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT coalesce(sum(open_count), 0) FROM fanout.lease").Scan(&open))
	require.Zero(t, open)
}

func TestPublishErrorsKeepSQLSTATE(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	pub := client.NewPublisher(b.Pool)
	_, err := pub.Publish(ctx, "nope", client.Message{Payload: json.RawMessage(`{}`)})
	require.Error(t, err)
	require.Contains(t, err.Error(), "PGQ01")
	_, err = pub.Publish(ctx, "nope", client.Message{})
	require.Error(t, err)
}

func TestListenWakeUp(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "events")
	col := newCollector()
	// The poll would take an hour: only the NOTIFY can wake the consumer.
	c, err := client.NewConsumer(b.Pool, client.Config{Topic: "events", PollInterval: time.Hour, Logger: quiet},
		col.handle)
	require.NoError(t, err)
	run(t, ctx, c)
	eventually(t, func() bool { return c.Stats().EmptyReads >= 1 }, 10*time.Second, "consumer idle")

	pub := client.NewPublisher(b.Pool)
	for i := 0; i < 3; i++ {
		// The topic notifies only while a consumer waits (notify_when =>
		// 'waiters', docs/wakeups.md): publish once this one announced.
		waitAnnounced(t, ctx, b.Pool)
		start := time.Now()
		_, err := pub.Publish(ctx, "events", client.Message{Payload: json.RawMessage(`{"wake":true}`)})
		require.NoError(t, err)
		col.wait(t, 1, 5*time.Second)
		t.Logf("publish → handler: %s", time.Since(start))
	}
	require.GreaterOrEqual(t, c.Stats().Notifications, int64(3))
}

func TestPollFallbackWithoutNotify(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "quiet", "notify => false")
	col := newCollector()
	c, err := client.NewConsumer(b.Pool, client.Config{Topic: "quiet", PollInterval: 20 * time.Millisecond,
		HeartbeatInterval: 10 * time.Millisecond, Logger: quiet}, col.handle)
	require.NoError(t, err)
	run(t, ctx, c)
	eventually(t, func() bool { return c.Stats().EmptyReads >= 1 }, 10*time.Second, "consumer idle")
	_, err = client.NewPublisher(b.Pool).Publish(ctx, "quiet", client.Message{Payload: json.RawMessage(`1`)})
	require.NoError(t, err)
	col.wait(t, 1, 5*time.Second)
	require.Zero(t, c.Stats().Notifications)
}

func TestNackRetryAndDeadLetter(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "jobs", "max_attempts => 3")
	pub := client.NewPublisher(b.Pool)
	flaky, err := pub.Publish(ctx, "jobs", client.Message{Payload: json.RawMessage(`{"kind":"flaky"}`)})
	require.NoError(t, err)
	poison, err := pub.Publish(ctx, "jobs", client.Message{Payload: json.RawMessage(`{"kind":"poison"}`)})
	require.NoError(t, err)

	var mu sync.Mutex
	attempts := map[int64][]int{}
	okFlaky := make(chan struct{})
	h := func(_ context.Context, d *client.Delivery) error {
		mu.Lock()
		attempts[d.ID] = append(attempts[d.ID], d.Attempt)
		mu.Unlock()
		switch {
		case d.ID == poison:
			return client.RetryAfter(0, errors.New("poison pill"))
		case d.Attempt == 1:
			return errors.New("flaky: first attempt fails") // server backoff: 1 s
		default:
			close(okFlaky)
			return nil
		}
	}
	c, err := client.NewConsumer(b.Pool, client.Config{Topic: "jobs", PollInterval: 20 * time.Millisecond, Logger: quiet}, h)
	require.NoError(t, err)
	stop := run(t, ctx, c)

	select {
	case <-okFlaky:
	case <-time.After(time.Minute):
		t.Fatal("flaky message was not redelivered")
	}
	var lastErr string
	eventually(t, func() bool {
		err := b.Pool.QueryRow(ctx, `SELECT last_error FROM fanout.dead_letters WHERE message_id = $1`, poison).Scan(&lastErr)
		return err == nil
	}, 15*time.Second, "poison message dead-lettered")
	require.NoError(t, stop())

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 2}, attempts[flaky])
	require.Equal(t, []int{1, 2, 3}, attempts[poison])
	require.Equal(t, "poison pill", lastErr)
	st := c.Stats()
	require.Equal(t, int64(1), st.Acked)
	require.Equal(t, int64(4), st.Nacked) // flaky once, poison three times
}

func TestGracefulStopFinishesInFlightPage(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "slow")
	msgs := make([]client.Message, 10)
	for i := range msgs {
		msgs[i] = client.Message{Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
	}
	ids, err := client.NewPublisher(b.Pool).PublishBatch(ctx, "slow", msgs)
	require.NoError(t, err)

	started := make(chan struct{})
	release := make(chan struct{})
	var mu sync.Mutex
	var handled []int64
	var ctxErrs []error
	h := func(hctx context.Context, d *client.Delivery) error {
		if d.ID == ids[0] {
			close(started)
			<-release
		}
		mu.Lock()
		handled = append(handled, d.ID)
		ctxErrs = append(ctxErrs, hctx.Err())
		mu.Unlock()
		return nil
	}
	c, err := client.NewConsumer(b.Pool, client.Config{Topic: "slow", MaxMessages: 10, Logger: quiet}, h)
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()

	<-started
	cancel() // ask to stop while the page is in flight
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) before the in-flight page was finished", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("Run did not return after the page was finished")
	}

	mu.Lock()
	require.Equal(t, ids, handled, "the whole page was handled, in order")
	for _, e := range ctxErrs {
		require.NoError(t, e, "handlers of the in-flight page run with a live context")
	}
	mu.Unlock()
	require.Equal(t, int64(10), c.Stats().Acked)
	require.Equal(t, int64(1), c.Stats().Reads, "no read after the stop")
	var open int
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT coalesce(sum(open_count), 0) FROM fanout.lease").Scan(&open))
	require.Zero(t, open, "the page was acked before Run returned")
}

func TestTxHandlerCommitsWritesWithAck(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "outbox", "max_attempts => 5")
	_, err := b.Pool.Exec(ctx, `CREATE TABLE processed (id bigint PRIMARY KEY, attempt int)`)
	require.NoError(t, err)
	ids, err := client.NewPublisher(b.Pool).PublishBatch(ctx, "outbox", []client.Message{
		{Payload: json.RawMessage(`{"fail_first":false}`)},
		{Payload: json.RawMessage(`{"fail_first":true}`)},
	})
	require.NoError(t, err)

	done := make(chan struct{}, 10)
	h := func(ctx context.Context, tx pgx.Tx, d *client.Delivery) error {
		defer func() { done <- struct{}{} }()
		if _, err := tx.Exec(ctx, `INSERT INTO processed VALUES ($1, $2)`, d.ID, d.Attempt); err != nil {
			return err
		}
		if d.ID == ids[1] && d.Attempt == 1 {
			return client.RetryAfter(0, errors.New("fail after writing"))
		}
		return nil
	}
	c, err := client.NewTxConsumer(b.Pool, client.Config{Topic: "outbox", PollInterval: 20 * time.Millisecond, Logger: quiet}, h)
	require.NoError(t, err)
	stop := run(t, ctx, c)
	eventually(t, func() bool { return c.Stats().Acked == 2 }, 10*time.Second, "both acked")
	require.NoError(t, stop())

	rows, err := b.Pool.Query(ctx, `SELECT id, attempt FROM processed ORDER BY id`)
	require.NoError(t, err)
	type row struct{ ID, Attempt int64 }
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	require.NoError(t, err)
	// The failed attempt's write rolled back with its (missing) ack.
	require.Equal(t, []row{{ids[0], 1}, {ids[1], 2}}, got)
	require.Equal(t, int64(1), c.Stats().Nacked)
}

func TestCompetingConsumersShareTheQueue(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "work")
	const n = 2000
	msgs := make([]client.Message, 100)
	for i := range msgs {
		msgs[i] = client.Message{Payload: json.RawMessage(`{"w":1}`)}
	}
	pub := client.NewPublisher(b.Pool)
	var want []int64
	for i := 0; i < n/100; i++ {
		ids, err := pub.PublishBatch(ctx, "work", msgs)
		require.NoError(t, err)
		want = append(want, ids...)
	}
	col := newCollector()
	var cs []*client.Consumer
	for i := 0; i < 4; i++ {
		c, err := client.NewConsumer(b.Pool, client.Config{Topic: "work", Consumer: fmt.Sprintf("w%d", i), Logger: quiet},
			col.handle)
		require.NoError(t, err)
		cs = append(cs, c)
		run(t, ctx, c)
	}
	col.wait(t, n, 60*time.Second)
	require.Equal(t, want, col.ids(), "each message exactly once")
	var delivered int64
	for _, c := range cs {
		delivered += c.Stats().Delivered
	}
	require.EqualValues(t, n, delivered, "the consumers' counters add up")
}

func TestRunFailsFastOnUnknownTopic(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	c, err := client.NewConsumer(b.Pool, client.Config{Topic: "missing", Logger: quiet},
		func(context.Context, *client.Delivery) error { return nil })
	require.NoError(t, err)
	err = c.Run(ctx)
	require.Error(t, err)
	require.Contains(t, err.Error(), "missing")

	c, err = client.NewConsumer(b.Pool, client.Config{Topic: "missing", DisableListen: true, Logger: quiet},
		func(context.Context, *client.Delivery) error { return nil })
	require.NoError(t, err)
	err = c.Run(ctx)
	require.Error(t, err)
	require.Contains(t, err.Error(), "PGQ01")
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	_, err := client.NewConsumer(nil, client.Config{Topic: "x"}, func(context.Context, *client.Delivery) error { return nil })
	require.Error(t, err)
	b, _ := setup(t)
	c, err := client.NewConsumer(b.Pool, client.Config{Topic: "x"}, func(context.Context, *client.Delivery) error { return nil })
	require.NoError(t, err)
	cfg := c.Config()
	require.Equal(t, client.DefaultMaxMessages, cfg.MaxMessages)
	require.Equal(t, client.DefaultLease, cfg.Lease)
	require.Equal(t, client.DefaultPollInterval, cfg.PollInterval)
	require.Equal(t, cfg.Lease, cfg.StopTimeout)
	require.Equal(t, client.DefaultListenCheck, cfg.ListenCheckTimeout)
	require.NotEmpty(t, cfg.Consumer)
	_, err = client.NewConsumer(b.Pool, client.Config{Topic: "x", ListenURL: "postgres://x:y@:bad:port/"},
		func(context.Context, *client.Delivery) error { return nil })
	require.ErrorContains(t, err, "Config.ListenURL")
	_, err = client.NewConsumer(b.Pool, client.Config{Topic: "x", MaxMessages: 10001},
		func(context.Context, *client.Delivery) error { return nil })
	require.Error(t, err)
	_, err = client.NewConsumer(b.Pool, client.Config{}, func(context.Context, *client.Delivery) error { return nil })
	require.Error(t, err)
}

func TestPipelinedAckFencedFallsBack(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "fenced")
	_, err := client.NewPublisher(b.Pool).PublishBatch(ctx, "fenced", []client.Message{
		{Payload: json.RawMessage(`1`)}, {Payload: json.RawMessage(`2`)}})
	require.NoError(t, err)
	// The consumer's pool has one connection, which the second handler
	// holds: the lease cannot be extended, expires, and another consumer
	// takes the page while the handler still runs.
	pool := consumerPool(t, ctx, b, "pgq-fenced", 1)

	inSecond := make(chan struct{})
	release := make(chan struct{})
	h := func(hctx context.Context, d *client.Delivery) error {
		if d.Attempt == 1 && d.Payload[0] == '2' {
			conn, err := pool.Acquire(hctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			close(inSecond)
			<-release // the lease expires meanwhile and another consumer takes the page
		}
		return nil
	}
	// A full page (2 of 2) handled without error: its ack would travel with the next read.
	c, err := client.NewConsumer(pool, client.Config{Topic: "fenced", MaxMessages: 2, Lease: 200 * time.Millisecond,
		PollInterval: 20 * time.Millisecond, DisableListen: true, Logger: quiet}, h)
	require.NoError(t, err)
	run(t, ctx, c)
	<-inSecond
	// Another consumer takes the page once the lease has expired (polled: on
	// a loaded or durable server the first tries may come before expiry).
	var other int64
	eventually(t, func() bool {
		var id *int64
		if err := b.Pool.QueryRow(ctx,
			`SELECT max(lease_id) FROM fanout.read('fenced', NULL, 'thief', 10, '1 minute')`).Scan(&id); err != nil {
			return false
		}
		if id != nil {
			other = *id
		}
		return id != nil
	}, 10*time.Second, "the expired page is taken by another consumer")
	close(release)

	// The pipelined ack is fenced (PGQ11); the consumer falls back, logs, and keeps reading.
	eventually(t, func() bool { return c.Stats().Errors >= 1 && c.Stats().Reads >= 2 }, 10*time.Second,
		"fenced ack reported and reading goes on")
	require.Zero(t, c.Stats().Acked)
	var n int
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT fanout.ack($1)`, other).Scan(&n))
	require.Equal(t, 2, n, "the new holder acks the page")
}

func TestPubSubGroupsEachGetEverything(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "news", "semantics => 'pubsub'")
	for _, g := range []string{"mail", "search"} {
		_, err := b.Pool.Exec(ctx, `SELECT * FROM fanout.subscribe('news', $1, start_position => 'earliest')`, g)
		require.NoError(t, err)
	}
	msgs := make([]client.Message, 250)
	for i := range msgs {
		msgs[i] = client.Message{Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
	}
	want, err := client.NewPublisher(b.Pool).PublishBatch(ctx, "news", msgs)
	require.NoError(t, err)

	cols := map[string]*collector{}
	for _, g := range []string{"mail", "search"} {
		col := newCollector()
		cols[g] = col
		for m := 0; m < 2; m++ { // two competing members per group
			c, err := client.NewConsumer(b.Pool, client.Config{Topic: "news", Group: g, Consumer: fmt.Sprintf("%s-%d", g, m),
				HeartbeatInterval: 20 * time.Millisecond, Logger: quiet}, col.handle)
			require.NoError(t, err)
			run(t, ctx, c)
		}
	}
	for g, col := range cols {
		col.wait(t, len(want), 20*time.Second)
		require.Equal(t, want, col.ids(), "group %s got every message once", g)
	}
}

func TestHeartbeatSeesCancelledGroup(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "feed", "semantics => 'pubsub'")
	_, err := b.Pool.Exec(ctx, `SELECT * FROM fanout.subscribe('feed', 'g1')`)
	require.NoError(t, err)
	c, err := client.NewConsumer(b.Pool, client.Config{Topic: "feed", Group: "g1", PollInterval: time.Hour,
		HeartbeatInterval: 10 * time.Millisecond, Logger: quiet},
		func(context.Context, *client.Delivery) error { return nil })
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	eventually(t, func() bool { return c.Stats().Heartbeats >= 2 }, 10*time.Second, "heartbeats sent")

	_, err = b.Pool.Exec(ctx, `SELECT fanout.unsubscribe('feed', 'g1')`)
	require.NoError(t, err)
	select {
	case err := <-done:
		require.ErrorIs(t, err, client.ErrGroupCancelled)
	case <-time.After(time.Minute):
		t.Fatal("Run did not stop on a cancelled group")
	}
}

// TestLingerGathersAPage: a consumer with Linger reads once for messages
// published one by one while it lingers; one without reads as soon as the
// first notification comes, so the same messages take it two pages or more.
func TestLingerGathersAPage(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "trickle", "semantics => 'pubsub'")
	consumers := map[string]*client.Consumer{}
	collectors := map[string]*collector{}
	// The patient consumer's linger outlasts every wait of the test before
	// its last publish (the eager read below may take up to 10 s on a
	// loaded machine), so its one page cannot come before the fourth message.
	for group, linger := range map[string]time.Duration{"eager": 0, "patient": 15 * time.Second} {
		_, err := b.Pool.Exec(ctx, `SELECT * FROM fanout.subscribe('trickle', $1)`, group)
		require.NoError(t, err)
		collectors[group] = newCollector()
		c, err := client.NewConsumer(b.Pool, client.Config{Topic: "trickle", Group: group, Linger: linger,
			PollInterval: time.Hour, ListenCheckTimeout: -1, Logger: quiet}, collectors[group].handle)
		require.NoError(t, err)
		consumers[group] = c
		run(t, ctx, c)
		// Two empty reads: the one before the consumer announced its wait and
		// the one after (docs/wakeups.md), so it sleeps on the notification
		// and no announcement races the first publish below.
		eventually(t, func() bool { return c.Stats().EmptyReads >= 2 }, 10*time.Second, group+" idle")
	}
	pub := client.NewPublisher(b.Pool)
	publish := func() {
		_, err := pub.Publish(ctx, "trickle", client.Message{Payload: json.RawMessage(`1`)})
		require.NoError(t, err)
	}
	publish()
	collectors["eager"].wait(t, 1, 10*time.Second) // the eager one has read the first alone
	for i := 0; i < 3; i++ {
		publish()
	}
	collectors["eager"].wait(t, 3, 10*time.Second)
	collectors["patient"].wait(t, 4, 40*time.Second)
	pages := func(c *client.Consumer) int64 { s := c.Stats(); return s.Reads - s.EmptyReads }
	require.Equal(t, int64(1), pages(consumers["patient"]), "the lingering consumer read the four messages in one page")
	require.GreaterOrEqual(t, pages(consumers["eager"]), int64(2), "the eager consumer read the first message alone")

	_, err := client.NewConsumer(b.Pool, client.Config{Topic: "trickle", Group: "eager", Linger: time.Second,
		PollInterval: time.Second}, collectors["eager"].handle)
	require.ErrorContains(t, err, "Config.Linger must be 0 or more and below PollInterval")
}
