package tests

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/client"
	"github.com/pgfanout/pgq/internal/testdb"
	"github.com/pgfanout/pgq/orchestrator"
)

// pgbouncer starts (or reuses) a PgBouncer in transaction pooling mode in
// front of the test server (scripts/pgbouncer.sh, which installs Debian's
// pgbouncer as root) on PGQ_TEST_PGBOUNCER_PORT (make test: PGBOUNCER_PORT,
// default 25443) and returns the URL of database db through it. A missing
// PgBouncer fails the test, saying what to install.
func pgbouncer(t *testing.T, db string) string {
	t.Helper()
	port := 25443
	if p := os.Getenv("PGQ_TEST_PGBOUNCER_PORT"); p != "" {
		var err error
		port, err = strconv.Atoi(p)
		require.NoError(t, err, "PGQ_TEST_PGBOUNCER_PORT")
	}
	server, err := pgconn.ParseConfig(testdb.ServerURL(t))
	require.NoError(t, err)
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	script := filepath.Join(root, "scripts", "pgbouncer.sh")
	var stderr strings.Builder
	cmd := exec.Command(script, "start", strconv.Itoa(port), server.Host, strconv.Itoa(int(server.Port)),
		server.User, server.Password)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "PgBouncer is required by this test (sudo make deps): %s", stderr.String())
	t.Cleanup(func() { _ = exec.Command(script, "stop", strconv.Itoa(port)).Run() })
	return testdb.WithDatabase(strings.TrimSpace(string(out)), db)
}

