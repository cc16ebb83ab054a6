package orchestrator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

const (
	managePartitions  = "fanout._manage_partitions"
	cleanupPartitions = "fanout._cleanup_partitions"
)

// A topic whose open partition is older than its partition_interval (seen
// from the stub clock, two minutes ahead) and not empty is due for rotation:
// one call creates the next partition, a second (own transaction) refreshes
// the partition lists, a third closes the old one; then the partition after
// it is made ready ahead (created, refreshed) and a sixth call finds nothing
// left.
func TestMaintenanceJobCallsUntilDone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `SELECT fanout.create_topic('orders', partition_interval => '1 minute')`)
	b.exec(t, `SELECT fanout.publish('orders', '{"n":1}')`)
	clk := newFakeClock(b.dbNow(t).Add(2 * time.Minute))

	job := NewMaintenanceJob(b.Pool, MaintenanceConfig{Func: managePartitions, Clock: clk})
	require.Equal(t, managePartitions, job.Name())
	require.Equal(t, DefaultSchedule, job.Schedule())

	res, err := job.Run(b.ctx)
	require.NoError(t, err)
	require.Equal(t, Result{Calls: 6, Rows: 5}, res)
	require.EqualValues(t, 3, b.int(t, `SELECT count(*) FROM fanout.partition`))
	require.EqualValues(t, 1, b.int(t, `SELECT count(*) FROM fanout.partition WHERE closed_at IS NOT NULL`))

	// Publishing still works and lands in the new partition.
	b.exec(t, `SELECT fanout.publish('orders', '{"n":2}')`)
	require.EqualValues(t, 2, b.int(t, `SELECT messages FROM fanout.topics WHERE topic = 'orders'`))

	// With the real clock nothing is due: no call at all.
	idle := NewMaintenanceJob(b.Pool, MaintenanceConfig{Func: managePartitions})
	res, err = idle.Run(b.ctx)
	require.NoError(t, err)
	require.Equal(t, Result{}, res)
}

// The batch limit caps the calls of one run; the next runs go on.
func TestMaintenanceJobHonoursBatchLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, topic := range []string{"a", "b", "c"} {
		b.exec(t, `SELECT fanout.create_topic($1, partition_interval => '1 minute')`, topic)
		b.exec(t, `SELECT fanout.publish($1, '{}')`, topic)
	}
	clk := newFakeClock(b.dbNow(t).Add(2 * time.Minute))
	job := NewMaintenanceJob(b.Pool, MaintenanceConfig{Func: managePartitions, Clock: clk, BatchLimit: 1})

	var total Result
	for i := 0; ; i++ {
		require.Less(t, i, 10, "the job must finish")
		res, err := job.Run(b.ctx)
		require.NoError(t, err)
		require.LessOrEqual(t, res.Calls, 1, "at most BatchLimit calls per run")
		total.add(res)
		if !res.Limited {
			break
		}
		require.EqualValues(t, 1, res.Calls)
		require.Positive(t, res.Rows)
	}
	// Each topic: creation, refresh and close, then the next partition made
	// ready ahead (creation, refresh).
	require.EqualValues(t, 15, total.Rows)
	require.EqualValues(t, 9, b.int(t, `SELECT count(*) FROM fanout.partition`))
	require.EqualValues(t, 3, b.int(t, `SELECT count(*) FROM fanout.partition WHERE closed_at IS NOT NULL`))
}

