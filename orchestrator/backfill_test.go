package orchestrator

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// With a stub clock a step "takes" what the test says: slow steps make
// the driver throttle, fast ones make it recover, and it never goes past
// MaxRate.
func TestBackfillThrottlesAndRecovers(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(time.Unix(1_700_000_000, 0))
	bf := NewBackfill(BackfillConfig{TargetLatency: 10 * time.Millisecond, MaxRate: 100, MinRate: 2, MaxSteps: 20, Clock: clk})
	latency := 2 * time.Millisecond
	var starts []time.Time
	step := func(context.Context) (int64, error) {
		starts = append(starts, clk.Now())
		clk.Advance(latency)
		return 1, nil
	}
	ctx := testContext(t)

	// Fast steps: full speed, paced at MaxRate.
	res, err := bf.Run(ctx, step)
	require.NoError(t, err)
	require.Equal(t, BackfillResult{Steps: 20, Rows: 20}, res)
	require.Equal(t, 100.0, bf.Rate())
	for i := 1; i < len(starts); i++ {
		require.GreaterOrEqual(t, starts[i].Sub(starts[i-1]), 10*time.Millisecond, "never above MaxRate")
	}

	// Slow steps (p95 40ms over the 10ms target): the rate drops, run
	// after run, down to the floor.
	latency = 40 * time.Millisecond
	res, err = bf.Run(ctx, step)
	require.NoError(t, err)
	require.Equal(t, 20, res.Steps)
	require.Less(t, bf.Rate(), 100.0/8, "halved once per 5 slow steps")
	require.Greater(t, bf.P95(), 10*time.Millisecond)
	for range 3 {
		_, err = bf.Run(ctx, step)
		require.NoError(t, err)
	}
	require.Equal(t, 2.0, bf.Rate(), "not below MinRate")
	starts = starts[:0]
	_, err = bf.Run(ctx, step)
	require.NoError(t, err)
	for i := 1; i < len(starts); i++ {
		require.GreaterOrEqual(t, starts[i].Sub(starts[i-1]), 500*time.Millisecond, "paced at the throttled rate")
	}

	// One slow burst in a fast stream costs one halving, not a collapse.
	latency = time.Millisecond
	for range 3 {
		_, err = bf.Run(ctx, step)
		require.NoError(t, err)
	}
	require.Equal(t, 100.0, bf.Rate(), "recovered once latency dropped")
	require.LessOrEqual(t, bf.P95(), 10*time.Millisecond)

	// A step that reports no work ends the run.
	res, err = bf.Run(ctx, func(context.Context) (int64, error) { return 0, nil })
	require.NoError(t, err)
	require.Equal(t, BackfillResult{Steps: 1, Done: true}, res)
}

// A short burst of slow steps inside fast traffic halves the rate once.
func TestBackfillSingleBurst(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(time.Unix(1_700_000_000, 0))
	bf := NewBackfill(BackfillConfig{MaxRate: 64, MaxSteps: 30, Clock: clk})
	n := 0
	res, err := bf.Run(testContext(t), func(context.Context) (int64, error) {
		n++
		if n >= 10 && n < 12 { // two slow steps
			clk.Advance(50 * time.Millisecond)
		} else {
			clk.Advance(time.Millisecond)
		}
		if n == 14 {
			require.Equal(t, 32.0, bf.Rate(), "one halving for one burst")
		}
		return 1, nil
	})
	require.NoError(t, err)
	require.Equal(t, 30, res.Steps)
	require.Equal(t, 64.0, bf.Rate())
}

