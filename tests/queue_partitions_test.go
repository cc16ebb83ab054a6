package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Short partitions, short retention: rotation and cleanup are driven with
// p_now so that no test waits for the clock.
const qPartOpts = "partition_interval => '1 minute', retention => '1 hour', " +
	"zero_subscription_retention => '1 hour', max_retention => '2 hours'"

// qManage runs one call of fanout._manage_partitions(now() + 2 hours) in its
// own transaction (on q) and returns what it did.
func (b *bundle) qManage(t *testing.T, q querier) int {
	t.Helper()
	var n int
	require.NoError(t, q.QueryRow(b.ctx,
		"SELECT fanout._manage_partitions(p_now => now() + interval '2 hours')").Scan(&n))
	return n
}

// qRotate closes the topic's open partition: the first call creates the
// next partition, the second (another transaction) refreshes every
// session's partition list, the third jumps the sequence.
func (b *bundle) qRotate(t *testing.T) {
	t.Helper()
	require.Equal(t, 1, b.qManage(t, b.Pool), "creates the next partition")
	require.Equal(t, 1, b.qManage(t, b.Pool), "refreshes the partition lists")
	require.Equal(t, 1, b.qManage(t, b.Pool), "jumps the sequence and closes the old partition")
}

// qCleanup runs fanout._cleanup_partitions(p_now => now() + ahead).
func (b *bundle) qCleanup(t *testing.T, ahead string) int {
	t.Helper()
	var n int
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		"SELECT fanout._cleanup_partitions(p_now => now() + $1::interval)", ahead).Scan(&n))
	return n
}

// qPartition describes partition part_no of a topic.
type qPartition struct {
	exists  bool  // still in fanout.partition
	rel     bool  // its table still exists
	closed  bool  // has a txid bound
	loID    int64 // first message id
	relname string
}

func (b *bundle) qPartition(t *testing.T, topic string, partNo int) qPartition {
	t.Helper()
	var p qPartition
	err := b.Pool.QueryRow(b.ctx, `
		SELECT true, to_regclass('fanout_data.' || quote_ident(p.relname)) IS NOT NULL,
		       p.txid_bound IS NOT NULL, p.lo_id, p.relname
		FROM fanout.partition p JOIN fanout.topic t USING (topic_id)
		WHERE t.topic = $1 AND p.part_no = $2`, topic, partNo).Scan(&p.exists, &p.rel, &p.closed, &p.loID, &p.relname)
	if err == pgx.ErrNoRows {
		var rel bool
		require.NoError(t, b.Pool.QueryRow(b.ctx, `
			SELECT to_regclass(format('fanout_data.m%s_p%s', topic_id, $2::int)) IS NOT NULL
			FROM fanout.topic WHERE topic = $1`, topic, partNo).Scan(&rel))
		return qPartition{rel: rel}
	}
	require.NoError(t, err)
	return p
}

