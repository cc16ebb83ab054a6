package tests

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// alter_topic(notify => ...) never queues publishers behind it: while a
// publishing transaction is open it retries its lock with NOWAIT, a new
// publish goes through meanwhile, and it succeeds once the publisher
// commits. (Before, its waiting lock request made every later publish wait
// too: 3.4 s observed.)
func TestAlterNotifyDoesNotQueuePublishers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "busy")
	holder, alterer, late := b.Conn(t), b.Conn(t), b.Conn(t)
	tx, err := holder.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, "SELECT fanout.publish('busy', '{}')")
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := alterer.Exec(b.ctx, "SELECT fanout.alter_topic('busy', notify => false)")
		done <- err
	}()
	b.tWaitSleeping(t, alterer) // between two NOWAIT attempts
	var id int64
	require.NoError(t, late.QueryRow(b.ctx, "SELECT fanout.publish('busy', '{}')").Scan(&id),
		"a publish goes through while alter_topic waits")
	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, <-done)
	var notify bool
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT notify FROM fanout.topics WHERE topic = 'busy'").Scan(&notify))
	require.False(t, notify)
}

// tWaitSleeping waits until the backend of conn sleeps in pg_sleep.
func (b *bundle) tWaitSleeping(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	pid := conn.PgConn().PID()
	for {
		var sleeping bool
		require.NoError(t, b.Pool.QueryRow(b.ctx,
			"SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'PgSleep')", pid).Scan(&sleeping))
		if sleeping {
			return
		}
		select {
		case <-b.ctx.Done():
			t.Fatal("the call never slept")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Reference mode: acks lock no message row (completion is recorded in the
// topic's completion table, fanout._complete_bits), so two business
// transactions of different groups that each ack several leases over the
// same messages in opposite orders never wait for each other. (Before, each
// ack locked the shared message rows: the second pair of acks deadlocked,
// 40P01.) lock_timeout turns a wait into a failure instead of a hang.
func TestReferenceAcksOfGroupsNeverWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "ref.shared", "'pubsub'", "'reference'")
	for _, g := range []string{"g1", "g2"} {
		_, err := b.Pool.Exec(b.ctx, "SELECT fanout.subscribe('ref.shared', $1)", g)
		require.NoError(t, err)
	}
	m := b.qPublishN(t, b.Pool, "ref.shared", 0, 2)
	lease := map[string][]int64{}
	for _, g := range []string{"g1", "g2"} {
		for range 2 {
			ms := b.read(t, b.Pool, "ref.shared", ptr(g), "c", 1, "1 hour")
			require.Len(t, ms, 1)
			lease[g] = append(lease[g], ms[0].LeaseID)
		}
	}
	connA, connB := b.Conn(t), b.Conn(t)
	for _, c := range []*pgx.Conn{connA, connB} {
		_, err := c.Exec(b.ctx, "SET lock_timeout = '5s'")
		require.NoError(t, err)
	}
	txA, err := connA.Begin(b.ctx)
	require.NoError(t, err)
	txB, err := connB.Begin(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, b.ack(t, txA, lease["g1"][0], nil)) // m[0]
	require.Equal(t, 1, b.ack(t, txB, lease["g2"][1], nil)) // m[1]
	require.Equal(t, 1, b.ack(t, txA, lease["g1"][1], nil), "m[1], acked by g2 in an open transaction")
	require.Equal(t, 1, b.ack(t, txB, lease["g2"][0], nil), "m[0], acked by g1 in an open transaction")
	for _, id := range m {
		var st string
		require.NoError(t, b.Pool.QueryRow(b.ctx,
			"SELECT DISTINCT message_status FROM fanout.message_status('ref.shared', $1)", id).Scan(&st))
		require.Equal(t, "pending", st, "nothing committed yet")
	}
	require.NoError(t, txA.Commit(b.ctx))
	require.NoError(t, txB.Commit(b.ctx))
	for _, id := range m {
		var st string
		require.NoError(t, b.Pool.QueryRow(b.ctx,
			"SELECT DISTINCT message_status FROM fanout.message_status('ref.shared', $1)", id).Scan(&st))
		require.Equal(t, "completed", st)
	}
}
