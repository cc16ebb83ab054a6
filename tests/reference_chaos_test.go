package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The seed's kill-and-resurrect scenario, scaled and on a simulated clock
// (maintenance runs with p_now): three groups at a steady publish rate, one
// killed without unsubscribing. Detection marks it dead within its window,
// the others never stall, storage stays bounded while it is dead, and its
// resurrection backfill is bounded by max_backfill.
func TestReferenceKillAndResurrect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const topic = "chaos"
	b.refTopic(t, topic, "retention => '1 hour'", "zero_subscription_retention => '1 hour'",
		"partition_interval => '1 minute'")
	b.subscribe(t, topic, "A")
	b.subscribe(t, topic, "B")
	b.subscribe(t, topic, "C", "heartbeat_timeout => '2 seconds'", "dead_after_misses => 3", "max_backfill => 50")

	tick := func(readC bool) (published []int64) {
		published = b.publishN(t, topic, 40)
		for _, g := range []string{"A", "B"} {
			require.Equal(t, published, b.readAck(t, topic, g), "group %s never stalls", g)
		}
		if readC {
			require.Equal(t, published, b.readAck(t, topic, "C"))
		}
		b.runJobs(t)
		b.rotate(t)
		b.cleanup(t, "2 hours")
		return published
	}
	for i := 0; i < 3; i++ {
		tick(true)
	}
	// C is killed: no more reads or heartbeats.
	var lastC time.Time
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		"SELECT last_heartbeat FROM fanout.groups WHERE group_name = 'C'").Scan(&lastC))
	tick(false)
	detect := func(after time.Duration) {
		_, err := b.Pool.Exec(b.ctx, "SELECT fanout._detect_dead_groups(p_now => $1)", lastC.Add(after))
		require.NoError(t, err)
	}
	detect(5 * time.Second)
	require.Equal(t, "active", b.groupStatus(t, topic, "C"), "two misses are tolerated")
	detect(6100 * time.Millisecond)
	require.Equal(t, "dead", b.groupStatus(t, topic, "C"), "dead after 3 × heartbeat_timeout")

	// While C is dead its bit is released and partitions keep going away.
	var sizes []int
	for i := 0; i < 6; i++ {
		tick(false)
		sizes = append(sizes, b.partitions(t, topic))
	}
	for _, n := range sizes {
		require.LessOrEqual(t, n, 3, "storage stays bounded while C is dead: %v", sizes)
	}
	require.Empty(t, b.checkConsistency(t))

	// Resurrection: a bounded backfill, then C follows new messages again.
	var status string
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout.heartbeat($1, 'C')", topic).Scan(&status))
	require.Equal(t, "active", status)
	b.runJobs(t)
	st, processed, _ := b.backfill(t, "C")
	require.Equal(t, "completed", st)
	require.LessOrEqual(t, *processed, int64(50), "resurrection backfill is bounded by max_backfill")
	fresh := tick(true)
	require.Len(t, fresh, 40)
	require.Empty(t, b.checkConsistency(t))
}
