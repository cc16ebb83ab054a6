package orchestrator

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url) //nolint:noctx // test
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func health(t *testing.T, url string) (int, Health) {
	t.Helper()
	code, body := get(t, url+"/healthz")
	var h Health
	require.NoError(t, json.Unmarshal([]byte(body), &h), body)
	return code, h
}

// /healthz on the leader: 200 while every job ran within its window, 503
// naming the overdue job otherwise. Driven by a stub clock.
func TestHealthzJobWindows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	clk := newFakeClock(b.dbNow(t))
	s := b.scheduler(t, SchedulerConfig{Clock: clk, LeaderTTL: time.Hour, LeaderID: "h",
		DiscoverSchedule: "@every 5s", JobTimeout: 2 * time.Second})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)

	code, h := health(t, srv.URL)
	require.Equal(t, http.StatusOK, code, "a standby is healthy while the database is")
	require.False(t, h.Leader)
	require.Equal(t, "up", h.Database)

	require.NoError(t, s.elector.attempt(b.ctx))
	require.True(t, s.IsLeader())
	// Election triggers a discover run at once.
	require.Eventually(t, func() bool { return jobStatus(t, s, discoverJobName).Runs == 1 },
		time.Minute, 10*time.Millisecond)
	code, h = health(t, srv.URL)
	require.Equal(t, http.StatusOK, code, "just elected, jobs ran")
	require.True(t, h.Leader)

	clk.Advance(13 * time.Second) // window: 2 x 5s + 2s timeout + 0 jitter
	code, h = health(t, srv.URL)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "unavailable", h.Status)
	require.Regexp(t, `^jobs overdue: discover \(last succeeded \d{4}-\d\d-\d\dT[0-9:]+Z\)$`, h.Reason)
	require.True(t, h.Jobs[0].Overdue)

	_, err := s.RunJob(b.ctx, discoverJobName)
	require.NoError(t, err)
	code, h = health(t, srv.URL)
	require.Equal(t, http.StatusOK, code, h.Reason)
	require.Len(t, h.Jobs, 1)
	require.Equal(t, int64(2), h.Jobs[0].Runs)
	require.False(t, h.Jobs[0].Overdue)

	// A job that never succeeds is named with its error.
	b.exec(t, `ALTER FUNCTION fanout.maint_operations(timestamptz) RENAME TO maint_operations_gone`)
	_, err = s.RunJob(b.ctx, discoverJobName)
	require.Error(t, err)
	clk.Advance(13 * time.Second)
	code, h = health(t, srv.URL)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, h.Reason, "jobs overdue: discover (last succeeded ")
	require.Contains(t, h.Reason, "last error: discover: maint_operations: ERROR: function fanout.maint_operations")
}

// /metrics: job series, the leader flag, and topic and group series read
// from the fanout views at scrape time.
func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `SELECT fanout.create_topic('orders')`)
	b.exec(t, `SELECT fanout.publish('orders', '{}') FROM generate_series(1, 3)`)
	// The partition kept ready ahead (created, then refreshed): nothing is
	// left for the scheduler's own runs to change.
	b.exec(t, `SELECT fanout._manage_partitions()`)
	b.exec(t, `SELECT fanout._manage_partitions()`)
	s := b.scheduler(t, SchedulerConfig{LeaderTTL: time.Hour})
	require.NoError(t, s.elector.attempt(b.ctx))
	s.onLeaderChange(true)
	_, err := s.RunJob(b.ctx, discoverJobName)
	require.NoError(t, err)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)

	code, body := get(t, srv.URL+"/metrics")
	require.Equal(t, http.StatusOK, code)
	for _, want := range []string{
		"pgq_database_up 1",
		"pgq_scheduler_leader 1",
		`pgq_scheduler_job_runs_total{job="discover"}`,
		`pgq_scheduler_job_duration_seconds_bucket{job="discover",le="+Inf"}`,
		`pgq_topic_messages{topic="orders"} 3`,
		`pgq_topic_segments{topic="orders"} 2`,
		`pgq_topic_partitions{topic="orders"} 2`, // deprecated alias of pgq_topic_segments
		`pgq_topic_dropped_unread_total{topic="orders"} 0`,
		`pgq_topic_oldest_message_age_seconds{topic="orders"}`,
		"go_goroutines",
	} {
		require.Contains(t, body, want)
	}
	// The queue topic's implicit group (group_name NULL: label "").
	require.Contains(t, body, `pgq_group_status{group="",status="active",topic="orders"} 1`)
	require.Contains(t, body, `pgq_group_lag_messages{group="",topic="orders"} 3`)
	require.Contains(t, body, `pgq_group_dead_letters{group="",topic="orders"} 0`)
	require.Contains(t, body, `pgq_group_lag_seconds{group="",topic="orders"}`)
	require.Contains(t, body, `pgq_group_expired{group="",topic="orders"} 0`)
	require.Contains(t, body, `pgq_group_waiting{group="",topic="orders"} 0`)
}

