package orchestrator

import (
	"context"
	"time"
)

// BackfillJobConfig configures a BackfillJob.
type BackfillJobConfig struct {
	// Func is the SQL step function as fanout.maint_operations() lists it
	// (one step per call, returns the rows it did). Required.
	Func string
	// Schedule is the cron spec. Default: DefaultBackfillSchedule (5s).
	Schedule string
	// Timeout bounds a whole run (a paced backfill can run long) and is
	// the upper bound of each step's statement_timeout.
	// Default: DefaultJobTimeout (1 minute).
	Timeout time.Duration
	// Backfill configures the adaptive rate limiter (target latency, max
	// rate, steps per run, clock).
	Backfill BackfillConfig
}

func (c BackfillJobConfig) withDefaults() BackfillJobConfig {
	if c.Schedule == "" {
		c.Schedule = DefaultBackfillSchedule
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultJobTimeout
	}
	c.Backfill = c.Backfill.withDefaults()
	return c
}

// BackfillJob runs a backfill step function through the adaptive driver:
// like a MaintenanceJob it asks fanout.maint_operations() what is due, but
// instead of a fixed batch it keeps stepping, paced by the latency of its
// own steps, until the step returns 0, the run's time budget ends, or
// Backfill.MaxSteps steps ran.
type BackfillJob struct {
	cfg    BackfillJobConfig
	db     DB
	driver *Backfill
}

// NewBackfillJob returns the job for cfg.Func on db.
func NewBackfillJob(db DB, cfg BackfillJobConfig) *BackfillJob {
	cfg = cfg.withDefaults()
	return &BackfillJob{cfg: cfg, db: db, driver: NewBackfill(cfg.Backfill)}
}

// Name is the SQL function name.
func (j *BackfillJob) Name() string { return j.cfg.Func }

// Schedule is the job's cron spec.
func (j *BackfillJob) Schedule() string { return j.cfg.Schedule }

// Driver exposes the rate limiter (for metrics).
func (j *BackfillJob) Driver() *Backfill { return j.driver }

// Run does one round; see BackfillJob.
func (j *BackfillJob) Run(ctx context.Context) (Result, error) {
	var res Result
	clk := j.cfg.Backfill.Clock
	args, err := dueArgs(ctx, j.db, j.cfg.Func, clk.Now())
	if err != nil || len(args) == 0 {
		return res, wrapJobErr(j.cfg.Func, err)
	}
	ident, err := resolveFunc(ctx, j.db, j.cfg.Func)
	if err != nil {
		return res, wrapJobErr(j.cfg.Func, err)
	}
	for _, arg := range args {
		br, err := j.driver.Run(ctx, func(ctx context.Context) (int64, error) {
			return callFunc(ctx, j.db, ident, arg, clk.Now(), j.cfg.Timeout)
		})
		res.add(Result{Calls: br.Steps, Rows: br.Rows, Limited: !br.Done})
		if err != nil {
			return res, wrapJobErr(j.cfg.Func, err)
		}
	}
	return res, nil
}
