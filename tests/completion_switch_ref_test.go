package tests

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// Switching an offset topic to reference completion with live groups:
// alter_topic(completion => 'reference') (docs/completion-switch.md,
// "Offset to reference").

// The mirror of TestCompletionSwitchUnderTraffic: 3 groups x 2 consumers
// with random nacks, 2 publishers committing and rolling back, maintenance
// looping, the switch to reference in the middle; 0 lost, 0 acked twice.
func TestCompletionSwitchToReferenceUnderTraffic(t *testing.T) {
	t.Parallel()
	t.Run("unpartitioned", func(t *testing.T) { switchUnderTraffic(t, "reference") })
	t.Run("key_partitions", func(t *testing.T) { switchUnderTraffic(t, "reference", "partitions => 4") })
}

// requiredOf returns the required_groups stamp of a message.
func (b *bundle) requiredOf(t *testing.T, table string, id int64) int64 {
	t.Helper()
	var req int64
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		fmt.Sprintf("SELECT required_groups FROM fanout_data.%s WHERE id = $1", table), id).Scan(&req))
	return req
}

// Leases, retries and a dead group across the switch to reference, the
// storage rule on each side of the switch id, and the way back and forth
// (offset -> reference -> offset -> reference).
func TestCompletionSwitchToReferenceLeasesAndRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const topic = "cs_toref"
	b.createTopic(t, b.Pool, topic, "semantics => 'pubsub'", "retention => '0'",
		"zero_subscription_retention => '0'", "partition_interval => '1 minute'")
	b.subscribe(t, topic, "A")
	b.subscribe(t, topic, "B")
	b.subscribe(t, topic, "D", "heartbeat_timeout => '1 second'", "dead_after_misses => 1")
	var table string
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT data_table FROM fanout.topic WHERE topic = $1", topic).Scan(&table))
	old := b.publishN(t, topic, 10)
	require.Equal(t, old, b.readAck(t, topic, "D"))
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout._detect_dead_groups(p_now => now() + interval '1 minute')")
	require.NoError(t, err)
	require.Equal(t, "dead", b.groupStatus(t, topic, "D"))

	// A holds 5 under a lease and nacks 2 of the next 5; B holds the first.
	a1 := b.read(t, b.Pool, topic, ptr("A"), "a1", 5, "10 minutes")
	require.Equal(t, old[:5], ids(a1))
	a2 := b.read(t, b.Pool, topic, ptr("A"), "a2", 5, "10 minutes")
	require.Equal(t, old[5:], ids(a2))
	require.Equal(t, 2, b.qNack(t, b.Pool, a2[0].LeaseID, old[5:7], ptr("0 seconds"), "later"))
	require.Equal(t, 3, b.ack(t, b.Pool, a2[0].LeaseID, old[7:]))
	heldB := b.read(t, b.Pool, topic, ptr("B"), "b1", 1, "10 minutes")
	require.Equal(t, old[:1], ids(heldB))

	var switchID int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout.alter_topic($1, completion => 'reference')", topic).Scan(new(int64)))
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT completion_switch_id FROM fanout.topic WHERE topic = $1", topic).Scan(&switchID))
	require.Greater(t, switchID, old[len(old)-1])
	c, done, bits := b.switchState(t, topic)
	require.Equal(t, "reference", c)
	require.True(t, done, "nothing left for maintenance to finish")
	require.Equal(t, 3, bits, "every group has a bit, the dead one too")
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic($1, completion => 'reference')", topic)
	require.NoError(t, err, "the same mode again changes nothing")
	require.Zero(t, b.requiredOf(t, table, old[0]), "messages below the switch id carry no bits")

	// New messages carry A's and B's bits (D is dead); the old lease is
	// acked after the switch, the nacked messages come back, B gets the
	// rest below the switch id and everything above it, each once.
	fresh := b.publishN(t, topic, 10)
	req, _, _ := b.bits(t, topic, fresh[0])
	require.Equal(t, []string{"A", "B"}, req)
	require.Equal(t, 5, b.ack(t, b.Pool, a1[0].LeaseID, nil), "a lease from before the switch is acked after it")
	ms := b.read(t, b.Pool, topic, ptr("A"), "a3", 100, "10 minutes")
	var retried []int64
	for _, m := range ms {
		if m.Attempt > 1 {
			retried = append(retried, m.MessageID)
		}
	}
	require.Equal(t, old[5:7], retried, "the nacked messages come back after the switch")
	b.ack(t, b.Pool, ms[0].LeaseID, nil)
	got := append(ids(ms), b.readAck(t, topic, "A")...)
	require.ElementsMatch(t, append(append([]int64{}, old[5:7]...), fresh...), got)
	require.Equal(t, append(append([]int64{}, old[1:]...), fresh...), b.readAck(t, topic, "B"))

	// B holds a message below the switch id, A one above it: cleanup keeps
	// the partition (offset rule below, reference rule above) until both ack.
	more := b.publishN(t, topic, 2)
	heldA := b.read(t, b.Pool, topic, ptr("A"), "a4", 1, "10 minutes")
	require.Equal(t, more[:1], ids(heldA))
	require.Equal(t, more, b.readAck(t, topic, "B"))
	b.rotate(t)
	for i := 0; i < 3; i++ {
		b.cleanup(t, "2 hours")
	}
	require.Contains(t, b.partitionLos(t, topic), int64(0), "B and A still hold messages of the partition")
	require.Equal(t, 1, b.ack(t, b.Pool, heldA[0].LeaseID, nil))
	require.Equal(t, more[1:], b.readAck(t, topic, "A"))
	for i := 0; i < 3; i++ {
		b.cleanup(t, "2 hours")
	}
	// Every message from the switch id on is COMPLETED: the offset rule
	// still keeps the partition for B's lease below it.
	require.Contains(t, b.partitionLos(t, topic), int64(0), "B still holds a message below the switch id")
	require.Equal(t, 1, b.ack(t, b.Pool, heldB[0].LeaseID, nil))
	for i := 0; i < 3; i++ {
		b.cleanup(t, "2 hours")
	}
	require.NotContains(t, b.partitionLos(t, topic), int64(0), "every group is done with the partition")
	require.Empty(t, queryStrings(t, b.ctx, b.URL, `SELECT coalesce(topic, '') || ': ' || problem FROM fanout.check_consistency()`))

	// A new group gets a bit; D comes back (a backfill from the switch id
	// on at the earliest), each message at most once.
	b.subscribe(t, topic, "C")
	late := b.publishN(t, topic, 2)
	require.Equal(t, late, b.readAck(t, topic, "C"))
	require.Equal(t, late, b.readAck(t, topic, "A"))
	require.Equal(t, late, b.readAck(t, topic, "B"))
	b.subscribe(t, topic, "D")
	var from int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT j.from_id FROM fanout.bitmap_job j JOIN fanout.consumer_group g USING (group_id)
		JOIN fanout.topic t USING (topic_id) WHERE t.topic = $1 AND g.group_name = 'D' AND j.kind = 'backfill'`, topic).Scan(&from))
	require.GreaterOrEqual(t, from, switchID, "no backfill below the switch id")
	b.runJobs(t)
	seen := map[int64]int{}
	for _, id := range b.readAck(t, topic, "D") {
		seen[id]++
		require.Equal(t, 1, seen[id], "D received %d twice", id)
		require.GreaterOrEqual(t, id, late[0], "D read on from its position")
	}

	// Back to offset, and to reference again: each switch keeps delivering.
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic($1, completion => 'offset')", topic)
	require.NoError(t, err)
	mid := b.publishN(t, topic, 3)
	for i := 0; i < 3; i++ {
		b.cleanup(t, "2 hours")
	}
	_, done, _ = b.switchState(t, topic)
	require.True(t, done, "the switch to offset finished")
	for _, g := range []string{"A", "B", "C"} {
		require.Equal(t, mid, b.readAck(t, topic, g), "%s", g)
	}
	// D: in offset mode it reads on from its position, which may be before
	// history it was not owed in reference mode (docs/completion-switch.md),
	// but nothing it had already.
	dMid := b.readAck(t, topic, "D")
	require.Subset(t, dMid, mid)
	for _, id := range dMid {
		seen[id]++
		require.Equal(t, 1, seen[id], "D received %d twice", id)
	}
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic($1, completion => 'reference')", topic)
	require.NoError(t, err)
	final := b.publishN(t, topic, 3)
	req, _, _ = b.bits(t, topic, final[0])
	require.Equal(t, []string{"A", "B", "C", "D"}, req)
	for _, g := range []string{"A", "B", "C", "D"} {
		require.Equal(t, final, b.readAck(t, topic, g), "%s", g)
	}
	b.rotate(t)
	for i := 0; i < 3; i++ {
		b.cleanup(t, "2 hours")
	}
	var closed int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*) FROM fanout.partition p JOIN fanout.topic t USING (topic_id)
		WHERE t.topic = $1 AND p.closed_at IS NOT NULL AND p.truncated_at IS NULL`, topic).Scan(&closed))
	require.Zero(t, closed, "every closed partition is done with and dropped")
	require.Empty(t, queryStrings(t, b.ctx, b.URL, `SELECT coalesce(topic, '') || ': ' || problem FROM fanout.check_consistency()`))
	var lost int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT coalesce(sum(lost_messages), 0) FROM fanout.groups WHERE topic = $1 AND group_name <> 'D'", topic).Scan(&lost))
	require.Zero(t, lost)
}

