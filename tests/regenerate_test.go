package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/release"
)

// fanout.regenerate_topics() while traffic runs, on real connections: with
// the regeneration's transaction open (every topic's generated functions
// dropped and made again), a publish, a read with its ack and a new
// subscription on other connections never wait for it (lock_timeout would
// end them with 55P03), while alter_topic of a topic waits (55P03). A
// session that published before the regeneration committed publishes and
// reads through the new functions after it, in the same transaction.
// Regenerated functions equal the ones create_topic made.
func TestRegenerateTopicsUnderTraffic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.Pool.Exec(b.ctx, release.SampleTopicsSQL)
	require.NoError(t, err)
	defs := func() []string {
		return b.strings(t, `SELECT p.oid::regprocedure::text || pg_get_functiondef(p.oid) || coalesce(p.proacl::text, '')
			FROM pg_proc p WHERE p.pronamespace = 'fanout_data'::regnamespace ORDER BY 1`)
	}
	before := defs()
	require.Len(t, before, 8*8+2, "8 topics: 8 functions each (one _page for every ordering), _done_add for 2")

	regen, err := b.Pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer regen.Release()
	other, err := b.Pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer other.Release()
	early, err := b.Pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer early.Release()

	_, err = early.Exec(b.ctx, "BEGIN")
	require.NoError(t, err)
	var id1 int64
	require.NoError(t, early.QueryRow(b.ctx, `SELECT fanout.publish('s_queue', '{"early": 1}')`).Scan(&id1))

	_, err = regen.Exec(b.ctx, "BEGIN")
	require.NoError(t, err)
	var n int
	require.NoError(t, regen.QueryRow(b.ctx, "SELECT fanout.regenerate_topics()").Scan(&n))
	require.Equal(t, 8, n)

	_, err = other.Exec(b.ctx, "SET lock_timeout = '50ms'")
	require.NoError(t, err)
	var id2 int64
	require.NoError(t, other.QueryRow(b.ctx, `SELECT fanout.publish('s_pubsub', '{"during": 1}')`).Scan(&id2))
	require.NoError(t, other.QueryRow(b.ctx, `SELECT fanout.publish('s_partitioned', '{"during": 1}', message_group => 'k')`).Scan(&id2))
	_, err = other.Exec(b.ctx, `SELECT * FROM fanout.subscribe('s_reference', 'g_new')`)
	require.NoError(t, err)
	ms, err := readMsgs(b.ctx, other, "s_pubsub", ptr("g1"), "c", 10, "1 minute")
	require.NoError(t, err)
	require.NotEmpty(t, ms)
	require.Equal(t, len(ms), b.ack(t, other, ms[0].LeaseID, ids(ms)))
	_, err = other.Exec(b.ctx, `SELECT fanout.alter_topic('s_queue', max_attempts => 7)`)
	requireSQLState(t, err, "55P03")

	_, err = regen.Exec(b.ctx, "COMMIT")
	require.NoError(t, err)
	var id3 int64
	require.NoError(t, early.QueryRow(b.ctx, `SELECT fanout.publish('s_queue', '{"early": 2}')`).Scan(&id3))
	_, err = early.Exec(b.ctx, "COMMIT")
	require.NoError(t, err)
	got, err := readMsgs(b.ctx, early, "s_queue", nil, "c", 100, "1 minute")
	require.NoError(t, err)
	require.Subset(t, ids(got), []int64{id1, id3})
	_, err = other.Exec(b.ctx, `SELECT fanout.alter_topic('s_queue', max_attempts => 7)`)
	require.NoError(t, err)
	require.Equal(t, before, defs(), "regenerated functions are the ones create_topic made")
	require.Empty(t, b.strings(t, `SELECT coalesce(topic, '') || ': ' || problem FROM fanout.check_consistency()`))
}

func (b *bundle) strings(t *testing.T, sql string) []string {
	t.Helper()
	rows, err := b.Pool.Query(b.ctx, sql)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}