// Messages published before and after a rotation, and one from a
// transaction that was open across it, are all delivered exactly once; the
// old partition is not dropped while that message is unread, and is dropped
// once everything in it is acked and it is past retention.
func TestQueuePartitionRotation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	topic := "parts.rotate"
	b.createTopic(t, b.Pool, topic, qPartOpts)

	var want []int64
	want = append(want, b.qPublishN(t, b.Pool, topic, 0, 5)...)

	// H publishes after the next partition was created and stays open: the
	// refresh of every session's partition list waits for every transaction
	// that was running when the creation was first seen committed, since its
	// list may predate the new partition (see the rotation specs in
	// tests/specs). R is open when the refresh is first seen committed: the
	// jump waits for it. Two more transactions begin after that and stay
	// open across the jump: A2 takes its xid first, A after it, and both
	// publish into the old partition before the jump, so the old
	// partition's txid bound must lie above both.
	connC, connH, connR := b.Conn(t), b.Conn(t), b.Conn(t)
	txC, err := connC.Begin(b.ctx)
	require.NoError(t, err)
	defer txC.Rollback(b.ctx) //nolint:errcheck
	require.Equal(t, 1, b.qManage(t, txC), "creates the next partition")
	require.NoError(t, txC.Commit(b.ctx))
	txH, err := connH.Begin(b.ctx)
	require.NoError(t, err)
	defer txH.Rollback(b.ctx) //nolint:errcheck
	want = append(want, b.publish(t, txH, topic, `{"open":"holds the refresh back"}`))
	require.Equal(t, 0, b.qManage(t, b.Pool), "waits for the transaction running at the first attempt")
	require.Equal(t, 0, b.qManage(t, b.Pool), "still waits for H")
	require.NoError(t, txH.Commit(b.ctx))
	require.Equal(t, 1, b.qManage(t, b.Pool), "refreshes the partition lists")
	txR, err := connR.Begin(b.ctx)
	require.NoError(t, err)
	defer txR.Rollback(b.ctx) //nolint:errcheck
	_, err = txR.Exec(b.ctx, "SELECT 1")
	require.NoError(t, err)
	require.Equal(t, 0, b.qManage(t, b.Pool), "the jump waits for R, running when the refresh was first seen")
	connA2, connA := b.Conn(t), b.Conn(t)
	txA2, err := connA2.Begin(b.ctx)
	require.NoError(t, err)
	defer txA2.Rollback(b.ctx) //nolint:errcheck
	_, err = txA2.Exec(b.ctx, "SELECT pg_current_xact_id()")
	require.NoError(t, err)
	txA, err := connA.Begin(b.ctx)
	require.NoError(t, err)
	defer txA.Rollback(b.ctx) //nolint:errcheck
	_, err = txA.Exec(b.ctx, "SELECT pg_current_xact_id()")
	require.NoError(t, err)
	idA2 := b.publish(t, txA2, topic, `{"open":"before the rotation"}`)
	idA := b.publish(t, txA, topic, `{"open":"across the rotation"}`)
	require.Equal(t, 0, b.qManage(t, b.Pool), "still waits for R")
	require.NoError(t, txR.Commit(b.ctx))
	require.Equal(t, 1, b.qManage(t, b.Pool), "jumps the sequence and closes the old partition")
	p0, p1 := b.qPartition(t, topic, 0), b.qPartition(t, topic, 1)
	require.True(t, p0.closed)
	require.False(t, p1.closed)
	require.Less(t, idA, p1.loID, "the open transactions' messages are in the old partition")
	require.Less(t, idA2, p1.loID)

	post := b.qPublishN(t, b.Pool, topic, 5, 5)
	require.GreaterOrEqual(t, post[0], p1.loID, "new messages go to the new partition")
	want = append(want, post...)
	delivered := ids(b.qDrain(t, b.Pool, topic, "c", 3))
	qSameSet(t, want, delivered, "before A commits")

	// A and A2 are still open: their partition must stay.
	require.Equal(t, 0, b.qCleanup(t, "90 minutes"))
	// A commits alone (A2, with a lower xid, would hide a txid bound that is
	// too low: reads look up the lowest newly committed xid).
	require.NoError(t, txA.Commit(b.ctx))
	// Committed but nobody has read it yet (and A2 still writes): no drop.
	require.Equal(t, 0, b.qCleanup(t, "90 minutes"))
	require.True(t, b.qPartition(t, topic, 0).rel)
	last := b.qDrain(t, b.Pool, topic, "c", 3)
	require.Equal(t, []int64{idA}, ids(last), "the message of the transaction that began inside the rotation")
	delivered = append(delivered, ids(last)...)

	require.NoError(t, txA2.Commit(b.ctx))
	// No writer left, everything else acked, past retention: only A2's
	// unread message keeps the partition.
	require.Equal(t, 0, b.qCleanup(t, "90 minutes"), "a partition with an unread message is not dropped")
	last = b.qDrain(t, b.Pool, topic, "c", 3)
	require.Equal(t, []int64{idA2}, ids(last), "the message of the transaction open before the rotation")
	delivered = append(delivered, ids(last)...)
	want = append(want, idA, idA2)
	qSameSet(t, want, delivered, "all messages, exactly once")

	// Everything acked (cleanup re-checks under the partition's lock, so an
	// unrelated open transaction does not matter); past retention only in 90
	// minutes.
	require.Equal(t, 0, b.qCleanup(t, "0"), "not before retention")
	require.Equal(t, 1, b.qCleanup(t, "90 minutes"))
	p0 = b.qPartition(t, topic, 0)
	require.False(t, p0.exists)
	require.False(t, p0.rel, "the partition table is dropped")
	require.True(t, b.qPartition(t, topic, 1).rel)
	var dropped, lost int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `
		SELECT t.dropped_unread, g.lost_messages FROM fanout.topic t JOIN fanout.consumer_group g USING (topic_id)
		WHERE t.topic = $1`, topic).Scan(&dropped, &lost))
	require.Zero(t, dropped)
	require.Zero(t, lost)

	// The topic goes on working.
	id := b.publish(t, b.Pool, topic, `{}`)
	require.Equal(t, []int64{id}, ids(b.qDrain(t, b.Pool, topic, "c", 3)))
}

