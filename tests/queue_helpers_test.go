package tests

// Helpers for the queue-topic tests (tests/queue_*_test.go). Names start
// with q so that they never collide with helpers of the pub/sub tests.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/testdb"
)

// qState is the SQLSTATE of err ("" when err is nil or not a PostgreSQL error).
func qState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// qPublishN publishes n messages {"n": from..from+n-1} with publish_batch in
// one statement and returns their ids in input order.
func (b *bundle) qPublishN(t *testing.T, q querier, topic string, from, n int) []int64 {
	t.Helper()
	rows, err := q.Query(b.ctx,
		`SELECT id FROM fanout.publish_batch($1,
		     ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series($2::int, $3::int) g ORDER BY g)) AS id`,
		topic, from, from+n-1)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, out, n)
	return out
}

// qNack nacks messages of a lease (ids nil = the whole lease).
func (b *bundle) qNack(t *testing.T, q querier, leaseID int64, ids []int64, retryIn *string, errText string) int {
	t.Helper()
	var n int
	require.NoError(t, q.QueryRow(b.ctx, "SELECT fanout.nack($1, $2, $3::interval, $4)",
		leaseID, ids, retryIn, errText).Scan(&n))
	return n
}

// qDrain reads and acks pages until two reads in a row come back empty and
// returns every message it got, in delivery order. Everything is acked under
// long leases, so a message delivered twice is a bug: it fails at once
// (instead of looping forever on a stream that keeps re-delivering).
func (b *bundle) qDrain(t *testing.T, q querier, topic, consumer string, max int) []msg {
	t.Helper()
	var out []msg
	seen := map[int64]bool{}
	empty := 0
	for empty < 2 {
		ms := b.read(t, q, topic, nil, consumer, max, "5 minutes")
		if len(ms) == 0 {
			empty++
			continue
		}
		empty = 0
		require.LessOrEqual(t, len(ms), max)
		for _, m := range ms {
			require.False(t, seen[m.MessageID], "a message was delivered twice")
			seen[m.MessageID] = true
		}
		require.Equal(t, len(ms), b.ack(t, q, ms[0].LeaseID, nil))
		out = append(out, ms...)
	}
	return out
}

// qWaitExpired waits (polling the server clock) until the lease has expired.
func (b *bundle) qWaitExpired(t *testing.T, leaseID int64) {
	t.Helper()
	for {
		var expired bool
		require.NoError(t, b.Pool.QueryRow(b.ctx,
			"SELECT expires_at <= clock_timestamp() FROM fanout.lease WHERE lease_id = fanout._lease_raw($1)", leaseID).Scan(&expired))
		if expired {
			return
		}
		select {
		case <-b.ctx.Done():
			t.Fatal("a lease did not expire before the test deadline")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// qMessageCount is the number of rows in a topic's message table.
func (b *bundle) qMessageCount(t *testing.T, topic string) int64 {
	t.Helper()
	var table string
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT data_table FROM fanout.topic WHERE topic = $1", topic).Scan(&table))
	var n int64
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		"SELECT count(*) FROM fanout_data."+pgx.Identifier{table}.Sanitize()).Scan(&n))
	return n
}

// qRole creates a login role that is a member of inRole ("" = of no role),
// with a name unique to this test (roles are cluster-wide), and returns it with a URL that logs in
// as it. The role is dropped when the test ends.
func (b *bundle) qRole(t *testing.T, inRole string) (string, string) {
	t.Helper()
	var r [5]byte
	_, _ = rand.Read(r[:])
	name := "pgq_test_" + hex.EncodeToString(r[:])
	sql := "CREATE ROLE " + pgx.Identifier{name}.Sanitize() + " LOGIN"
	if inRole != "" {
		sql += " IN ROLE " + pgx.Identifier{inRole}.Sanitize()
	}
	_, err := b.Pool.Exec(b.ctx, sql)
	require.NoError(t, err)
	t.Cleanup(func() {
		conn, err := pgx.Connect(b.ctx, b.Admin)
		if err != nil {
			t.Logf("drop role %s: %v", name, err)
			return
		}
		defer conn.Close(b.ctx)
		if _, err := conn.Exec(b.ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
			t.Logf("drop role %s: %v", name, err)
		}
	})
	return name, testdb.WithUser(b.URL, name)
}

// qConnAs opens a connection to the test database as user url (closed at
// the end of the test, before the role is dropped).
func (b *bundle) qConnAs(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(b.ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(b.ctx) })
	return conn
}

// qSorted returns a sorted copy.
func qSorted(xs []int64) []int64 {
	out := slices.Clone(xs)
	slices.Sort(out)
	return out
}

// qRequireUnique fails when xs holds a value twice.
func qRequireUnique(t *testing.T, xs []int64, what string) {
	t.Helper()
	s := qSorted(xs)
	for i := 1; i < len(s); i++ {
		if s[i] == s[i-1] {
			t.Fatalf("%s: a message appears twice", what)
		}
	}
}

// qSameSet asserts that got and want hold the same ids, each exactly once.
func qSameSet(t *testing.T, want, got []int64, what string) {
	t.Helper()
	qRequireUnique(t, got, what)
	require.Equal(t, len(want), len(got), "%s: count", what)
	require.True(t, slices.Equal(qSorted(want), qSorted(got)), "%s: the sets differ", what)
}
