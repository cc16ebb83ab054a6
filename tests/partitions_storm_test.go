package tests

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// Member storms on partitioned topics (bench "partitions"): what a read of a
// member costs the others. See docs/architecture.md, "Partitioned topics".

// Partition cursors exist from the group's creation (subscribe, a queue's
// create_topic, alter_topic raising P), so a read never inserts them (the
// first version created them on a group's first read: one more wait in a
// storm of first reads). A member that owns nothing because P live members
// rank before it (more members than partitions) reads without writing or
// locking any row: its transaction never even gets an xid.
func TestPartitionsStormReadsWriteNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	const P = 2
	b.createTopic(t, b.Pool, "s", "semantics => 'pubsub'", fmt.Sprintf("partitions => %d", P))
	b.subscribe(t, "s", "g")
	require.EqualValues(t, P, b.count(t, `SELECT count(*) FROM fanout.kpart k
		JOIN fanout.consumer_group g USING (group_id) WHERE g.group_name = 'g'`))
	b.createTopic(t, b.Pool, "q", fmt.Sprintf("partitions => %d", P)) // a queue's implicit group
	qid := b.count(t, `SELECT topic_id FROM fanout.topic WHERE topic = 'q'`)
	require.EqualValues(t, P, b.count(t, `SELECT count(*) FROM fanout.kpart k
		JOIN fanout.consumer_group g USING (group_id) WHERE g.topic_id = $1`, qid))
	_, err := b.Pool.Exec(ctx, `SELECT fanout.alter_topic('s', partitions => 5)`)
	require.NoError(t, err)
	require.EqualValues(t, 5, b.count(t, `SELECT count(*) FROM fanout.kpart k
		JOIN fanout.consumer_group g USING (group_id) WHERE g.group_name = 'g'`))
	_, err = b.Pool.Exec(ctx, `SELECT fanout.subscribe('s', 'h')`)
	require.NoError(t, err)
	require.EqualValues(t, 5, b.count(t, `SELECT count(*) FROM fanout.kpart k
		JOIN fanout.consumer_group g USING (group_id) WHERE g.group_name = 'h'`))
	_, err = b.Pool.Exec(ctx, `SELECT fanout.publish_batch('s', array_agg('{}'::jsonb), message_groups => array_agg('k' || i))
		FROM generate_series(1, 50) i`)
	require.NoError(t, err)

	cursors := func() int64 {
		return b.count(t, `SELECT count(*) FROM fanout.kpart k JOIN fanout.consumer_group g USING (group_id)
			WHERE g.group_name = 'g'`)
	}
	// readIn runs one read of member m in its own transaction and says how
	// many messages it got and whether it wrote or locked any row (then the
	// transaction has an xid).
	// An idle read also locks no message partition, lease or retry
	// relation (pages, which the idle read never looks at), nor the message
	// table beyond the ACCESS SHARE every call of the topic takes on the
	// partitioned parent (fanout._enter: what drop_topic waits for), and
	// its relation locks all fit the fast path.
	var heavy, slow int64
	readIn := func(m string) (got int64, wrote bool) {
		t.Helper()
		tx, err := b.Pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM fanout.read('s', 'g', $1, 10)`, m).Scan(&got))
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_current_xact_id_if_assigned() IS NOT NULL`).Scan(&wrote))
		require.NoError(t, tx.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE (c.relnamespace = 'fanout_data'::regnamespace
			                        AND NOT (c.relname = (SELECT t.data_table FROM fanout.topic t WHERE t.topic = 's')
			                                 AND l.mode = 'AccessShareLock'))
			                    OR c.relname LIKE 'lease%' OR c.relname LIKE 'retry%'),
			count(*) FILTER (WHERE NOT l.fastpath AND c.relnamespace IN ('fanout'::regnamespace, 'fanout_data'::regnamespace))
			FROM pg_locks l LEFT JOIN pg_class c ON c.oid = l.relation
			WHERE l.pid = pg_backend_pid()`).Scan(&heavy, &slow))
		require.NoError(t, tx.Commit(ctx))
		return got, wrote
	}
	// Eight members on five partitions, each reading once, in name order:
	// m0 first (alone: it takes every partition), then the others take
	// their shares (from m0, which holds more than anyone's); m5, m6 and m7
	// rank after five live members.
	for i := 0; i < 8; i++ {
		readIn(fmt.Sprintf("m%d", i))
		require.EqualValues(t, 5, cursors())
	}
	owners := b.pOwners(t, "s", "g")
	require.Zero(t, owners["m5"]+owners["m6"]+owners["m7"], "%v", owners)
	for _, m := range []string{"m5", "m6", "m7"} {
		// A weak lock leaves the fast path whenever any backend of the
		// server holds a strong lock on a relation in the same one of
		// PostgreSQL's 1024 lock hash slots (other tests create and drop
		// tables all the time): the fast-path check allows a few tries.
		for try := 0; ; try++ {
			got, wrote := readIn(m)
			require.Zero(t, got)
			require.False(t, wrote, "the read of %s, which owns nothing, wrote or locked a row", m)
			require.Zero(t, heavy, "the read of %s, which owns nothing, locked a message, lease or retry relation", m)
			if slow == 0 || try == 4 {
				break
			}
		}
		require.Zero(t, slow, "the read of %s, which owns nothing, locked relations outside the fast path (5 tries)", m)
	}
	// The group's members converge to one partition each for m0..m4.
	for round := 0; round < 3; round++ {
		for i := 0; i < 8; i++ {
			readIn(fmt.Sprintf("m%d", i))
		}
	}
	owners = b.pOwners(t, "s", "g")
	for i := 0; i < 5; i++ {
		require.Equal(t, 1, owners[fmt.Sprintf("m%d", i)], "%v", owners)
	}
}

// Leases have no foreign key to their group (its check took a KEY SHARE lock
// on the group row for every page: a storm's members shared multixacts on
// that one row). Every path that deletes groups deletes their leases:
// cleanup of cancelled groups (after zombie_ttl) and of dead ones (after
// max_retention), and drop_topic; other groups' leases stay.
func TestPartitionsGroupDeletionDeletesLeases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	b.createTopic(t, b.Pool, "a", "semantics => 'pubsub'", "partitions => 4")
	b.createTopic(t, b.Pool, "u", "semantics => 'pubsub'") // unpartitioned
	b.subscribe(t, "a", "cancelled")
	b.subscribe(t, "a", "kept")
	_, err := b.Pool.Exec(ctx, `SELECT fanout.subscribe('a', 'dead', heartbeat_timeout => '1 second')`)
	require.NoError(t, err)
	b.subscribe(t, "u", "dropped")
	for _, topic := range []string{"a", "u"} {
		_, err := b.Pool.Exec(ctx, `SELECT fanout.publish_batch($1, array_agg('{}'::jsonb), message_groups => array_agg('k' || i))
			FROM generate_series(1, 40) i`, topic)
		require.NoError(t, err)
	}
	// Each group: two lease slots, one settled and one open (two pages out
	// at once, then the first acked: a settled slot is kept for reuse).
	for _, gt := range [][2]string{{"a", "cancelled"}, {"a", "dead"}, {"a", "kept"}, {"u", "dropped"}} {
		ms := b.read(t, b.Pool, gt[0], ptr(gt[1]), "w", 5, "1 hour")
		require.NotEmpty(t, ms)
		require.NotEmpty(t, b.read(t, b.Pool, gt[0], ptr(gt[1]), "w2", 5, "1 hour"))
		b.ack(t, b.Pool, ms[0].LeaseID, nil)
	}
	leasesOf := func(group string) int64 {
		return b.count(t, `SELECT count(*) FROM fanout.lease l WHERE l.group_id IN
			(SELECT g.group_id FROM fanout.consumer_group g WHERE g.group_name = $1)`, group)
	}
	for _, g := range []string{"cancelled", "dead", "kept", "dropped"} {
		require.EqualValues(t, 2, leasesOf(g), g)
	}
	total := b.count(t, `SELECT count(*) FROM fanout.lease`)
	orphans := func() int64 {
		return b.count(t, `SELECT count(*) FROM fanout.lease l
			WHERE NOT EXISTS (SELECT 1 FROM fanout.consumer_group g WHERE g.group_id = l.group_id)`)
	}

	_, err = b.Pool.Exec(ctx, `SELECT fanout.unsubscribe('a', 'cancelled')`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(ctx, `SELECT fanout._detect_dead_groups(now() + interval '1 minute')`)
	require.NoError(t, err)
	require.Equal(t, "dead", b.groupStatus(t, "a", "dead"))
	var n int
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT fanout._cleanup_groups(now() + interval '100 years')`).Scan(&n))
	require.Equal(t, 2, n)
	require.Zero(t, orphans(), "cleanup of cancelled and dead groups left their leases")
	require.EqualValues(t, total-4, b.count(t, `SELECT count(*) FROM fanout.lease`))
	require.EqualValues(t, 2, leasesOf("kept"))

	_, err = b.Pool.Exec(ctx, `SELECT fanout.drop_topic('u', force => true)`)
	require.NoError(t, err)
	require.Zero(t, orphans(), "drop_topic left its groups' leases")
	require.EqualValues(t, 2, leasesOf("kept"))
	require.EqualValues(t, total-6, b.count(t, `SELECT count(*) FROM fanout.lease`))
}