// A partition is never dropped while an un-acked lease or a pending retry
// points into it, nor before retention.
func TestQueuePartitionCleanupWaitsForLeasesAndRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	topic := "parts.pins"
	b.createTopic(t, b.Pool, topic, qPartOpts)
	published := b.qPublishN(t, b.Pool, topic, 0, 10)
	b.qRotate(t)

	ms := b.read(t, b.Pool, topic, nil, "w", 100, "1 hour")
	require.Equal(t, published, ids(ms))
	require.Equal(t, 0, b.qCleanup(t, "90 minutes"), "an open lease pins the partition")

	require.Equal(t, 9, b.ack(t, b.Pool, ms[0].LeaseID, published[:9]))
	require.Equal(t, 1, b.qNack(t, b.Pool, ms[0].LeaseID, published[9:], ptr("1 second"), "retry"))
	require.Equal(t, 0, b.qCleanup(t, "90 minutes"), "a pending retry pins the partition")

	retried := b.qReadUntil(t, topic, "w", 10)
	require.Equal(t, published[9:], ids(retried))
	require.Equal(t, 0, b.qCleanup(t, "90 minutes"), "the retry's lease pins the partition")
	require.True(t, b.qPartition(t, topic, 0).rel)

	require.Equal(t, 1, b.ack(t, b.Pool, retried[0].LeaseID, nil))
	require.Equal(t, 0, b.qCleanup(t, "30 minutes"), "not before retention")
	require.Equal(t, 1, b.qCleanup(t, "90 minutes"), "acked and past retention")
	require.False(t, b.qPartition(t, topic, 0).rel)
}

// max_retention drops even unread data, and counts and logs it: the unread
// rows, the pending retry and the un-acked lease messages of the partition.
func TestQueuePartitionMaxRetention(t *testing.T) {
	t.Parallel()
	b := setup(t)
	topic := "parts.max"
	b.createTopic(t, b.Pool, topic, qPartOpts)
	published := b.qPublishN(t, b.Pool, topic, 0, 10)
	ms := b.read(t, b.Pool, topic, nil, "w", 4, "1 hour")
	require.Equal(t, published[:4], ids(ms))
	lease := ms[0].LeaseID
	require.Equal(t, 1, b.ack(t, b.Pool, lease, published[:1]))
	require.Equal(t, 1, b.qNack(t, b.Pool, lease, published[1:2], ptr("1 hour"), "later"))
	// Left: 2 in the open lease, 1 pending retry, 6 never read = 9.
	b.qRotate(t)

	require.Equal(t, 0, b.qCleanup(t, "90 minutes"), "unread data is kept until max_retention")
	require.Equal(t, 1, b.qCleanup(t, "3 hours"), "max_retention drops it anyway")
	require.False(t, b.qPartition(t, topic, 0).rel)

	var dropped, lost, logged int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `
		SELECT t.dropped_unread, g.lost_messages,
		       (SELECT coalesce(sum(e.count), 0) FROM fanout.event_log e
		        WHERE e.topic = t.topic AND e.kind = 'unread_dropped' AND e.detail->>'reason' = 'max_retention')
		FROM fanout.topic t JOIN fanout.consumer_group g USING (topic_id)
		WHERE t.topic = $1`, topic).Scan(&dropped, &lost, &logged))
	require.Equal(t, int64(9), dropped, "fanout.topic.dropped_unread")
	require.Equal(t, int64(9), lost, "fanout.consumer_group.lost_messages")
	require.Equal(t, int64(9), logged, "fanout.event_log")

	// The dropped lease messages can no longer be acked; nothing dropped is
	// delivered; new messages are.
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.ack($1)", lease)
	requireSQLState(t, err, "PGQ11")
	id := b.publish(t, b.Pool, topic, `{}`)
	require.Equal(t, []int64{id}, ids(b.qDrain(t, b.Pool, topic, "c", 100)))
}

