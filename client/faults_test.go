package client_test

// Faults the consumer must survive without handling a message twice that it
// handled successfully: a handler that runs longer than the lease, a pool so
// busy that the lease cannot be extended, a stop in the middle of a page,
// and the consumer's backends killed (pg_terminate_backend) while a page is
// handled. Each runs against the real server with the real fault.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/client"
	"github.com/pgfanout/pgq/internal/testdb"
)

// consumerPool is a pool of its own for a consumer, its backends named
// appName (so that a test can kill exactly them). Pings before reuse are
// off, so that a killed backend is met by the next statement rather than
// weeded out by chance when the connection sat idle for over a second.
func consumerPool(t *testing.T, ctx context.Context, b *testdb.Bundle, appName string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(b.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = appName
	cfg.MaxConns = maxConns
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// killBackends terminates every backend named appName and waits until they
// are gone; it returns how many there were.
func killBackends(t *testing.T, ctx context.Context, b *testdb.Bundle, appName string) int {
	t.Helper()
	var n int
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000))
		FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()`, appName).Scan(&n))
	return n
}

func publishN(t *testing.T, ctx context.Context, b *testdb.Bundle, topic string, n int) []int64 {
	t.Helper()
	msgs := make([]client.Message, n)
	for i := range msgs {
		msgs[i] = client.Message{Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
	}
	ids, err := client.NewPublisher(b.Pool).PublishBatch(ctx, topic, msgs)
	require.NoError(t, err)
	return ids
}

// steal reads what another member can take from topic right now.
func steal(t *testing.T, ctx context.Context, b *testdb.Bundle, topic string) []int64 {
	t.Helper()
	rows, err := b.Pool.Query(ctx, `SELECT message_id FROM fanout.read($1, NULL, 'thief', 100, '1 hour')
	                                 ORDER BY message_id`, topic)
	require.NoError(t, err)
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

func openLeases(t *testing.T, ctx context.Context, b *testdb.Bundle) int {
	t.Helper()
	var open int
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT coalesce(sum(open_count), 0) FROM fanout.lease").Scan(&open))
	return open
}

// A handler that runs for several leases keeps its message: a
// timer extends the lease while it runs, so another member never gets it,
// and the handler's ack goes through.
func TestHandlerLongerThanLeaseKeepsItsMessage(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "long")
	ids := publishN(t, ctx, b, "long", 1)

	started := make(chan struct{})
	release := make(chan struct{})
	var calls sync.Map
	h := func(hctx context.Context, d *client.Delivery) error {
		calls.Store(d.Attempt, true)
		close(started)
		select {
		case <-release:
		case <-hctx.Done():
			return context.Cause(hctx)
		}
		return nil
	}
	const lease = 3 * time.Second
	c, err := client.NewConsumer(b.Pool, client.Config{Topic: "long", Lease: lease, Logger: quiet}, h)
	require.NoError(t, err)
	run(t, ctx, c)
	<-started
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	// Three extensions, each at half a lease: the page has been held for
	// one and a half leases by then. Another member tries all along.
	var stolen []int64
	require.Eventually(t, func() bool {
		if stolen = append(stolen, steal(t, ctx, b, "long")...); len(stolen) > 0 {
			return true
		}
		return c.Stats().LeaseExtensions >= 3
	}, time.Minute, 50*time.Millisecond, "the lease is extended while the handler runs")
	require.Empty(t, stolen, "another member took the message of a running handler (its lease was not extended)")
	close(release)
	eventually(t, func() bool { return c.Stats().Acked == 1 }, 30*time.Second, "the long handler's message is acked")
	require.Zero(t, c.Stats().SettleFailures)
	require.Zero(t, c.Stats().LeasesLost)
	_, again := calls.Load(2)
	require.False(t, again, "the message was handled a second time")
	require.Empty(t, steal(t, ctx, b, "long"))
	require.Equal(t, []int64{ids[0]}, ids)
}

// When the lease cannot be kept (here the pool is exhausted, so
// no extension gets a connection before the lease runs out) the handler's
// context is cancelled with ErrLeaseLost as its cause, and the rest of the
// page is not handed to the handler under the lost lease.
func TestLostLeaseCancelsHandlerAndStopsThePage(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "lost")
	ids := publishN(t, ctx, b, "lost", 3)
	pool := consumerPool(t, ctx, b, "pgq-lost", 1)

	type call struct {
		id      int64
		attempt int
	}
	var mu sync.Mutex
	var seen []call
	cause := make(chan error, 1)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	h := func(hctx context.Context, d *client.Delivery) error {
		mu.Lock()
		seen = append(seen, call{d.ID, d.Attempt})
		mu.Unlock()
		if d.ID != ids[0] || d.Attempt != 1 {
			return nil
		}
		// Hold the pool's only connection: the lease cannot be extended.
		conn, err := pool.Acquire(hctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		select {
		case <-hctx.Done():
			cause <- context.Cause(hctx)
			return hctx.Err()
		case <-release:
			return errors.New("released by the test: the handler's context was never cancelled")
		}
	}
	c, err := client.NewConsumer(pool, client.Config{Topic: "lost", MaxMessages: 3, Lease: time.Second,
		PollInterval: 50 * time.Millisecond, DisableListen: true, Logger: quiet}, h)
	require.NoError(t, err)
	run(t, ctx, c)
	select {
	case err := <-cause:
		require.ErrorIs(t, err, client.ErrLeaseLost)
	case <-time.After(time.Minute):
		t.Fatal("the handler's context was not cancelled when the lease could not be kept")
	}
	eventually(t, func() bool { return c.Stats().LeasesLost == 1 }, 10*time.Second, "the lost lease is counted")
	mu.Lock()
	defer mu.Unlock()
	for _, s := range seen {
		if s.attempt == 1 {
			require.Equal(t, ids[0], s.id, "a message of the lost page was handed out under the lost lease")
		}
	}
}

// A stop in the middle of a page acks what succeeded within
// StopTimeout (with a context that outlives the cancellation), calls no
// handler after StopTimeout, and leaves only the rest to come back.
func TestStopMidPageAcksWhatSucceeded(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "stopmid")
	ids := publishN(t, ctx, b, "stopmid", 10)

	inFourth := make(chan struct{})
	var mu sync.Mutex
	var handled []int64
	var fourthCause error
	h := func(hctx context.Context, d *client.Delivery) error {
		mu.Lock()
		handled = append(handled, d.ID)
		mu.Unlock()
		if d.ID != ids[3] {
			return hctx.Err()
		}
		close(inFourth)
		<-hctx.Done() // a handler that honours its context
		mu.Lock()
		fourthCause = context.Cause(hctx)
		mu.Unlock()
		return hctx.Err()
	}
	c, err := client.NewConsumer(b.Pool, client.Config{Topic: "stopmid", MaxMessages: 10, Lease: 2 * time.Second,
		StopTimeout: 300 * time.Millisecond, Logger: quiet}, h)
	require.NoError(t, err)
	stop := run(t, ctx, c)
	<-inFourth
	require.NoError(t, stop()) // cancel while the fourth message is handled

	mu.Lock()
	require.Equal(t, ids[:4], handled, "no handler is called once StopTimeout has passed")
	require.ErrorIs(t, fourthCause, client.ErrStopTimeout)
	mu.Unlock()
	st := c.Stats()
	require.Equal(t, int64(3), st.Acked, "the three messages that succeeded are acked")
	require.Zero(t, st.Nacked, "the interrupted message is not nacked")
	require.Zero(t, st.SettleFailures)

	// Once the lease has run out, another member gets the rest, and only the rest.
	var got []int64
	eventually(t, func() bool { got = append(got, steal(t, ctx, b, "stopmid")...); return len(got) >= 7 },
		time.Minute, "the unhandled messages come back after the lease")
	require.Equal(t, ids[3:], got)
}

// The consumer's backends are killed while a page is handled;
// its ack (and its nacks) are retried on a fresh connection while the lease
// is valid, instead of being dropped (which would hand the page out again).
func TestAckSurvivesKilledBackends(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		max       int // page size: 10 of 10 is full, so its ack travels with the next read
		failEvery int // handler fails every n-th message (0: never)
		retried   bool
	}{
		{"settled at once", 20, 0, true},
		// The pipeline's fallback already settled this page on its own
		// (on a new connection of the pool) before the fix; kept as a guard.
		{"pipelined with the next read", 10, 0, false},
		{"acks and nacks", 20, 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, ctx := setup(t)
			createTopic(t, ctx, b.Pool, "killed")
			ids := publishN(t, ctx, b, "killed", 10)
			app := "pgq-killed-" + b.DBName
			pool := consumerPool(t, ctx, b, app, 4)

			inLast := make(chan struct{})
			killed := make(chan struct{})
			var again sync.Map // messages handed out a second time
			h := func(_ context.Context, d *client.Delivery) error {
				if d.Attempt > 1 {
					again.Store(d.ID, d.Attempt)
				}
				if d.ID == ids[9] && d.Attempt == 1 {
					close(inLast)
					<-killed
				}
				if tc.failEvery > 0 && (d.ID-ids[0]+1)%int64(tc.failEvery) == 0 {
					return client.RetryAfter(time.Hour, errors.New("failed on purpose"))
				}
				return nil
			}
			// A short lease: a dropped ack shows as the page handed out again soon.
			c, err := client.NewConsumer(pool, client.Config{Topic: "killed", MaxMessages: tc.max,
				Lease: 6 * time.Second, DisableListen: true, PollInterval: 50 * time.Millisecond,
				ErrorBackoff: 50 * time.Millisecond, Logger: quiet}, h)
			require.NoError(t, err)
			run(t, ctx, c)
			<-inLast
			require.Positive(t, killBackends(t, ctx, b, app), "the consumer's backends were killed")
			close(killed)

			wantNacked := int64(0)
			if tc.failEvery > 0 {
				wantNacked = int64(len(ids) / tc.failEvery)
			}
			redelivered := func() bool {
				n := 0
				again.Range(func(any, any) bool { n++; return true })
				return n > 0
			}
			eventually(t, func() bool {
				st := c.Stats()
				return st.Acked+st.Nacked >= int64(len(ids)) || st.SettleFailures > 0 || redelivered()
			}, time.Minute, "the page is settled")
			require.False(t, redelivered(), "messages were handled again: their ack or nack was dropped")
			st := c.Stats()
			require.Zero(t, st.SettleFailures, "an ack or nack was dropped after the backends were killed")
			require.Equal(t, int64(len(ids))-wantNacked, st.Acked)
			require.Equal(t, wantNacked, st.Nacked)
			if tc.retried {
				require.Positive(t, st.Retries, "the kill was met and retried")
			}
			require.Zero(t, openLeases(t, ctx, b), "nothing of the page is left to come back")
			require.Empty(t, steal(t, ctx, b, "killed"))
		})
	}
}

// The fenced case: an operator's seek takes the page away from a
// running handler (its holder's acks and extensions then meet PGQ11). The
// next extension finds out: the handler's context is cancelled with a cause
// that wraps ErrLeaseLost and the server's error, the rest of the page is
// not handed out under that lease, and nothing of it is acked.
func TestFencedPageStopsAndCancelsHandler(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "seeked")
	ids := publishN(t, ctx, b, "seeked", 3)

	type call struct{ lease, id int64 }
	var mu sync.Mutex
	var calls []call
	var firstLease int64
	started := make(chan struct{})
	cause := make(chan error, 1)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	h := func(hctx context.Context, d *client.Delivery) error {
		mu.Lock()
		calls = append(calls, call{d.LeaseID, d.ID})
		first := firstLease == 0
		if first {
			firstLease = d.LeaseID
		}
		mu.Unlock()
		if !first {
			return nil
		}
		close(started)
		select {
		case <-hctx.Done():
			cause <- context.Cause(hctx)
		case <-release:
		}
		return nil // even a success cannot be acked on a page taken away
	}
	c, err := client.NewConsumer(b.Pool, client.Config{Topic: "seeked", MaxMessages: 3, Lease: 3 * time.Second,
		Logger: quiet}, h)
	require.NoError(t, err)
	run(t, ctx, c)
	<-started
	_, err = b.Pool.Exec(ctx, `SELECT fanout.seek('seeked', NULL, 'earliest')`)
	require.NoError(t, err)
	select {
	case err := <-cause:
		require.ErrorIs(t, err, client.ErrLeaseLost)
		require.Contains(t, []string{client.CodeFenced, client.CodeLeaseNotFound}, client.SQLState(err),
			"the cause carries the server's answer: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the handler's context was not cancelled when the page was taken away")
	}
	eventually(t, func() bool { return c.Stats().LeasesLost == 1 }, 10*time.Second, "the lost lease is counted")
	mu.Lock()
	for _, cl := range calls {
		if cl.lease == firstLease {
			require.Equal(t, ids[0], cl.id, "a message of the fenced page was handed out under its lost lease")
		}
	}
	mu.Unlock()
	require.Zero(t, c.Stats().SettleFailures, "no ack is tried on a page the server took away")
}

// A message whose handler succeeded on a page that is taken away before its
// ack is reported to Config.OnAckFailed (it will be handled again by the new
// holder), with the lease and a cause that wraps ErrLeaseLost; the message
// interrupted by the loss is not reported (its handler did not succeed).
func TestOnAckFailedReportsHandledMessagesOfALostPage(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "ackfailed")
	ids := publishN(t, ctx, b, "ackfailed", 3)

	type report struct {
		lease int64
		ids   []int64
		err   error
	}
	reports := make(chan report, 10)
	var leaseOfFirst atomic.Int64
	started := make(chan struct{})
	h := func(hctx context.Context, d *client.Delivery) error {
		if d.ID == ids[0] {
			leaseOfFirst.Store(d.LeaseID)
			return nil // handled: its ack will fail
		}
		if d.ID != ids[1] || d.LeaseID != leaseOfFirst.Load() {
			return nil
		}
		close(started)
		<-hctx.Done() // until the page is taken away
		return hctx.Err()
	}
	c, err := client.NewConsumer(b.Pool, client.Config{Topic: "ackfailed", MaxMessages: 3, Lease: 2 * time.Second,
		Logger: quiet, OnAckFailed: func(lease int64, ids []int64, err error) {
			reports <- report{lease, ids, err}
		}}, h)
	require.NoError(t, err)
	run(t, ctx, c)
	<-started
	_, err = b.Pool.Exec(ctx, `SELECT fanout.seek('ackfailed', NULL, 'earliest')`)
	require.NoError(t, err)
	select {
	case r := <-reports:
		require.Equal(t, leaseOfFirst.Load(), r.lease)
		require.Equal(t, []int64{ids[0]}, r.ids, "exactly the handled message of the lost page")
		require.ErrorIs(t, r.err, client.ErrLeaseLost)
	case <-time.After(time.Minute):
		t.Fatal("OnAckFailed was not called for the handled message of the lost page")
	}
}

// After an extension the client keeps retrying a failing ack for as long as
// the server keeps the lease: an extension moves the expiry by Lease from
// the old expiry (as fanout.extend_lease does), not from the time the
// extension was sent. Here the database is unreachable for new connections
// from the handler's return until 1.6 leases after the read, while the
// extended lease holds until 2 leases after it: the ack gets through.
func TestAckRetriedUntilTheExtendedLeaseEnds(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "extended")
	publishN(t, ctx, b, "extended", 1)
	app := "pgq-extended-" + b.DBName
	const lease = 2 * time.Second
	var openAt atomic.Int64 // unix nanos from which new connections work again (0: always)
	cfg, err := pgxpool.ParseConfig(b.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	cfg.BeforeConnect = func(context.Context, *pgx.ConnConfig) error {
		if at := openAt.Load(); at != 0 && time.Now().UnixNano() < at {
			return errors.New("the database is unreachable (test)")
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	var c *client.Consumer
	h := func(hctx context.Context, d *client.Delivery) error {
		readAt := time.Now() // no earlier than the consumer's read was sent
		for c.Stats().LeaseExtensions == 0 {
			select {
			case <-hctx.Done():
				return hctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		openAt.Store(readAt.Add(lease * 16 / 10).UnixNano())
		_, err := b.Pool.Exec(ctx, `SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity
			WHERE application_name = $1 AND datname = current_database()`, app)
		return err // (a failure here would show as a nack, not an ack)
	}
	c, err = client.NewConsumer(pool, client.Config{Topic: "extended", MaxMessages: 10, Lease: lease,
		DisableListen: true, PollInterval: 50 * time.Millisecond, ErrorBackoff: 50 * time.Millisecond,
		MaxErrorBackoff: 100 * time.Millisecond, Logger: quiet}, h)
	require.NoError(t, err)
	run(t, ctx, c)
	eventually(t, func() bool { st := c.Stats(); return st.Acked+st.SettleFailures > 0 }, time.Minute, "settled")
	st := c.Stats()
	require.Zero(t, st.SettleFailures, "the ack was given up while the extended lease held")
	require.Equal(t, int64(1), st.Acked)
	require.Positive(t, st.Retries)
}
