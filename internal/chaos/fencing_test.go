package chaos

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/testdb"
)

// failoverPort is the first of the two ports of TestStaleAckAfterAsyncFailover:
// PGQ_TEST_FAILOVER_PORT (make test sets it from FAILOVER_PORT, TEST_PORT +
// 13), 25446 when unset; the standby runs on the next one.
func failoverPort(t *testing.T) int {
	if p := os.Getenv("PGQ_TEST_FAILOVER_PORT"); p != "" {
		n, err := strconv.Atoi(p)
		require.NoError(t, err, "PGQ_TEST_FAILOVER_PORT")
		return n
	}
	return 25446
}

// TestStaleAckAfterAsyncFailover: a worker holds a page of an asynchronous
// primary that is lost in a failover. The promoted standby never saw that
// read (nor the messages published after its WAL receiver stopped), so it
// hands the same slot's same page number out again, with message ids
// re-issued to new messages. The stale worker's ack, nack and extension
// must be fenced (PGQ11) and settle nothing; the new holder gets and settles
// every message. On a queue topic and on a key partition of a pubsub topic.
// Before the epoch in lease ids the stale ack returned 6 and settled the new
// holder's page (messages never processed, never redelivered).
func TestStaleAckAfterAsyncFailover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	port := failoverPort(t)
	primary, adminP := freshCluster(ctx, t, "fence-p", port)
	standby := &cluster{root: primary.root, name: "fence-s", port: port + 1}
	require.NoError(t, standby.destroy(ctx))
	t.Cleanup(func() { _ = standby.destroy(context.Background()) })
	u, err := freshDatabase(ctx, adminP, "fence")
	require.NoError(t, err)
	db := connect(ctx, t, u)
	exec := mustExec(ctx, t)
	exec(db, `SELECT fanout.create_topic('q', max_attempts => 10)`)
	exec(db, `SELECT fanout.create_topic('k', semantics => 'pubsub', partitions => 2, max_attempts => 10)`)
	exec(db, `SELECT fanout.subscribe('k', 'g')`)
	var kp int
	require.NoError(t, db.QueryRow(ctx, `SELECT fanout.partition_of('k', 'a')`).Scan(&kp))
	// Each slot has handed out and settled a page before the base backup,
	// so the lost page is the slot's second (the slot row itself survives).
	publish := func(c *pgx.Conn, n int, tag string) {
		t.Helper()
		for i := 0; i < n; i++ {
			exec(c, `SELECT fanout.publish('q', jsonb_build_object('tag', $1::text, 'i', $2::int))`, tag, i)
			exec(c, `SELECT fanout.publish('k', jsonb_build_object('tag', $1::text, 'i', $2::int), message_group => 'a')`, tag, i)
		}
	}
	readQ := func(c *pgx.Conn, consumer string) (int64, map[int64]string) {
		return readPage(ctx, t, c, `SELECT lease_id, message_id, payload->>'tag' FROM fanout.read('q', consumer => $1)`, consumer)
	}
	readK := func(c *pgx.Conn) (int64, map[int64]string) {
		return readPage(ctx, t, c, `SELECT lease_id, message_id, payload->>'tag' FROM fanout.read('k', 'g', partition => $1)`, kp)
	}
	publish(db, 1, "before")
	l0, _ := readQ(db, "w0")
	exec(db, `SELECT fanout.ack($1)`, l0)
	lk0, _ := readK(db)
	exec(db, `SELECT fanout.ack($1)`, lk0)
	publish(db, 3, "replicated")

	adminS, err := standby.standbyOf(ctx, primary)
	require.NoError(t, err)
	su := testdb.WithDatabase(adminS, "fence")
	waitReplayed(ctx, t, db, su)
	require.NoError(t, standby.stop(ctx)) // the WAL receiver is gone: what follows is lost

	publish(db, 3, "lost")
	w1 := connect(ctx, t, u)
	lq1, q1 := readQ(w1, "w1")
	lk1, k1 := readK(w1)
	require.Len(t, q1, 6)
	require.Len(t, k1, 6)
	require.NoError(t, primary.crash(ctx))
	w1.Close(context.Background())

	_, err = standby.start(ctx)
	require.NoError(t, err)
	require.NoError(t, standby.promote(ctx))
	require.NoError(t, waitReady(ctx, su, time.Minute))
	db2 := connect(ctx, t, su)
	publish(db2, 3, "after")
	w2 := connect(ctx, t, su)
	lq2, q2 := readQ(w2, "w2")
	lk2, k2 := readK(w2)
	require.Len(t, q2, 6)
	require.Len(t, k2, 6)
	// The hazard is real: the same slot's same page went out again, and
	// message ids were re-issued to other messages.
	rq1, rq2 := rawLease(ctx, t, w2, lq1), rawLease(ctx, t, w2, lq2)
	require.Equal(t, rq1>>32, rq2>>32, "the lost page's slot is reused")
	require.Equal(t, rq1&0xFFFF, rq2&0xFFFF, "the lost page's number is handed out again")
	require.NotEqual(t, lq1, lq2, "but under another lease id")
	require.NotEqual(t, lk1, lk2)
	reissued := 0
	for id, tag := range q2 {
		if old, ok := q1[id]; ok && old != tag {
			reissued++
		}
	}
	require.Equal(t, 3, reissued, "ids of the lost messages were re-issued: %v / %v", q1, q2)

	// The stale worker, reconnected to the new primary, is fenced everywhere.
	stale := connect(ctx, t, su)
	for _, sql := range []string{
		`SELECT fanout.ack($1)`, `SELECT fanout.nack($1)`, `SELECT fanout.extend_lease($1, '1 minute')`,
	} {
		for _, l := range []int64{lq1, lk1} {
			requireCode(ctx, t, stale, "PGQ11", sql, l)
		}
	}
	var ids []int64
	for id := range q1 {
		ids = append(ids, id)
	}
	requireCode(ctx, t, stale, "PGQ11", `SELECT fanout.ack($1, $2)`, lq1, ids)

	var n int
	require.NoError(t, w2.QueryRow(ctx, `SELECT fanout.ack($1)`, lq2).Scan(&n))
	require.Equal(t, 6, n, "the new holder settles its whole page")
	require.NoError(t, w2.QueryRow(ctx, `SELECT fanout.ack($1)`, lk2).Scan(&n))
	require.Equal(t, 6, n)
	require.NoError(t, db2.QueryRow(ctx, `SELECT count(*) FROM fanout.read('q', consumer => 'w3')`).Scan(&n))
	require.Zero(t, n, "nothing left over")
	require.NoError(t, db2.QueryRow(ctx, `SELECT count(*) FROM fanout.check_consistency()`).Scan(&n))
	require.Zero(t, n)
}