// Invariant 7 (docs/design.md §3.7): the consume path (read, ack, nack, retries, lease expiry,
// dead letters, replay) never updates or deletes a row of a message table.
func TestQueueConsumePathIsAppendOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	topic := "append.only"
	b.createTopic(t, b.Pool, topic, "max_attempts => 2")
	producer, consumer := b.Conn(t), b.Conn(t)
	const total = 500
	for i := 0; i < total/100; i++ {
		b.qPublishN(t, producer, topic, i*100, 100)
	}

	ms := b.read(t, consumer, topic, nil, "w", 100, "1 second")
	require.Len(t, ms, 100)
	b.qWaitExpired(t, ms[0].LeaseID) // expiry: re-claimed below
	for page := 0; ; page++ {
		require.Less(t, page, 100, "500 messages, 2 attempts each, pages of 50: never 100 pages")
		ms = b.read(t, consumer, topic, nil, "w", 50, "1 minute")
		if len(ms) == 0 {
			break
		}
		half := ids(ms)[:len(ms)/2]
		require.Equal(t, len(half), b.ack(t, consumer, ms[0].LeaseID, half))
		b.qNack(t, consumer, ms[0].LeaseID, nil, ptr("0"), "fail") // second attempt dead-letters
	}
	var dead []int64
	rows, err := consumer.Query(b.ctx, "SELECT message_id FROM fanout.dead_letters WHERE topic = $1", topic)
	require.NoError(t, err)
	dead, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.NotEmpty(t, dead)
	var n int
	require.NoError(t, consumer.QueryRow(b.ctx, "SELECT fanout.replay_dead_letters($1, NULL, $2)", topic, dead).Scan(&n))
	require.Equal(t, len(dead), n)
	b.qDrain(t, consumer, topic, "w", 100)

	// Flush both sessions' statistics, then look at every message table.
	for _, c := range []*pgx.Conn{producer, consumer} {
		_, err := c.Exec(b.ctx, "SELECT pg_stat_force_next_flush()")
		require.NoError(t, err)
		_, err = c.Exec(b.ctx, "SELECT 1")
		require.NoError(t, err)
	}
	for {
		var ins, upd, del, tables int64
		require.NoError(t, b.Pool.QueryRow(b.ctx, `
			SELECT coalesce(sum(n_tup_ins), 0), coalesce(sum(n_tup_upd), 0), coalesce(sum(n_tup_del), 0), count(*)
			FROM pg_stat_user_tables WHERE schemaname = 'fanout_data'`).Scan(&ins, &upd, &del, &tables))
		require.Zero(t, upd, "UPDATE on a message table")
		require.Zero(t, del, "DELETE on a message table")
		if ins == total {
			require.Positive(t, tables)
			break
		}
		require.Less(t, ins, int64(total))
		select {
		case <-b.ctx.Done():
			t.Fatalf("statistics never showed the %d inserts (saw %d)", total, ins)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Dropping an emptied partition never queues for a lock: a transaction that
// holds the partition itself (some look-ups read a partition directly, not
// through its parent) keeps it for a later round, and the call returns at
// once instead of waiting while it holds the parent, which would stop every
// publisher and reader of the topic behind it.
func TestQueuePartitionDropNeverQueues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	topic := "parts.dropwait"
	b.createTopic(t, b.Pool, topic, qPartOpts)
	b.qPublishN(t, b.Pool, topic, 0, 10)
	require.Len(t, b.qDrain(t, b.Pool, topic, "w", 100), 10)
	b.qRotate(t)
	p := b.qPartition(t, topic, 0)
	parent := strings.TrimSuffix(p.relname, "_p0")

	// The parent busy: the partition is emptied but not dropped.
	holder, err := b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = holder.Exec(b.ctx, fmt.Sprintf("LOCK TABLE ONLY fanout_data.%s IN ACCESS SHARE MODE", parent))
	require.NoError(t, err)
	require.Equal(t, 1, b.qCleanup(t, "90 minutes"), "emptied")
	require.True(t, b.qPartition(t, topic, 0).rel, "not dropped while its parent is busy")
	require.NoError(t, holder.Commit(b.ctx))

	// The partition itself busy: the call returns without waiting.
	holder, err = b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(b.ctx) }()
	var n int
	require.NoError(t, holder.QueryRow(b.ctx, fmt.Sprintf("SELECT count(*) FROM fanout_data.%s", p.relname)).Scan(&n))
	done := make(chan error, 1)
	var pid uint32
	conn, err := b.Pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	pid = conn.Conn().PgConn().PID()
	go func() {
		_, err := conn.Exec(b.ctx, "SELECT fanout._cleanup_partitions(p_now => now() + interval '90 minutes')")
		done <- err
	}()
	for returned := false; !returned; {
		select {
		case err := <-done:
			require.NoError(t, err)
			returned = true
		default:
			var waiting bool
			require.NoError(t, b.Pool.QueryRow(b.ctx,
				"SELECT coalesce(bool_or(wait_event_type = 'Lock'), false) FROM pg_stat_activity WHERE pid = $1",
				pid).Scan(&waiting))
			require.False(t, waiting, "cleanup queued for a lock behind the partition's holder")
		}
	}
	require.True(t, b.qPartition(t, topic, 0).rel, "kept while a transaction holds it")
	require.NoError(t, holder.Commit(b.ctx))
	require.Equal(t, 0, b.qCleanup(t, "90 minutes"), "nothing left to empty")
	require.False(t, b.qPartition(t, topic, 0).rel, "dropped once free")
}

