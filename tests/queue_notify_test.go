package tests

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// qListen subscribes conn to the LISTEN channel of each topic (looked up in
// fanout.topics, as a user would) and returns the channels in order.
func (b *bundle) qListen(t *testing.T, conn *pgx.Conn, topics ...string) []string {
	t.Helper()
	var out []string
	for _, topic := range topics {
		var ch string
		require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT channel FROM fanout.topics WHERE topic = $1", topic).Scan(&ch))
		_, err := conn.Exec(b.ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize())
		require.NoError(t, err)
		out = append(out, ch)
	}
	return out
}

// qNotificationsUntil collects the channels of the notifications conn
// receives until one arrives on channel stop (inclusive). Notifications are
// delivered in commit order, so publishing on a control topic last makes
// "none arrived" a deterministic assertion instead of a timeout.
func (b *bundle) qNotificationsUntil(t *testing.T, conn *pgx.Conn, stop string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	var got []string
	for {
		n, err := conn.WaitForNotification(ctx)
		require.NoError(t, err, "no notification on %s", stop)
		got = append(got, n.Channel)
		if n.Channel == stop {
			return got
		}
	}
}

// Publishing wakes LISTENers on the topic's channel once per statement, only
// after commit, and not at all on a topic with notify => false.
func TestQueueNotify(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// notify_when => 'always': every publish, whether a consumer waits or
	// not (TestQueueNotifyWaiters has the default, 'waiters').
	b.createTopic(t, b.Pool, "loud", "notify_when => 'always'")
	b.createTopic(t, b.Pool, "quiet", "notify => false", "notify_when => 'always'")
	b.createTopic(t, b.Pool, "control", "notify_when => 'always'")
	listener := b.Conn(t)
	chs := b.qListen(t, listener, "loud", "quiet", "control")
	loud, quiet, control := chs[0], chs[1], chs[2]
	require.NotEqual(t, loud, quiet)

	// After commit, not before: a rolled-back publish sends nothing.
	producer := b.Conn(t)
	tx, err := producer.Begin(b.ctx)
	require.NoError(t, err)
	b.publish(t, tx, "loud", `{"rolled":"back"}`)
	require.NoError(t, tx.Rollback(b.ctx))
	b.publish(t, b.Pool, "loud", `{}`)
	b.publish(t, b.Pool, "control", `{}`)
	require.Equal(t, []string{loud, control}, b.qNotificationsUntil(t, listener, control))

	// notify => false at creation: nothing.
	b.publish(t, b.Pool, "quiet", `{}`)
	b.publish(t, b.Pool, "control", `{}`)
	require.Equal(t, []string{control}, b.qNotificationsUntil(t, listener, control))

	// publish_batch of 100: one notification.
	b.qPublishN(t, b.Pool, "loud", 0, 100)
	b.publish(t, b.Pool, "control", `{}`)
	require.Equal(t, []string{loud, control}, b.qNotificationsUntil(t, listener, control))
	var perStatement bool
	require.NoError(t, b.Pool.QueryRow(b.ctx, `
		SELECT bool_and(tg.tgtype & 1 = 0)  -- TRIGGER_TYPE_ROW bit clear: FOR EACH STATEMENT
		FROM pg_trigger tg JOIN fanout.topic t ON tg.tgrelid = format('fanout_data.%I', t.data_table)::regclass
		WHERE t.topic = 'loud' AND tg.tgname = 'notify'`).Scan(&perStatement))
	require.True(t, perStatement, "one NOTIFY per statement, not per row")

	// alter_topic switches it off and on again.
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('loud', notify => false)")
	require.NoError(t, err)
	b.publish(t, b.Pool, "loud", `{}`)
	b.publish(t, b.Pool, "control", `{}`)
	require.Equal(t, []string{control}, b.qNotificationsUntil(t, listener, control))
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('quiet', notify => true)")
	require.NoError(t, err)
	b.publish(t, b.Pool, "quiet", `{}`)
	b.publish(t, b.Pool, "control", `{}`)
	require.Equal(t, []string{quiet, control}, b.qNotificationsUntil(t, listener, control))
}

// A new topic's default, notify_when => 'waiters': publishing NOTIFYs only
// while a consumer announced its wait (fanout.wait_begin), until it ends it
// (fanout.wait_end); seen on a real LISTEN connection (docs/wakeups.md).
func TestQueueNotifyWaiters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "lazy")
	b.createTopic(t, b.Pool, "control", "notify_when => 'always'")
	listener := b.Conn(t)
	chs := b.qListen(t, listener, "lazy", "control")
	lazy, control := chs[0], chs[1]

	// Nobody waits: no NOTIFY, from publish or publish_batch.
	b.publish(t, b.Pool, "lazy", `{}`)
	b.qPublishN(t, b.Pool, "lazy", 0, 10)
	b.publish(t, b.Pool, "control", `{}`)
	require.Equal(t, []string{control}, b.qNotificationsUntil(t, listener, control))

	// A consumer announced its wait: every publishing statement notifies.
	var ready bool
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.wait_begin('lazy', 'w1', '1 minute')`).Scan(&ready))
	require.True(t, ready)
	b.publish(t, b.Pool, "lazy", `{}`)
	b.qPublishN(t, b.Pool, "lazy", 0, 10)
	b.publish(t, b.Pool, "control", `{}`)
	require.Equal(t, []string{lazy, lazy, control}, b.qNotificationsUntil(t, listener, control))

	// It ended its wait: none again.
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.wait_end('lazy', 'w1')`)
	require.NoError(t, err)
	b.publish(t, b.Pool, "lazy", `{}`)
	b.publish(t, b.Pool, "control", `{}`)
	require.Equal(t, []string{control}, b.qNotificationsUntil(t, listener, control))
}
