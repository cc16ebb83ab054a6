package orchestrator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// leaderCfg is a scheduler config for election tests: a short TTL and a
// discover job every second, so the leader visibly runs jobs.
func leaderCfg(id string, ttl time.Duration) SchedulerConfig {
	return SchedulerConfig{LeaderID: id, LeaderTTL: ttl, DiscoverSchedule: "@every 1s", ShutdownTimeout: 5 * time.Second}
}

func runs(s *Scheduler) int64 {
	var n int64
	for _, j := range s.Jobs() {
		n += j.Runs
	}
	return n
}

// leaseExpiry is when the current lease of role pgq-scheduler runs out
// (database clock).
func (b *bundle) leaseExpiry(t *testing.T) time.Time {
	t.Helper()
	var at time.Time
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		`SELECT expires_at FROM fanout.leader WHERE name = 'pgq-scheduler'`).Scan(&at))
	return at
}

// electedAt is when the current leader of role pgq-scheduler was elected.
func (b *bundle) electedAt(t *testing.T) time.Time {
	t.Helper()
	var at time.Time
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		`SELECT elected_at FROM fanout.leader WHERE name = 'pgq-scheduler'`).Scan(&at))
	return at
}

func (b *bundle) leaderRow(t *testing.T) string {
	t.Helper()
	var id string
	err := b.Pool.QueryRow(b.ctx, `SELECT coalesce(max(leader_id), '') FROM fanout.leader
	                               WHERE name = 'pgq-scheduler' AND expires_at > clock_timestamp()`).Scan(&id)
	require.NoError(t, err)
	return id
}

// Two schedulers on one database: exactly one leads and runs jobs; when it
// dies without resigning (context cancelled, no handover) the other takes
// over within the TTL and runs the jobs from then on.
func TestLeaderFailover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Renewed every ttl/3: with 2 s a stall of about 1.3 s on a loaded
	// machine let the standby take over before the simulated crash.
	const ttl = 5 * time.Second
	a := b.scheduler(t, leaderCfg("a", ttl))
	stopA := start(t, a)
	require.Eventually(t, a.IsLeader, time.Minute, 20*time.Millisecond, "the first sidecar is elected")
	c := b.scheduler(t, leaderCfg("c", ttl))
	start(t, c)
	require.Eventually(t, func() bool { return c.elector.attempts.Load() > 0 }, time.Minute, 10*time.Millisecond,
		"the standby has tried and lost")

	require.Eventually(t, func() bool { return runs(a) >= 2 }, time.Minute, 50*time.Millisecond, "the leader runs jobs")
	require.False(t, c.IsLeader())
	require.Zero(t, runs(c), "the standby runs nothing")
	require.Equal(t, "a", b.leaderRow(t))

	// Crash: no resign, the lease stays in the table until it expires.
	a.noResign = true
	require.NoError(t, stopA())
	killed := time.Now()
	require.Equal(t, "a", b.leaderRow(t), "a crashed leader leaves its lease")
	expired := b.leaseExpiry(t)
	require.Eventually(t, c.IsLeader, time.Minute, 20*time.Millisecond, "the standby takes over")
	t.Logf("takeover %s after the crash (ttl %s)", time.Since(killed).Round(time.Millisecond), ttl)
	require.Equal(t, "c", b.leaderRow(t))
	require.False(t, b.electedAt(t).Before(expired), "not before the crashed leader's lease expired")
	before := runs(c)
	require.Eventually(t, func() bool { return runs(c) > before }, time.Minute, 50*time.Millisecond, "the new leader runs jobs")
}

// A clean stop resigns: the standby takes over at its next attempt, long
// before the old lease would have expired.
func TestLeaderCleanHandover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const ttl = 9 * time.Second // the leader renews every 3s
	a := b.scheduler(t, leaderCfg("a", ttl))
	stopA := start(t, a)
	require.Eventually(t, a.IsLeader, time.Minute, 20*time.Millisecond)
	c := b.scheduler(t, leaderCfg("c", ttl))
	start(t, c)
	require.Eventually(t, func() bool { return c.elector.attempts.Load() > 0 }, time.Minute, 10*time.Millisecond,
		"the standby has tried and lost")
	require.Eventually(t, func() bool { return runs(a) >= 1 }, time.Minute, 20*time.Millisecond)
	require.False(t, c.IsLeader())

	expires := b.leaseExpiry(t)
	require.NoError(t, stopA())
	stopped := time.Now()
	require.NotEqual(t, "a", b.leaderRow(t), "resigned on stop")
	require.False(t, a.IsLeader())
	require.Eventually(t, c.IsLeader, time.Minute, 20*time.Millisecond, "the standby takes over")
	t.Logf("handover %s after the stop (ttl %s)", time.Since(stopped).Round(time.Millisecond), ttl)
	// On the database's clock: the standby was elected while the old lease
	// would still have run, so it did not wait for the TTL.
	require.True(t, b.electedAt(t).Before(expires), "handover without waiting for the TTL")
	require.Contains(t, b.logs.String(), `"msg":"resigned leadership","leader_id":"a"`)
}

// Even two sidecars that both believe they lead (here: two elections under
// different role names) cannot run one maintenance function at once: the
// function's advisory lock makes the second caller a no-op.
func TestTwoLeadersDoNotCollide(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `SELECT fanout.create_topic('orders', partition_interval => '1 minute')`)
	b.exec(t, `SELECT fanout.publish('orders', '{}')`)
	clk := newFakeClock(b.dbNow(t).Add(2 * time.Minute))

	// Hold the function's lock as a concurrent leader would mid-call.
	tx, err := b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx) //nolint:errcheck
	var n int
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT fanout._manage_partitions(p_now => $1)`, clk.Now()).Scan(&n))
	require.Equal(t, 1, n)

	job := NewMaintenanceJob(b.Pool, MaintenanceConfig{Func: managePartitions, Clock: clk})
	res, err := job.Run(b.ctx)
	require.NoError(t, err)
	require.Equal(t, Result{Calls: 1}, res, "the other caller's lock makes this one a no-op")
	require.NoError(t, tx.Commit(b.ctx))
	res, err = job.Run(b.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 4, res.Rows, "once the lock is free it finishes the rotation (refresh, jump) and makes the next partition ready")
}
