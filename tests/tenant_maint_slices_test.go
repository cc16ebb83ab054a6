package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Partition cleanup works through many topics in slices: one call visits
// at most 100 topics that have a closed partition, says so by returning
// > 0 (call again), and the next call resumes after the last topic it
// visited (fanout.lock_row's resume_after) instead of starting over; the
// call that reaches the end returns what it emptied (0 here: nothing is
// past retention) and starts the next pass from the beginning. Before, one
// call visited every topic (thousands of topics: one long call holding a
// lock on each).
func TestMaintenanceCleanupSlicesTopics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 105
	for i := 0; i < n; i++ {
		topic := fmt.Sprintf("s.t%03d", i)
		b.createTopic(t, b.Pool, topic)
		b.publish(t, b.Pool, topic, `{}`)
	}
	// Rotate every topic's partition (creation, refresh, jump: 3 steps each).
	require.Eventually(t, func() bool {
		b.count(t, `SELECT fanout._manage_partitions(p_now => now() + interval '2 hours')`)
		return b.count(t, `SELECT count(DISTINCT topic_id) FROM fanout.partition WHERE closed_at IS NOT NULL`) == n
	}, 5*time.Minute, 10*time.Millisecond)

	resume := func() int64 {
		return b.count(t, `SELECT resume_after FROM fanout.lock_row WHERE name = 'maint:cleanup_partitions'`)
	}
	ids := func(cond string) int64 {
		return b.count(t, `SELECT count(*) FROM fanout.topic WHERE `+cond, resume())
	}
	// One pass: each call visits a slice (at most 100 topics; fewer when it
	// ran out of its time budget) and the next resumes after it.
	var calls int
	for {
		got := b.cleanup(t, "1 hour")
		calls++
		if got == 0 {
			break
		}
		require.EqualValues(t, 1, got, "more to come, nothing emptied (nothing is past retention)")
		require.Positive(t, resume())
		require.LessOrEqual(t, ids("topic_id <= $1"), int64(100)*int64(calls), "at most 100 topics a call")
		require.Positive(t, ids("topic_id > $1"), "the rest for the next call")
		require.Less(t, calls, n, "every call makes progress")
	}
	require.GreaterOrEqual(t, calls, 2, "105 topics take more than one call")
	require.Zero(t, resume(), "the pass is over: the next starts from the first topic")
	require.EqualValues(t, 1, b.cleanup(t, "1 hour"), "the next pass starts over")
	require.Positive(t, resume())
}