// Through the scheduler: discovery finds the due functions, each job runs
// its function to completion, and metrics and JSON logs record it.
func TestSchedulerJobsRecordMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `SELECT fanout.create_topic('orders', partition_interval => '1 minute', retention => '0',
	           zero_subscription_retention => '0', max_retention => '1 minute')`)
	b.exec(t, `SELECT fanout.publish('orders', '{"n":1}')`)
	clk := newFakeClock(b.dbNow(t).Add(2 * time.Minute))
	s := b.scheduler(t, SchedulerConfig{Clock: clk})

	res, err := s.RunJob(b.ctx, discoverJobName)
	require.NoError(t, err)
	// _manage_partitions, and _cleanup_bookkeeping: the dedupe sweep's first
	// pass is due once a topic exists.
	require.EqualValues(t, 2, res.Rows, "two new jobs")
	require.Equal(t, DefaultCleanupSchedule, jobStatus(t, s, "fanout._cleanup_bookkeeping").Schedule)
	require.Equal(t, DefaultSchedule, jobStatus(t, s, managePartitions).Schedule)

	res, err = s.RunJob(b.ctx, managePartitions)
	require.NoError(t, err)
	require.Equal(t, Result{Calls: 6, Rows: 5}, res)

	// The old partition is closed now; past max_retention it is dropped
	// even though nobody read its message, and the loss is counted.
	clk.Advance(5 * time.Minute)
	res, err = s.RunJob(b.ctx, discoverJobName)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Rows)
	require.Equal(t, DefaultCleanupSchedule, jobStatus(t, s, cleanupPartitions).Schedule)
	res, err = s.RunJob(b.ctx, cleanupPartitions)
	require.NoError(t, err)
	require.Equal(t, Result{Calls: 2, Rows: 1}, res)
	require.EqualValues(t, 2, b.int(t, `SELECT count(*) FROM fanout.partition`), "the open one and the one ready ahead")
	require.EqualValues(t, 1, b.int(t, `SELECT dropped_unread FROM fanout.topics WHERE topic = 'orders'`))

	m := s.metrics
	require.EqualValues(t, 1, testutil.ToFloat64(m.runs.WithLabelValues(managePartitions)))
	require.EqualValues(t, 5, testutil.ToFloat64(m.rows.WithLabelValues(managePartitions)))
	require.EqualValues(t, 6, testutil.ToFloat64(m.calls.WithLabelValues(managePartitions)))
	require.EqualValues(t, 0, testutil.ToFloat64(m.errors.WithLabelValues(managePartitions)))
	require.EqualValues(t, 1, testutil.ToFloat64(m.rows.WithLabelValues(cleanupPartitions)))
	require.EqualValues(t, 2, testutil.ToFloat64(m.runs.WithLabelValues(discoverJobName)))
	require.EqualValues(t, float64(clk.Now().UnixNano())/1e9,
		testutil.ToFloat64(m.lastSuccess.WithLabelValues(cleanupPartitions)))
	require.EqualValues(t, 1, histogramCount(t, s, "pgq_scheduler_job_duration_seconds", managePartitions))
	st := jobStatus(t, s, managePartitions)
	require.EqualValues(t, 1, st.Runs)
	require.Equal(t, clk.Now().Add(-5*time.Minute), st.LastSuccess)

	logs := b.logs.String()
	require.Contains(t, logs, `"msg":"job done","job":"fanout._manage_partitions"`)
	require.Contains(t, logs, `"rows":5`)
}

// A function maint_operations lists that does not exist, or whose name is
// an injection attempt, fails its job with a clear error and runs nothing.
func TestMaintenanceJobRejectsBadFunctions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `CREATE TABLE public.canary (x int)`)
	b.exec(t, `ALTER FUNCTION fanout.maint_operations(timestamptz) RENAME TO maint_operations_orig`)
	b.exec(t, `CREATE FUNCTION fanout.maint_operations(p_now timestamptz DEFAULT now())
	           RETURNS TABLE(func text, arg text) LANGUAGE sql AS $$
	             SELECT * FROM fanout.maint_operations_orig(p_now)
	             UNION ALL VALUES ('public.no_such_function', NULL),
	                              ('now(); DROP TABLE public.canary; SELECT fanout._manage_partitions', NULL),
	                              ('pg_catalog.pg_sleep', NULL)
	           $$`)
	s := b.scheduler(t, SchedulerConfig{})
	res, err := s.RunJob(b.ctx, discoverJobName)
	require.NoError(t, err)
	require.EqualValues(t, 3, res.Rows)

	_, err = s.RunJob(b.ctx, "public.no_such_function")
	require.ErrorContains(t, err, `public.no_such_function: function "public.no_such_function" does not exist`)
	_, err = s.RunJob(b.ctx, "now(); DROP TABLE public.canary; SELECT fanout._manage_partitions")
	require.Error(t, err)
	_, err = s.RunJob(b.ctx, "pg_catalog.pg_sleep")
	require.ErrorContains(t, err, "returns void, want an integer")
	require.EqualValues(t, 0, b.int(t, `SELECT count(*) FROM public.canary`), "the table is still there")
	require.EqualValues(t, 1, testutil.ToFloat64(s.metrics.errors.WithLabelValues("public.no_such_function")))
	require.True(t, strings.Contains(b.logs.String(), `"msg":"job failed","job":"public.no_such_function"`))
}

