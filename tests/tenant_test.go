package tests

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/testdb"
)

// tRole creates a login role named after the test database (roles are
// cluster-wide, so the prefix keeps parallel tests apart), member of inRole
// ("" = of none), dropped when the test ends; it returns the name and a
// connection logged in as it (closed before the role is dropped).
func (b *bundle) tRole(t *testing.T, suffix, inRole string) (string, *pgx.Conn) {
	t.Helper()
	name := b.DBName + "_" + suffix
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
	return name, b.qConnAs(t, testdb.WithUser(b.URL, name))
}

// tIsolate revokes the install's grants on '%' (what an operator does to
// turn tenant isolation on).
func (b *bundle) tIsolate(t *testing.T) {
	t.Helper()
	for _, g := range [][2]string{{"fanout_producer", "publish"}, {"fanout_consumer", "consume"}, {"fanout_admin", "admin"}} {
		var removed bool
		require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout.revoke_topic('%', $1::regrole, $2)", g[0], g[1]).Scan(&removed))
		require.True(t, removed, "the install grants %s %s on '%%'", g[0], g[1])
	}
}

// tenantConns is one login per (group role, relation to tenant a): with a
// grant on 'a.%' (own), with a grant on 'b.%' only (other), with no grant.
type tenantConns map[string]map[string]*pgx.Conn

func (b *bundle) tTenants(t *testing.T) tenantConns {
	t.Helper()
	out := tenantConns{}
	for _, kind := range []struct{ short, role, priv string }{
		{"prod", "fanout_producer", "publish"}, {"cons", "fanout_consumer", "consume"}, {"adm", "fanout_admin", "admin"},
	} {
		out[kind.short] = map[string]*pgx.Conn{}
		for _, rel := range []string{"own", "other", "none"} {
			name, conn := b.tRole(t, kind.short+"_"+rel, kind.role)
			switch rel {
			case "own":
				b.tGrant(t, b.Pool, "a.%", name, kind.priv)
			case "other":
				b.tGrant(t, b.Pool, "b.%", name, kind.priv)
			}
			out[kind.short][rel] = conn
		}
	}
	return out
}

func (b *bundle) tGrant(t *testing.T, q querier, pattern, role, priv string) {
	t.Helper()
	var added bool
	require.NoError(t, q.QueryRow(b.ctx, "SELECT fanout.grant_topic($1, $2::regrole, $3)", pattern, role, priv).Scan(&added))
	require.True(t, added)
}

