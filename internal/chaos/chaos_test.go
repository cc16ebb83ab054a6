package chaos

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/testdb"
)

// The test binary doubles as the chaos worker: the harness re-executes
// os.Executable() with PGQ_CHAOS_WORKER set.
func TestMain(m *testing.M) {
	if IsWorker() {
		WorkerMain()
		return
	}
	os.Exit(m.Run())
}

// ciPort is the port of the short run's own cluster: PGQ_TEST_CHAOS_PORT
// (make test sets it from CHAOS_CI_PORT), 55442 when unset.
func ciPort(t *testing.T) int {
	if p := os.Getenv("PGQ_TEST_CHAOS_PORT"); p != "" {
		n, err := strconv.Atoi(p)
		require.NoError(t, err, "PGQ_TEST_CHAOS_PORT")
		return n
	}
	return 55442
}

// TestChaosShort is the CI version of make chaos: a 60-second soak with at
// least one immediate server restart and consumers SIGKILLed mid-page, then
// the long-transaction and dead-group scenarios scaled down. Any lost
// message, bad duplicate or delivered rollback fails it.
func TestChaosShort(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	root, err := repoRoot()
	require.NoError(t, err)
	sched := filepath.Join(t.TempDir(), "pgq-scheduler")
	build := exec.CommandContext(ctx, "go", "build", "-o", sched, "./cmd/pgq-scheduler")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build pgq-scheduler: %s", out)

	logs := &testdb.SyncBuffer{}
	report := &testdb.SyncBuffer{}
	cfg := Config{
		Root: root, Port: ciPort(t), Cluster: "chaos-ci", SchedulerBin: sched,
		Duration: 60 * time.Second, DrainTimeout: 60 * time.Second, Rate: 30, Producers: 2,
		Restarts: 1, Terminates: 3, Kills: 2, LeaderKills: 1, LateAcks: 1,
		LongTx: 8 * time.Second, DeadGroupRounds: 8,
		Scenarios: []string{"soak", "longtx", "deadgroup"},
		RunDir:    t.TempDir(),
		Logger:    slog.New(slog.NewTextHandler(logs, nil)),
	}
	t.Cleanup(func() {
		c := &cluster{root: root, name: cfg.Cluster, port: cfg.Port}
		_ = c.stop(context.Background())
	})
	sum, err := Run(ctx, cfg, report)
	t.Logf("report:\n%s\n%s", report.String(), sum.Line())
	if err != nil || !sum.OK() {
		t.Logf("harness log:\n%s", logs.String())
	}
	require.NoError(t, err)
	require.Empty(t, sum.Problems)
	require.True(t, sum.OK(), sum.Line())
}