// freshCluster destroys and starts the throwaway cluster name on port (it is
// destroyed again when the test ends) and returns it and its admin URL.
func freshCluster(ctx context.Context, t *testing.T, name string, port int) (*cluster, string) {
	t.Helper()
	root, err := repoRoot()
	require.NoError(t, err)
	c := &cluster{root: root, name: name, port: port}
	require.NoError(t, c.destroy(ctx))
	t.Cleanup(func() { _ = c.destroy(context.Background()) })
	admin, err := c.start(ctx)
	require.NoError(t, err)
	return c, admin
}

// mustExec runs SQL on a connection, failing the test on an error.
func mustExec(ctx context.Context, t *testing.T) func(c *pgx.Conn, sql string, args ...any) {
	return func(c *pgx.Conn, sql string, args ...any) {
		t.Helper()
		_, err := c.Exec(ctx, sql, args...)
		require.NoError(t, err, sql)
	}
}

func connect(ctx context.Context, t *testing.T, u string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// rawLease is the internal id (slot * 2^32 + epoch * 2^16 + page) of a lease
// id read returned (fanout._lease_code), for the checks of which slot and
// page a read reused.
func rawLease(ctx context.Context, t *testing.T, c *pgx.Conn, id int64) int64 {
	t.Helper()
	var raw int64
	require.NoError(t, c.QueryRow(ctx, `SELECT fanout._lease_raw($1)`, id).Scan(&raw))
	return raw
}

// readPage runs a read and returns its lease id and message id -> tag.
func readPage(ctx context.Context, t *testing.T, c *pgx.Conn, sql string, args ...any) (int64, map[int64]string) {
	t.Helper()
	rows, err := c.Query(ctx, sql, args...)
	require.NoError(t, err)
	var lease int64
	got := map[int64]string{}
	for rows.Next() {
		var id int64
		var tag string
		require.NoError(t, rows.Scan(&lease, &id, &tag))
		got[id] = tag
	}
	require.NoError(t, rows.Err())
	require.NotZero(t, lease, "a page was handed out")
	return lease, got
}

func requireCode(ctx context.Context, t *testing.T, c *pgx.Conn, code, sql string, args ...any) {
	t.Helper()
	_, err := c.Exec(ctx, sql, args...)
	var pe *pgconn.PgError
	require.True(t, errors.As(err, &pe), "%s %v: want %s, got %v", sql, args, code, err)
	require.Equal(t, code, pe.Code, "%s %v: %s", sql, args, pe.Message)
}

// waitReplayed waits until the standby has replayed the primary's WAL up to
// now.
func waitReplayed(ctx context.Context, t *testing.T, primary *pgx.Conn, standbyURL string) {
	t.Helper()
	var lsn string
	require.NoError(t, primary.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn))
	require.Eventually(t, func() bool {
		c, err := pgx.Connect(ctx, standbyURL)
		if err != nil {
			return false
		}
		defer c.Close(context.Background())
		var ok bool
		err = c.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, lsn).Scan(&ok)
		return err == nil && ok
	}, time.Minute, 100*time.Millisecond)
}
