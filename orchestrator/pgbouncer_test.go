package orchestrator

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// Everything the scheduler sends works without session state and without
// named prepared statements, as behind PgBouncer in transaction pooling
// mode (pgx: default_query_exec_mode=simple_protocol or exec).
func TestTransactionPoolingCompatible(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		cfg, err := pgxpool.ParseConfig(b.URL)
		require.NoError(t, err)
		cfg.ConnConfig.DefaultQueryExecMode = mode
		pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)

		topic := "t-" + mode.String()
		b.exec(t, `SELECT fanout.create_topic($1, partition_interval => '1 minute')`, topic)
		b.exec(t, `SELECT fanout.publish($1, '{}')`, topic)
		clk := newFakeClock(b.dbNow(t).Add(2 * time.Minute))
		s, err := NewScheduler(pool, SchedulerConfig{Logger: b.log, Clock: clk})
		require.NoError(t, err)
		_, err = s.RunJob(b.ctx, discoverJobName)
		require.NoError(t, err, mode)
		res, err := s.RunJob(b.ctx, managePartitions)
		require.NoError(t, err, mode)
		require.EqualValues(t, 5, res.Rows, mode) // create, refresh, jump; create and refresh the next

		e := NewElector(pool, ElectorConfig{Name: "pool-" + mode.String(), TTL: time.Minute, Logger: b.log})
		require.NoError(t, e.attempt(b.ctx), mode)
		require.True(t, e.IsLeader())
		st, err := ReadStats(b.ctx, pool, "pool-"+mode.String())
		require.NoError(t, err, mode)
		require.NotNil(t, st.Leader)
		require.Equal(t, e.ID(), st.Leader.ID)
		require.NoError(t, e.Resign(b.ctx))
		require.False(t, e.IsLeader())
	}
}
