package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// revokeAdvisoryLocks is the operator step of docs/security.md, "What it does not
// cover" (Advisory locks), quoted there verbatim.
const revokeAdvisoryLocks = `REVOKE EXECUTE ON FUNCTION
    pg_advisory_lock(bigint), pg_advisory_lock(int, int),
    pg_advisory_lock_shared(bigint), pg_advisory_lock_shared(int, int),
    pg_try_advisory_lock(bigint), pg_try_advisory_lock(int, int),
    pg_try_advisory_lock_shared(bigint), pg_try_advisory_lock_shared(int, int),
    pg_advisory_xact_lock(bigint), pg_advisory_xact_lock(int, int),
    pg_advisory_xact_lock_shared(bigint), pg_advisory_xact_lock_shared(int, int),
    pg_try_advisory_xact_lock(bigint), pg_try_advisory_xact_lock(int, int),
    pg_try_advisory_xact_lock_shared(bigint), pg_try_advisory_xact_lock_shared(int, int)
FROM PUBLIC;`

// pgq's functions serialise on advisory locks whose keys any role can
// compute from a topic's name (or a maintenance job's), and PostgreSQL lets
// every role take any advisory lock: a role without a single grant can stall
// another tenant's topic, or make maintenance skip its runs. The operator
// step in docs/security.md revokes the advisory-lock functions from PUBLIC (per
// database); pgq's functions run as their owner, so they keep working.
func TestTenantAdvisoryLocksRevoked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.tIsolate(t)
	b.createTopic(t, b.Pool, "b.q")
	_, stranger := b.tRole(t, "stranger", "")
	prodName, prod := b.tRole(t, "prod_b", "fanout_producer")
	b.tGrant(t, b.Pool, "b.%", prodName, "publish")
	consName, cons := b.tRole(t, "cons_b", "fanout_consumer")
	b.tGrant(t, b.Pool, "b.%", consName, "consume")
	useKeys := `SELECT count(pg_advisory_lock(hashtextextended('fanout.topic_use:' || 'b.q', 0) # k))
		FROM generate_series(0, 31) k`

	// Before: the stranger holds every "topic in use" key of b.q, and b's
	// own producer cannot publish.
	_, err := stranger.Exec(b.ctx, useKeys)
	require.NoError(t, err)
	_, err = prod.Exec(b.ctx, `SET lock_timeout = '300ms'`)
	require.NoError(t, err)
	_, err = prod.Exec(b.ctx, `SELECT fanout.publish('b.q', '{}')`)
	requireSQLState(t, err, "55P03")
	_, err = stranger.Exec(b.ctx, `SELECT pg_advisory_unlock_all()`)
	require.NoError(t, err)

	// The operator step, in this database.
	_, err = b.Pool.Exec(b.ctx, revokeAdvisoryLocks)
	require.NoError(t, err)
	_, err = stranger.Exec(b.ctx, useKeys)
	requireSQLState(t, err, "42501")
	_, err = stranger.Exec(b.ctx, `SELECT pg_try_advisory_lock(hashtextextended('fanout.maint:cleanup_partitions', 0))`)
	requireSQLState(t, err, "42501")
	_, err = stranger.Exec(b.ctx, `SELECT pg_advisory_xact_lock(1)`)
	requireSQLState(t, err, "42501")

	// pgq itself works as before: publish, read, ack, maintenance.
	var id int64
	require.NoError(t, prod.QueryRow(b.ctx, `SELECT fanout.publish('b.q', '{"n":1}')`).Scan(&id))
	ms := b.read(t, cons, "b.q", nil, "c", 10, "30 seconds")
	require.Equal(t, []int64{id}, ids(ms))
	b.ack(t, cons, ms[0].LeaseID, nil)
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.run_maintenance()`)
	require.NoError(t, err)

	readme, err := os.ReadFile(filepath.Join("..", "docs", "security.md"))
	require.NoError(t, err)
	require.True(t, strings.Contains(string(readme), "```sql\n"+revokeAdvisoryLocks+"\n```"),
		"docs/security.md must quote the statement this test runs")
}