// The per-job timeout is the statement_timeout of the job's transactions.
func TestMaintenanceJobTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `CREATE FUNCTION public.slow_op(p_now timestamptz DEFAULT now()) RETURNS int
	           LANGUAGE sql AS $$ SELECT 1 FROM pg_sleep(60) $$`)
	b.exec(t, `ALTER FUNCTION fanout.maint_operations(timestamptz) RENAME TO maint_operations_orig`)
	b.exec(t, `CREATE FUNCTION fanout.maint_operations(p_now timestamptz DEFAULT now())
	           RETURNS TABLE(func text, arg text) LANGUAGE sql AS $$ VALUES ('public.slow_op', NULL::text) $$`)
	// 2 s: the job's own look-up of maint_operations must fit in it on a
	// loaded machine; the 60 s call must not.
	s := b.scheduler(t, SchedulerConfig{Timeouts: map[string]time.Duration{"public.slow_op": 2 * time.Second}})
	_, err := s.RunJob(b.ctx, discoverJobName)
	require.NoError(t, err)
	_, err = s.RunJob(b.ctx, "public.slow_op")
	require.ErrorContains(t, err, "public.slow_op: timed out: call 1: ")
}

type panicJob struct{ calls int }

func (*panicJob) Name() string     { return "panicky" }
func (*panicJob) Schedule() string { return "@every 1h" }
func (j *panicJob) Run(context.Context) (Result, error) {
	j.calls++
	panic("boom")
}

// A job that panics is recovered, counted as an error and logged; the
// scheduler keeps going.
func TestJobPanicIsRecovered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.scheduler(t, SchedulerConfig{})
	j := &panicJob{}
	require.NoError(t, s.Register(j))
	require.ErrorContains(t, s.Register(j), "a job of that name exists")
	_, err := s.RunJob(b.ctx, "panicky")
	require.EqualError(t, err, "panicky: panic: boom")
	require.EqualValues(t, 1, testutil.ToFloat64(s.metrics.errors.WithLabelValues("panicky")))
	require.Contains(t, b.logs.String(), `"msg":"job failed","job":"panicky"`)

	// Through the cron chain (what a scheduled run goes through) on a leader.
	require.NoError(t, s.elector.attempt(b.ctx))
	s.jobs["panicky"].wrapped.Run()
	require.Equal(t, 2, j.calls)
	require.EqualValues(t, 2, testutil.ToFloat64(s.metrics.errors.WithLabelValues("panicky")))
	_, err = s.RunJob(b.ctx, "nope")
	require.EqualError(t, err, `no job "nope"`)
}

// A sequence gap older than gap_alert_after is reported once by its job and
// counted in pgq_sequence_gap_alerts_total.
func TestSchedulerSequenceGapAlerts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `SELECT fanout.create_topic('ledger', sequence_ordering => true, gap_alert_after => '1 minute')`)
	b.exec(t, `SELECT fanout.publish('ledger', '{}', message_group => 'acct-7', sequence => 2)`)
	require.EqualValues(t, 0, b.int(t, `SELECT count(*) FROM fanout.read('ledger')`), "2 waits for 1")
	clk := newFakeClock(b.dbNow(t).Add(2 * time.Minute))
	s := b.scheduler(t, SchedulerConfig{Clock: clk})
	_, err := s.RunJob(b.ctx, discoverJobName)
	require.NoError(t, err)
	res, err := s.RunJob(b.ctx, SequenceGapAlertsFunc)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Rows)
	res, err = s.RunJob(b.ctx, SequenceGapAlertsFunc)
	require.NoError(t, err)
	require.EqualValues(t, 0, res.Rows, "once per gap")
	require.EqualValues(t, 1, testutil.ToFloat64(s.metrics.gapAlerts))
	require.EqualValues(t, 1, b.int(t, `SELECT count(*) FROM fanout.event_log WHERE kind = 'sequence_gap'`))
}
