package orchestrator

import (
	"context"
)

// Job is one unit of scheduled work. The scheduler runs it on its cron
// schedule, only on the leader, never twice at once (SkipIfStillRunning),
// under a per-job timeout, and records its Result in metrics and logs.
type Job interface {
	// Name identifies the job in logs, metrics and flags; for maintenance
	// jobs it is the SQL function as fanout.maint_operations() lists it.
	Name() string
	// Schedule is a robfig/cron spec: "@every 10s", "*/5 * * * *", or with
	// an optional leading seconds field.
	Schedule() string
	// Run does one round of work. ctx carries the job's timeout.
	Run(ctx context.Context) (Result, error)
}

// Result is what one run of a job did.
type Result struct {
	// Calls is how many SQL calls the run made.
	Calls int
	// Rows is the work done as the called functions reported it (the sum
	// of their return values).
	Rows int64
	// Limited is true when the run stopped at its batch limit (or time
	// budget) while the function still reported work: the next run goes on.
	Limited bool
}

func (r *Result) add(o Result) {
	r.Calls += o.Calls
	r.Rows += o.Rows
	r.Limited = r.Limited || o.Limited
}
