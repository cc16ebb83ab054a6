package tests

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// _lock_lease skips the grant check when this transaction wrote the slot's
// row (the read that handed the page out checked it). The read checked the
// role in effect then: a session that reads as tenant a and then, in the
// same transaction, SET ROLE to tenant b (a pooled superuser connection
// acting for tenants, as TestTenantLeasesGrantsAndSetRole does) must not
// ack, nack or extend a's lease as b: each is refused (PGQ21) and a's page
// stays open. Before the fix b's ack settled a's message. A second
// connection, logged in as a, then acks the page itself.
func TestLockLeaseSkipIsPerRole(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.tIsolate(t)
	consA, a := b.tRole(t, "cons_a", "fanout_consumer")
	consB, _ := b.tRole(t, "cons_b", "fanout_consumer")
	b.tGrant(t, b.Pool, "a.%", consA, "consume")
	b.tGrant(t, b.Pool, "b.%", consB, "consume")
	b.createTopic(t, b.Pool, "a.orders")
	b.createTopic(t, b.Pool, "b.orders")
	b.publish(t, b.Pool, "a.orders", `{"n":1}`)
	b.publish(t, b.Pool, "b.orders", `{"n":2}`)

	conn := b.Conn(t)
	for _, sql := range []string{"SELECT fanout.ack($1)", "SELECT fanout.nack($1)", "SELECT fanout.extend_lease($1, '1 hour')"} {
		tx, err := conn.Begin(b.ctx)
		require.NoError(t, err)
		_, err = tx.Exec(b.ctx, "SET LOCAL ROLE "+pgx.Identifier{consA}.Sanitize())
		require.NoError(t, err)
		ms := b.read(t, tx, "a.orders", nil, "worker-a", 10, "1 minute")
		require.Len(t, ms, 1)
		_, err = tx.Exec(b.ctx, "SET LOCAL ROLE "+pgx.Identifier{consB}.Sanitize())
		require.NoError(t, err)
		// b's own read in the same transaction writes a slot row too.
		require.Len(t, b.read(t, tx, "b.orders", nil, "worker-b", 10, "1 minute"), 1)
		_, err = tx.Exec(b.ctx, sql, ms[0].LeaseID)
		requireSQLState(t, err, "PGQ21")
		require.NoError(t, tx.Rollback(b.ctx))
	}
	ms := b.read(t, a, "a.orders", nil, "worker-a", 10, "1 minute")
	require.Len(t, ms, 1, "nothing of a's page was settled by b")
	require.Equal(t, 1, b.ack(t, a, ms[0].LeaseID, nil))
}
