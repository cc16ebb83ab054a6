package tests

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 27, finding 1: a tenant admin with a grant on 'acme%' must not widen
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

// Issue 27, finding 1: lengths are counted in NFC, the form names are stored
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
