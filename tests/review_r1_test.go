package tests

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// _lock_lease skips the grant check when this transaction wrote the slot's
// row (the read that handed the page out checked it). The read checked the
// role in effect then: a session that reads as tenant a and then, in the
// same transaction, SET ROLE to tenant b (a pooled superuser connection
// acting for tenants, as TestTenantLeasesGrantsAndSetRole does) must not
// ack, nack or extend a's lease as b: each is refused (PGQ10, as a lease
// that does not exist) and a's page
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
		requireSQLState(t, err, "PGQ10")
		require.NoError(t, tx.Rollback(b.ctx))
	}
	ms := b.read(t, a, "a.orders", nil, "worker-a", 10, "1 minute")
	require.Len(t, ms, 1, "nothing of a's page was settled by b")
	require.Equal(t, 1, b.ack(t, a, ms[0].LeaseID, nil))
}

// read(..., ack => L) checks that L is a lease of the read's topic and group
// and then acks it without checking the grant again. The check looked at
// L's slot without a lock and passed when the slot did not exist yet: a
// tenant could name the slot the next read of another tenant's topic would
// get (slot ids come from a sequence, the epoch and page 1 are known), queue
// behind its own group's row, and ack the other tenant's page once it was
// handed out. Here tenant b's read(ack => predicted id) waits for its group
// row (held by a third session) while tenant a's read opens the predicted
// lease; b's call must fail (PGQ10: no such lease when it was checked) and
// a's page stays open for a to ack.
func TestReadAckOfFutureLeaseOfAnotherTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.tIsolate(t)
	consA, a := b.tRole(t, "cons_a", "fanout_consumer")
	consB, bc := b.tRole(t, "cons_b", "fanout_consumer")
	b.tGrant(t, b.Pool, "a.%", consA, "consume")
	b.tGrant(t, b.Pool, "b.%", consB, "consume")
	b.createTopic(t, b.Pool, "a.orders")
	topicB := b.createTopic(t, b.Pool, "b.orders")
	b.publish(t, b.Pool, "a.orders", `{"n":1}`)
	b.publish(t, b.Pool, "b.orders", `{"n":2}`)

	own := b.read(t, bc, "b.orders", nil, "worker-b", 10, "1 minute")
	require.Len(t, own, 1)
	require.Equal(t, 1, b.ack(t, bc, own[0].LeaseID, nil))
	// Lease ids are opaque (fanout._lease_code): a tenant cannot predict
	// one. The race is still checked with the id the next slot's first page
	// gets, computed here with the key (the test's superuser connection).
	raw := rawLease(t, b, own[0].LeaseID)
	slot, epoch := raw>>32, (raw>>16)&65535
	predicted := publicLease(t, b, (slot+1)<<32|epoch<<16|1)

	holder, err := b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(b.ctx) }()
	_, err = holder.Exec(b.ctx, "SELECT 1 FROM fanout.consumer_group WHERE topic_id = $1 FOR UPDATE", topicB)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := bc.Exec(b.ctx, "SELECT count(*) FROM fanout.read('b.orders', ack => $1)", predicted)
		done <- err
	}()
	blocked := b.tWaitBlockedOrDone(t, bc, done)
	victim := b.read(t, a, "a.orders", nil, "worker-a", 10, "1 minute")
	require.Len(t, victim, 1)
	require.NoError(t, holder.Commit(b.ctx))
	err = <-done
	if blocked {
		require.Equal(t, predicted, victim[0].LeaseID, "the predicted id is a's lease")
	}
	requireSQLState(t, err, "PGQ10")
	require.Equal(t, 1, b.ack(t, a, victim[0].LeaseID, nil), "a's page was not settled by b")
}

// Priority on a key-partitioned topic under three members on their own
// connections: pages are acked message by message, some messages nacked for
// an immediate retry, some pages read under a lease of a millisecond (taken
// over by whoever reads the partition next, the stale holder's acks fenced
// or settling nothing), and the partition count raised half-way. Every
// message is settled exactly once (an ack that returned 1), none is lost.
func TestKpartPriorityChurnSettlesEachOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "kp", "semantics => 'pubsub'", "partitions => 3", "max_attempts => 100")
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.subscribe('kp', 'g')")
	require.NoError(t, err)
	const n = 240
	publish := func(from, to int) {
		_, err := b.Pool.Exec(b.ctx, `SELECT fanout.publish('kp', jsonb_build_object('i', i), message_group => 'k' || (i % 11),
		                                  priority => (i * 7) % 10) FROM generate_series($1::int, $2::int) i`, from, to)
		require.NoError(t, err)
	}
	publish(1, n/2)

	type result struct {
		settled map[int64]int
		err     error
	}
	var total, again atomic.Int64
	third := make(chan struct{})
	var once sync.Once
	out := make(chan result, 3)
	for w := 0; w < 3; w++ {
		conn := b.Conn(t)
		go func(w int, conn *pgx.Conn) {
			settled := map[int64]int{}
			fail := func(err error) {
				once.Do(func() { close(third) })
				out <- result{err: err}
			}
			for round := 0; round < 3000 && total.Load() < n; round++ {
				lease := "1 minute"
				if round%6 == 5 {
					lease = "1 millisecond"
				}
				ms, err := readMsgs(b.ctx, conn, "kp", ptr("g"), fmt.Sprintf("c%d", w), 5, lease)
				if err != nil {
					fail(fmt.Errorf("read: %w", err))
					return
				}
				for i, m := range ms {
					if m.Attempt > 1 {
						again.Add(1)
					}
					if lease != "1 minute" {
						break // left to expire and be taken over
					}
					if (m.MessageID+int64(round))%9 == 0 && i == 0 {
						if _, err := conn.Exec(b.ctx, "SELECT fanout.nack($1, ARRAY[$2::bigint], retry_in => '0')", m.LeaseID, m.MessageID); err != nil {
							fail(fmt.Errorf("nack: %w", err))
							return
						}
						continue
					}
					var k int
					err := conn.QueryRow(b.ctx, "SELECT fanout.ack($1, ARRAY[$2::bigint])", m.LeaseID, m.MessageID).Scan(&k)
					var pe *pgconn.PgError
					if errors.As(err, &pe) && pe.Code == "PGQ11" {
						continue
					}
					if err != nil {
						fail(fmt.Errorf("ack: %w", err))
						return
					}
					if k == 1 {
						settled[m.MessageID]++
						if total.Add(1) >= n/3 {
							once.Do(func() { close(third) })
						}
					}
				}
			}
			once.Do(func() { close(third) })
			out <- result{settled: settled}
		}(w, conn)
	}
	<-third
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('kp', partitions => 5)")
	require.NoError(t, err)
	publish(n/2+1, n)
	all := map[int64]int{}
	for w := 0; w < 3; w++ {
		r := <-out
		require.NoError(t, r.err)
		for id, c := range r.settled {
			all[id] += c
		}
	}
	require.Len(t, all, n, "every message settled")
	require.Positive(t, again.Load(), "some messages came again (nacked or taken over)")
	for id, c := range all {
		require.Equal(t, 1, c, "message %d settled once", id)
	}
	var bad int
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT count(*) FROM fanout.check_consistency()").Scan(&bad))
	require.Zero(t, bad)
}
