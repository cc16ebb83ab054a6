package chaos

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStaleAckAfterCrashRecovery: the lease epoch (fanout._epoch)
// is the WAL timeline and a hash of pg_postmaster_start_time(). A backend
// that dies by a signal (an OOM kill, a segfault) makes the postmaster
// reinitialise and replay the WAL without restarting itself: the timeline
// and the start time stay, so the epoch stays. With
// synchronous_commit = off (which docs/architecture.md names as covered:
// "a crash that loses committed transactions") the replay loses the last
// read, the same slot's same page goes out again under the very same lease
// id, and the stale worker's ack settles the new holder's page: messages
// never processed and never redelivered.
//
// Not parallel: it borrows TestStaleAckAfterAsyncFailover's primary port
// (FAILOVER_PORT) under its own cluster name, and is done (cluster
// destroyed) before the parallel tests start.
func TestStaleAckAfterCrashRecovery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	_, admin := freshCluster(ctx, t, "crash26", failoverPort(t))
	a := connect(ctx, t, admin)
	// Asynchronous commit, and a WAL writer that flushes only every 10 s,
	// so that a commit just before the crash is lost (as it is, by design,
	// with synchronous_commit = off).
	for _, sql := range []string{
		`ALTER SYSTEM SET synchronous_commit = off`, `ALTER SYSTEM SET wal_writer_delay = '10s'`,
		`ALTER SYSTEM SET autovacuum = off`, `SELECT pg_reload_conf()`,
	} {
		_, err := a.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	u, err := freshDatabase(ctx, admin, "crash")
	require.NoError(t, err)
	db := connect(ctx, t, u)
	exec := mustExec(ctx, t)
	// Everything up to the worker's read is durable (synchronous commits).
	exec(db, `SET synchronous_commit = on`)
	exec(db, `SELECT fanout.create_topic('q', max_attempts => 10)`)
	for i := 0; i < 3; i++ {
		exec(db, `SELECT fanout.publish('q', jsonb_build_object('tag', 'first', 'i', $1::int))`, i)
	}
	l0, _ := readPage(ctx, t, db, `SELECT lease_id, message_id, payload->>'tag' FROM fanout.read('q', consumer => 'w0')`)
	exec(db, `SELECT fanout.ack($1)`, l0)
	for i := 0; i < 3; i++ {
		exec(db, `SELECT fanout.publish('q', jsonb_build_object('tag', 'second', 'i', $1::int))`, i)
	}
	var epochBefore int
	require.NoError(t, db.QueryRow(ctx, `SELECT fanout._epoch()`).Scan(&epochBefore))

	w1 := connect(ctx, t, u)
	l1, m1 := readPage(ctx, t, w1, `SELECT lease_id, message_id, payload->>'tag' FROM fanout.read('q', consumer => 'w1')`)
	require.Len(t, m1, 3)
	// A backend dies: the postmaster resets shared memory and replays the
	// WAL. The epoch's incarnation part is a 10-bit hash: one crash in 1,024
	// keeps it (the documented limit), so the crash is repeated, at most
	// twice more, until it changed; every crash after the first loses nothing.
	var epochAfter int
	for attempt := 0; attempt < 3; attempt++ {
		victim := connect(ctx, t, u)
		var pid int
		require.NoError(t, victim.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		require.Eventually(t, func() bool {
			var one int
			return db.QueryRow(ctx, `SELECT 1`).Scan(&one) != nil // the old sessions were terminated
		}, time.Minute, 50*time.Millisecond)
		require.NoError(t, waitReady(ctx, u, time.Minute))
		db = connect(ctx, t, u)
		require.NoError(t, db.QueryRow(ctx, `SELECT fanout._epoch()`).Scan(&epochAfter))
		if epochAfter != epochBefore {
			break
		}
	}
	require.NotEqual(t, epochBefore, epochAfter, "three crash recoveries kept the epoch")

	w2 := connect(ctx, t, u)
	l2, m2 := readPage(ctx, t, w2, `SELECT lease_id, message_id, payload->>'tag' FROM fanout.read('q', consumer => 'w2')`)
	// The hazard is real: the read was lost, and the same slot's same page
	// went out again with the same messages.
	r1, r2 := rawLease(ctx, t, w2, l1), rawLease(ctx, t, w2, l2)
	require.Equal(t, r1>>32, r2>>32, "the lost page's slot is reused")
	require.Equal(t, r1&0xFFFF, r2&0xFFFF, "the lost page's number is handed out again")
	require.Equal(t, m1, m2)
	t.Logf("epoch before %d, after %d; lost lease %d, new lease %d", epochBefore, epochAfter, l1, l2)
	assert.NotEqual(t, l1, l2, "the page that went out again must have another lease id than the lost one")

	stale := connect(ctx, t, u)
	requireCode(ctx, t, stale, "PGQ11", `SELECT fanout.ack($1)`, l1)
	var n int
	require.NoError(t, w2.QueryRow(ctx, `SELECT fanout.ack($1)`, l2).Scan(&n))
	require.Equal(t, 3, n, "the new holder settles its whole page")
}
