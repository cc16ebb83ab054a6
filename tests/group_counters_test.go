package tests

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// groupTotals reads a group's acked_total and nacked_total from the groups
// view (group "" = a queue topic's implicit group).
func (b *bundle) groupTotals(t *testing.T, topic, group string) (acked, nacked int64) {
	t.Helper()
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT acked_total, nacked_total FROM fanout.groups
	                                            WHERE topic = $1 AND group_name IS NOT DISTINCT FROM nullif($2, '')`,
		topic, group).Scan(&acked, &nacked))
	return acked, nacked
}

// The groups view's acked_total and nacked_total count what the group's
// members acked and nacked (ack, ack of some ids, read(ack =>), nack, a
// nack at the last attempt that dead-letters), 0 from the subscription on;
// a rolled-back ack counts nothing; another group's acks are its own. Two
// members ack and nack in open transactions at once on two connections
// without either waiting for the other (lock_timeout would fail a wait:
// the counters live in rows per lease slot, not one row per group). When
// cleanup deletes the idle slots, their counts move into the group's slot 0
// row and the totals stay; removing the group deletes its rows.
func TestGroupAckNackCounters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "orders", "semantics => 'pubsub'", "max_attempts => 2")
	for _, g := range []string{"billing", "email"} {
		_, err := b.Pool.Exec(b.ctx, "SELECT fanout.subscribe('orders', $1)", g)
		require.NoError(t, err)
	}
	for range 10 {
		b.publish(t, b.Pool, "orders", `{}`)
	}
	acked, nacked := b.groupTotals(t, "orders", "billing")
	require.Equal(t, [2]int64{0, 0}, [2]int64{acked, nacked}, "0 from the subscription on")

	conn := func() *pgxpool.Conn {
		c, err := b.Pool.Acquire(b.ctx)
		require.NoError(t, err)
		t.Cleanup(c.Release)
		_, err = c.Exec(b.ctx, "SET lock_timeout = '5s'")
		require.NoError(t, err)
		return c
	}
	a, c := conn(), conn()
	ma := b.read(t, a, "orders", ptr("billing"), "a", 4, "1 minute")
	mc := b.read(t, c, "orders", ptr("billing"), "c", 4, "1 minute")
	require.Len(t, ma, 4)
	require.Len(t, mc, 4)
	// Both in open business transactions at once.
	_, err := a.Exec(b.ctx, "BEGIN")
	require.NoError(t, err)
	_, err = c.Exec(b.ctx, "BEGIN")
	require.NoError(t, err)
	require.Equal(t, 3, b.ack(t, a, ma[0].LeaseID, ids(ma)[:3]))
	var n int
	require.NoError(t, c.QueryRow(b.ctx, "SELECT fanout.nack($1, $2, '0')", mc[0].LeaseID, ids(mc)[:2]).Scan(&n))
	require.Equal(t, 2, n)
	require.Equal(t, 2, b.ack(t, c, mc[0].LeaseID, nil))
	require.Equal(t, 1, b.ack(t, a, ma[0].LeaseID, nil))
	_, err = c.Exec(b.ctx, "COMMIT")
	require.NoError(t, err)
	acked, nacked = b.groupTotals(t, "orders", "billing")
	require.Equal(t, [2]int64{2, 2}, [2]int64{acked, nacked}, "a's acks are not committed yet")
	_, err = a.Exec(b.ctx, "COMMIT")
	require.NoError(t, err)
	acked, nacked = b.groupTotals(t, "orders", "billing")
	require.Equal(t, [2]int64{6, 2}, [2]int64{acked, nacked})

	// Left: two new messages and the two nacked ones (attempt 2, due).
	// read(ack =>): the next read acks the previous page in the same call.
	mp := b.read(t, a, "orders", ptr("billing"), "a", 1, "1 minute")
	require.Len(t, mp, 1)
	var rest []msg
	rows, err := a.Query(b.ctx, `SELECT lease_id, message_id, attempt FROM fanout.read('orders', 'billing', 'a', 10, ack => $1)`,
		mp[0].LeaseID)
	require.NoError(t, err)
	for rows.Next() {
		var m msg
		require.NoError(t, rows.Scan(&m.LeaseID, &m.MessageID, &m.Attempt))
		rest = append(rest, m)
	}
	require.NoError(t, rows.Err())
	require.Len(t, rest, 3)
	acked, nacked = b.groupTotals(t, "orders", "billing")
	require.Equal(t, [2]int64{7, 2}, [2]int64{acked, nacked})
	// A rolled-back ack counts nothing.
	tx, err := b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 3, b.ack(t, tx, rest[0].LeaseID, nil))
	require.NoError(t, tx.Rollback(b.ctx))
	// A nack at the last attempt (max_attempts 2) dead-letters: a nack, and
	// a dead letter. Acking again counts nothing.
	var retried int64
	for _, m := range rest {
		if m.Attempt == 2 {
			retried = m.MessageID
		}
	}
	require.NotZero(t, retried, "one of the two retried messages is in the page")
	require.NoError(t, a.QueryRow(b.ctx, "SELECT fanout.nack($1, ARRAY[$2::bigint])", rest[0].LeaseID, retried).Scan(&n))
	require.Equal(t, 1, n)
	require.Equal(t, 2, b.ack(t, a, rest[0].LeaseID, nil))
	require.Equal(t, 0, b.ack(t, a, rest[0].LeaseID, nil))
	acked, nacked = b.groupTotals(t, "orders", "billing")
	require.Equal(t, [2]int64{9, 3}, [2]int64{acked, nacked})
	var dead int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT dead_lettered_total FROM fanout.groups
	                                            WHERE topic = 'orders' AND group_name = 'billing'`).Scan(&dead))
	require.Equal(t, int64(1), dead)
	acked, nacked = b.groupTotals(t, "orders", "email")
	require.Equal(t, [2]int64{0, 0}, [2]int64{acked, nacked}, "another group's acks are not email's")

	// Cleanup deletes the idle slots: the totals stay, in one row.
	var slots int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*) FROM fanout.lease l JOIN fanout.consumer_group g USING (group_id)
	                                            WHERE g.group_name = 'billing'`).Scan(&slots))
	require.Positive(t, slots)
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout._cleanup_bookkeeping(now() + interval '2 hours')`)
	require.NoError(t, err)
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*) FROM fanout.lease l JOIN fanout.consumer_group g USING (group_id)
	                                            WHERE g.group_name = 'billing'`).Scan(&slots))
	require.Zero(t, slots, "cleanup deleted the group's idle slots")
	acked, nacked = b.groupTotals(t, "orders", "billing")
	require.Equal(t, [2]int64{9, 3}, [2]int64{acked, nacked}, "deleting slots keeps the totals")
	var tallyRows, slotZero int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*), count(*) FILTER (WHERE slot_id = 0)
	                                            FROM fanout.group_tally t JOIN fanout.consumer_group g USING (group_id)
	                                            WHERE g.group_name = 'billing'`).Scan(&tallyRows, &slotZero))
	require.Equal(t, [2]int64{1, 1}, [2]int64{tallyRows, slotZero})

	// A queue topic's implicit group counts too.
	b.createTopic(t, b.Pool, "jobs")
	b.publish(t, b.Pool, "jobs", `{}`)
	mj := b.read(t, b.Pool, "jobs", nil, "w", 1, "1 minute")
	require.Equal(t, 1, b.ack(t, b.Pool, mj[0].LeaseID, nil))
	acked, nacked = b.groupTotals(t, "jobs", "")
	require.Equal(t, [2]int64{1, 0}, [2]int64{acked, nacked})

	// Deleting a group deletes its rows: cleanup of a removed group past
	// zombie_ttl, and a dropped topic's groups.
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.remove_group('orders', 'billing')")
	require.NoError(t, err)
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout._cleanup_groups(now() + interval '8 days')`).Scan(&n))
	require.Equal(t, 1, n)
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*) FROM fanout.group_tally`).Scan(&tallyRows))
	require.Equal(t, int64(1), tallyRows, "jobs' row is left")
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.drop_topic('jobs', force => true)")
	require.NoError(t, err)
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*) FROM fanout.group_tally t
	                                            WHERE NOT EXISTS (SELECT 1 FROM fanout.consumer_group g WHERE g.group_id = t.group_id)`).
		Scan(&tallyRows))
	require.Zero(t, tallyRows, "no rows of removed groups")
}