// A page read of a group that has no retry row (nothing nacked, delayed or
// replayed) looks fanout.retry up once, on one index: the head-of-line check
// and the due-retry delete (three more indexes) are skipped. Relation locks
// beyond PostgreSQL 15's 16 fast-path slots per transaction go through the
// shared lock table, on one partition per relation for every member of a
// storm. Warm session (generic plans), as a consumer's connection is.
func TestPartitionsPageReadSkipsRetryLookups(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	b.createTopic(t, b.Pool, "r", "semantics => 'pubsub'", "partitions => 4")
	b.subscribe(t, "r", "g")
	_, err := b.Pool.Exec(ctx, `SELECT fanout.publish_batch('r', array_agg('{}'::jsonb), message_groups => array_agg('k' || i))
		FROM generate_series(1, 400) i`)
	require.NoError(t, err)
	conn := b.Conn(t)
	page := func(q querier) (lease int64, n int) {
		t.Helper()
		rows, err := q.Query(ctx, `SELECT lease_id FROM fanout.read('r', 'g', 'm', 5)`)
		require.NoError(t, err)
		for rows.Next() {
			require.NoError(t, rows.Scan(&lease))
			n++
		}
		require.NoError(t, rows.Err())
		return lease, n
	}
	for i := 0; i < 8; i++ { // past the plan cache's first five executions
		lease, n := page(conn)
		require.Equal(t, 5, n)
		_, err := conn.Exec(ctx, `SELECT fanout.ack($1)`, lease)
		require.NoError(t, err)
	}
	retryRels := func() int64 {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		lease, n := page(tx)
		require.Equal(t, 5, n)
		var rels int64
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(DISTINCT l.relation) FROM pg_locks l
			JOIN pg_class c ON c.oid = l.relation
			WHERE l.pid = pg_backend_pid() AND c.relnamespace = 'fanout'::regnamespace
			  AND c.relname LIKE 'retry%'`).Scan(&rels))
		_, err = tx.Exec(ctx, `SELECT fanout.ack($1)`, lease)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		return rels
	}
	require.EqualValues(t, 2, retryRels(), "fanout.retry and one index")
	// With a retry row in the group, the look-ups run as before (and the
	// nacked message's partition waits for it: head-of-line).
	lease, n := page(conn)
	require.Equal(t, 5, n)
	_, err = conn.Exec(ctx, `SELECT fanout.nack($1, (SELECT msg_ids[1:1] FROM fanout.lease WHERE lease_id = fanout._lease_raw($1)),
		retry_in => '1 hour')`, lease)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT fanout.ack($1)`, lease)
	require.NoError(t, err)
	require.Greater(t, retryRels(), int64(2))
}