// A partition due at max_retention whose lease is held by an acking
// transaction that has not committed: the round that empties it gives up
// (it would hold the partition exclusively, so every reader of the topic
// would wait behind the acker) and a later round, after the commit, empties
// it and counts exactly the messages that acker did not settle.
func TestQueuePartitionCleanupGivesUpOnAHeldLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	topic := "parts.heldlease"
	b.createTopic(t, b.Pool, topic, qPartOpts)
	published := b.qPublishN(t, b.Pool, topic, 0, 4)
	ms := b.read(t, b.Pool, topic, nil, "w", 4, "1 hour")
	require.Len(t, ms, 4)
	b.qRotate(t)

	acker, err := b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = acker.Rollback(b.ctx) }()
	require.Equal(t, 1, b.ack(t, acker, ms[0].LeaseID, published[:1]))
	done := make(chan int, 1)
	go func() {
		var n int
		err := b.Pool.QueryRow(b.ctx, "SELECT fanout._cleanup_partitions(p_now => now() + interval '3 hours')").Scan(&n)
		if err != nil {
			n = -1
		}
		done <- n
	}()
	select {
	case n := <-done:
		require.Equal(t, 0, n, "busy: left for a later round")
	case <-b.ctx.Done():
		t.Fatal("cleanup waited for the acking transaction")
	}
	require.True(t, b.qPartition(t, topic, 0).rel)
	require.NoError(t, acker.Commit(b.ctx))

	require.Equal(t, 1, b.qCleanup(t, "3 hours"))
	require.False(t, b.qPartition(t, topic, 0).rel)
	var lost int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `
		SELECT g.lost_messages FROM fanout.consumer_group g JOIN fanout.topic t USING (topic_id)
		WHERE t.topic = $1`, topic).Scan(&lost))
	require.Equal(t, int64(3), lost, "the three the acker left open")
}

