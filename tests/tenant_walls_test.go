package tests

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A tenant admin with a grant on 'acme%' must not widen
// its reach to another tenant's 'acmé.%' by typing the pattern decomposed
// (E'acme\u0301.%' starts with 'acme' as typed, but is stored and matched as
// 'acmé.%'), nor revoke that tenant's grant the same way. Hostile roles on
// their own connections.
func TestTenantWallsUnicodeGrantEscalation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.tIsolate(t)
	aName, a := b.tRole(t, "uni_a", "fanout_admin")
	bName, bc := b.tRole(t, "uni_b", "fanout_admin")
	b.tGrant(t, b.Pool, "acme%", aName, "admin")
	b.tGrant(t, b.Pool, "acm\u00e9.%", bName, "admin")
	b.createTopic(t, bc, "acm\u00e9.orders")
	b.publish(t, bc, "acm\u00e9.orders", `{"secret":1}`)

	// The exploit of the issue: both calls are refused.
	_, err := a.Exec(b.ctx, "SELECT fanout.grant_topic($1, $2::regrole, 'admin')", "acme\u0301.%", aName)
	requireSQLState(t, err, "PGQ21")
	_, err = a.Exec(b.ctx, "SELECT fanout.grant_topic($1, $2::regrole, 'consume')", "acme\u0301.orders", aName)
	requireSQLState(t, err, "PGQ21")
	_, err = a.Exec(b.ctx, "SELECT fanout.revoke_topic($1, $2::regrole, 'admin')", "acme\u0301.%", bName)
	requireSQLState(t, err, "PGQ21")

	var grants []string
	rows, err := b.Pool.Query(b.ctx, "SELECT pattern || ' ' || role::text || ' ' || privilege FROM fanout.topic_grant ORDER BY 1")
	require.NoError(t, err)
	for rows.Next() {
		var g string
		require.NoError(t, rows.Scan(&g))
		grants = append(grants, g)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"acme% " + aName + " admin", "acm\u00e9.% " + bName + " admin"}, grants,
		"tenant a neither gained a grant on b's prefix nor removed b's")

	// Tenant a still cannot reach b's topic under either spelling.
	for _, name := range []string{"acm\u00e9.orders", "acme\u0301.orders"} {
		_, err = readMsgs(b.ctx, a, name, nil, "", 10, "1 minute")
		requireSQLState(t, err, "PGQ21")
		_, err = a.Exec(b.ctx, "SELECT fanout.drop_topic($1, force => true)", name)
		requireSQLState(t, err, "PGQ21")
	}
	// Tenant b administers its own prefix in either spelling (one grant).
	var added bool
	require.NoError(t, bc.QueryRow(b.ctx, "SELECT fanout.grant_topic($1, $2::regrole, 'consume')",
		"acme\u0301.orders", bName).Scan(&added))
	require.True(t, added)
	require.NoError(t, bc.QueryRow(b.ctx, "SELECT fanout.grant_topic($1, $2::regrole, 'consume')",
		"acm\u00e9.orders", bName).Scan(&added))
	require.False(t, added, "one grant, whichever spelling")
	require.NoError(t, bc.QueryRow(b.ctx, "SELECT fanout.revoke_topic($1, $2::regrole, 'consume')",
		"acm\u00e9.orders", bName).Scan(&added))
	require.True(t, added)
}

// Lengths are counted in NFC, the form names are stored
// in. 512 x U+1D160 is 1,536 characters in NFC: refused (it was stored as a
// 1,536-character topic). 400 x 'e' + U+0301 is 800 characters as typed and
// 400 in NFC: accepted, as the 400-character name it is.
func TestTenantWallsNameLengthAfterNFC(t *testing.T) {
	t.Parallel()
	b := setup(t)
	long := strings.Repeat("\U0001D160", 512)
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.create_topic($1)", long)
	requireSQLState(t, err, "PGQ04")
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.grant_topic($1, 'fanout_admin', 'admin')", long)
	requireSQLState(t, err, "PGQ04")
	b.createTopic(t, b.Pool, "t", "semantics => 'pubsub'")
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.subscribe('t', $1)", long)
	requireSQLState(t, err, "PGQ04")

	decomposed := strings.Repeat("e\u0301", 400)
	b.createTopic(t, b.Pool, decomposed)
	var n int
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT char_length(topic) FROM fanout.topic WHERE topic = $1",
		strings.Repeat("\u00e9", 400)).Scan(&n))
	require.Equal(t, 400, n)
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.subscribe('t', $1)", decomposed)
	require.NoError(t, err)
	var max int
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT max(char_length(topic)) FROM fanout.topic").Scan(&max))
	require.LessOrEqual(t, max, 512)
}

