package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/client"
)

// A topic created with the default notify_when => 'waiters' NOTIFYs only
// while a consumer announced its wait (fanout.wait_begin). The consumer
// polls once an hour here, so every delivery below needs a NOTIFY or the
// protocol's second read: a lost wake-up shows as a message not delivered.
// First, publishers on their own connections race the consumer's read,
// announce, read, sleep. Then the lost wake-up's shape: a publisher that
// sends no NOTIFY (notify => false stands for one that checked for waiters
// before the announcement) keeps its transaction open while the consumer
// finishes a page, ends its wait, reads nothing (uncommitted) and announces;
// it commits once the consumer went round twice. fanout.wait_begin must
// have refused (a publisher in flight), so that the consumer reads again
// instead of sleeping for an hour.
func TestAnnouncedWaitLosesNoWakeUp(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "waiters")
	var when string
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT notify_when FROM fanout.topics WHERE topic = 'waiters'`).Scan(&when))
	require.Equal(t, "waiters", when)
	col := newCollector()
	hold := make(chan struct{})
	held := make(chan struct{}, 1)
	handler := func(ctx context.Context, d *client.Delivery) error {
		if strings.Contains(string(d.Payload), `"hold"`) {
			held <- struct{}{}
			<-hold
		}
		return col.handle(ctx, d)
	}
	c, err := client.NewConsumer(b.Pool, client.Config{Topic: "waiters", PollInterval: time.Hour,
		ListenCheckTimeout: -1, Logger: quiet}, handler)
	require.NoError(t, err)
	stop := run(t, ctx, c)
	eventually(t, func() bool { return c.Stats().EmptyReads >= 2 }, 10*time.Second, "consumer idle")

	publish := func(q client.DB, payload string, opts ...client.PublishOption) error {
		_, err := client.NewPublisher(q).Publish(ctx, "waiters", client.Message{Payload: json.RawMessage(payload)}, opts...)
		return err
	}
	total := 0
	for round := 0; round < 60; round++ {
		if round%3 == 0 { // sometimes only once the consumer sleeps
			waitAnnounced(t, ctx, b.Pool)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = publish(b.Pool, fmt.Sprintf(`{"round":%d,"i":%d}`, round, i))
			}()
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		total += 2
		col.wait(t, 2, 30*time.Second)
	}

	for round := 0; round < 5; round++ {
		waitAnnounced(t, ctx, b.Pool)
		require.NoError(t, publish(b.Pool, `{"hold":true}`))
		<-held // the consumer handles it, announced
		tx, err := b.Pool.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, publish(tx, fmt.Sprintf(`{"in_flight":%d}`, round), client.WithNotify(false)))
		before := c.Stats().EmptyReads
		hold <- struct{}{}
		col.wait(t, 1, 30*time.Second)
		eventually(t, func() bool { return c.Stats().EmptyReads >= before+2 }, 10*time.Second, "consumer read again")
		require.NoError(t, tx.Commit(ctx))
		total += 2
		col.wait(t, 1, 30*time.Second)
	}
	require.NoError(t, stop())
	require.Len(t, col.ids(), total)
	var left string
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT coalesce(string_agg(waiter || ' ' || (until - clock_timestamp()), ', '), '') FROM fanout.waiter`).Scan(&left))
	require.Empty(t, left, "the consumer ends its wait when it stops")
	require.Greater(t, c.Stats().Notifications, int64(0))
}

// waitAnnounced waits until some consumer announced its wait
// (fanout.wait_begin) and no other: the one consumer of the test's database
// sleeps or is about to, so a publish now must NOTIFY to reach it.
func waitAnnounced(t *testing.T, ctx context.Context, db client.DB) {
	t.Helper()
	eventually(t, func() bool {
		var n int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM fanout.waiter`).Scan(&n))
		return n == 1
	}, 10*time.Second, "the consumer announced its wait")
}
