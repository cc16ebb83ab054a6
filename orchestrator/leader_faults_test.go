package orchestrator

import (
	"context"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// ownPool is a pool of maxConns connections on the test database, as
// pgq-scheduler makes one (--max-conns).
func (b *bundle) ownPool(t *testing.T, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(b.URL)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// lockedJob waits for an advisory lock the test holds, on a connection of
// the scheduler's pool, until its run is cancelled.
type lockedJob struct {
	name    string
	db      DB
	started chan struct{}
}

func (j *lockedJob) Name() string     { return j.name }
func (j *lockedJob) Schedule() string { return "@every 1s" }
func (j *lockedJob) Run(ctx context.Context) (Result, error) {
	j.started <- struct{}{}
	_, err := j.db.Exec(ctx, `SELECT pg_advisory_lock(741741)`)
	if err == nil {
		_, err = j.db.Exec(ctx, `SELECT pg_advisory_unlock(741741)`)
	}
	return Result{}, err
}

// Four jobs stuck on a lock hold every connection of a pool of
// four (the default --max-conns); the leader keeps renewing its lease on its
// own connection instead of dropping out.
func TestElectionSurvivesAnExhaustedPool(t *testing.T) {
	t.Parallel()
	b := setup(t)
	holder := b.Conn(t)
	_, err := holder.Exec(b.ctx, `SELECT pg_advisory_lock(741741)`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = holder.Exec(context.Background(), `SELECT pg_advisory_unlock_all()`) })

	pool := b.ownPool(t, 4)
	const ttl = 4 * time.Second
	s, err := NewScheduler(pool, SchedulerConfig{Logger: b.log, Jitter: -1, LeaderID: "busy", LeaderTTL: ttl,
		DiscoverSchedule: "@yearly", JobTimeout: 5 * time.Minute, ShutdownTimeout: time.Second})
	require.NoError(t, err)
	started := make(chan struct{}, 100)
	for i := range 4 {
		require.NoError(t, s.Register(&lockedJob{name: "stuck" + string(rune('a'+i)), db: pool, started: started}))
	}
	start(t, s)
	for range 4 {
		select {
		case <-started:
		case <-time.After(time.Minute):
			t.Fatal("the four jobs did not all start")
		}
	}
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%pg_advisory_lock(741741)%'`).Scan(&waiting))
		return waiting == 4
	}, time.Minute, 20*time.Millisecond, "every pool connection is stuck on the lock")
	require.Equal(t, int32(4), pool.Stat().AcquiredConns())

	// Renewals go on: the lease runs on, well past two TTLs, and the
	// sidecar never stops leading.
	first := b.leaseExpiry(t)
	var lost atomic.Bool
	require.Eventually(t, func() bool {
		if !s.IsLeader() {
			lost.Store(true)
			return true
		}
		return b.leaseExpiry(t).After(first.Add(2 * ttl))
	}, time.Minute, 50*time.Millisecond, "the lease is renewed while the pool is exhausted")
	require.False(t, lost.Load(), "the leader dropped out while jobs held every pool connection")
	require.Equal(t, "busy", b.leaderRow(t))
	require.NotContains(t, b.logs.String(), "no longer leader")
	_, _ = holder.Exec(b.ctx, `SELECT pg_advisory_unlock_all()`)
}

// electionPID is the backend of s's election connection.
func electionPID(t *testing.T, s *Scheduler) int {
	t.Helper()
	s.elector.connMu.Lock()
	defer s.elector.connMu.Unlock()
	require.NotNil(t, s.elector.conn, "the election has its own connection")
	return int(s.elector.conn.PgConn().PID())
}

// A leader whose renewals stop getting through (its election
// backend is paused with SIGSTOP: a real pause, as a partition or a stalled
// server gives) logs that it lost leadership once its lease ran out, and
// its run in flight is cancelled (cause ErrLeadershipLost) instead of going
// on beside the new leader's.
func TestLeaderLossCancelsRunsInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const ttl = 2 * time.Second
	cfg := leaderCfg("paused", ttl)
	cfg.DiscoverSchedule = "@yearly"
	a, err := NewScheduler(b.ownPool(t, 4), func() SchedulerConfig { cfg.Logger = b.log; cfg.Jitter = -1; return cfg }())
	require.NoError(t, err)
	j := newBlockingJob()
	var cause atomic.Value
	require.NoError(t, a.Register(&causeJob{blockingJob: j, cause: &cause}))
	start(t, a)
	select {
	case <-j.started:
	case <-time.After(time.Minute):
		t.Fatal("the job never started")
	}
	require.True(t, a.IsLeader())

	pid := electionPID(t, a)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	standby := b.scheduler(t, leaderCfg("standby", ttl))
	start(t, standby)

	require.Eventually(t, j.canceled.Load, time.Minute, 20*time.Millisecond,
		"the run in flight is cancelled when leadership is lost")
	require.ErrorIs(t, cause.Load().(error), ErrLeadershipLost)
	require.Contains(t, b.logs.String(), `"msg":"no longer leader","leader_id":"paused"`)
	require.Contains(t, b.logs.String(), `leadership lost: cancelling the runs in flight`)
	resume()
	require.Eventually(t, func() bool { return standby.IsLeader() || a.IsLeader() }, time.Minute, 20*time.Millisecond)
}

// causeJob is a blockingJob that records its context's cause.
type causeJob struct {
	*blockingJob
	cause *atomic.Value
}

func (j *causeJob) Run(ctx context.Context) (Result, error) {
	res, err := j.blockingJob.Run(ctx)
	if c := context.Cause(ctx); c != nil {
		j.cause.Store(c)
	}
	return res, err
}

// gateClock is the wall clock, except that short sleeps (the scheduler's
// jitter; the elector's sleeps are longer here) wait until the test opens
// the gate or their context ends.
type gateClock struct {
	RealClock
	sleeping chan struct{}
	gate     chan struct{}
}

func (c *gateClock) Sleep(ctx context.Context, d time.Duration) error {
	if d >= time.Second {
		return c.RealClock.Sleep(ctx, d)
	}
	select {
	case c.sleeping <- struct{}{}:
	default:
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.gate:
		return nil
	}
}

// A run waiting out its jitter when the scheduler is told to
// stop does not start afterwards.
func TestJitterSleepRechecksStopping(t *testing.T) {
	t.Parallel()
	b := setup(t)
	clk := &gateClock{sleeping: make(chan struct{}, 1), gate: make(chan struct{})}
	s := b.scheduler(t, SchedulerConfig{Clock: clk, LeaderID: "jitter", LeaderTTL: 30 * time.Second,
		DiscoverSchedule: "@yearly", Jitter: 500 * time.Millisecond, ShutdownTimeout: 5 * time.Second})
	j := newBlockingJob()
	require.NoError(t, s.Register(j))
	stop := start(t, s)
	select {
	case <-clk.sleeping:
	case <-time.After(time.Minute):
		t.Fatal("no run waited out its jitter")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.stopping
	}, time.Minute, 5*time.Millisecond, "the scheduler is stopping")
	close(clk.gate) // the jitter is over (if the sleep was not cut short)
	require.NoError(t, <-stopped)
	// Every run waits out its jitter at the gate (the discover job's, run
	// at election, included), so none may have run at all.
	require.Zero(t, runs(s), "a run started after the scheduler was told to stop")
	require.Empty(t, j.started)
	require.True(t, strings.Contains(b.logs.String(), "scheduler stopped"))
}