// A tenant that leaves a drop_topic of its own topic open
// in a transaction must not stall partition maintenance of every other
// tenant. The maintenance round passes the held topic by (counted in
// fanout.maint_skips()), creates the other topics' partitions, and gets the
// held topic's done once the tenant lets go.
func TestTenantWallsMaintenanceNeverWaitsForATenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.tIsolate(t)
	aName, a := b.tRole(t, "hold_a", "fanout_admin")
	b.tGrant(t, b.Pool, "ta.%", aName, "admin")
	b.createTopic(t, a, "ta.hold", "semantics => 'pubsub'", "zombie_ttl => '1 second'")
	// A settled lease slot and a cancelled group: rows the drop below holds
	// and the cleanups would delete.
	_, err := a.Exec(b.ctx, "SELECT fanout.subscribe('ta.hold', 'g')")
	require.NoError(t, err)
	b.publish(t, a, "ta.hold", `{}`)
	ms := b.read(t, a, "ta.hold", ptr("g"), "c", 10, "1 minute")
	require.Len(t, ms, 1)
	require.Equal(t, 1, b.ack(t, a, ms[0].LeaseID, ids(ms)))
	_, err = a.Exec(b.ctx, "SELECT fanout.unsubscribe('ta.hold', 'g')")
	require.NoError(t, err)
	b.createTopic(t, b.Pool, "tb.new")
	b.createTopic(t, b.Pool, "tc.new", "completion => 'reference'", "semantics => 'pubsub'")
	parts := func(topic string) int {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*) FROM fanout.partition p JOIN fanout.topic t USING (topic_id)
		                                           WHERE t.topic = $1`, topic).Scan(&n))
		return n
	}
	require.Equal(t, 1, parts("tb.new"), "a new topic waits for maintenance for its partition ahead")

	tx, err := a.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx) //nolint:errcheck // rolled back below; no-op then
	_, err = tx.Exec(b.ctx, "SELECT fanout.drop_topic('ta.hold', force => true)")
	require.NoError(t, err)

	// Another connection, as the sidecar or pg_cron would run it. The
	// statement_timeout only turns a stall into an error instead of a hang.
	m, err := b.Pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer m.Release()
	_, err = m.Exec(b.ctx, "SET statement_timeout = '60s'")
	require.NoError(t, err)
	for _, call := range []string{
		"SELECT fanout._manage_partitions()", "SELECT fanout.run_maintenance()",
		// The other maintenance functions, with a clock far enough ahead to
		// want the held topic's cancelled group and settled lease slot.
		"SELECT fanout._cleanup_groups(now() + interval '1 minute')",
		"SELECT fanout._cleanup_bookkeeping(now() + interval '2 hours')",
		"SELECT fanout._refresh_topic_state()", "SELECT fanout._detect_dead_groups()",
	} {
		_, err = m.Exec(b.ctx, call)
		require.NoError(t, err, "%s must not wait for the tenant's open drop_topic", call)
	}
	require.Equal(t, 2, parts("tb.new"), "the other tenants' topics got their partition ahead")
	require.Equal(t, 2, parts("tc.new"))

	var topic, fn string
	var skips int64
	require.NoError(t, m.QueryRow(b.ctx, "SELECT func, topic, skips FROM fanout.maint_skips()").Scan(&fn, &topic, &skips))
	require.Equal(t, "fanout._manage_partitions", fn)
	require.Equal(t, "ta.hold", topic)
	require.GreaterOrEqual(t, skips, int64(2), "each call that passed it by is counted")

	// The tenant gives up: the next round does the held topic and forgets it.
	require.NoError(t, tx.Rollback(b.ctx))
	// What the cleanups passed by was theirs to do: they do it now.
	var n int
	require.NoError(t, m.QueryRow(b.ctx, "SELECT fanout._cleanup_groups(now() + interval '1 minute')").Scan(&n))
	require.Equal(t, 1, n, "the held topic's cancelled group")
	require.NoError(t, m.QueryRow(b.ctx, "SELECT fanout._cleanup_bookkeeping(now() + interval '2 hours')").Scan(&n))
	require.Zero(t, b.count(t, "SELECT count(*) FROM fanout.lease"), "the held topic's settled lease slot")
	// A tenant's admin grant is not enough to see other tenants' skips.
	_, err = a.Exec(b.ctx, "SELECT * FROM fanout.maint_skips()")
	requireSQLState(t, err, "PGQ21")
	_, err = m.Exec(b.ctx, "SELECT fanout.run_maintenance()")
	require.NoError(t, err)
	require.Equal(t, 2, parts("ta.hold"))
	var left int
	require.NoError(t, m.QueryRow(b.ctx, "SELECT count(*) FROM fanout.maint_skips()").Scan(&left))
	require.Zero(t, left)
}

// Log_action bounds and validates its input like every
// other name (it took a 100,000-character group name, a 4 MB detail and any
// actor), and the audit row says which part is claimed by the caller: a
// tenant admin cannot pass itself off as another role.
func TestTenantWallsLogActionBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.tIsolate(t)
	aName, a := b.tRole(t, "log_a", "fanout_admin")
	b.tGrant(t, b.Pool, "ta.%", aName, "admin")
	b.createTopic(t, a, "ta.t")
	bad := []struct {
		group, kind, detail string
		count               int64
		code                string
	}{
		{strings.Repeat("g", 100000), "console_x", `{}`, 0, "PGQ04"},
		{"g\x01", "console_x", `{}`, 0, "PGQ04"},
		{"g", "console_x", `{"blob":"` + strings.Repeat("x", 4<<20) + `"}`, 0, "PGQ03"},
		{"g", "console_x", `[1, 2]`, 0, "PGQ03"},
		{"g", "console_x", `{"actor":"root\u0007"}`, 0, "PGQ04"},
		{"g", "console_x", `{"actor":"` + strings.Repeat("r", 600) + `"}`, 0, "PGQ04"},
		{"g", "console_x", `{"actor":{"name":"root"}}`, 0, "PGQ03"},
		{"g", "console_x", `{}`, -1, "PGQ03"},
		{"g", strings.Repeat("k", 100000), `{}`, 0, "PGQ03"},
	}
	for _, c := range bad {
		_, err := a.Exec(b.ctx, "SELECT fanout.log_action('ta.t', $1, $2, $3, $4::jsonb)", c.group, c.kind, c.count, c.detail)
		requireSQLState(t, err, c.code)
	}
	_, err := a.Exec(b.ctx, "SELECT fanout.log_action($1, NULL, 'console_x')", strings.Repeat("t", 600))
	requireSQLState(t, err, "PGQ04")
	var n int
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT count(*) FROM fanout.event_log WHERE kind = 'console_x'").Scan(&n))
	require.Zero(t, n, "nothing recorded")

	var id int64
	require.NoError(t, a.QueryRow(b.ctx, `SELECT fanout.log_action($1, $2, 'console_x', 1, '{"actor":"root","role":"postgres"}')`,
		"ta.t", "e\u0301").Scan(&id))
	var group, actor, role string
	var verified bool
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT group_name, detail->>'actor', (detail->'actor_verified')::boolean, detail->>'role'
	                                           FROM fanout.event_log WHERE event_id = $1`, id).Scan(&group, &actor, &verified, &role))
	require.Equal(t, "\u00e9", group, "stored in NFC")
	require.Equal(t, "root", actor)
	require.False(t, verified, "the actor is what the caller claims")
	require.Equal(t, aName, role, "the role is the caller's, whatever detail said")
}
