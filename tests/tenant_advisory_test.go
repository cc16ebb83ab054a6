package tests

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// formerAdvisoryKeys is every advisory-lock key pgq's functions used to
// take (before they moved to row and relation locks no tenant can take),
// as SQL expressions: the 32 "topic in use" keys of each topic name, the
// create key of each name, the subscribe key of each (topic id, group), the
// reconcile key of each topic id, the key of each maintenance function.
func formerAdvisoryKeys(names []string, maxTopicID int, groups []string) []string {
	var keys []string
	for _, n := range names {
		lit := "'" + strings.ReplaceAll(n, "'", "''") + "'"
		keys = append(keys, fmt.Sprintf("hashtextextended('fanout.topic:' || %s, 0)", lit))
		for k := 0; k < 32; k++ {
			keys = append(keys, fmt.Sprintf("(hashtextextended('fanout.topic_use:' || %s, 0) # %d)", lit, k))
		}
	}
	for id := 1; id <= maxTopicID; id++ {
		keys = append(keys, fmt.Sprintf("hashtextextended('fanout.reconcile:%d', 0)", id))
		for _, g := range groups {
			keys = append(keys, fmt.Sprintf("hashtextextended('fanout.group:%d:%s', 0)", id, g))
		}
	}
	for _, f := range []string{"cleanup_bookkeeping", "cleanup_groups", "cleanup_partitions", "detect_dead_groups",
		"manage_partitions", "refresh_topic_state", "sequence_gap_alerts", "measure_usage"} {
		keys = append(keys, fmt.Sprintf("hashtextextended('fanout.maint:%s', 0)", f))
	}
	return keys
}