// Refusals of the switch to reference, with their codes, and a refused
// switch changes nothing.
func TestCompletionSwitchToReferenceRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exec := func(sql string, args ...any) error {
		_, err := b.Pool.Exec(b.ctx, sql, args...)
		return err
	}
	b.createTopic(t, b.Pool, "cs_queue")
	requireSQLState(t, exec("SELECT fanout.alter_topic('cs_queue', completion => 'reference')"), "PGQ03")

	// More than 64 groups.
	b.createTopic(t, b.Pool, "cs_many", "semantics => 'pubsub'")
	for i := 0; i < 65; i++ {
		b.subscribe(t, "cs_many", fmt.Sprintf("g%02d", i))
	}
	requireSQLState(t, exec("SELECT fanout.alter_topic('cs_many', completion => 'reference')"), "PGQ17")
	require.NoError(t, exec("SELECT fanout.unsubscribe('cs_many', 'g64')"))
	// A cancelled group still counts: it keeps a bit until subscription cleanup.
	requireSQLState(t, exec("SELECT fanout.alter_topic('cs_many', completion => 'reference')"), "PGQ17")

	// A publisher's transaction holds the table: refused after its attempts,
	// and nothing changed; after it commits, the switch goes through.
	b.createTopic(t, b.Pool, "cs_busy", "semantics => 'pubsub'")
	b.subscribe(t, "cs_busy", "A")
	var table string
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT data_table FROM fanout.topic WHERE topic = 'cs_busy'").Scan(&table))
	tx, err := b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	var held int64
	require.NoError(t, tx.QueryRow(b.ctx, "SELECT fanout.publish('cs_busy', '{}')").Scan(&held))
	requireSQLState(t, exec("SELECT fanout.alter_topic('cs_busy', completion => 'reference')"), "PGQ28")
	c, _, bits := b.switchState(t, "cs_busy")
	require.Equal(t, "offset", c)
	require.Zero(t, bits)
	require.False(t, b.relExists(t, table+"_done"), "a refused switch leaves the table as it was")
	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, exec("SELECT fanout.alter_topic('cs_busy', completion => 'reference')"))
	require.Equal(t, []int64{held}, b.readAck(t, "cs_busy", "A"))

	// A switch to offset not finished yet: the way back waits (PGQ28).
	b.refTopic(t, "cs_back")
	b.subscribe(t, "cs_back", "A")
	require.NoError(t, exec("SELECT fanout.alter_topic('cs_back', completion => 'offset')"))
	requireSQLState(t, exec("SELECT fanout.alter_topic('cs_back', completion => 'reference')"), "PGQ28")
	for i := 0; i < 3; i++ {
		b.cleanup(t, "2 hours")
	}
	_, done, _ := b.switchState(t, "cs_back")
	require.True(t, done)
	require.NoError(t, exec("SELECT fanout.alter_topic('cs_back', completion => 'reference')"))

	// A backfill under way on the reference topic: its switch to offset is
	// refused (PGQ28) until the job has finished.
	b.publishN(t, "cs_back", 3)
	b.subscribe(t, "cs_back", "B", "start_position => 'earliest'")
	requireSQLState(t, exec("SELECT fanout.alter_topic('cs_back', completion => 'offset')"), "PGQ28")
	b.runJobs(t)
	require.NoError(t, exec("SELECT fanout.alter_topic('cs_back', completion => 'offset')"))
}