func bouncerPool(t *testing.T, ctx context.Context, url string) *pgxpool.Pool {
	t.Helper()
	// Transaction pooling: no named prepared statements (PgBouncer < 1.21).
	cfg, err := pgxpool.ParseConfig(url + "&default_query_exec_mode=exec")
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// syncLog is a logger whose output the test reads.
func syncLog() (*slog.Logger, *testdb.SyncBuffer) {
	buf := &testdb.SyncBuffer{}
	return slog.New(slog.NewTextHandler(buf, nil)), buf
}

// The scheduler and a client consumer through a real PgBouncer in
// transaction pooling mode: the scheduler is elected and runs maintenance
// (a silent group is marked dead); the consumer's LISTEN through PgBouncer
// is detected as not working (a warning, and polling keeps delivering);
// with ListenURL on a direct connection, notifications wake it up.
func TestPgBouncerTransactionPooling(t *testing.T) {
	t.Parallel()
	b := setup(t)
	url := pgbouncer(t, b.DBName)
	pool := bouncerPool(t, b.ctx, url)

	// The scheduler through PgBouncer: leader election and maintenance.
	// notify_when => 'always': the publish below must notify whether or not
	// the direct consumer has announced its wait yet (docs/wakeups.md).
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.create_topic('bounced', semantics => 'pubsub', notify_when => 'always');
	                              SELECT fanout.subscribe('bounced', 'gone', heartbeat_timeout => '1 second', dead_after_misses => 1);
	                              SELECT fanout.subscribe('bounced', 'workers', start_position => 'earliest')`)
	require.NoError(t, err)
	slog1, schedLogs := syncLog()
	s, err := orchestrator.NewScheduler(pool, orchestrator.SchedulerConfig{
		Logger: slog1, LeaderID: "bounced", LeaderTTL: 5 * time.Second, Jitter: -1,
		Schedules: map[string]string{"fanout._detect_dead_groups": "@every 1s"},
	})
	require.NoError(t, err)
	sctx, stopSched := context.WithCancel(b.ctx)
	schedDone := make(chan error, 1)
	go func() { schedDone <- s.Run(sctx) }()
	defer func() {
		stopSched()
		require.NoError(t, <-schedDone)
	}()
	require.Eventually(t, func() bool {
		var status string
		_ = b.Pool.QueryRow(b.ctx, `SELECT status FROM fanout.groups WHERE group_name = 'gone'`).Scan(&status)
		return status == "dead"
	}, 60*time.Second, 50*time.Millisecond, "the scheduler behind PgBouncer detects the dead group; logs:\n%s", schedLogs)
	require.True(t, s.IsLeader())

	// A consumer whose LISTEN goes through PgBouncer: warned, still served by polling.
	pub := client.NewPublisher(pool)
	run := func(cfg client.Config, want int) (*client.Consumer, *testdb.SyncBuffer, func()) {
		logger, logs := syncLog()
		cfg.Topic, cfg.Group, cfg.Logger = "bounced", "workers", logger
		if cfg.ListenCheckTimeout == 0 {
			cfg.ListenCheckTimeout = 2 * time.Second
		}
		var mu sync.Mutex
		got := 0
		done := make(chan struct{})
		c, err := client.NewConsumer(pool, cfg, func(_ context.Context, d *client.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			if got++; got == want {
				close(done)
			}
			return nil
		})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(b.ctx)
		errc := make(chan error, 1)
		go func() { errc <- c.Run(ctx) }()
		return c, logs, func() {
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				t.Fatalf("the consumer did not get %d messages; logs:\n%s", want, logs)
			}
			cancel()
			require.NoError(t, <-errc)
		}
	}

	c1, logs1, wait1 := run(client.Config{Consumer: "via-bouncer", PollInterval: 100 * time.Millisecond}, 5)
	require.Eventually(t, func() bool { return c1.Stats().ListenChecked != 0 }, 60*time.Second, 10*time.Millisecond)
	require.EqualValues(t, -1, c1.Stats().ListenChecked, "LISTEN through PgBouncer delivers nothing")
	// (The client records the result, then logs the warning.)
	require.Eventually(t, func() bool {
		return strings.Contains(logs1.String(), "LISTEN does not deliver notifications on this connection")
	}, 10*time.Second, 10*time.Millisecond, "the warning is logged")
	require.Contains(t, logs1.String(), "set Config.ListenURL to a direct connection")
	start := time.Now()
	for range 5 {
		_, err := pub.Publish(b.ctx, "bounced", client.Message{Payload: []byte(`{}`)})
		require.NoError(t, err)
	}
	wait1()
	t.Logf("through PgBouncer, polling every 100ms: 5 messages in %s", time.Since(start).Round(time.Millisecond))
	require.Zero(t, c1.Stats().Nacked)

	// With ListenURL on a direct connection, a notification wakes it up: the
	// poll interval is an hour, so only a notification can deliver.
	// (A check that succeeds ends when its notification arrives: a long
	// timeout costs nothing, and a loaded machine cannot fail it.)
	c2, logs2, wait2 := run(client.Config{Consumer: "direct-listen", PollInterval: time.Hour, ListenURL: b.URL,
		ListenCheckTimeout: 30 * time.Second}, 1)
	require.Eventually(t, func() bool { return c2.Stats().ListenChecked != 0 }, 60*time.Second, 10*time.Millisecond)
	require.EqualValues(t, 1, c2.Stats().ListenChecked, "logs:\n%s", logs2)
	start = time.Now()
	_, err = pub.Publish(b.ctx, "bounced", client.Message{Payload: []byte(`{"wake":true}`)})
	require.NoError(t, err)
	wait2()
	t.Logf("direct LISTEN, publish through PgBouncer -> handler: %s", time.Since(start).Round(time.Millisecond))
	require.Greater(t, c2.Stats().Notifications, int64(1), "the check and the publish")
	require.NotContains(t, logs2.String(), "LISTEN does not deliver")
	require.EqualValues(t, 6, c1.Stats().Acked+c2.Stats().Acked)
}

// Behind PgBouncer in transaction pooling mode without
// default_query_exec_mode=exec, pgx's cached prepared statements of two
// client connections meet on one server connection: PostgreSQL answers
// 42P05 on every call, and the sidecar's pool (WatchPreparedStatements, as
// pgq-scheduler run sets it up) logs the fix once, however often it comes.
// Not parallel: it starts and stops the suite's PgBouncer before the
// parallel PgBouncer test does.
func TestPgBouncerPreparedStatementHint(t *testing.T) {
	b := setup(t)
	url := pgbouncer(t, b.DBName)
	logger, logs := syncLog()
	newPool := func(url string) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(url)
		require.NoError(t, err)
		orchestrator.WatchPreparedStatements(cfg.ConnConfig, logger)
		pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return pool
	}
	// Two client connections, one after the other on PgBouncer's one server
	// connection of this database: the second prepares what the first did.
	clash := func(pool *pgxpool.Pool) (failures int) {
		c1, err := pool.Acquire(b.ctx)
		require.NoError(t, err)
		defer c1.Release()
		c2, err := pool.Acquire(b.ctx)
		require.NoError(t, err)
		defer c2.Release()
		const q = `SELECT count(*) FROM fanout.topics WHERE topic = $1`
		var n int
		require.NoError(t, c1.QueryRow(b.ctx, q, "x").Scan(&n))
		for range 3 {
			err := c2.QueryRow(b.ctx, q, "x").Scan(&n)
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "42P05" {
				failures++
			} else {
				require.NoError(t, err)
			}
		}
		return failures
	}

	pool := newPool(url)
	require.Equal(t, 3, clash(pool), "PgBouncer shares the server connection's prepared statements")
	require.Equal(t, 1, strings.Count(logs.String(), orchestrator.PreparedStatementFix), "the fix, once:\n%s", logs)
	require.Contains(t, logs.String(), "sqlstate=42P05")
	require.Contains(t, logs.String(), "level=ERROR")

	// The scheduler's own calls meet it too; still said once.
	s, err := orchestrator.NewScheduler(pool, orchestrator.SchedulerConfig{Logger: logger, LeaderTTL: time.Hour, Jitter: -1})
	require.NoError(t, err)
	require.Equal(t, 3, clash(pool))
	_, _ = s.RunJob(b.ctx, "discover")
	require.Equal(t, 1, strings.Count(logs.String(), orchestrator.PreparedStatementFix), "logs:\n%s", logs)

	// With the fix in the URL: no clash, nothing said.
	fixedLogger, fixedLogs := syncLog()
	cfg, err := pgxpool.ParseConfig(url + "&default_query_exec_mode=exec")
	require.NoError(t, err)
	orchestrator.WatchPreparedStatements(cfg.ConnConfig, fixedLogger)
	fixed, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(fixed.Close)
	require.Zero(t, clash(fixed))
	require.NotContains(t, fixedLogs.String(), orchestrator.PreparedStatementFix)
}
