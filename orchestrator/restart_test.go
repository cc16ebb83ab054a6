package orchestrator

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/testdb"
)

// restartCluster is the throwaway cluster of TestDatabaseRestart (name and
// port of its own: it is stopped and started under the test's feet). The
// port is PGQ_TEST_RESTART_PORT (make test sets it from RESTART_PORT),
// 25441 when unset.
const restartCluster = "restart"

func restartPort() string {
	if p := os.Getenv("PGQ_TEST_RESTART_PORT"); p != "" {
		return p
	}
	return "25441"
}

func devdb(t *testing.T, args ...string) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		require.NotEqual(t, dir, filepath.Dir(dir), "go.mod not found")
		dir = filepath.Dir(dir)
	}
	cmd := exec.Command(filepath.Join(dir, "scripts", "devdb.sh"), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "devdb.sh %v: %s", args, stderr.String())
	return strings.TrimSpace(string(out))
}

// The database goes away under a running leader and comes back: /healthz
// says 503 while it is down and 200 after, the pool reconnects by itself,
// the scheduler is re-elected and its jobs run again. No crash, no restart.
func TestDatabaseRestart(t *testing.T) {
	t.Parallel()
	// The cluster first: initdb and a durable start can take minutes on a
	// loaded machine, and must not eat the test's context.
	url := devdb(t, "start", restartCluster, restartPort())
	t.Cleanup(func() { devdb(t, "stop", restartCluster) })
	ctx := testContext(t)
	_, err := MigrateURL(ctx, url)
	require.NoError(t, err)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	logs := &testdb.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("scheduler logs:\n%s", logs.String())
		}
	})
	b := &bundle{ctx: ctx, logs: logs}
	b.log = newTestLogger(logs)
	s, err := NewScheduler(pool, SchedulerConfig{
		Logger: b.log, Jitter: -1, LeaderName: randomName("restart-"), LeaderTTL: 2 * time.Second,
		DiscoverSchedule: "@every 1s", JobTimeout: 2 * time.Second, ShutdownTimeout: 5 * time.Second,
	})
	require.NoError(t, err)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	stop := start(t, s)
	discoverRuns := func() float64 { return testutil.ToFloat64(s.metrics.runs.WithLabelValues(discoverJobName)) }
	discoverOK := func() time.Time { return jobStatus(t, s, discoverJobName).LastSuccess }

	require.Eventually(t, func() bool {
		code, _ := health(t, srv.URL)
		return code == http.StatusOK && s.IsLeader() && discoverRuns() >= 1
	}, time.Minute, 50*time.Millisecond, "healthy leader running jobs")

	devdb(t, "stop", restartCluster)
	down := time.Now()
	code, h := health(t, srv.URL)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "down", h.Database)
	require.Contains(t, h.Reason, "database unreachable")
	// Leadership lapses locally once renewals fail for a TTL.
	require.Eventually(t, func() bool { return !s.IsLeader() }, time.Minute, 50*time.Millisecond)
	_, body := get(t, srv.URL+"/metrics")
	require.Contains(t, body, "pgq_database_up 0")
	require.Contains(t, body, "pgq_scheduler_leader 0")

	devdb(t, "start", restartCluster, restartPort())
	t.Logf("database down for %s", time.Since(down).Round(time.Millisecond))
	up := time.Now()
	require.Eventually(t, func() bool {
		code, _ := health(t, srv.URL)
		return code == http.StatusOK && s.IsLeader() && discoverOK().After(up)
	}, time.Minute, 50*time.Millisecond, "healthy again: re-elected and jobs run")
	t.Logf("recovered %s after the restart", time.Since(up).Round(time.Millisecond))
	require.Contains(t, logs.String(), `"msg":"leader election failed"`)
	require.NoError(t, stop())

	var holder string
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*)::text FROM fanout.leader WHERE name = $1`, s.cfg.LeaderName).Scan(&holder))
	require.Equal(t, "0", holder, "resigned on stop")
}