// The refresh after a new partition's creation, and then the jump into it,
// each wait for every transaction of the database that was running when the
// step before was first seen committed, not only those holding the topic's
// table: one that locks the table later could still use a partition list
// from before the new partition. After ten minutes only those that hold
// the table still hold the jump back, so an idle session elsewhere cannot
// stop rotation for good.
func TestQueuePartitionJumpWaitsForRunningTransactions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	topic := "parts.jumpwait"
	b.createTopic(t, b.Pool, topic, qPartOpts)
	b.qPublishN(t, b.Pool, topic, 0, 3)
	require.Equal(t, 1, b.qManage(t, b.Pool), "creates the next partition")

	idle, err := b.Conn(t).Begin(b.ctx)
	require.NoError(t, err)
	defer idle.Rollback(b.ctx) //nolint:errcheck
	_, err = idle.Exec(b.ctx, "SELECT 1")
	require.NoError(t, err)
	holder, err := b.Conn(t).Begin(b.ctx)
	require.NoError(t, err)
	defer holder.Rollback(b.ctx) //nolint:errcheck
	b.publish(t, holder, topic, `{}`)

	manageAt := func(ahead string) int {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.ctx,
			"SELECT fanout._manage_partitions(p_now => now() + $1::interval)", ahead).Scan(&n))
		return n
	}
	require.Equal(t, 0, manageAt("2 hours"), "waits for both")
	require.Equal(t, 0, manageAt("2 hours 11 minutes"), "past the bound: the table's holder still counts")
	require.NoError(t, holder.Commit(b.ctx))
	require.Equal(t, 0, manageAt("2 hours 1 minute"), "within the bound: the idle transaction counts")
	require.Equal(t, 1, manageAt("2 hours 11 minutes"), "past the bound: the idle transaction no longer counts (refresh)")
	require.False(t, b.qPartition(t, topic, 0).closed, "the refresh does not jump")
	// The jump waits for the transactions running when the refresh was first
	// seen committed, with the same bound counted from then.
	require.Equal(t, 0, manageAt("2 hours 12 minutes"), "the idle transaction counts again, from the refresh")
	require.Equal(t, 1, manageAt("2 hours 23 minutes"), "past the bound again: the jump")
	require.True(t, b.qPartition(t, topic, 0).closed)
}

// A topic keeps one partition ready ahead of the open one: it is created and
// every session's partition list refreshed right away, not when the open
// partition is due, so a due rotation is one step (the jump). An empty or
// young open partition is not rotated, and the scheduler is told to call
// only while a step is pending.
func TestQueuePartitionKeptReadyAhead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	topic := "parts.ahead"
	b.createTopic(t, b.Pool, topic, qPartOpts)
	manageAt := func(ahead string) int {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.ctx,
			"SELECT fanout._manage_partitions(p_now => now() + $1::interval)", ahead).Scan(&n))
		return n
	}
	listed := func() bool {
		var ok bool
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT EXISTS (SELECT 1 FROM fanout.maint_operations()
			WHERE func = 'fanout._manage_partitions')`).Scan(&ok))
		return ok
	}
	refreshed := func(partNo int) bool {
		var ok bool
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT p.refresh_xid IS NOT NULL
			FROM fanout.partition p JOIN fanout.topic t USING (topic_id) WHERE t.topic = $1 AND p.part_no = $2`,
			topic, partNo).Scan(&ok))
		return ok
	}

	require.True(t, listed(), "no partition ready ahead")
	require.Equal(t, 1, manageAt("0"), "creates partition 1 while partition 0 is young and empty")
	require.True(t, b.qPartition(t, topic, 1).exists)
	require.False(t, refreshed(1))
	require.Equal(t, 1, manageAt("0"), "refreshes the partition lists")
	require.True(t, refreshed(1))
	require.Equal(t, 0, manageAt("0"), "young: no jump")
	require.False(t, listed(), "nothing pending until partition 0 is due")
	require.Equal(t, 0, manageAt("2 hours"), "empty: no jump")
	require.False(t, b.qPartition(t, topic, 0).closed)

	b.qPublishN(t, b.Pool, topic, 0, 2)
	require.Equal(t, 1, manageAt("2 hours"), "due and not empty: the jump, in one step")
	require.True(t, b.qPartition(t, topic, 0).closed)
	require.False(t, b.qPartition(t, topic, 1).closed)
	require.False(t, b.qPartition(t, topic, 2).exists)
	require.True(t, listed(), "partition 2 is to be made ready")
	require.Equal(t, 1, manageAt("0"), "creates partition 2")
	require.Equal(t, 1, manageAt("0"), "refreshes")
	require.Equal(t, 0, manageAt("0"), "partition 1 opened just now: no jump")
	require.False(t, b.qPartition(t, topic, 1).closed)
}
