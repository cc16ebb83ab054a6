package tests

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// CALL fanout.maintain() commits after each call of an operation, where
// fanout.run_maintenance runs the whole round in one transaction: the rows
// two operations wrote (a group marked dead, a partition created) come from
// two transactions under maintain and from one under run_maintenance. So a
// lock an operation took (a dropped partition's parent) is not held for
// the rest of the round. Inside a transaction block it is refused (2D000),
// and a tenant's admin may not run it (PGQ21).
func TestMaintainCommitsAfterEachOperation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The (top-level) transactions that mark a group dead and create a
	// partition, noted by triggers of this test's database.
	_, err := b.Pool.Exec(b.ctx, `
		CREATE TABLE public.maint_writes (topic_id bigint, what text, xid xid8);
		CREATE FUNCTION public.maint_note() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO public.maint_writes VALUES (NEW.topic_id, TG_TABLE_NAME, pg_current_xact_id());
			RETURN NULL;
		END $$;
		CREATE TRIGGER maint_note AFTER INSERT ON fanout.partition FOR EACH ROW EXECUTE FUNCTION public.maint_note();
		CREATE TRIGGER maint_note AFTER UPDATE ON fanout.consumer_group FOR EACH ROW
			WHEN (NEW.status = 'dead' AND OLD.status <> 'dead') EXECUTE FUNCTION public.maint_note();`)
	require.NoError(t, err)
	// writers counts the transactions that wrote each kind for the topic.
	writers := func(topic string) (dead, partition, both int) {
		t.Helper()
		require.NoError(t, b.Pool.QueryRow(b.ctx, `
			SELECT count(DISTINCT w.xid) FILTER (WHERE w.what = 'consumer_group'),
			       count(DISTINCT w.xid) FILTER (WHERE w.what = 'partition'),
			       count(DISTINCT w.xid)
			FROM public.maint_writes w JOIN fanout.topic t USING (topic_id) WHERE t.topic = $1`, topic).Scan(&dead, &partition, &both))
		return dead, partition, both
	}
	for _, tc := range []struct {
		topic, round string
		sameTx       bool
	}{
		{"m.round", "SELECT fanout.run_maintenance(now() + interval '1 hour')", true},
		{"m.maintain", "CALL fanout.maintain(now() + interval '1 hour')", false},
	} {
		b.createTopic(t, b.Pool, tc.topic, "semantics => 'pubsub'", "partition_interval => '1 minute'")
		_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe($1, 'g', heartbeat_timeout => '1 second', dead_after_misses => 1)`, tc.topic)
		require.NoError(t, err)
		_, err = b.Pool.Exec(b.ctx, "DELETE FROM public.maint_writes")
		require.NoError(t, err)
		_, err = b.Pool.Exec(b.ctx, tc.round)
		require.NoError(t, err)
		dead, partition, both := writers(tc.topic)
		require.Equal(t, 1, dead, "%s: the silent group is dead", tc.round)
		require.Equal(t, 1, partition, "%s: a partition was created", tc.round)
		require.Equal(t, tc.sameTx, both == 1, "%s: one transaction for the round: %v", tc.round, tc.sameTx)
	}

	for _, bad := range []string{"infinity", "-infinity"} {
		_, err = b.Pool.Exec(b.ctx, "CALL fanout.maintain($1::timestamptz)", bad)
		requireSQLState(t, err, "PGQ03")
	}
	tx, err := b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, "CALL fanout.maintain()")
	requireSQLState(t, err, "2D000")
	require.NoError(t, tx.Rollback(b.ctx))

	b.tIsolate(t)
	name, adm := b.tRole(t, "adm", "fanout_admin")
	b.tGrant(t, b.Pool, "a.%", name, "admin")
	_, err = adm.Exec(b.ctx, "CALL fanout.maintain()")
	requireSQLState(t, err, "PGQ21")
	_, err = adm.Exec(b.ctx, "SELECT fanout._maint_call('pg_catalog.pg_sleep', NULL, now())")
	requireSQLState(t, err, "PGQ21")
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout._maint_call('pg_catalog.pg_terminate_backend', NULL, now())")
	requireSQLState(t, err, "PGQ03")
}
