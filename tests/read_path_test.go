package tests

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A session peeks (fanout._group_idle, an unread scan) before it locks the
// group only when its previous read of that group found nothing. Before, a
// session that had never found the group idle had no hint at all (NULL), and
// NULL made every one of its reads peek first.
func TestReadPeeksOnlyAfterAnEmptyRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "peek")
	for i := 0; i < 3; i++ {
		b.publish(t, b.Pool, "peek", `{}`)
	}
	conn := b.Conn(t)
	// Calls of fanout._group_idle by one read, in its own transaction.
	peeks := func(wantMsgs int) int64 {
		t.Helper()
		tx, err := conn.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(b.ctx) }()
		_, err = tx.Exec(b.ctx, "SET LOCAL track_functions = 'pl'")
		require.NoError(t, err)
		require.Len(t, b.read(t, tx, "peek", nil, "c", 1, "1 minute"), wantMsgs)
		var n int64
		require.NoError(t, tx.QueryRow(b.ctx,
			"SELECT coalesce(pg_stat_get_xact_function_calls('fanout._group_idle(fanout.topic, text, timestamptz)'::regprocedure), 0)").
			Scan(&n))
		require.NoError(t, tx.Commit(b.ctx))
		return n
	}
	require.Zero(t, peeks(1), "a fresh session with a backlog does not peek")
	require.Zero(t, peeks(1), "nor does a busy one")
	require.Zero(t, peeks(1))
	require.Zero(t, peeks(0), "the read that finds nothing did not peek either")
	require.Equal(t, int64(1), peeks(0), "after an empty read the next one peeks")
}

// The page's byte budget: the page stops before the message that would
// exceed max_bytes; the first message of a page always comes. The cut runs
// only when the page's total exceeds the budget (fanout._page_fit).
func TestPageFit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct {
		sizes  string
		budget int64
		first  bool
		want   int
	}{
		{"{10,10,10}", 30, false, 3},
		{"{10,10,10}", 29, false, 2},
		{"{10,10,10}", 5, true, 1},
		{"{10,10,10}", 5, false, 0},
		{"{10,10,10}", -20, false, 0},
		{"{}", 5, true, 0},
		{"{40,1,1}", 10, true, 1},
	} {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout._page_fit($1::int[], $2, $3)", c.sizes, c.budget, c.first).Scan(&n))
		require.Equal(t, c.want, n, "%s budget %d first %v", c.sizes, c.budget, c.first)
	}
}
