package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/robfig/cron/v3"
)

// SchedulerConfig configures a Scheduler. Zero values take the defaults of
// defaults.go.
type SchedulerConfig struct {
	// Logger receives JSON-friendly structured logs; every job log carries
	// job=<name>. Default: JSON to stderr.
	Logger *slog.Logger
	// Clock supplies p_now and paces waits. Default RealClock.
	Clock Clock
	// Registry receives the Prometheus metrics. Default: a new registry
	// with the Go and process collectors.
	Registry *prometheus.Registry

	// LeaderID, LeaderName, LeaderTTL configure the Elector.
	LeaderID   string
	LeaderName string
	LeaderTTL  time.Duration

	// ShutdownTimeout is how long Run waits for running jobs after its
	// context ends before cancelling them. Default 30s.
	ShutdownTimeout time.Duration

	// DiscoverSchedule is how often fanout.maint_operations() is asked for
	// functions that have no job yet. Default "@every 10s".
	DiscoverSchedule string
	// DefaultSchedule, when set, is the schedule of every maintenance
	// function without an entry in Schedules. Default: DefaultScheduleFor.
	DefaultSchedule string
	// Schedules overrides the schedule per function name.
	Schedules map[string]string
	// JobTimeout is the per-run timeout (and statement_timeout) of jobs
	// without an entry in Timeouts. Default 1 minute.
	JobTimeout time.Duration
	// Timeouts overrides the timeout per function name.
	Timeouts map[string]time.Duration
	// BatchLimit caps calls per run and argument. Default 100.
	BatchLimit int
	// SkippedDegradedAfter: /healthz says "degraded" while maintenance has
	// been passing a topic by (fanout.maint_skips()) for longer than this.
	// Default DefaultSkippedDegradedAfter.
	SkippedDegradedAfter time.Duration
	// Jitter is the largest random delay before a scheduled run (capped at
	// half the job's interval). Default 1s; negative disables it.
	Jitter time.Duration

	// BackfillMatch is a regular expression: functions whose name matches
	// it are backfill steps and run through the adaptive driver (BackfillJob)
	// instead of a fixed batch. Default "backfill|bitmap_step".
	BackfillMatch string
	// Backfill configures the driver of backfill jobs (target latency,
	// max rate).
	Backfill BackfillConfig
}

func (c SchedulerConfig) withDefaults() SchedulerConfig {
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if c.Clock == nil {
		c.Clock = RealClock{}
	}
	if c.LeaderName == "" {
		c.LeaderName = DefaultLeaderName
	}
	if c.LeaderTTL <= 0 {
		c.LeaderTTL = DefaultLeaderTTL
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.DiscoverSchedule == "" {
		c.DiscoverSchedule = DefaultDiscoverSchedule
	}
	if c.JobTimeout <= 0 {
		c.JobTimeout = DefaultJobTimeout
	}
	if c.BatchLimit <= 0 {
		c.BatchLimit = DefaultBatchLimit
	}
	if c.SkippedDegradedAfter <= 0 {
		c.SkippedDegradedAfter = DefaultSkippedDegradedAfter
	}
	if c.Jitter == 0 {
		c.Jitter = DefaultJitter
	}
	if c.BackfillMatch == "" {
		c.BackfillMatch = DefaultBackfillMatch
	}
	if c.Backfill.Clock == nil {
		c.Backfill.Clock = c.Clock
	}
	c.Backfill = c.Backfill.withDefaults()
	return c
}

// cronParser accepts standard 5-field specs, an optional leading seconds
// field and descriptors (@every 10s, @hourly).
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom |
	cron.Month | cron.Dow | cron.Descriptor)

// ParseSchedule validates a cron spec.
func ParseSchedule(spec string) (cron.Schedule, error) {
	s, err := cronParser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", spec, err)
	}
	return s, nil
}

// entry is a registered job and its run state.
type entry struct {
	job      Job
	sched    cron.Schedule
	interval time.Duration
	timeout  time.Duration
	wrapped  cron.Job // with Recover and SkipIfStillRunning

	mu          sync.Mutex
	registered  time.Time
	runs, errs  int64
	lastRun     time.Time
	lastSuccess time.Time
	lastErr     string
	lastDur     time.Duration
	failStreak  int64 // runs in a row that failed
}