// Every public function x {no grant, other tenant's grant, own grant}: the
// first two raise PGQ21 and change nothing, the own tenant's call works.
// (Before per-topic grants every one of these calls succeeded for any role.)
func TestTenantRoleMatrix(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.tIsolate(t)
	conns := b.tTenants(t)

	b.createTopic(t, b.Pool, "a.q")
	b.createTopic(t, b.Pool, "b.q")
	b.createTopic(t, b.Pool, "a.drop")
	b.createTopic(t, b.Pool, "a.dl", "max_attempts => 1")
	b.createTopic(t, b.Pool, "a.ps", "'pubsub'")
	b.createTopic(t, b.Pool, "a.ref", "'pubsub'", "'reference'")
	for _, g := range []string{"ga", "gx", "gy"} {
		_, err := b.Pool.Exec(b.ctx, "SELECT fanout.subscribe('a.ps', $1)", g)
		require.NoError(t, err)
	}
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.subscribe('a.ref', 'gr', 'earliest')")
	require.NoError(t, err)
	// A dead letter of a.dl, and three open leases of a.q (one message each).
	dl := b.publish(t, b.Pool, "a.dl", `{"secret":"a"}`)
	ms := b.read(t, b.Pool, "a.dl", nil, "c", 10, "1 minute")
	b.qNack(t, b.Pool, ms[0].LeaseID, nil, nil, "boom")
	aq := b.qPublishN(t, b.Pool, "a.q", 0, 3)
	var leases []int64
	for range 3 {
		leases = append(leases, b.read(t, b.Pool, "a.q", nil, "c", 1, "1 hour")[0].LeaseID)
	}
	_, consOther := b.tRole(t, "cons_x", "fanout_consumer") // another login of tenant b, for grant_topic
	_ = consOther

	type call struct {
		kind, sql string
		own       string // SQLSTATE the own tenant gets ("" = success)
	}
	calls := []call{
		{"prod", "SELECT fanout.publish('a.q', '{}')", ""},
		{"prod", "SELECT fanout.publish_batch('a.q', ARRAY['{}']::jsonb[])", ""},
		{"cons", "SELECT * FROM fanout.read('a.q', consumer => 'c', max_messages => 1)", ""},
		{"cons", "SELECT * FROM fanout.read('a.ps', 'ga', 'c')", ""},
		{"cons", "SELECT fanout.heartbeat('a.ps', 'ga', 'c')", ""},
		{"cons", "SELECT * FROM fanout.subscribe('a.ps', 'g-new')", ""},
		{"cons", fmt.Sprintf("SELECT fanout.ack(%d)", leases[0]), ""},
		{"cons", fmt.Sprintf("SELECT fanout.nack(%d)", leases[1]), ""},
		{"cons", fmt.Sprintf("SELECT fanout.extend_lease(%d, '1 minute')", leases[2]), ""},
		{"adm", "SELECT fanout.create_topic('a.new')", ""},
		{"adm", "SELECT fanout.alter_topic('a.q', max_attempts => 7)", ""},
		{"adm", "SELECT fanout.drop_topic('a.drop')", ""},
		{"adm", "SELECT fanout.seek('a.ps', 'ga', 'latest')", ""},
		{"adm", "SELECT fanout.pause('a.ps', 'ga')", ""},
		{"adm", "SELECT fanout.resume('a.ps', 'ga')", ""},
		{"adm", "SELECT fanout.unsubscribe('a.ps', 'gx')", ""},
		{"adm", "SELECT fanout.remove_group('a.ps', 'gy')", ""},
		{"adm", "SELECT fanout.resurrect_group('a.ps', 'ga')", "PGQ15"}, // not dead: allowed, refused on status
		{"adm", "SELECT fanout.cancel_backfill('a.ref', 'gr')", ""},
		{"adm", "SELECT fanout.restart_backfill('a.ref', 'gr')", ""},
		{"adm", "SELECT fanout.force_complete_orphaned('a.ref', '1 hour')", ""},
		{"adm", "SELECT * FROM fanout.message_status('a.q', " + fmt.Sprint(aq[0]) + ")", ""},
		{"adm", fmt.Sprintf("SELECT fanout.replay_dead_letters('a.dl', NULL, ARRAY[%d::bigint])", dl), ""},
		{"adm", "SELECT fanout.purge_dead_letters('a.dl', NULL, '0')", ""},
		{"adm", "SELECT fanout.grant_topic('a.shared', 'fanout_consumer', 'consume')", ""},
		{"adm", "SELECT fanout.revoke_topic('a.shared', 'fanout_consumer', 'consume')", ""},
	}
	for _, c := range calls {
		for _, rel := range []string{"none", "other"} {
			before := b.qDigest(t)
			_, err := conns[c.kind][rel].Exec(b.ctx, c.sql)
			require.Error(t, err, "%s %s: %s", c.kind, rel, c.sql)
			refused := "PGQ21"
			if leaseCall(c.sql) {
				refused = "PGQ10" // another tenant's lease: as one that does not exist
			}
			require.Equal(t, refused, qState(err), "%s %s: %s: %v", c.kind, rel, c.sql, err)
			require.Equal(t, before, b.qDigest(t), "%s %s: %s left partial state", c.kind, rel, c.sql)
		}
		_, err := conns[c.kind]["own"].Exec(b.ctx, c.sql)
		if c.own == "" {
			require.NoError(t, err, "own %s: %s", c.kind, c.sql)
		} else {
			require.Equal(t, c.own, qState(err), "own %s: %s: %v", c.kind, c.sql, err)
		}
	}

	// The views and listing functions show each caller only its tenant's rows.
	count := func(c *pgx.Conn, sql string) int {
		var n int
		require.NoError(t, c.QueryRow(b.ctx, sql).Scan(&n), sql)
		return n
	}
	for _, v := range []struct {
		kind, sql string
	}{
		{"cons", "SELECT count(*) FROM fanout.groups WHERE topic LIKE 'a.%'"},
		{"cons", "SELECT count(*) FROM fanout.topics WHERE topic LIKE 'a.%'"},
		{"prod", "SELECT count(*) FROM fanout.topics WHERE topic LIKE 'a.%'"},
		{"adm", "SELECT count(*) FROM fanout.groups WHERE topic LIKE 'a.%'"},
		{"adm", "SELECT count(*) FROM fanout.stuck_messages('0')"},
		{"adm", "SELECT count(*) FROM fanout.topic_grants WHERE pattern = 'a.%'"},
	} {
		require.Zero(t, count(conns[v.kind]["none"], v.sql), "none %s: %s", v.kind, v.sql)
		require.Zero(t, count(conns[v.kind]["other"], v.sql), "other %s: %s", v.kind, v.sql)
		require.Positive(t, count(conns[v.kind]["own"], v.sql), "own %s: %s", v.kind, v.sql)
	}
	// A dead letter for the dead_letters view (the one above was replayed).
	b.publish(t, b.Pool, "a.dl", `{"secret":"a2"}`)
	ms = b.read(t, b.Pool, "a.dl", nil, "c", 10, "1 minute")
	b.qNack(t, b.Pool, ms[len(ms)-1].LeaseID, nil, nil, "boom")
	for _, rel := range []string{"none", "other"} {
		require.Zero(t, count(conns["cons"][rel], "SELECT count(*) FROM fanout.dead_letters"), rel)
		// The views' helpers reveal nothing when called directly either.
		var n *int64
		require.NoError(t, conns["cons"][rel].QueryRow(b.ctx,
			"SELECT messages FROM fanout._group_view((SELECT 1))").Scan(&n))
		require.Nil(t, n, rel)
	}
	require.Positive(t, count(conns["cons"]["own"], "SELECT count(*) FROM fanout.dead_letters"))
	// The internal helpers behind the views are granted to nobody (before,
	// producers could read any group's lag and liveness through them, and
	// _group_unread(999) raised an undocumented P0002).
	for _, kind := range []string{"prod", "cons", "adm"} {
		for _, sql := range []string{
			"SELECT * FROM fanout._group_unread(999)",
			"SELECT * FROM fanout._topic_stats(1)",
			"SELECT fanout._liveness(g) FROM (SELECT NULL::fanout.consumer_group AS g) x",
		} {
			_, err := conns[kind]["own"].Exec(b.ctx, sql)
			requireSQLState(t, err, "42501")
		}
	}

	// Calls that act on every tenant need an admin grant on '%': a tenant's
	// admin could otherwise run maintenance with a p_now years ahead (and
	// drop everyone's data as past retention) or take the sidecar's
	// leadership (and stop its maintenance).
	global := []string{
		"SELECT * FROM fanout.check_consistency()",
		"SELECT fanout.run_maintenance(now() + interval '3650 days')",
		"SELECT count(*) FROM fanout.maint_operations()",
		"SELECT fanout._manage_partitions()",
		"SELECT fanout._cleanup_partitions(now() + interval '3650 days')",
		"SELECT fanout._cleanup_bookkeeping()",
		"SELECT fanout._detect_dead_groups()",
		"SELECT fanout._cleanup_groups()",
		"SELECT fanout._bitmap_step()",
		"SELECT fanout._refresh_topic_state()",
		"SELECT fanout.leader_attempt('tenant-a', '1 hour', 'pgq-scheduler')",
		"SELECT fanout.leader_resign('sidecar', 'pgq-scheduler')",
	}
	for _, sql := range global {
		for _, rel := range []string{"none", "other", "own"} {
			before := b.qDigest(t)
			_, err := conns["adm"][rel].Exec(b.ctx, sql)
			require.Equal(t, "PGQ21", qState(err), "%s: %s: %v", rel, sql, err)
			require.Equal(t, before, b.qDigest(t), "%s: %s left partial state", rel, sql)
		}
	}
	b.tGrant(t, b.Pool, "%", "fanout_admin", "admin")
	for _, sql := range global {
		_, err = conns["adm"]["own"].Exec(b.ctx, sql)
		require.NoError(t, err, sql)
	}
}

