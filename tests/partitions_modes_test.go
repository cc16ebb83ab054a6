package tests

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Reference mode on a partitioned topic: completion is per message (bits),
// reads go by key partition. A message completes only when every required
// group acked it; a late joiner's backfill and a cancelled group's release
// work with per-partition cursors (the joiner reads every retained pending
// message through its own partition cursors); cleanup reclaims the storage
// partition once everything in it completed.
func TestPartitionsReferenceMode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.keepLeaseHistory(t)
	b.refTopic(t, "rp", "partitions => 4", "retention => '1 second'", "zero_subscription_retention => '1 second'")
	b.subscribe(t, "rp", "A")
	b.subscribe(t, "rp", "B")
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.publish_batch('rp', array_agg(jsonb_build_object('i', i)),
		message_groups => array_agg('k' || i)) FROM generate_series(1, 40) i`)
	require.NoError(t, err)
	all := sorted(b.drain(t, "rp", ptr("A")))
	require.Len(t, all, 40)
	require.EqualValues(t, 4, b.count(t, `SELECT count(*) FROM audit.lease_all WHERE kpart IS NOT NULL`),
		"a partitioned read hands out one page per key partition")
	for _, id := range all {
		req, done, st := b.bits(t, "rp", id)
		require.Equal(t, []string{"A", "B"}, req)
		require.Equal(t, []string{"A"}, done)
		require.Equal(t, "pending", st, "message %d completed before B acked it", id)
	}

	// A late joiner from earliest: backfilled, then reads them all through
	// its own partition cursors.
	b.subscribe(t, "rp", "C", "start_position => 'earliest'")
	b.runJobs(t)
	require.Equal(t, all, sorted(b.drain(t, "rp", ptr("C"))))
	for _, id := range all[:3] {
		req, _, st := b.bits(t, "rp", id)
		require.Equal(t, []string{"A", "B", "C"}, req)
		require.Equal(t, "pending", st)
	}

	// B goes: its bits are released, everything completes for A and C.
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.unsubscribe('rp', 'B')`)
	require.NoError(t, err)
	b.runJobs(t)
	for _, id := range all {
		_, _, st := b.bits(t, "rp", id)
		require.Equal(t, "completed", st, "message %d", id)
	}
	b.rotate(t)
	require.Positive(t, b.cleanup(t, "2 hours"))
	var table string
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT data_table FROM fanout.topic WHERE topic = 'rp'`).Scan(&table))
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout_data.`+table), "completed messages were not reclaimed")
}

// Delayed messages on a partitioned topic (the documented rule): a message
// with a delivery time in the future does not block its key partition. The
// partition's cursor passes it (it waits in the group's retry table with
// its partition, attempt 0), later messages of the same key are handed out
// meanwhile, and it comes, alone, as its partition's next page once due.
// So per-key order holds among undelayed messages; a delayed one is
// delivered when due, after what its key published meanwhile.
func TestPartitionsDelayedDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "dp", "partitions => 4")
	var delayed, later int64
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		`SELECT fanout.publish('dp', '{"n":1}', message_group => 'order-1', delay => '1 hour')`).Scan(&delayed))
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		`SELECT fanout.publish('dp', '{"n":2}', message_group => 'order-1')`).Scan(&later))
	ms := b.read(t, b.Pool, "dp", nil, "w", 10, "1 minute")
	require.Equal(t, []int64{later}, ids(ms), "the delayed message blocked its partition, or came early")
	b.ack(t, b.Pool, ms[0].LeaseID, nil)
	var kpart, want int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT r.kpart, fanout.partition_of('dp', 'order-1')
		FROM fanout.retry r WHERE r.message_id = $1 AND r.attempt = 0`, delayed).Scan(&kpart, &want))
	require.Equal(t, want, kpart, "the waiting delayed message does not carry its key partition")
	require.Empty(t, b.read(t, b.Pool, "dp", nil, "w", 10, "1 minute"), "a delayed message came before it was due")

	// Due (its time moved into the past): it is its partition's next page.
	_, err := b.Pool.Exec(b.ctx, `UPDATE fanout.retry SET not_before = now() - interval '1 second' WHERE message_id = $1`,
		delayed)
	require.NoError(t, err)
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		`SELECT fanout.publish('dp', '{"n":3}', message_group => 'order-1')`).Scan(&later))
	ms = b.read(t, b.Pool, "dp", nil, "w", 10, "1 minute")
	require.Equal(t, []int64{delayed}, ids(ms), "a due delayed message comes alone, before the stream of its partition")
	require.EqualValues(t, 1, ms[0].Attempt)
	require.Empty(t, b.read(t, b.Pool, "dp", nil, "w", 10, "1 minute"), "the next page came before the delayed one settled")
	b.ack(t, b.Pool, ms[0].LeaseID, nil)
	ms = b.read(t, b.Pool, "dp", nil, "w", 10, "1 minute")
	require.Equal(t, []int64{later}, ids(ms))
}
