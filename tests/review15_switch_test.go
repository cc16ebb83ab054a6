package tests

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// offset -> reference -> offset: while the second switch is in progress
// (maintenance has not finished it: the groups keep their bits) the rows
// below the first switch's id carry no bits (published in offset mode) and
// the topic's page functions read every row by position. The group's unread
// count must count them too: before the fix fanout._group_unread filtered by
// the group's bit whenever the group had one, so fanout.groups showed a lag
// of 0 and the read's idle short-cut (fanout._group_idle) handed out nothing
// until maintenance finished the switch (up to 10 minutes behind a long
// transaction), though 20 messages were waiting.
func TestReview15SwitchBackToOffsetReadsRowsFromBeforeReference(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "u", "semantics => 'pubsub'")
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('u', 'b')`)
	require.NoError(t, err)
	g := "b"
	got, err := readMsgs(b.ctx, b.Pool, "u", &g, "x", 100, "1 hour")
	require.NoError(t, err)
	require.Empty(t, got)
	require.EqualValues(t, 20, b.count(t,
		`SELECT count(fanout.publish('u', jsonb_build_object('n', g))) FROM generate_series(1, 20) g`))
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.alter_topic('u', completion => 'reference')`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.alter_topic('u', completion => 'offset')`)
	require.NoError(t, err)
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM fanout.topic
		WHERE topic = 'u' AND completion = 'offset' AND completion_switch_done_at IS NULL`), "the switch is in progress")
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM fanout.consumer_group WHERE bit_no IS NOT NULL`), "b keeps its bit meanwhile")

	require.EqualValues(t, 20, b.count(t, `SELECT lag_messages FROM fanout.groups WHERE topic = 'u' AND group_name = 'b'`))
	got, err = readMsgs(b.ctx, b.Pool, "u", &g, "x", 100, "1 hour")
	require.NoError(t, err)
	require.Len(t, got, 20, "the group reads what was published before the switch to reference")
}