// /metrics for a partitioned topic: per-group key-partition series (count,
// unowned, imbalance, largest partition lag), never one per partition.
func TestMetricsKeyPartitions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `SELECT fanout.create_topic('kp', semantics => 'pubsub', partitions => 4)`)
	b.exec(t, `SELECT fanout.subscribe('kp', 'g')`)
	b.exec(t, `SELECT fanout.publish('kp', '{}', message_group => 'order-42') FROM generate_series(1, 5)`)
	b.exec(t, `SELECT count(*) FROM fanout.read('kp', 'g', 'w1', 2)`) // w1 owns all 4, 2 of 5 out
	s := b.scheduler(t, SchedulerConfig{LeaderTTL: time.Hour})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	code, body := get(t, srv.URL+"/metrics")
	require.Equal(t, http.StatusOK, code)
	for _, want := range []string{
		`pgq_group_key_partitions{group="g",topic="kp"} 4`,
		`pgq_group_key_partitions_unowned{group="g",topic="kp"} 0`,
		`pgq_group_key_partition_imbalance{group="g",topic="kp"} 0`,
		`pgq_group_key_partition_max_lag_messages{group="g",topic="kp"} 3`,
		`pgq_group_key_partition_max_lag_seconds{group="g",topic="kp"}`,
	} {
		require.Contains(t, body, want)
	}
	require.NotContains(t, body, `partition="`, "a series per partition")
}

// /metrics and /healthz without the database: 503, and the scrape still
// answers (pgq_database_up 0).
func TestEndpointsWithoutDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.scheduler(t, SchedulerConfig{})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	b.Pool.Close() // the pool is gone: every query fails at once

	code, h := health(t, srv.URL)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "down", h.Database)
	require.Contains(t, h.Reason, "database unreachable: ")
	code, body := get(t, srv.URL+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "pgq_database_up 0")
}

// /healthz turns 503 as soon as a job (discover included) failed
// FailingRunsUnhealthy runs in a row, without waiting for the job's window
// (before, discovery failed 8 times in a row while /healthz said 200), and
// back to 200 after a success.
func TestHealthzJobKeepsFailing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	clk := newFakeClock(b.dbNow(t))
	s := b.scheduler(t, SchedulerConfig{Clock: clk, LeaderTTL: time.Hour, LeaderID: "f",
		DiscoverSchedule: "@every 1h", JobTimeout: 2 * time.Second})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	require.NoError(t, s.elector.attempt(b.ctx))
	require.True(t, s.IsLeader())
	// Election triggers a discover run at once; let it finish first.
	require.Eventually(t, func() bool { return jobStatus(t, s, discoverJobName).Runs == 1 },
		5*time.Second, 10*time.Millisecond)

	b.exec(t, `ALTER FUNCTION fanout.maint_operations(timestamptz) RENAME TO maint_operations_gone`)
	for i := 1; i <= FailingRunsUnhealthy; i++ {
		_, err := s.RunJob(b.ctx, discoverJobName)
		require.Error(t, err)
		code, h := health(t, srv.URL)
		if i < FailingRunsUnhealthy {
			require.Equal(t, http.StatusOK, code, "failure %d: %s", i, h.Reason)
			continue
		}
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Contains(t, h.Reason, "jobs failing: discover (3 runs in a row, last error: discover: maint_operations: ")
	}
	b.exec(t, `ALTER FUNCTION fanout.maint_operations_gone(timestamptz) RENAME TO maint_operations`)
	_, err := s.RunJob(b.ctx, discoverJobName)
	require.NoError(t, err)
	code, h := health(t, srv.URL)
	require.Equal(t, http.StatusOK, code, h.Reason)
}

