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
	hundredth := b.count(t, `SELECT topic_id FROM fanout.topic ORDER BY topic_id OFFSET 99 LIMIT 1`)
	require.EqualValues(t, 1, b.cleanup(t, "1 hour"), "100 topics visited, more to come")
	require.Equal(t, hundredth, resume())
	require.EqualValues(t, 0, b.cleanup(t, "1 hour"), "the last 5: the pass is over")
	require.Zero(t, resume())
	require.EqualValues(t, 1, b.cleanup(t, "1 hour"), "the next pass starts over")
	require.Equal(t, hundredth, resume())
}