// A consumer of tenant b cannot ack, nack or extend tenant a's lease by
// guessing its id (before grants it could, and the victim's own ack then
// returned 0); a tenant admin grants only within its own patterns; the role
// checked is the one set with SET ROLE, not the login.
func TestTenantLeasesGrantsAndSetRole(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.tIsolate(t)
	consA, a := b.tRole(t, "cons_a", "fanout_consumer")
	consB, bc := b.tRole(t, "cons_b", "fanout_consumer")
	admA, adm := b.tRole(t, "adm_a", "fanout_admin")
	b.tGrant(t, b.Pool, "a.%", consA, "consume")
	b.tGrant(t, b.Pool, "b.%", consB, "consume")
	b.tGrant(t, b.Pool, "a.%", admA, "admin")
	b.createTopic(t, b.Pool, "a.orders")
	b.publish(t, b.Pool, "a.orders", `{"n":1}`)

	ms := b.read(t, a, "a.orders", nil, "worker-a", 10, "1 minute")
	require.Len(t, ms, 1)
	for _, sql := range []string{"SELECT fanout.ack($1)", "SELECT fanout.nack($1)", "SELECT fanout.extend_lease($1, '1 hour')"} {
		_, err := bc.Exec(b.ctx, sql, ms[0].LeaseID)
		requireSQLState(t, err, "PGQ10") // as a lease that does not exist
	}
	_, err := readMsgs(b.ctx, bc, "a.orders", nil, "thief", 10, "1 minute")
	requireSQLState(t, err, "PGQ21")
	require.Equal(t, 1, b.ack(t, a, ms[0].LeaseID, nil), "the owner's ack still settles its message")

	// Tenant a's admin shares a's topics, and nothing else.
	b.tGrant(t, adm, "a.orders", consB, "consume")
	for _, p := range []string{"%", "b.%", "a%", "b.orders"} {
		_, err := adm.Exec(b.ctx, "SELECT fanout.grant_topic($1, $2::regrole, 'consume')", p, consB)
		requireSQLState(t, err, "PGQ21")
	}
	b.publish(t, b.Pool, "a.orders", `{"n":2}`)
	require.Len(t, b.read(t, bc, "a.orders", nil, "b-reader", 10, "1 minute"), 1, "shared explicitly")
	for _, bad := range []struct{ state, sql string }{
		{"PGQ03", "SELECT fanout.grant_topic('a.x', $1::regrole, 'write')"},
		{"PGQ03", "SELECT fanout.grant_topic('a.x', NULL, 'consume')"},
		{"PGQ04", "SELECT fanout.grant_topic('', $1::regrole, 'consume')"},
		{"42704", "SELECT fanout.grant_topic('a.x', 'no_such_role_anywhere'::regrole, 'consume')"},
	} {
		args := []any{}
		if bad.state != "42704" && bad.sql != "SELECT fanout.grant_topic('a.x', NULL, 'consume')" {
			args = append(args, consB)
		}
		_, err := adm.Exec(b.ctx, bad.sql, args...)
		requireSQLState(t, err, bad.state)
	}

	// SET ROLE: the superuser's session acting as tenant b is checked as b.
	conn := b.Conn(t)
	_, err = conn.Exec(b.ctx, "SET ROLE "+pgx.Identifier{consB}.Sanitize())
	require.NoError(t, err)
	_, err = conn.Exec(b.ctx, "SELECT * FROM fanout.read('a.other.topic')")
	requireSQLState(t, err, "PGQ21")
	_, err = conn.Exec(b.ctx, "RESET ROLE")
	require.NoError(t, err)
	_, err = conn.Exec(b.ctx, "SELECT * FROM fanout.read('a.orders')")
	require.NoError(t, err)

	// Unknown topics look the same as forbidden ones to a tenant without a
	// grant (no existence oracle); with a grant, PGQ01.
	_, err = bc.Exec(b.ctx, "SELECT * FROM fanout.read('a.does.not.exist')")
	requireSQLState(t, err, "PGQ21")
	_, err = a.Exec(b.ctx, "SELECT * FROM fanout.read('a.does.not.exist')")
	requireSQLState(t, err, "PGQ01")
}

// leaseCall reports whether sql is an ack, nack or extend_lease call: a lease
// of a topic the caller may not consume is refused as one that does not
// exist (PGQ10), not with PGQ21.
func leaseCall(sql string) bool {
	for _, f := range []string{"SELECT fanout.ack(", "SELECT fanout.nack(", "SELECT fanout.extend_lease("} {
		if strings.HasPrefix(sql, f) {
			return true
		}
	}
	return false
}
