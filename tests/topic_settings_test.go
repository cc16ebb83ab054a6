package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// topicMaxGroups reads a topic's max_groups from the fanout.topics view.
func (b *bundle) topicMaxGroups(t *testing.T, topic string) int {
	t.Helper()
	var n int
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT max_groups FROM fanout.topics WHERE topic = $1", topic).Scan(&n))
	return n
}

// The group cap of a topic is its max_groups setting (default 1000): a
// tenant's admin may lower it and raise it back up to 1000, only an operator
// (admin grant on '%') above that; lowering it removes no group, it refuses
// new ones; a reference topic keeps its 64.
func TestMaxGroupsPerTopic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "a.cap", "semantics => 'pubsub'")
	require.Equal(t, 1000, b.topicMaxGroups(t, "a.cap"))
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.subscribe('a.cap', 'g' || i) FROM generate_series(1, 1000) i")
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.subscribe('a.cap', 'g1001')")
	requireSQLState(t, err, "PGQ22")

	b.tIsolate(t)
	adm, admConn := b.tRole(t, "capadm", "fanout_admin")
	b.tGrant(t, b.Pool, "a.%", adm, "admin")
	_, err = admConn.Exec(b.ctx, "SELECT fanout.alter_topic('a.cap', max_groups => 1001)")
	requireSQLState(t, err, "PGQ21")
	require.Equal(t, 1000, b.topicMaxGroups(t, "a.cap"), "a refused raise changes nothing")
	for _, bad := range []int{0, -1, 1000001} {
		_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('a.cap', max_groups => $1)", bad)
		requireSQLState(t, err, "PGQ03")
	}

	// The operator raises it: five more groups, not six.
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('a.cap', max_groups => 1005)")
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.subscribe('a.cap', 'g' || i) FROM generate_series(1001, 1005) i")
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.subscribe('a.cap', 'g1006')")
	requireSQLState(t, err, "PGQ22")

	// The tenant lowers it: every group stays and may subscribe again (same
	// settings), no new one comes in; raising it back past 1000 is the
	// operator's again.
	_, err = admConn.Exec(b.ctx, "SELECT fanout.alter_topic('a.cap', max_groups => 10)")
	require.NoError(t, err)
	var groups int
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT count(*) FROM fanout.groups WHERE topic = 'a.cap'").Scan(&groups))
	require.Equal(t, 1005, groups)
	_, err = admConn.Exec(b.ctx, "SELECT fanout.subscribe('a.cap', 'g7')")
	require.NoError(t, err)
	_, err = admConn.Exec(b.ctx, "SELECT fanout.subscribe('a.cap', 'new')")
	requireSQLState(t, err, "PGQ22")
	_, err = admConn.Exec(b.ctx, "SELECT fanout.alter_topic('a.cap', max_groups => 1000)")
	require.NoError(t, err)
	_, err = admConn.Exec(b.ctx, "SELECT fanout.alter_topic('a.cap', max_groups => 1005)")
	requireSQLState(t, err, "PGQ21")
	require.Equal(t, 1000, b.topicMaxGroups(t, "a.cap"))

	// A reference topic keeps its 64 whatever max_groups says.
	b.createTopic(t, b.Pool, "a.ref", "semantics => 'pubsub'", "completion => 'reference'")
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('a.ref', max_groups => 2000)")
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.subscribe('a.ref', 'r' || i) FROM generate_series(1, 64) i")
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.subscribe('a.ref', 'r65')")
	requireSQLState(t, err, "PGQ17")
}

// An offset topic with 10,000 groups: the groups view and one cleanup call
// stay exact, and their durations at 1,000 and at 10,000 groups are printed
// with their ratio (a measurement, not an assertion: the machine is shared).
func TestTenThousandGroupsCleanupAndView(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Two closed partitions of 20 messages and 5 in the open one; each group
	// is subscribed before them (lag 45, loses 40 to a cleanup past
	// zombie_ttl).
	type measure struct{ view, cleanup time.Duration }
	var at = map[int]measure{}
	for round, groups := range []int{1000, 10000} {
		topic := fmt.Sprintf("many%d", round)
		b.createTopic(t, b.Pool, topic, "semantics => 'pubsub'", qPartOpts, "zombie_ttl => '3 hours'")
		_, err := b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic($1, max_groups => 20000)", topic)
		require.NoError(t, err)
		start := time.Now()
		_, err = b.Pool.Exec(b.ctx, "SELECT fanout.subscribe($1, 'g' || i, start_position => 'earliest') FROM generate_series(1, $2) i",
			topic, groups)
		require.NoError(t, err)
		t.Logf("%d groups subscribed in %v", groups, time.Since(start).Round(time.Millisecond))
		for p := 0; p < 2; p++ {
			b.qPublishN(t, b.Pool, topic, p*20, 20)
			b.qRotate(t)
		}
		b.qPublishN(t, b.Pool, topic, 40, 5)

		start = time.Now()
		var rows, exact int
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*), count(*) FILTER (WHERE lag_messages = 45)
		                                          FROM fanout.groups WHERE topic = $1`, topic).Scan(&rows, &exact))
		view := time.Since(start)
		require.Equal(t, groups, rows)
		require.Equal(t, groups, exact, "every group has all 45 messages unread")

		start = time.Now()
		// Both closed partitions go: no group pins them past zombie_ttl
		// (called again while it returns > 0: a call begins no partition
		// after its time budget, so on a loaded machine the second may be
		// the next call's).
		for calls := 1; b.cleanup(t, "4 hours") > 0; calls++ {
			require.Less(t, calls, 10)
		}
		require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.partition p JOIN fanout.topic t USING (topic_id)
			WHERE t.topic = $1 AND p.closed_at IS NOT NULL AND p.truncated_at IS NULL`, topic), "both closed partitions emptied")
		cleanup := time.Since(start)
		var lost, right, dropped int64
		require.NoError(t, b.Pool.QueryRow(b.ctx, `
			SELECT sum(g.lost_messages), count(*) FILTER (WHERE g.lost_messages = 40), min(t.dropped_unread)
			FROM fanout.consumer_group g JOIN fanout.topic t USING (topic_id) WHERE t.topic = $1`, topic).
			Scan(&lost, &right, &dropped))
		require.Equal(t, int64(groups)*40, lost)
		require.Equal(t, int64(groups), right)
		require.Equal(t, int64(groups)*40, dropped)
		at[groups] = measure{view, cleanup}
		// The next round's partition maintenance counts this topic's steps
		// otherwise.
		_, err = b.Pool.Exec(b.ctx, "SELECT fanout.drop_topic($1, force => true)", topic)
		require.NoError(t, err)
		t.Logf("%d groups: groups view %v (%.3f ms per group), cleanup of 2 partitions %v",
			groups, view.Round(time.Millisecond), float64(view.Microseconds())/1000/float64(groups), cleanup.Round(time.Millisecond))
	}
	t.Logf("10,000 vs 1,000 groups: groups view x%.1f, cleanup x%.1f (linear would be x10)",
		float64(at[10000].view)/float64(at[1000].view), float64(at[10000].cleanup)/float64(at[1000].cleanup))
}