// okJob succeeds at once on a given schedule.
type okJob struct{ name, spec string }

func (j okJob) Name() string                      { return j.name }
func (j okJob) Schedule() string                  { return j.spec }
func (okJob) Run(context.Context) (Result, error) { return Result{}, nil }

// A job on a schedule with uneven gaps is overdue by its own schedule: the
// second firing after its last success, plus timeout and jitter, not twice
// the gap between the first two firings after it was registered (which
// called "0 9-17 * * *" overdue every night and "0 3 * * 1-5" every
// weekend). Driven by a stub clock; the leadership is real and renewed as
// the clock moves.
func TestHealthzIrregularSchedules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec      string
		register  time.Time   // the sidecar starts (and is elected) here
		success   time.Time   // the job's last success
		fine      []time.Time // not overdue at these
		overdueAt time.Time   // overdue from here (second firing after success + timeout)
		timeout   time.Duration
	}{
		{
			spec:     "0 9-17 * * *",
			register: time.Date(2026, 11, 23, 10, 30, 0, 0, time.Local), // Monday; next gaps: 1 h
			success:  time.Date(2026, 11, 23, 17, 0, 0, 0, time.Local),
			fine: []time.Time{
				time.Date(2026, 11, 23, 23, 0, 0, 0, time.Local),
				time.Date(2026, 11, 24, 3, 0, 0, 0, time.Local),
				time.Date(2026, 11, 24, 9, 30, 0, 0, time.Local), // missed 09:00: one firing may be missed
				time.Date(2026, 11, 24, 10, 0, 30, 0, time.Local),
			},
			overdueAt: time.Date(2026, 11, 24, 10, 1, 1, 0, time.Local),
			timeout:   time.Minute,
		},
		{
			spec:     "0 3 * * 1-5",
			register: time.Date(2026, 11, 23, 2, 0, 0, 0, time.Local), // Monday; next gap: 24 h
			success:  time.Date(2026, 11, 27, 3, 0, 0, 0, time.Local), // Friday
			fine: []time.Time{
				time.Date(2026, 11, 28, 12, 0, 0, 0, time.Local), // Saturday
				time.Date(2026, 11, 29, 4, 0, 0, 0, time.Local),  // Sunday, 49 h after
				time.Date(2026, 11, 30, 3, 30, 0, 0, time.Local), // Monday, missed one
				time.Date(2026, 12, 1, 3, 0, 30, 0, time.Local),
			},
			overdueAt: time.Date(2026, 12, 1, 3, 1, 1, 0, time.Local),
			timeout:   time.Minute,
		},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			clk := newFakeClock(tc.register)
			name := randomName("irregular_")
			s := b.scheduler(t, SchedulerConfig{Clock: clk, LeaderTTL: time.Hour, LeaderID: name,
				LeaderName: name, DiscoverSchedule: "@yearly", JobTimeout: tc.timeout})
			require.NoError(t, s.Register(okJob{name, tc.spec}))
			require.NoError(t, s.elector.attempt(b.ctx))
			require.True(t, s.IsLeader())
			// moveTo advances the stub clock in steps shorter than the
			// local lease, renewing it at each, so this sidecar stays the
			// leader throughout (a new election would reopen the window).
			moveTo := func(at time.Time) {
				t.Helper()
				for clk.Now().Before(at) {
					clk.Advance(min(30*time.Minute, at.Sub(clk.Now())))
					require.NoError(t, s.elector.attempt(b.ctx))
					require.True(t, s.IsLeader())
				}
			}
			moveTo(tc.success)
			_, err := s.RunJob(b.ctx, name)
			require.NoError(t, err)
			require.Equal(t, tc.success, jobStatus(t, s, name).LastSuccess)
			for _, at := range tc.fine {
				moveTo(at)
				st := jobStatus(t, s, name)
				require.False(t, st.Overdue, "%s, last success %s: overdue at %s", tc.spec, tc.success, at)
				require.NotContains(t, s.Health(b.ctx).Reason, name)
			}
			moveTo(tc.overdueAt)
			require.True(t, jobStatus(t, s, name).Overdue, "%s: overdue at %s", tc.spec, tc.overdueAt)
			require.Contains(t, s.Health(b.ctx).Reason, "jobs overdue: "+name)
		})
	}
}
