package orchestrator

import (
	"strings"
	"time"
)

// Defaults of every setting, in one place. The CLI shows the same values in
// its --help and the README documents them.
const (
	DefaultLeaderName      = "pgq-scheduler"
	DefaultLeaderTTL       = 15 * time.Second
	DefaultShutdownTimeout = 30 * time.Second
	DefaultJobTimeout      = time.Minute
	DefaultBatchLimit      = 100
	// DefaultSkippedDegradedAfter is how long maintenance may pass one topic
	// by (fanout.maint_skips(): another transaction holds a lock it needs)
	// before /healthz says "degraded".
	DefaultSkippedDegradedAfter = 10 * time.Minute
	// FailingRunsUnhealthy is how many failed runs in a row of one job
	// (discover included) turn /healthz to 503 even before the job is overdue.
	FailingRunsUnhealthy    = 3
	DefaultJitter           = time.Second
	DefaultSchedule         = "@every 10s"
	DefaultCleanupSchedule  = "@every 30s"
	DefaultBackfillSchedule = "@every 5s"
	DefaultDiscoverSchedule = "@every 10s"
	DefaultBackfillMatch    = "backfill|bitmap_step" // a regular expression

	DefaultBackfillTargetLatency = 10 * time.Millisecond
	DefaultBackfillMaxRate       = 100.0 // steps per second
	DefaultBackfillMinRate       = 1.0   // steps per second
	DefaultBackfillWindow        = 20    // steps the p95 is taken over
	DefaultBackfillMaxSteps      = 10000 // steps per run

	// statsTimeout bounds the queries behind /metrics and /healthz.
	statsTimeout = 5 * time.Second
)

// DefaultScheduleFor is the schedule of a maintenance function when neither
// flags nor the config file name one: backfill steps run every 5s (each run
// goes on as long as the adaptive rate and its timeout allow), functions
// whose name contains "cleanup" every 30s, everything else every 10s.
func DefaultScheduleFor(fn string, backfill bool) string {
	switch {
	case backfill:
		return DefaultBackfillSchedule
	case strings.Contains(fn, "cleanup"):
		return DefaultCleanupSchedule
	default:
		return DefaultSchedule
	}
}