// A role without a single grant (and no fanout group role) takes, in its
// session, every advisory-lock key pgq's functions ever derived, in the
// bigint form and in the (int, int) form of the same 64 bits, and keeps
// them while another tenant works: create_topic, subscribe, publish, read,
// heartbeat, ack, drop_topic and a full maintenance round all complete
// (each victim connection has a lock_timeout, so a wait would fail it with
// 55P03), maintenance does its work instead of passing its turn, and no
// pgq call takes an advisory lock at all. The install needs no operator
// step for this (the advisory-lock functions stay granted to PUBLIC).
func TestTenantAdvisoryKeysStallNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.tIsolate(t)
	admName, adm := b.tRole(t, "adm_b", "fanout_admin")
	b.tGrant(t, b.Pool, "b.%", admName, "admin")
	prodName, prod := b.tRole(t, "prod_b", "fanout_producer")
	b.tGrant(t, b.Pool, "b.%", prodName, "publish")
	consName, cons := b.tRole(t, "cons_b", "fanout_consumer")
	b.tGrant(t, b.Pool, "b.%", consName, "consume")
	_, stranger := b.tRole(t, "stranger", "")

	b.createTopic(t, adm, "b.q")
	b.createTopic(t, adm, "b.ref", "semantics => 'pubsub'", "completion => 'reference'")
	_, err := cons.Exec(b.ctx, `SELECT fanout.subscribe('b.ref', 'g0', 'latest')`)
	require.NoError(t, err)

	// The stranger takes every key (session locks: held until it unlocks).
	keys := formerAdvisoryKeys([]string{"b.q", "b.ref", "b.new", "b.drop"}, 64, []string{"g0", "g1", "g2"})
	var held int
	for i := 0; i < len(keys); i += 200 {
		end := min(i+200, len(keys))
		var sb strings.Builder
		sb.WriteString("SELECT count(*) FROM (VALUES ")
		for j, k := range keys[i:end] {
			if j > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString("(" + k + ")")
		}
		sb.WriteString(`) v(k), LATERAL (SELECT pg_advisory_lock(v.k),
			pg_advisory_lock((v.k >> 32)::int, (v.k & 4294967295)::bit(32)::int)) l`)
		var n int
		require.NoError(t, stranger.QueryRow(b.ctx, sb.String()).Scan(&n))
		held += 2 * n
	}
	var inLocks int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND a.usename = $1`, b.DBName+"_stranger").Scan(&inLocks))
	require.Equal(t, held, inLocks, "the stranger holds every key, both forms")
	t.Logf("stranger holds %d advisory keys (%d derived keys x 2 forms)", held, len(keys))

	victims := []*pgx.Conn{adm, prod, cons}
	for _, c := range victims {
		_, err := c.Exec(b.ctx, `SET lock_timeout = '3s'`)
		require.NoError(t, err)
	}
	// noAdvisory runs f in a transaction on c and checks that pgq took no
	// advisory lock in it.
	noAdvisory := func(c *pgx.Conn, what string, f func(tx pgx.Tx)) {
		t.Helper()
		tx, err := c.Begin(b.ctx)
		require.NoError(t, err)
		defer tx.Rollback(b.ctx) //nolint:errcheck
		f(tx)
		var n int
		require.NoError(t, tx.QueryRow(b.ctx,
			`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&n))
		require.Zero(t, n, "%s took advisory locks", what)
		require.NoError(t, tx.Commit(b.ctx), what)
	}

	noAdvisory(adm, "create_topic", func(tx pgx.Tx) {
		b.createTopic(t, tx, "b.new", "semantics => 'pubsub'")
		b.createTopic(t, tx, "b.drop")
	})
	noAdvisory(cons, "subscribe", func(tx pgx.Tx) {
		for _, g := range []string{"g1", "g2"} {
			_, err := tx.Exec(b.ctx, `SELECT fanout.subscribe('b.new', $1, 'earliest')`, g)
			require.NoError(t, err, "subscribe %s", g)
		}
		_, err := tx.Exec(b.ctx, `SELECT fanout.subscribe('b.ref', 'g1', 'earliest')`)
		require.NoError(t, err)
	})
	var pub []int64
	noAdvisory(prod, "publish", func(tx pgx.Tx) {
		for _, topic := range []string{"b.q", "b.new", "b.ref", "b.drop"} {
			pub = append(pub, b.publish(t, tx, topic, `{"n":1}`))
		}
		_, err := tx.Exec(b.ctx, `SELECT fanout.publish_batch('b.q', ARRAY['{}'::jsonb, '{}'])`)
		require.NoError(t, err)
	})
	noAdvisory(cons, "read, heartbeat and ack", func(tx pgx.Tx) {
		ms := b.read(t, tx, "b.q", nil, "c1", 10, "30 seconds")
		require.Len(t, ms, 3)
		b.ack(t, tx, ms[0].LeaseID, nil)
		ms = b.read(t, tx, "b.new", ptr("g1"), "c1", 10, "30 seconds")
		require.Equal(t, []int64{pub[1]}, ids(ms))
		b.ack(t, tx, ms[0].LeaseID, nil)
		ms = b.read(t, tx, "b.ref", ptr("g0"), "c1", 10, "30 seconds")
		require.Equal(t, []int64{pub[2]}, ids(ms))
		b.ack(t, tx, ms[0].LeaseID, nil)
		_, err := tx.Exec(b.ctx, `SELECT fanout.heartbeat('b.new', 'g2', 'c2')`)
		require.NoError(t, err)
	})
	noAdvisory(adm, "drop_topic", func(tx pgx.Tx) {
		_, err := tx.Exec(b.ctx, `SELECT fanout.drop_topic('b.drop', force => true)`)
		require.NoError(t, err)
	})

	// Maintenance: each function does its work instead of passing its turn
	// (the functions returned 0 at once while their key was held).
	owner, err := b.Pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer owner.Release()
	_, err = owner.Exec(b.ctx, `SET lock_timeout = '3s'`)
	require.NoError(t, err)
	tx, err := owner.Begin(b.ctx)
	require.NoError(t, err)
	var parts int
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT fanout._manage_partitions()`).Scan(&parts))
	require.Positive(t, parts, "_manage_partitions made the new topics' next partitions")
	var n int
	require.NoError(t, tx.QueryRow(b.ctx,
		`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&n))
	require.Zero(t, n)
	require.NoError(t, tx.Commit(b.ctx))
	// Every maintenance function takes its lock row (it would return 0
	// without working if it could not).
	for _, f := range []string{"cleanup_bookkeeping", "cleanup_groups", "cleanup_partitions", "detect_dead_groups",
		"manage_partitions", "refresh_topic_state", "sequence_gap_alerts", "measure_usage"} {
		tx, err := owner.Begin(b.ctx)
		require.NoError(t, err)
		_, err = tx.Exec(b.ctx, fmt.Sprintf(`SELECT fanout._%s()`, f))
		require.NoError(t, err, f)
		var mine bool
		// Held by this transaction: another one cannot take it.
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT NOT EXISTS (SELECT 1 FROM fanout.lock_row
			WHERE name = $1 FOR UPDATE SKIP LOCKED)`, "maint:"+f).Scan(&mine))
		require.True(t, mine, "%s holds its lock row", f)
		require.NoError(t, tx.Rollback(b.ctx))
	}
	var total int64
	require.NoError(t, owner.QueryRow(b.ctx, `SELECT fanout.run_maintenance()`).Scan(&total))
	require.NoError(t, owner.QueryRow(b.ctx, `SELECT count(*) FROM fanout.maint_skips()`).Scan(&n))
	require.Zero(t, n, "maintenance passed no topic by")

	// The stranger still holds them all.
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND a.usename = $1`, b.DBName+"_stranger").Scan(&inLocks))
	require.Equal(t, held, inLocks)
}
