package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// MaintenanceConfig configures a MaintenanceJob.
type MaintenanceConfig struct {
	// Func is the SQL maintenance function, as fanout.maint_operations()
	// lists it (e.g. "fanout._cleanup_partitions"). Required.
	Func string
	// Schedule is the cron spec. Default: DefaultScheduleFor(Func).
	Schedule string
	// BatchLimit caps the calls per run for each (function, argument) that
	// is due; the next run continues. Default: DefaultBatchLimit (100).
	BatchLimit int
	// Timeout is the statement_timeout of each call (SET LOCAL, in the
	// call's own transaction); the scheduler also bounds the whole run by
	// it. Default: DefaultJobTimeout (1 minute).
	Timeout time.Duration
	// Clock supplies p_now. Default: RealClock.
	Clock Clock
}

func (c MaintenanceConfig) withDefaults() MaintenanceConfig {
	if c.Schedule == "" {
		c.Schedule = DefaultScheduleFor(c.Func, false)
	}
	if c.BatchLimit <= 0 {
		c.BatchLimit = DefaultBatchLimit
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultJobTimeout
	}
	if c.Clock == nil {
		c.Clock = RealClock{}
	}
	return c
}

// MaintenanceJob runs one SQL maintenance function: each run asks
// fanout.maint_operations() whether (and with which arguments) the function
// is due, then calls it, each call in its own transaction, again while it
// returns > 0, at most BatchLimit times per argument. Which functions exist
// is the database's business: the scheduler creates one MaintenanceJob per
// function that maint_operations() has ever listed.
type MaintenanceJob struct {
	cfg MaintenanceConfig
	db  DB
}

// NewMaintenanceJob returns the job for cfg.Func on db.
func NewMaintenanceJob(db DB, cfg MaintenanceConfig) *MaintenanceJob {
	return &MaintenanceJob{cfg: cfg.withDefaults(), db: db}
}

// Name is the SQL function name.
func (j *MaintenanceJob) Name() string { return j.cfg.Func }

// Schedule is the job's cron spec.
func (j *MaintenanceJob) Schedule() string { return j.cfg.Schedule }

// Run does one round; see MaintenanceJob.
func (j *MaintenanceJob) Run(ctx context.Context) (Result, error) {
	var res Result
	args, err := dueArgs(ctx, j.db, j.cfg.Func, j.cfg.Clock.Now())
	if err != nil || len(args) == 0 {
		return res, wrapJobErr(j.cfg.Func, err)
	}
	ident, err := resolveFunc(ctx, j.db, j.cfg.Func)
	if err != nil {
		return res, wrapJobErr(j.cfg.Func, err)
	}
	for _, arg := range args {
		r, err := j.drain(ctx, ident, arg)
		res.add(r)
		if err != nil {
			return res, wrapJobErr(j.cfg.Func, err)
		}
	}
	return res, nil
}

// drain calls the function for one argument until it reports no work or
// the batch limit is reached.
func (j *MaintenanceJob) drain(ctx context.Context, ident string, arg *string) (Result, error) {
	var res Result
	for res.Calls < j.cfg.BatchLimit {
		n, err := callFunc(ctx, j.db, ident, arg, j.cfg.Clock.Now(), j.cfg.Timeout)
		if err != nil {
			return res, fmt.Errorf("call %d%s: %w", res.Calls+1, argText(arg), err)
		}
		res.Calls++
		res.Rows += n
		if n <= 0 {
			return res, nil
		}
	}
	res.Limited = true
	return res, nil
}

func argText(arg *string) string {
	if arg == nil {
		return ""
	}
	return fmt.Sprintf(" (arg %q)", *arg)
}

func wrapJobErr(name string, err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &pgErr) && pgErr.Code == "57014") {
		return fmt.Errorf("%s: timed out: %w", name, err)
	}
	return fmt.Errorf("%s: %w", name, err)
}
