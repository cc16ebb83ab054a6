package tests

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Review 13 (maintenance slices): partition management resumes after the
// topic it visited last (fanout.lock_row's resume_after). A cursor left at a
// topic that was dropped since, topics created between calls, and a topic
// held by an open alter_topic (passed by, every call) must neither stop the
// pass nor make "call again while it returns > 0" loop: every other topic is
// visited, the held one once it is released.
func TestReview13ManagePartitionsCursorSurvivesDropsAndHeldTopics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, n := range []string{"r13.a", "r13.b", "r13.c"} {
		b.createTopic(t, b.Pool, n)
	}
	manage := func() int64 { return b.count(t, `SELECT fanout._manage_partitions()`) }
	drain := func() {
		for calls := 0; manage() > 0; calls++ {
			require.Less(t, calls, 1000, "every call makes progress")
		}
	}
	recorded := func(topic string) int64 {
		return b.count(t, `SELECT count(*) FROM fanout.partition p JOIN fanout.topic t USING (topic_id)
			WHERE t.topic = $1 AND p.part_no = 1 AND p.refresh_vxids IS NOT NULL`, topic)
	}
	forget := func() {
		_, err := b.Pool.Exec(b.ctx, `UPDATE fanout.partition SET refresh_vxids = NULL, refresh_at = NULL WHERE part_no = 1`)
		require.NoError(t, err)
	}
	drain()
	for _, n := range []string{"r13.a", "r13.b", "r13.c"} {
		require.EqualValues(t, 1, recorded(n), n)
	}

	// The cursor at r13.b, which is then dropped; r13.d created after it.
	forget()
	_, err := b.Pool.Exec(b.ctx, `UPDATE fanout.lock_row SET resume_after = (SELECT topic_id FROM fanout.topic WHERE topic = 'r13.b')
		WHERE name = 'maint:manage_partitions'`)
	require.NoError(t, err)
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM (SELECT fanout.drop_topic('r13.b')) d`))
	b.createTopic(t, b.Pool, "r13.d")
	drain()
	for _, n := range []string{"r13.a", "r13.c", "r13.d"} {
		require.EqualValues(t, 1, recorded(n), "%s visited although the cursor named a dropped topic", n)
	}
	require.Zero(t, b.count(t, `SELECT resume_after FROM fanout.lock_row WHERE name = 'maint:manage_partitions'`))

	// r13.c held by an open alter_topic: the calls still end, the others
	// are visited, and r13.c is once the hold ends.
	forget()
	hold := b.Conn(t)
	_, err = hold.Exec(b.ctx, `BEGIN; SELECT fanout.alter_topic('r13.c', max_attempts => 7)`)
	require.NoError(t, err)
	drain()
	drain()
	for _, n := range []string{"r13.a", "r13.d"} {
		require.EqualValues(t, 1, recorded(n), n)
	}
	_, err = hold.Exec(b.ctx, `COMMIT`)
	require.NoError(t, err)
	drain()
	require.EqualValues(t, 1, recorded("r13.c"), "the held topic visited once released")
}
