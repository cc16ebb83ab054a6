package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStaleIDAfterPlainRestart: a clean restart loses nothing, so
// every lease id handed out before it must keep working: the page still
// out is extended and acked by its holder, an earlier page's id settles
// nothing (0), and the slot's next page (the new epoch) is fenced from
// neither. Not parallel: it borrows FAILOVER_PORT under its own cluster name (as
// TestStaleAckAfterCrashRecovery) before the parallel tests start.
func TestStaleIDAfterPlainRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, admin := freshCluster(ctx, t, "crash26", failoverPort(t))
	u, err := freshDatabase(ctx, admin, "restart")
	require.NoError(t, err)
	db := connect(ctx, t, u)
	exec := mustExec(ctx, t)
	exec(db, `SELECT fanout.create_topic('q', max_attempts => 10)`)
	for i := 0; i < 4; i++ {
		exec(db, `SELECT fanout.publish('q', jsonb_build_object('tag', 'm', 'i', $1::int))`, i)
	}
	read := `SELECT lease_id, message_id, payload->>'tag' FROM fanout.read('q', consumer => 'w', max_messages => 2)`
	la, _ := readPage(ctx, t, db, read)
	exec(db, `SELECT fanout.ack($1)`, la)
	lb, mb := readPage(ctx, t, db, read)
	require.Len(t, mb, 2)
	require.Equal(t, rawLease(ctx, t, db, la)>>32, rawLease(ctx, t, db, lb)>>32, "the slot is reused")
	db.Close(context.Background())

	require.NoError(t, c.stop(ctx))
	_, err = c.start(ctx)
	require.NoError(t, err)
	require.NoError(t, waitReady(ctx, u, time.Minute))
	w := connect(ctx, t, u)
	var n int
	exec(w, `SELECT fanout.extend_lease($1, '1 minute')`, lb)
	require.NoError(t, w.QueryRow(ctx, `SELECT fanout.ack($1)`, lb).Scan(&n))
	require.Equal(t, 2, n, "the page out across the restart is acked by its holder")
	require.NoError(t, w.QueryRow(ctx, `SELECT fanout.ack($1)`, la).Scan(&n))
	require.Zero(t, n, "an earlier page settles nothing")
	for i := 0; i < 2; i++ {
		exec(w, `SELECT fanout.publish('q', jsonb_build_object('tag', 'n', 'i', $1::int))`, i)
	}
	lc, mc := readPage(ctx, t, w, read)
	require.Len(t, mc, 2)
	rb, rc := rawLease(ctx, t, w, lb), rawLease(ctx, t, w, lc)
	require.Equal(t, rb>>32, rc>>32, "the slot is reused after the restart")
	require.Equal(t, rb&0xFFFF+1, rc&0xFFFF)
	require.NoError(t, w.QueryRow(ctx, `SELECT fanout.ack($1)`, lb).Scan(&n))
	require.Zero(t, n, "the pre-restart page's id is an earlier page now")
	require.NoError(t, w.QueryRow(ctx, `SELECT fanout.ack($1)`, lc).Scan(&n))
	require.Equal(t, 2, n)
	require.NoError(t, w.QueryRow(ctx, `SELECT count(*) FROM fanout.check_consistency()`).Scan(&n))
	require.Zero(t, n)
}