// A key partition's next page reuses the lease slot of the partition's
// previous page when that slot is free, rather than the group's most
// recently freed slot (which every owner of a member storm went for at
// once). The slot moves to its next page number, as any reuse does.
func TestPartitionsPageReusesItsPartitionsSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	b.createTopic(t, b.Pool, "s", "semantics => 'pubsub'", "partitions => 2")
	b.subscribe(t, "s", "g")
	_, err := b.Pool.Exec(ctx, `SELECT fanout.publish_batch('s', array_agg('{}'::jsonb), message_groups => array_agg('k' || i))
		FROM generate_series(1, 40) i`)
	require.NoError(t, err)
	page := func() (lease int64, kpart int) {
		t.Helper()
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT lease_id FROM fanout.read('s', 'g', 'm', 3) LIMIT 1`).Scan(&lease))
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT kpart FROM fanout.lease WHERE lease_id = fanout._lease_raw($1)`, lease).Scan(&kpart))
		return lease, kpart
	}
	ack := func(lease int64) {
		t.Helper()
		_, err := b.Pool.Exec(ctx, `SELECT fanout.ack($1)`, lease)
		require.NoError(t, err)
	}
	first, k1 := page()  // the least recently served partition
	second, k2 := page() // the other one, in a second slot (the first is open)
	require.NotEqual(t, k1, k2)
	// Lease ids are opaque: compare the internal ids (slot * 2^32 + epoch * 2^16 + page).
	rFirst, rSecond := rawLease(t, b, first), rawLease(t, b, second)
	require.NotEqual(t, rFirst>>32, rSecond>>32)
	ack(first)
	ack(second) // the group's most recently freed slot
	third, k3 := page()
	rThird := rawLease(t, b, third)
	require.Equal(t, k1, k3, "the least recently served partition comes next")
	require.Equal(t, rFirst>>32, rThird>>32, "the partition's own slot, not the most recently freed one")
	require.Equal(t, rFirst+1, rThird, "the slot's next page")
	ack(third)
}