// The driver against PostgreSQL: a new maintenance function that
// maint_operations() lists is picked up with no Go change, driven as a
// backfill (called with the listed argument until it returns 0) and
// reported in the metrics. How fast it goes depends on the machine, so
// this test asserts counts only; throttling and recovery are asserted
// with a stub clock in TestBackfillThrottlesAndRecovers.
func TestBackfillJobAgainstDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `CREATE TABLE public.bf_state (remaining int NOT NULL, args text[] NOT NULL DEFAULT '{}')`)
	b.exec(t, `INSERT INTO public.bf_state VALUES (12)`)
	b.exec(t, `CREATE FUNCTION public.test_backfill_step(p_topic text, p_now timestamptz DEFAULT now()) RETURNS int
	           LANGUAGE plpgsql AS $$
	           BEGIN
	             UPDATE public.bf_state SET remaining = remaining - 1, args = args || p_topic
	             WHERE remaining > 0;
	             RETURN CASE WHEN FOUND THEN 1 ELSE 0 END;
	           END $$`)
	b.exec(t, `ALTER FUNCTION fanout.maint_operations(timestamptz) RENAME TO maint_operations_orig`)
	b.exec(t, `CREATE FUNCTION fanout.maint_operations(p_now timestamptz DEFAULT now())
	           RETURNS TABLE(func text, arg text) LANGUAGE sql AS $$
	             SELECT * FROM fanout.maint_operations_orig(p_now)
	             UNION ALL SELECT 'public.test_backfill_step', 'events' FROM public.bf_state WHERE remaining > 0
	           $$`)
	s := b.scheduler(t, SchedulerConfig{Backfill: BackfillConfig{TargetLatency: 10 * time.Millisecond, MaxRate: 1000, MinRate: 5}})
	res, err := s.RunJob(b.ctx, discoverJobName)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Rows)
	job := s.jobs["public.test_backfill_step"].job.(*BackfillJob)
	require.Equal(t, DefaultBackfillSchedule, job.Schedule())

	res, err = s.RunJob(b.ctx, "public.test_backfill_step")
	require.NoError(t, err)
	require.EqualValues(t, Result{Calls: 13, Rows: 12}, res)
	require.Equal(t, job.Driver().Rate(), testutil.ToFloat64(s.metrics.bfRate.WithLabelValues("public.test_backfill_step")))
	require.EqualValues(t, 12, testutil.ToFloat64(s.metrics.rows.WithLabelValues("public.test_backfill_step")))
	require.EqualValues(t, 12, b.int(t, `SELECT count(*) FROM public.bf_state, unnest(args) a WHERE a = 'events'`),
		"called with the argument maint_operations listed")

	// More work appears: the next run does all of it.
	b.exec(t, `UPDATE public.bf_state SET remaining = 25`)
	res, err = s.RunJob(b.ctx, "public.test_backfill_step")
	require.NoError(t, err)
	require.EqualValues(t, 25, res.Rows)
	require.EqualValues(t, 37, testutil.ToFloat64(s.metrics.rows.WithLabelValues("public.test_backfill_step")))

	// Nothing due: no step at all.
	res, err = s.RunJob(b.ctx, "public.test_backfill_step")
	require.NoError(t, err)
	require.Equal(t, Result{}, res)
}

// A step that fails for a reason of its own is reported even when the run's
// deadline is within the last 50 ms (it was taken for the budget running out
// and the run reported success); a step cut off by the deadline is not an
// error: the next run goes on.
func TestBackfillStepErrorNearDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bf := NewBackfill(BackfillConfig{MaxSteps: 10})

	ctx, cancel := context.WithTimeout(b.ctx, 40*time.Millisecond)
	defer cancel()
	steps := 0
	_, err := bf.Run(ctx, func(ctx context.Context) (int64, error) {
		steps++
		// The statement runs whatever the deadline (it must fail for its own
		// reason, not be cut off): a real error from the server.
		var n int64
		err := b.Pool.QueryRow(context.WithoutCancel(ctx), `SELECT 1 / (random() * 0)::int`).Scan(&n)
		return n, err
	})
	require.Equal(t, 1, steps)
	require.ErrorContains(t, err, "backfill step 1")
	require.ErrorContains(t, err, "division by zero", "a step error within 50 ms of the deadline is reported")

	ctx, cancel = context.WithTimeout(b.ctx, 40*time.Millisecond)
	defer cancel()
	res, err := bf.Run(ctx, func(ctx context.Context) (int64, error) {
		_, err := b.Pool.Exec(ctx, `SELECT pg_sleep(60)`)
		return 0, err
	})
	require.NoError(t, err, "a step cut off by the run's deadline is not an error")
	require.Zero(t, res.Steps)
}

func TestBackfillConfigRejectsNonFiniteRates(t *testing.T) {
	t.Parallel()
	for _, r := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1} {
		err := SchedulerConfig{Backfill: BackfillConfig{MaxRate: r}}.Validate()
		require.ErrorContains(t, err, "backfill max rate", "max rate %g", r)
		err = SchedulerConfig{Backfill: BackfillConfig{MinRate: r}}.Validate()
		require.ErrorContains(t, err, "backfill min rate", "min rate %g", r)
	}
	require.NoError(t, SchedulerConfig{Backfill: BackfillConfig{MaxRate: 5, MinRate: 1}}.Validate())
}
