package tests

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A tenant's publish, read, pipelined read and ack each check the caller
// once, in one query (fanout._enter_topic), and the ack of a lease read in
// the same transaction checks nothing again: none of them goes through the
// chain fanout._enter -> fanout._authorize -> fanout._may -> fanout._caller,
// nor looks the topic up a second time (fanout._topic). Counted with the
// transaction's own function statistics (track_functions), which are exact.
func TestEntryPointsCheckTheCallerOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.tIsolate(t)
	name, _ := b.tRole(t, "app", "fanout_consumer")
	_, err := b.Pool.Exec(b.ctx, "GRANT fanout_producer TO "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	b.tGrant(t, b.Pool, "app.%", name, "publish")
	b.tGrant(t, b.Pool, "app.%", name, "consume")
	b.createTopic(t, b.Pool, "app.q")

	conn, err := b.Pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	// begin opens a transaction as the tenant with its function statistics on.
	begin := func() pgx.Tx {
		t.Helper()
		tx, err := conn.Begin(b.ctx)
		require.NoError(t, err)
		_, err = tx.Exec(b.ctx, "SET LOCAL track_functions = 'all'")
		require.NoError(t, err)
		_, err = tx.Exec(b.ctx, "SET LOCAL ROLE "+pgx.Identifier{name}.Sanitize())
		require.NoError(t, err)
		return tx
	}
	// counts reads the calls of the check functions this session has not yet
	// reported (pg_stat_get_xact_function_calls: they can include an earlier
	// transaction's until the statistics are flushed, so compare deltas).
	checks := []string{"fanout._enter_topic(text,text)", "fanout._enter(text,text)",
		"fanout._authorize(text,text)", "fanout._may(text,text)", "fanout._topic(text)"}
	counts := func(tx pgx.Tx) []int64 {
		t.Helper()
		out := make([]int64, len(checks))
		for i, fn := range checks {
			require.NoError(t, tx.QueryRow(b.ctx,
				"SELECT coalesce(pg_stat_get_xact_function_calls(to_regprocedure($1)), 0)", fn).Scan(&out[i]))
		}
		return out
	}
	onlyOneCheck := func(tx pgx.Tx, before []int64, entries int64) {
		t.Helper()
		after := counts(tx)
		require.Equal(t, entries, after[0]-before[0], "one check per entry point call")
		for i := 1; i < len(checks); i++ {
			require.Zero(t, after[i]-before[i], "%s is not on the common path of an allowed caller", checks[i])
		}
	}

	tx := begin()
	before := counts(tx)
	_, err = tx.Exec(b.ctx, "SELECT fanout.publish('app.q', '{}') FROM generate_series(1, 3)")
	require.NoError(t, err)
	onlyOneCheck(tx, before, 3)
	require.NoError(t, tx.Commit(b.ctx))

	tx = begin()
	defer tx.Rollback(b.ctx) //nolint:errcheck
	before = counts(tx)
	var lease int64
	require.NoError(t, tx.QueryRow(b.ctx,
		"SELECT lease_id FROM fanout.read('app.q', consumer => 'c', max_messages => 1)").Scan(&lease))
	require.NoError(t, tx.QueryRow(b.ctx,
		"SELECT lease_id FROM fanout.read('app.q', consumer => 'c', max_messages => 1, ack => $1)", lease).Scan(&lease))
	var acked int64
	require.NoError(t, tx.QueryRow(b.ctx, "SELECT fanout.ack($1)", lease).Scan(&acked))
	require.Equal(t, int64(1), acked)
	onlyOneCheck(tx, before, 2)
}
