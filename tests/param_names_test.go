package tests

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Public functions take bare parameter names (docs/design.md §2), also the
// leader, maintenance and channel functions; positional calls keep working.
func TestPublicParameterNamesAreBare(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var fns []string
	rows, err := b.Pool.Query(b.ctx, `
		SELECT p.oid::regprocedure::text FROM pg_proc p
		WHERE p.pronamespace = 'fanout'::regnamespace AND p.proname !~ '^_'
		  AND EXISTS (SELECT 1 FROM unnest(p.proargnames) a WHERE a ~ '^p_')`)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		fns = append(fns, s)
	}
	require.NoError(t, rows.Err())
	require.Empty(t, fns, "public functions with p_ parameter names")

	for _, q := range []string{
		`SELECT fanout.leader_attempt(leader_id => 'a', ttl => '1 minute', name => 'named')`,
		`SELECT fanout.leader_resign(leader_id => 'a', name => 'named')`,
		`SELECT fanout.leader_attempt('b', '1 minute', 'positional')`,
		`SELECT fanout.leader_resign('b', 'positional')`,
		`SELECT count(*) > 0 FROM fanout.maint_functions()`,
		`SELECT count(*) >= 0 FROM fanout.maint_operations(now => now())`,
		`SELECT count(*) >= 0 FROM fanout.maint_operations(now())`,
		`SELECT fanout.run_maintenance(now => now()) >= 0`,
		`SELECT fanout.run_maintenance(now()) >= 0`,
		`SELECT count(*) >= 0 FROM fanout.groups_near_timeout(now => now())`,
		`SELECT count(*) >= 0 FROM fanout.groups_near_timeout(now())`,
		`SELECT fanout.channel_name(topic_id => 7) = 'fanout_7'`,
		`SELECT fanout.channel_name(7) = 'fanout_7'`,
	} {
		var ok bool
		require.NoError(t, b.Pool.QueryRow(b.ctx, q).Scan(&ok), q)
		require.True(t, ok, q)
	}
}
