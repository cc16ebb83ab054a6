package orchestrator

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

const discoverJobName = "discover"

// DiscoverConfig configures the DiscoverJob.
type DiscoverConfig struct {
	// Schedule is the cron spec. Default: DefaultDiscoverSchedule (10s).
	Schedule string
	// Clock supplies p_now. Default RealClock.
	Clock Clock
	// Register is called with every function maint_operations() lists and
	// reports whether a job was newly created for it. Required.
	Register func(fn string) (bool, error)
}

func (c DiscoverConfig) withDefaults() DiscoverConfig {
	if c.Schedule == "" {
		c.Schedule = DefaultDiscoverSchedule
	}
	if c.Clock == nil {
		c.Clock = RealClock{}
	}
	return c
}

// DiscoverJob asks fanout.maint_operations() which maintenance functions
// are due and hands each to Register, which creates a job for a function
// seen for the first time. This is how the scheduler learns of maintenance
// that later schema versions add, without a Go change.
type DiscoverJob struct {
	cfg DiscoverConfig
	db  DB
}

// NewDiscoverJob returns the discover job on db.
func NewDiscoverJob(db DB, cfg DiscoverConfig) *DiscoverJob {
	return &DiscoverJob{cfg: cfg.withDefaults(), db: db}
}

// Name is "discover".
func (j *DiscoverJob) Name() string { return discoverJobName }

// Schedule is the job's cron spec.
func (j *DiscoverJob) Schedule() string { return j.cfg.Schedule }

// Run lists due functions; Result.Rows is how many jobs it created.
func (j *DiscoverJob) Run(ctx context.Context) (Result, error) {
	res := Result{Calls: 1}
	rows, err := j.db.Query(ctx,
		`SELECT DISTINCT func FROM fanout.maint_operations($1) ORDER BY 1`, j.cfg.Clock.Now())
	if err != nil {
		return res, fmt.Errorf("discover: maint_operations: %w", err)
	}
	fns, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return res, fmt.Errorf("discover: maint_operations: %w", err)
	}
	for _, fn := range fns {
		isNew, err := j.cfg.Register(fn)
		if err != nil {
			return res, fmt.Errorf("discover: %w", err)
		}
		if isNew {
			res.Rows++
		}
	}
	return res, nil
}
