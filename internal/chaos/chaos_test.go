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
// (make test sets it from CHAOS_CI_PORT), 25442 when unset. The
// long-transaction and dead-group scenarios run on a second cluster on the
// next port.
func ciPort(t *testing.T) int {
	if p := os.Getenv("PGQ_TEST_CHAOS_PORT"); p != "" {
		n, err := strconv.Atoi(p)
		require.NoError(t, err, "PGQ_TEST_CHAOS_PORT")
		return n
	}
	return 25444 // make test: CHAOS_CI_PORT, TEST_PORT + 11
}

// TestChaosShort is the CI version of make chaos: a 60-second soak with at
// least one immediate server restart, consumers SIGKILLed mid-page, client
// workers shut down mid-page and client handlers longer than the lease
// (each redelivery of a handled message must be explained by the recorded
// fault timeline), then
// the long-transaction and dead-group scenarios scaled down. The soak has
// every topic kind and scripted event of make chaos. Any lost message, bad
// duplicate, delivered rollback, out-of-order or early delivery fails it.
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
	cfg := Config{
		Root: root, Port: ciPort(t), Cluster: "chaos-ci", SchedulerBin: sched,
		Duration: 60 * time.Second, DrainTimeout: 60 * time.Second, Rate: 30, Producers: 2,
		Restarts: 1, Terminates: 3, Kills: 2, LeaderKills: 1, LateAcks: 1, Stops: 2, Overruns: 2,
		LongTx: 8 * time.Second, DeadGroupRounds: 8,
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	}
	side := cfg
	side.Cluster, side.Port = "chaos-ci-side", cfg.Port+1
	t.Cleanup(func() {
		for _, c := range []Config{cfg, side} {
			_ = (&cluster{root: root, name: c.Cluster, port: c.Port}).stop(context.Background())
		}
	})
	// The soak restarts its server, so the long-transaction and dead-group
	// scenarios run beside it on a cluster of their own (each in a database
	// of its own).
	type result struct {
		sum    Summary
		err    error
		report *testdb.SyncBuffer
	}
	run := func(c Config, scenarios ...string) <-chan result {
		c.Scenarios = scenarios
		c.RunDir = t.TempDir()
		ch := make(chan result, 1)
		go func() {
			r := result{report: &testdb.SyncBuffer{}}
			r.sum, r.err = Run(ctx, c, r.report)
			ch <- r
		}()
		return ch
	}
	// (one after the other: concurrent migrations of a fresh cluster race on
	// its roles).
	soak, others := run(cfg, "soak"), run(side, "longtx", "deadgroup")
	results := []result{<-soak, <-others}
	var total Summary
	failed := false
	for _, r := range results {
		t.Logf("report:\n%s", r.report.String())
		total.Lost += r.sum.Lost
		total.BadDuplicates += r.sum.BadDuplicates
		total.RolledBackDelivered += r.sum.RolledBackDelivered
		total.OutOfOrder += r.sum.OutOfOrder
		total.Early += r.sum.Early
		total.Problems = append(total.Problems, r.sum.Problems...)
		if r.err != nil {
			total.Problems = append(total.Problems, r.err.Error())
		}
		failed = failed || r.err != nil || !r.sum.OK()
	}
	t.Log(total.Line())
	if failed {
		t.Logf("harness log:\n%s", logs.String())
	}
	require.Empty(t, total.Problems)
	require.True(t, total.OK(), total.Line())
}
