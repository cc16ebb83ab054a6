// Package orchestrator is the Go side of pgq-scheduler: migrations
// (Migrate), maintenance jobs on cron (Scheduler, MaintenanceJob,
// BackfillJob, DiscoverJob), leader election among sidecars (Elector),
// adaptive backfill pacing (Backfill), Prometheus metrics and /healthz
// (Scheduler.Handler), and the status report (ReadStats, WriteStatus).
//
// All maintenance logic lives in SQL (schema fanout): the scheduler asks
// fanout.maint_operations() what is due and calls each listed function, in
// its own transaction under SET LOCAL statement_timeout, while it returns
// more than 0. Each service has a Config struct whose zero values take the
// defaults of defaults.go, takes a Clock (tests pass a stub: nothing sleeps
// on cron), and wraps its errors with context.
package orchestrator