// JobStatus is a snapshot of one job's state.
type JobStatus struct {
	Name        string    `json:"name"`
	Schedule    string    `json:"schedule"`
	Runs        int64     `json:"runs"`
	Errors      int64     `json:"errors"`
	LastRun     time.Time `json:"last_run,omitzero"`
	LastSuccess time.Time `json:"last_success,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
	// LastDuration is how long the last run took.
	LastDuration time.Duration `json:"last_duration_ns,omitempty"`
	// Overdue is true on the leader when the job has not succeeded within
	// its window: by the second firing of its schedule after its last
	// success (or its registration, or this sidecar's election), plus its
	// timeout and jitter.
	Overdue bool `json:"overdue,omitempty"`
	// FailingRuns is how many runs in a row failed (0 after a success).
	FailingRuns int64 `json:"failing_runs,omitempty"`
	// Failing is true on the leader when the last FailingRunsUnhealthy runs
	// or more all failed, even within the job's window.
	Failing bool `json:"failing,omitempty"`
}

// Scheduler runs maintenance on cron as one of possibly several sidecars:
// only the elected leader runs jobs. Jobs come from fanout.maint_operations():
// a discover job registers one MaintenanceJob (or BackfillJob) per function
// it lists, so new SQL maintenance needs no Go change.
type Scheduler struct {
	cfg     SchedulerConfig
	db      DB
	log     *slog.Logger
	elector *Elector
	metrics *metrics
	reg     *prometheus.Registry
	cron    *cron.Cron
	chain   cron.Chain
	isBF    *regexp.Regexp

	mu       sync.Mutex
	jobs     map[string]*entry
	started  time.Time
	stopping bool
	runWG    sync.WaitGroup
	runCtx   context.Context
	cancel   context.CancelFunc
	// stopCtx is cancelled when Run starts stopping (a run waiting out its
	// jitter then does not start).
	stopCtx context.Context
	stopNow context.CancelFunc
	// term lives while this sidecar leads; scheduled runs are cancelled
	// with ErrLeadershipLost when it ends. nil while not leading.
	term       context.Context
	termCancel context.CancelCauseFunc
	inFlight   int // scheduled runs in progress

	noResign bool // tests: simulate a crash (no handover)
}

// Validate checks the schedules and the backfill expression.
func (c SchedulerConfig) Validate() error {
	if err := c.Backfill.Validate(); err != nil { // before defaults: min() would hide a +Inf MinRate
		return fmt.Errorf("scheduler: %w", err)
	}
	c = c.withDefaults()
	for fn, spec := range c.Schedules {
		if _, err := ParseSchedule(spec); err != nil {
			return fmt.Errorf("scheduler: %s: %w", fn, err)
		}
	}
	for _, spec := range []string{c.DiscoverSchedule, c.DefaultSchedule} {
		if spec == "" {
			continue
		}
		if _, err := ParseSchedule(spec); err != nil {
			return fmt.Errorf("scheduler: %w", err)
		}
	}
	if _, err := regexp.Compile(c.BackfillMatch); err != nil {
		return fmt.Errorf("scheduler: backfill match: %w", err)
	}
	if c.LeaderTTL > time.Hour {
		return fmt.Errorf("scheduler: leader TTL %s: at most 1h", c.LeaderTTL)
	}
	return nil
}

// NewScheduler validates cfg and returns a scheduler on db. Call Run.
func NewScheduler(db DB, cfg SchedulerConfig) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	isBF := regexp.MustCompile(cfg.BackfillMatch)
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	s := &Scheduler{
		cfg:  cfg,
		db:   db,
		log:  cfg.Logger,
		reg:  reg,
		jobs: map[string]*entry{},
		isBF: isBF,
	}
	s.runCtx, s.cancel = context.WithCancel(context.Background())
	s.stopCtx, s.stopNow = context.WithCancel(context.Background())
	var electConn *pgx.ConnConfig
	if p, ok := db.(*pgxpool.Pool); ok {
		electConn = electionConnConfig(p.Config().ConnConfig)
	}
	s.metrics = newMetrics(reg, func() bool { return s.elector.IsLeader() })
	reg.MustRegister(newStatsCollector(db, cfg.LeaderName, cfg.Logger))
	cl := cronLogger{s.log}
	s.chain = cron.NewChain(cron.Recover(cl), cron.SkipIfStillRunning(cl))
	s.cron = cron.New(cron.WithParser(cronParser), cron.WithLogger(cl))
	s.elector = NewElector(db, ElectorConfig{
		ID: cfg.LeaderID, Name: cfg.LeaderName, TTL: cfg.LeaderTTL,
		Clock: cfg.Clock, Logger: s.log,
		OnChange: s.onLeaderChange, ConnConfig: electConn,
	})
	if err := s.register(NewDiscoverJob(db, DiscoverConfig{
		Schedule: cfg.DiscoverSchedule, Clock: cfg.Clock, Register: s.ensureMaintenanceJob,
	}), cfg.JobTimeout); err != nil {
		return nil, err
	}
	return s, nil
}

// Registry is where the scheduler's metrics live.
func (s *Scheduler) Registry() *prometheus.Registry { return s.reg }

// IsLeader tells whether this sidecar currently runs the jobs.
func (s *Scheduler) IsLeader() bool { return s.elector.IsLeader() }

// Register adds a job (beside those discovered from the database). Its
// timeout is the one configured for its name.
func (s *Scheduler) Register(j Job) error { return s.register(j, s.timeoutFor(j.Name())) }

func (s *Scheduler) timeoutFor(name string) time.Duration {
	if t, ok := s.cfg.Timeouts[name]; ok && t > 0 {
		return t
	}
	return s.cfg.JobTimeout
}

func (s *Scheduler) scheduleFor(name string) string { return scheduleFor(s.cfg, s.isBF, name) }

func scheduleFor(cfg SchedulerConfig, isBF *regexp.Regexp, name string) string {
	if spec, ok := cfg.Schedules[name]; ok {
		return spec
	}
	if cfg.DefaultSchedule != "" {
		return cfg.DefaultSchedule
	}
	return DefaultScheduleFor(name, isBF.MatchString(name))
}

func (s *Scheduler) register(j Job, timeout time.Duration) error {
	sched, err := ParseSchedule(j.Schedule())
	if err != nil {
		return fmt.Errorf("register %s: %w", j.Name(), err)
	}
	now := s.cfg.Clock.Now()
	next := sched.Next(now)
	e := &entry{job: j, sched: sched, interval: sched.Next(next).Sub(next), timeout: timeout, registered: now}
	e.wrapped = s.chain.Then(cron.FuncJob(func() { s.scheduled(e) }))
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.jobs[j.Name()]; ok {
		return fmt.Errorf("register %s: a job of that name exists", j.Name())
	}
	s.jobs[j.Name()] = e
	var bf *Backfill
	if bj, ok := j.(*BackfillJob); ok {
		bf = bj.Driver()
	}
	s.metrics.initJob(j.Name(), bf)
	s.cron.Schedule(sched, e.wrapped)
	s.log.Info("job registered", "job", j.Name(), "schedule", j.Schedule(), "timeout", timeout.String())
	return nil
}

// ensureMaintenanceJob registers the job of a function that
// fanout.maint_operations() listed, unless it exists. A due job that has
// not run yet (new, or registered at start) runs at once (on the leader).
// Reports whether it was new.
func (s *Scheduler) ensureMaintenanceJob(fn string) (bool, error) {
	isNew, err := s.registerMaintenance(fn)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	e := s.jobs[fn]
	s.mu.Unlock()
	e.mu.Lock()
	ran := !e.lastRun.IsZero()
	e.mu.Unlock()
	if !ran {
		go e.wrapped.Run()
	}
	return isNew, nil
}

// registerMaintenance registers the job of maintenance function fn unless
// it exists. Reports whether it was new.
func (s *Scheduler) registerMaintenance(fn string) (bool, error) {
	s.mu.Lock()
	_, ok := s.jobs[fn]
	s.mu.Unlock()
	if ok {
		return false, nil
	}
	var j Job
	if s.isBF.MatchString(fn) {
		j = NewBackfillJob(s.db, BackfillJobConfig{
			Func: fn, Schedule: s.scheduleFor(fn), Timeout: s.timeoutFor(fn), Backfill: s.cfg.Backfill,
		})
	} else {
		j = NewMaintenanceJob(s.db, MaintenanceConfig{
			Func: fn, Schedule: s.scheduleFor(fn), BatchLimit: s.cfg.BatchLimit,
			Timeout: s.timeoutFor(fn), Clock: s.cfg.Clock,
		})
	}
	if err := s.register(j, s.timeoutFor(fn)); err != nil {
		return false, err
	}
	return true, nil
}

// MaintenanceFunc is one maintenance function of the installed schema
// (fanout.maint_functions()) with the schedule this scheduler gives it.
type MaintenanceFunc struct {
	Func     string `json:"func"`
	Purpose  string `json:"purpose"`
	Schedule string `json:"schedule"`
}

// MaintenanceFuncs lists every maintenance function the installed schema
// has (due or not) with the schedule that cfg's rules give it: --schedule,
// else --default-schedule, else the built-in default. A schema without
// fanout.maint_functions() (older than this binary) yields none.
func MaintenanceFuncs(ctx context.Context, db DB, cfg SchedulerConfig) ([]MaintenanceFunc, error) {
	cfg = cfg.withDefaults()
	isBF, err := regexp.Compile(cfg.BackfillMatch)
	if err != nil {
		return nil, fmt.Errorf("backfill match: %w", err)
	}
	var out []MaintenanceFunc
	rows, err := db.Query(ctx, `SELECT func, purpose FROM fanout.maint_functions() ORDER BY 1`)
	if err == nil {
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (MaintenanceFunc, error) {
			var f MaintenanceFunc
			return f, r.Scan(&f.Func, &f.Purpose)
		})
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42883" {
			return nil, nil
		}
		return nil, fmt.Errorf("maint_functions: %w", err)
	}
	for i := range out {
		out[i].Schedule = scheduleFor(cfg, isBF, out[i].Func)
	}
	return out, nil
}

// ErrLeadershipLost is the cause (context.Cause) of a scheduled run's
// context when this sidecar lost leadership while the run was in flight:
// another sidecar may be running the same job.
var ErrLeadershipLost = errors.New("scheduler: leadership lost")

// electionConnConfig is the pool's connection settings for the election's
// own connection, named "<application_name> election" in pg_stat_activity.
func electionConnConfig(cc *pgx.ConnConfig) *pgx.ConnConfig {
	cc = cc.Copy()
	name := cc.RuntimeParams["application_name"]
	if name == "" {
		name = DefaultLeaderName
	}
	cc.RuntimeParams["application_name"] = name + " election"
	return cc
}

// scheduled is what cron runs: on the leader only, after jitter. The run's
// context ends when leadership is lost; after the jitter it starts only if
// the scheduler is not stopping and still leads.
func (s *Scheduler) scheduled(e *entry) {
	if !s.elector.IsLeader() {
		return
	}
	s.mu.Lock()
	term := s.term
	if s.stopping || term == nil {
		s.mu.Unlock()
		return
	}
	s.runWG.Add(1)
	s.inFlight++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
		s.runWG.Done()
	}()
	ctx, cancel := context.WithCancelCause(s.runCtx)
	defer cancel(nil)
	stopTerm := context.AfterFunc(term, func() { cancel(context.Cause(term)) })
	defer stopTerm()
	if j := min(s.cfg.Jitter, e.interval/2); j > 0 {
		jctx, jcancel := context.WithCancel(ctx)
		stopJitter := context.AfterFunc(s.stopCtx, jcancel)
		err := s.cfg.Clock.Sleep(jctx, rand.N(j))
		stopJitter()
		jcancel()
		if err != nil {
			return
		}
	}
	s.mu.Lock()
	stopping := s.stopping
	s.mu.Unlock()
	if stopping || ctx.Err() != nil || !s.elector.IsLeader() {
		return
	}
	_, _ = s.runEntry(ctx, e)
}

// RunJob runs the named job once, now, whether or not this sidecar leads
// (the SQL functions' advisory locks still keep two callers apart), with
// the same timeout, metrics and logs as a scheduled run.
func (s *Scheduler) RunJob(ctx context.Context, name string) (Result, error) {
	s.mu.Lock()
	e, ok := s.jobs[name]
	s.mu.Unlock()
	if !ok {
		return Result{}, fmt.Errorf("no job %q", name)
	}
	return s.runEntry(ctx, e)
}

func (s *Scheduler) runEntry(ctx context.Context, e *entry) (res Result, err error) {
	name := e.job.Name()
	log := s.log.With("job", name)
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: panic: %v", name, r)
		}
		s.record(e, log, res, err, time.Since(start))
	}()
	return e.job.Run(ctx)
}

func (s *Scheduler) record(e *entry, log *slog.Logger, res Result, err error, d time.Duration) {
	name := e.job.Name()
	now := s.cfg.Clock.Now()
	s.metrics.runs.WithLabelValues(name).Inc()
	s.metrics.duration.WithLabelValues(name).Observe(d.Seconds())
	s.metrics.rows.WithLabelValues(name).Add(float64(max(res.Rows, 0)))
	s.metrics.calls.WithLabelValues(name).Add(float64(res.Calls))
	if name == SequenceGapAlertsFunc {
		s.metrics.gapAlerts.Add(float64(max(res.Rows, 0)))
	}
	if res.Limited {
		s.metrics.limited.WithLabelValues(name).Inc()
	}
	if bj, ok := e.job.(*BackfillJob); ok {
		s.metrics.bfRate.WithLabelValues(name).Set(bj.Driver().Rate())
	}
	e.mu.Lock()
	e.runs++
	e.lastRun = now
	e.lastDur = d
	if err != nil {
		resetOnReadOnly(s.db, err)
		e.errs++
		e.failStreak++
		e.lastErr = err.Error()
	} else {
		e.lastSuccess = now
		e.lastErr = ""
		e.failStreak = 0
	}
	e.mu.Unlock()
	attrs := []any{"duration_ms", float64(d.Microseconds()) / 1000, "calls", res.Calls, "rows", res.Rows, "limited", res.Limited}
	switch {
	case err != nil:
		s.metrics.errors.WithLabelValues(name).Inc()
		log.Error("job failed", append(attrs, "error", err.Error())...)
	case res.Rows > 0 || res.Limited:
		s.metrics.lastSuccess.WithLabelValues(name).Set(float64(now.UnixNano()) / 1e9)
		log.Info("job done", attrs...)
	default:
		s.metrics.lastSuccess.WithLabelValues(name).Set(float64(now.UnixNano()) / 1e9)
		log.Debug("job done", attrs...)
	}
}

func (s *Scheduler) onLeaderChange(leader bool) {
	s.mu.Lock()
	if s.termCancel != nil {
		s.termCancel(ErrLeadershipLost)
		s.term, s.termCancel = nil, nil
		if !leader && s.inFlight > 0 {
			s.log.Warn("leadership lost: cancelling the runs in flight", "runs", s.inFlight)
		}
	}
	if leader {
		s.term, s.termCancel = context.WithCancelCause(context.Background())
	}
	s.mu.Unlock()
	if leader {
		// Look for work at once instead of waiting for the next tick.
		s.mu.Lock()
		e := s.jobs[discoverJobName]
		s.mu.Unlock()
		if e != nil {
			go e.wrapped.Run()
		}
	}
}

// Jobs returns the state of every registered job, by name.
func (s *Scheduler) Jobs() []JobStatus {
	s.mu.Lock()
	es := make([]*entry, 0, len(s.jobs))
	for _, e := range s.jobs {
		es = append(es, e)
	}
	s.mu.Unlock()
	leader := s.elector.IsLeader()
	since := s.elector.Since()
	now := s.cfg.Clock.Now()
	out := make([]JobStatus, 0, len(es))
	for _, e := range es {
		e.mu.Lock()
		st := JobStatus{
			Name: e.job.Name(), Schedule: e.job.Schedule(), Runs: e.runs, Errors: e.errs,
			LastRun: e.lastRun, LastSuccess: e.lastSuccess, LastError: e.lastErr, LastDuration: e.lastDur,
			FailingRuns: e.failStreak,
		}
		ref := maxTime(e.lastSuccess, e.registered, since)
		e.mu.Unlock()
		st.Overdue = leader && e.overdue(ref, now, max(s.cfg.Jitter, 0))
		st.Failing = leader && st.FailingRuns >= FailingRunsUnhealthy
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b JobStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// overdue tells whether a job whose window opened at ref (its last success,
// or when it was registered or this sidecar was elected, whichever is
// latest) has missed its window at now: the second firing of its own
// schedule after ref, plus its timeout and jitter. It follows the schedule
// itself, so uneven gaps count as they are: "0 9-17 * * *" that last
// succeeded at 17:00 is due again by 10:00 the next day, not two hours
// later; "0 3 * * 1-5" that succeeded on Friday by Tuesday. A schedule that
// never fires again is never overdue.
func (e *entry) overdue(ref, now time.Time, jitter time.Duration) bool {
	second := e.sched.Next(e.sched.Next(ref))
	if second.IsZero() {
		return false
	}
	return now.After(second.Add(e.timeout + jitter))
}

func maxTime(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}

// Run takes part in leader election and runs the jobs on the leader until
// ctx ends; then it stops taking new runs, waits for running ones up to
// ShutdownTimeout (then cancels them), and resigns leadership so that a
// standby takes over at once. It returns nil on a clean shutdown.
func (s *Scheduler) Run(ctx context.Context) error {
	s.mu.Lock()
	if !s.started.IsZero() {
		s.mu.Unlock()
		return errors.New("scheduler: Run called twice")
	}
	s.started = s.cfg.Clock.Now()
	s.mu.Unlock()
	s.log.Info("scheduler starting", "leader_id", s.elector.ID(), "leader_ttl", s.cfg.LeaderTTL.String())
	s.registerKnownMaintenance(ctx)

	electCtx, stopElect := context.WithCancel(context.Background())
	elected := make(chan struct{})
	go func() { defer close(elected); s.elector.Run(electCtx) }()
	s.cron.Start()

	<-ctx.Done()
	s.log.Info("scheduler stopping", "shutdown_timeout", s.cfg.ShutdownTimeout.String())
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	s.stopNow()
	s.cron.Stop()

	// Keep renewing the lease while running jobs finish.
	done := make(chan struct{})
	go func() { s.runWG.Wait(); close(done) }()
	var err error
	t := time.NewTimer(s.cfg.ShutdownTimeout)
	select {
	case <-done:
		t.Stop()
	case <-t.C:
		s.log.Warn("running jobs did not finish within the shutdown timeout; cancelling them")
		s.cancel()
		<-done
		err = errors.New("scheduler: running jobs were cancelled at the shutdown timeout")
	}
	s.cancel()
	stopElect()
	<-elected
	defer s.elector.Close()
	if s.noResign {
		return err
	}
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if rerr := s.elector.Resign(rctx); rerr != nil {
		s.log.Warn("resign failed; a standby takes over when the lease expires", "error", rerr)
	}
	s.log.Info("scheduler stopped")
	return err
}

// registerKnownMaintenance registers a job for every maintenance function
// of the installed schema, due or not, and logs them with their schedules,
// so that the jobs show at once (in the log, /metrics and /healthz) rather
// than one by one as fanout.maint_operations() first lists them. Failing
// here is not fatal: the discover job finds the functions later.
func (s *Scheduler) registerKnownMaintenance(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, s.cfg.JobTimeout)
	defer cancel()
	fns, err := MaintenanceFuncs(lctx, s.db, s.cfg)
	if err != nil {
		s.log.Warn("cannot list the maintenance functions; the discover job will find them", "error", err)
		return
	}
	list := make([]string, 0, len(fns))
	for _, f := range fns {
		if _, err := s.registerMaintenance(f.Func); err != nil {
			s.log.Warn("cannot register a maintenance function", "func", f.Func, "error", err)
			continue
		}
		list = append(list, f.Func+" "+f.Schedule)
	}
	s.log.Info("maintenance functions", "count", len(list), "functions", list,
		"discover_schedule", s.cfg.DiscoverSchedule)
}

// cronLogger adapts slog to cron.Logger.
type cronLogger struct{ l *slog.Logger }

func (c cronLogger) Info(msg string, kv ...any) { c.l.Debug("cron: "+msg, kv...) }
func (c cronLogger) Error(err error, msg string, kv ...any) {
	c.l.Error("cron: "+msg, append(kv, "error", fmt.Sprint(err))...)
}
