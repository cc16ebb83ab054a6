package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/testdb"
)

// bundle is what a CLI test gets: its own migrated database.
type bundle struct {
	*testdb.Bundle
	ctx context.Context
}

func setup(t *testing.T) *bundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return &bundle{Bundle: testdb.New(t), ctx: ctx}
}

func (b *bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := b.Pool.Exec(b.ctx, sql, args...)
	require.NoError(t, err, sql)
}

func noEnv(string) string { return "" }

// cli runs the program in-process as `pgq-scheduler args...`.
func cli(ctx context.Context, env map[string]string, args ...string) (stdout, stderr string, err error) {
	var out, errb bytes.Buffer
	err = run(ctx, args, func(k string) string { return env[k] }, &out, &errb)
	return out.String(), errb.String(), err
}

func TestStatusEmptyDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out, _, err := cli(b.ctx, nil, "status", "--database-url", b.URL)
	require.NoError(t, err)
	require.Contains(t, out, "leader: none")
	require.Contains(t, out, "TOPICS\nno topics (create one with: SELECT fanout.create_topic('name');)\n")
	require.Contains(t, out, "GROUPS\n")
	require.NotContains(t, out, "BACKFILLS")
	require.Contains(t, out, "MAINTENANCE (every function the schema has;")
	require.Regexp(t, `\nfanout\._manage_partitions +@every 10s +create the next partition`, out)
	require.Regexp(t, `\nfanout\._cleanup_partitions +@every 30s +drop closed partitions`, out)

	// DATABASE_URL from the environment works the same.
	out2, _, err := cli(b.ctx, map[string]string{"DATABASE_URL": b.URL}, "status")
	require.NoError(t, err)
	require.Equal(t, out, out2)
}

// column returns the text of row under the header column named col
// (columns are separated by two or more spaces; aligned tables put every
// value at its header's offset).
func column(t *testing.T, header, row, col string) string {
	t.Helper()
	i := strings.Index(header, col)
	require.GreaterOrEqual(t, i, 0, "no column %q in %q", col, header)
	require.Greater(t, len(row), i, "row %q shorter than header", row)
	v := row[i:]
	if j := strings.Index(v, "  "); j >= 0 {
		v = v[:j]
	}
	return strings.TrimSpace(v)
}

func lineWith(t *testing.T, out, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	require.Failf(t, "line not found", "no line starting with %q in:\n%s", prefix, out)
	return ""
}

func TestStatusBusyDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `SELECT fanout.create_topic('orders')`)
	b.exec(t, `SELECT fanout.publish('orders', jsonb_build_object('n', i)) FROM generate_series(1, 5) i`)
	b.exec(t, `SELECT fanout.create_topic('events', semantics => 'pubsub')`)
	b.exec(t, `SELECT fanout.leader_attempt('sidecar-1', '15 seconds')`)
	var pubsub bool
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT to_regproc('fanout.subscribe') IS NOT NULL`).Scan(&pubsub))
	if pubsub {
		b.exec(t, `SELECT fanout.subscribe('events', 'billing', heartbeat_timeout => '1 second', dead_after_misses => 1)`)
		b.exec(t, `SELECT fanout.subscribe('events', 'search')`)
		b.exec(t, `SELECT fanout.publish('events', '{}') FROM generate_series(1, 3)`)
		// billing misses its heartbeats: dead-group detection (maintenance)
		// declares it dead.
		b.exec(t, `SELECT fanout._detect_dead_groups(p_now => now() + interval '10 seconds')`)
	}

	out, _, err := cli(b.ctx, nil, "status", "--database-url", b.URL)
	require.NoError(t, err)
	t.Logf("status:\n%s", out)
	require.Regexp(t, `leader: sidecar-1 \(lease expires in 1\ds\)`, out)

	header := lineWith(t, out, "TOPIC  ")
	orders := lineWith(t, out, "orders ")
	require.Equal(t, "queue", column(t, header, orders, "SEMANTICS"))
	require.Equal(t, "offset", column(t, header, orders, "COMPLETION"))
	require.Equal(t, "5", column(t, header, orders, "MESSAGES"))
	require.Equal(t, "1", column(t, header, orders, "SEGMENTS"))
	require.Equal(t, "0", column(t, header, orders, "DROPPED UNREAD"))
	require.Regexp(t, `^\d+(\.\d+)? (KiB|B)$`, column(t, header, orders, "SIZE"))
	events := lineWith(t, out, "events ")
	require.Equal(t, "pubsub", column(t, header, events, "SEMANTICS"))

	groups := out[strings.Index(out, "\nGROUPS\n"):]
	gheader := lineWith(t, groups, "TOPIC  ")
	queue := lineWith(t, groups, "orders ")
	require.Equal(t, "(queue)", column(t, gheader, queue, "GROUP"))
	require.Equal(t, "ACTIVE", column(t, gheader, queue, "STATUS"))
	require.Equal(t, "5", column(t, gheader, queue, "LAG"))
	if pubsub {
		billing := lineWith(t, groups, "events  billing")
		require.Equal(t, "DEAD", column(t, gheader, billing, "STATUS"))
		require.Contains(t, out, "dead groups: 1 (events/billing)")
		search := lineWith(t, groups, "events  search")
		require.Equal(t, "ACTIVE", column(t, gheader, search, "STATUS"))
		require.Equal(t, "3", column(t, gheader, search, "LAG"))
	}
}

func TestBadCommandLines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, nil, "missing command"},
		{[]string{"bogus"}, nil, `unknown command "bogus"`},
		{[]string{"status", "--nope"}, nil, "status: flag provided but not defined: -nope"},
		{[]string{"status"}, nil, "status: no database: set --database-url or DATABASE_URL"},
		{[]string{"status", "--database-url", "postgres://x:y@:bad:port/"}, nil, "status: invalid database URL"},
		{[]string{"status", "--database-url", "postgres://h/db", "extra"}, nil, `unexpected argument "extra"`},
		{[]string{"status", "--leader-ttl", "1s", "--database-url", "postgres://h/db"}, nil, "flag provided but not defined: -leader-ttl"},
		{[]string{"run", "--database-url", "postgres://h/db", "--leader-ttl", "soon"}, nil, `invalid value "soon" for flag -leader-ttl`},
		{[]string{"run", "--database-url", "postgres://h/db", "--leader-ttl", "2h"}, nil, "--leader-ttl 2h0m0s: want between 1s and 1h"},
		{[]string{"run", "--database-url", "postgres://h/db"}, map[string]string{"PGQ_BATCH_LIMIT": "many"}, `env PGQ_BATCH_LIMIT: invalid value "many" for batch-limit`},
		{[]string{"run", "--database-url", "postgres://h/db", "--schedule", "fanout.x"}, nil, "want FUNC=VALUE"},
		{[]string{"run", "--database-url", "postgres://h/db", "--schedule", "fanout.x=every day"}, nil, `schedule "every day"`},
		{[]string{"run", "--database-url", "postgres://h/db", "--timeout", "fanout.x=-1s"}, nil, "want a positive duration"},
		{[]string{"run", "--database-url", "postgres://h/db", "--backfill-match", "("}, nil, "backfill match: error parsing regexp"},
		{[]string{"run", "--database-url", "postgres://h/db", "--log-level", "loud"}, nil, `invalid --log-level "loud"`},
		{[]string{"run", "--database-url", "postgres://h/db", "--console-admin"}, nil, "--console-admin needs --console and a --console-token"},
		{[]string{"run", "--database-url", "postgres://h/db", "--console=false"}, map[string]string{"PGQ_CONSOLE_ADMIN": "true", "PGQ_CONSOLE_TOKEN": "t"}, "--console-admin needs --console"},
		{[]string{"migrate", "--config", "/nonexistent/pgq.conf", "--database-url", "postgres://h/db"}, nil, "config: open /nonexistent/pgq.conf"},
		// Numbers that parse but must not start a sidecar: NaN and +Inf left
		// backfills unthrottled, 4294967298 wrapped to a pool of 2, and
		// 3000000000 failed later with exit status 1.
		{[]string{"run", "--database-url", "postgres://h/db", "--backfill-max-rate", "NaN"}, nil, "--backfill-max-rate NaN: want a finite number > 0"},
		{[]string{"run", "--database-url", "postgres://h/db", "--backfill-max-rate", "+Inf"}, nil, "--backfill-max-rate +Inf: want a finite number > 0"},
		{[]string{"run", "--database-url", "postgres://h/db"}, map[string]string{"PGQ_BACKFILL_MAX_RATE": "-Inf"}, "--backfill-max-rate -Inf: want a finite number > 0"},
		{[]string{"run", "--database-url", "postgres://h/db", "--max-conns", "4294967298"}, nil, "--max-conns 4294967298: want between 2 and 10000"},
		{[]string{"run", "--database-url", "postgres://h/db", "--max-conns", "3000000000"}, nil, "--max-conns 3000000000: want between 2 and 10000"},
		{[]string{"run", "--database-url", "postgres://h/db", "--max-conns", "1"}, nil, "--max-conns 1: want between 2 and 10000"},
	} {
		_, _, err := cli(ctx, tc.env, tc.args...)
		require.ErrorContains(t, err, tc.want, "args %q", tc.args)
		var ue usageError
		require.ErrorAs(t, err, &ue, "args %q: a usage error (exit 2)", tc.args)
	}
}

func TestHelpAndVersion(t *testing.T) {
	t.Parallel()
	out, _, err := cli(context.Background(), nil, "help")
	require.NoError(t, err)
	for _, want := range []string{"pgq-scheduler migrate", "--leader-ttl", "PGQ_LEADER_TTL", "(default 15s)",
		"--backfill-target-latency", "(default 10ms)", "--backfill-max-rate", "--shutdown-timeout", "DATABASE_URL"} {
		require.Contains(t, out, want)
	}
	out2, _, err := cli(context.Background(), nil, "run", "--help")
	require.NoError(t, err)
	require.Equal(t, out, out2)
	out, _, err = cli(context.Background(), nil, "version")
	require.NoError(t, err)
	require.Regexp(t, `^pgq-scheduler v\d+\.\d+\.\d+\S* \(go[0-9.]+, schema version \d+, SQL \d+\.\d+\.\d+\S*\)\n$`, out)
}

// Flags beat the environment, which beats the config file, which beats the
// defaults; per-function maps merge key by key in the same order.
func TestConfigPrecedence(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "pgq.conf")
	require.NoError(t, os.WriteFile(file, []byte(`
# pgq-scheduler config
database-url = "postgres://file/db"
leader-ttl = 20s
jitter = 3s
batch-limit = 7
schedule.fanout._cleanup_partitions = @every 1m
schedule.fanout._manage_partitions = @every 2m
timeout.fanout._cleanup_partitions = 5m
`), 0o600))
	env := map[string]string{
		"PGQ_CONFIG":     file,
		"DATABASE_URL":   "postgres://env/db",
		"PGQ_LEADER_TTL": "25s",
		"PGQ_SCHEDULE":   "fanout._manage_partitions=@every 3m; fanout._detect_dead_groups=@every 5s",
	}
	o, err := parseOptions("run", []string{"--leader-ttl", "30s", "--schedule", "fanout._manage_partitions=@every 4m"},
		func(k string) string { return env[k] })
	require.NoError(t, err)
	require.Equal(t, "postgres://env/db", o.databaseURL)
	require.Equal(t, 30*time.Second, o.leaderTTL)
	require.Equal(t, 3*time.Second, o.jitter)
	require.Equal(t, 7, o.batchLimit)
	require.Equal(t, 10*time.Second, o.connectTimeout, "default")
	require.Equal(t, mapFlag{
		"fanout._manage_partitions":  "@every 4m",
		"fanout._detect_dead_groups": "@every 5s",
		"fanout._cleanup_partitions": "@every 1m",
	}, o.schedules)
	require.Equal(t, mapFlag{"fanout._cleanup_partitions": "5m"}, o.timeouts)

	// A config file shared with `status` may hold run's settings.
	o, err = parseOptions("status", []string{"--config", file}, noEnv)
	require.NoError(t, err)
	require.Equal(t, "postgres://file/db", o.databaseURL)

	bad := filepath.Join(t.TempDir(), "bad.conf")
	require.NoError(t, os.WriteFile(bad, []byte("leader-tll = 5s\n"), 0o600))
	_, err = parseOptions("run", []string{"--config", bad}, noEnv)
	require.EqualError(t, err, fmt.Sprintf(`config %s:1: unknown setting "leader-tll"`, bad))
	require.NoError(t, os.WriteFile(bad, []byte("just words\n"), 0o600))
	_, err = parseOptions("run", []string{"--config", bad}, noEnv)
	require.ErrorContains(t, err, `:1: want key = value, got "just words"`)
}

func TestMigrateFreshDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	name := "pgq_mig_" + randHex()
	conn, err := pgx.Connect(b.ctx, b.Admin)
	require.NoError(t, err)
	defer conn.Close(b.ctx)
	_, err = conn.Exec(b.ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), b.Admin)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	url := testdb.WithDatabase(b.Admin, name)

	_, _, err = cli(b.ctx, nil, "status", "--database-url", url)
	require.EqualError(t, err, "status: schema fanout is not installed (run: pgq-scheduler migrate)")
	out, _, err := cli(b.ctx, nil, "migrate", "--database-url", url)
	require.NoError(t, err)
	require.Regexp(t, `^pgq-scheduler: schema at version \d+\n$`, out)
	again, _, err := cli(b.ctx, nil, "migrate", "--database-url", url)
	require.NoError(t, err)
	require.Equal(t, out, again, "idempotent")
	out, _, err = cli(b.ctx, nil, "status", "--database-url", url)
	require.NoError(t, err)
	require.Contains(t, out, "no topics")

	// uninstall (no --roles: they are shared with every test database)
	// removes what migrate made and nothing else; migrate installs again.
	// Its three roles are counted by name: other tests of the suite make
	// roles of their own on the same server (fanout_directory_reader).
	uc, err := pgx.Connect(b.ctx, url)
	require.NoError(t, err)
	_, err = uc.Exec(b.ctx, `CREATE TABLE public.mine (x int); INSERT INTO public.mine VALUES (7);
		SELECT fanout.create_topic('t'); SELECT fanout.publish('t', '{}')`)
	require.NoError(t, err)
	uc.Close(b.ctx)
	out, _, err = cli(b.ctx, nil, "uninstall", "--database-url", url)
	require.NoError(t, err)
	require.Equal(t, "pgq-scheduler: removed schemas fanout and fanout_data and public.fanout_schema_version\n", out)
	uc, err = pgx.Connect(b.ctx, url)
	require.NoError(t, err)
	defer uc.Close(b.ctx)
	var left, mine, roles int
	require.NoError(t, uc.QueryRow(b.ctx, `SELECT (SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'fanout%')
		+ (SELECT count(*) FROM pg_class WHERE relname = 'fanout_schema_version'),
		(SELECT x FROM public.mine), (SELECT count(*) FROM pg_roles WHERE rolname IN ('fanout_admin', 'fanout_producer', 'fanout_consumer'))`).Scan(&left, &mine, &roles))
	require.Equal(t, 0, left)
	require.Equal(t, 7, mine)
	require.Equal(t, 3, roles, "roles stay without --roles")
	_, _, err = cli(b.ctx, nil, "status", "--database-url", url)
	require.EqualError(t, err, "status: schema fanout is not installed (run: pgq-scheduler migrate)")
	again, _, err = cli(b.ctx, nil, "migrate", "--database-url", url)
	require.NoError(t, err)
	require.Regexp(t, `^pgq-scheduler: schema at version \d+\n$`, again)
}

func randHex() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds pgq-scheduler once per test run.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pgq-scheduler-test-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "pgq-scheduler")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// The real binary: bad flags and an unreachable database give one line on
// stderr and a non-zero exit status.
func TestBinaryErrors(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"status", "--nope"}, 2, "pgq-scheduler: status: flag provided but not defined: -nope (see: pgq-scheduler help)"},
		{[]string{"frobnicate"}, 2, `pgq-scheduler: unknown command "frobnicate"`},
		{[]string{"run", "--max-conns", "3000000000", "--database-url", "postgres://postgres@127.0.0.1:1/x?sslmode=disable"}, 2,
			"pgq-scheduler: run: --max-conns 3000000000: want between 2 and 10000"},
		{[]string{"run", "--backfill-max-rate", "NaN", "--database-url", "postgres://postgres@127.0.0.1:1/x?sslmode=disable"}, 2,
			"pgq-scheduler: run: --backfill-max-rate NaN: want a finite number > 0"},
		{[]string{"status", "--database-url", "postgres://postgres@127.0.0.1:1/x?sslmode=disable"}, 1,
			"pgq-scheduler: status: database unreachable: failed to connect to"},
		{[]string{"migrate", "--database-url", "postgres://postgres@127.0.0.1:1/x?sslmode=disable"}, 1,
			"pgq-scheduler: migrate: database unreachable: failed to connect to"},
		{[]string{"run", "--connect-timeout", "1s", "--database-url", "postgres://postgres@127.0.0.1:1/x?sslmode=disable"}, 1,
			"pgq-scheduler: run: database unreachable: failed to connect to"},
	} {
		cmd := exec.Command(bin, tc.args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "args %q", tc.args)
		require.Equal(t, tc.code, ee.ExitCode(), "args %q", tc.args)
		require.Empty(t, stdout.String())
		lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
		require.Len(t, lines, 1, "one line: %q", stderr.String())
		require.True(t, strings.HasPrefix(lines[0], tc.want), "args %q: got %q", tc.args, lines[0])
	}
}

// listenedAddr is the address a binary started with --listen 127.0.0.1:0
// listens on, from its log: the kernel picks a free port at the binary's
// own listen, so no other process can take it between a test choosing a
// port and the binary binding it.
func listenedAddr(t *testing.T, stderr *testdb.SyncBuffer) string {
	t.Helper()
	var addr string
	require.Eventually(t, func() bool {
		for _, line := range strings.Split(stderr.String(), "\n") {
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "serving /metrics and /healthz" && rec.Addr != "" {
				addr = rec.Addr
				return true
			}
		}
		return false
	}, time.Minute, 50*time.Millisecond, "the binary logs the address it listens on")
	return addr
}

// `run` end to end through the binary: it serves /healthz and /metrics,
// runs maintenance as the leader (here: dead-group detection marks a group
// without heartbeats dead), logs JSON, and on SIGTERM stops cleanly (exit 0)
// and resigns.
func TestBinaryRunAndSigterm(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bin := binary(t)
	b.exec(t, `SELECT fanout.create_topic('events', semantics => 'pubsub')`)
	b.exec(t, `SELECT fanout.subscribe('events', 'billing', heartbeat_timeout => '1 second', dead_after_misses => 1)`)
	b.exec(t, `SELECT fanout.subscribe('events', 'search')`)
	cmd := exec.Command(bin, "run", "--listen", "127.0.0.1:0", "--migrate", "--jitter", "0",
		"--discover-schedule", "@every 1s", "--default-schedule", "@every 1s")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + b.URL, "PGQ_LEADER_ID=bin-1", "PGQ_LOG_LEVEL=debug"}
	var stderr testdb.SyncBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("stderr:\n%s", stderr.String())
		}
	})
	addr := listenedAddr(t, &stderr)

	require.Eventually(t, func() bool {
		code, body := httpGet("http://" + addr + "/healthz")
		return code == http.StatusOK && strings.Contains(body, `"leader": true`)
	}, time.Minute, 100*time.Millisecond, "healthy leader")
	require.Eventually(t, func() bool {
		var status string
		require.NoError(t, b.Pool.QueryRow(b.ctx,
			`SELECT status FROM fanout.groups WHERE topic = 'events' AND group_name = 'billing'`).Scan(&status))
		return status == "dead"
	}, time.Minute, 100*time.Millisecond, "the scheduler's dead-group detection ran")
	var search string
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		`SELECT status FROM fanout.groups WHERE topic = 'events' AND group_name = 'search'`).Scan(&search))
	require.Equal(t, "active", search)

	// The job's transaction commits (the group is dead) before the
	// scheduler counts the run: poll for the counter.
	var code int
	var metrics string
	require.Eventually(t, func() bool {
		code, metrics = httpGet("http://" + addr + "/metrics")
		return strings.Contains(metrics, `pgq_scheduler_job_runs_total{job="fanout._detect_dead_groups"}`)
	}, time.Minute, 100*time.Millisecond, "the run is counted")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, metrics, `pgq_group_status{group="billing",status="dead",topic="events"} 1`)
	require.Contains(t, metrics, "pgq_scheduler_leader 1")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err, "clean exit on SIGTERM")
	case <-time.After(time.Minute):
		t.Fatal("no exit after SIGTERM")
	}
	var leaders int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*) FROM fanout.leader`).Scan(&leaders))
	require.Zero(t, leaders, "resigned on SIGTERM")
	logs := stderr.String()
	for _, want := range []string{`"msg":"elected leader","leader_id":"bin-1"`, `"job":"fanout._detect_dead_groups"`,
		`"msg":"scheduler stopping"`, `"msg":"resigned leadership"`} {
		require.Contains(t, logs, want)
	}
	for _, l := range strings.Split(strings.TrimSpace(logs), "\n") {
		require.True(t, strings.HasPrefix(l, "{") && strings.HasSuffix(l, "}"), "JSON log line: %q", l)
	}
}

func httpGet(url string) (int, string) {
	resp, err := http.Get(url) //nolint:noctx // test
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.String()
}

// startBinary runs `pgq-scheduler run` against the test database until the
// test ends and waits until it is a healthy leader.
func startBinary(t *testing.T, b *bundle, extra ...string) (cmd *exec.Cmd, addr string, stderr *testdb.SyncBuffer, exited chan error) {
	t.Helper()
	args := append([]string{"run", "--listen", "127.0.0.1:0", "--jitter", "0",
		"--discover-schedule", "@every 1s", "--default-schedule", "@every 1s"}, extra...)
	cmd = exec.Command(binary(t), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + b.URL, "PGQ_LOG_LEVEL=debug"}
	stderr = &testdb.SyncBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	exited = make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("stderr:\n%s", stderr.String())
		}
	})
	addr = listenedAddr(t, stderr)
	require.Eventually(t, func() bool {
		code, body := httpGet("http://" + addr + "/healthz")
		return code == http.StatusOK && strings.Contains(body, `"leader": true`)
	}, time.Minute, 100*time.Millisecond, "healthy leader")
	return cmd, addr, stderr, exited
}

// The seed's kill-and-resurrect scenario through the real binary: publish
// continuously, kill one group's consumer, the scheduler marks the group
// dead while the other group keeps up; resurrect it and both groups are
// healthy and caught up.
func TestBinaryKillAndResurrect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `SELECT fanout.create_topic('events', semantics => 'pubsub')`)
	// billing dies about 3 s after its consumer stops (a single missed
	// second could catch a consumer that is only slow on a loaded machine);
	// search, the control, is never close to it.
	b.exec(t, `SELECT fanout.subscribe('events', 'billing', heartbeat_timeout => '1 second', dead_after_misses => 3)`)
	b.exec(t, `SELECT fanout.subscribe('events', 'search', heartbeat_timeout => '30 seconds')`)
	cmd, _, _, exited := startBinary(t, b)

	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	var wg sync.WaitGroup
	loop := func(every time.Duration, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					if err := f(); err != nil && ctx.Err() == nil {
						t.Errorf("loop: %v", err)
						return
					}
				}
			}
		}()
	}
	consume := func(group string) func() error {
		return func() error {
			_, err := b.Pool.Exec(ctx, `SELECT fanout.ack(lease_id) FROM (SELECT DISTINCT lease_id
			                            FROM fanout.read('events', $1, 'c1', 100, '30 seconds')) l`, group)
			return err
		}
	}
	var publishing atomic.Bool
	publishing.Store(true)
	loop(20*time.Millisecond, func() error {
		if !publishing.Load() {
			return nil
		}
		_, err := b.Pool.Exec(ctx, `SELECT fanout.publish('events', '{"n":1}')`)
		return err
	})
	loop(50*time.Millisecond, consume("search"))
	billingCtx, killBilling := context.WithCancel(ctx)
	billing := consume("billing")
	loop(50*time.Millisecond, func() error {
		if billingCtx.Err() != nil {
			return nil // killed: no reads, no heartbeats
		}
		return billing()
	})

	status := func(group string) string {
		var s string
		require.NoError(t, b.Pool.QueryRow(b.ctx,
			`SELECT status FROM fanout.groups WHERE topic = 'events' AND group_name = $1`, group).Scan(&s))
		return s
	}
	groupInt := func(col, group string) int64 {
		var n int64
		require.NoError(t, b.Pool.QueryRow(b.ctx,
			`SELECT `+col+` FROM fanout.groups WHERE topic = 'events' AND group_name = $1`, group).Scan(&n))
		return n
	}
	lag := func(group string) int64 { return groupInt("lag_messages", group) }
	require.Eventually(t, func() bool { return groupInt("delivered", "billing") >= 10 }, time.Minute,
		20*time.Millisecond, "both consumers at work")
	require.Equal(t, "active", status("billing"))
	killBilling()
	require.Eventually(t, func() bool { return status("billing") == "dead" }, time.Minute, 100*time.Millisecond,
		"the scheduler declares the killed group dead")
	require.Equal(t, "active", status("search"), "the healthy group keeps heartbeating by reading")

	var st string
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.resurrect_group('events', 'billing')`).Scan(&st))
	require.Equal(t, "active", status("billing"))
	loop(50*time.Millisecond, billing) // the consumer is back
	publishing.Store(false)
	require.Eventually(t, func() bool { return lag("billing") == 0 && lag("search") == 0 }, time.Minute,
		100*time.Millisecond, "both groups caught up")
	require.Equal(t, "active", status("billing"))
	require.Equal(t, "active", status("search"))
	cancel()
	wg.Wait()

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("no exit after SIGTERM")
	}
}

// A leader paused with SIGSTOP past
// its TTL is replaced by the standby; once resumed (SIGCONT) it logs that it
// lost leadership (it said nothing: its first attempt after the pause just
// lost, and the loss of a lease already past its local deadline was not
// reported) and stops reporting itself as leader.
func TestBinaryLeaderPausedPastTTL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a, addrA, logsA, _ := startBinary(t, b, "--leader-id", "paused", "--leader-ttl", "2s")

	c := exec.Command(binary(t), "run", "--listen", "127.0.0.1:0", "--jitter", "0", "--leader-id", "standby",
		"--leader-ttl", "2s", "--discover-schedule", "@every 1s", "--default-schedule", "@every 1s")
	c.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + b.URL, "PGQ_LOG_LEVEL=debug"}
	logsC := &testdb.SyncBuffer{}
	c.Stderr = logsC
	require.NoError(t, c.Start())
	go func() { _ = c.Wait() }()
	t.Cleanup(func() {
		_ = c.Process.Kill()
		if t.Failed() {
			t.Logf("standby stderr:\n%s", logsC.String())
		}
	})
	addrC := listenedAddr(t, logsC)
	require.Eventually(t, func() bool {
		_, body := httpGet("http://" + addrC + "/healthz")
		return strings.Contains(body, `"leader": false`)
	}, time.Minute, 50*time.Millisecond, "the second binary is a standby")

	require.NoError(t, a.Process.Signal(syscall.SIGSTOP))
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = a.Process.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	require.Eventually(t, func() bool {
		_, body := httpGet("http://" + addrC + "/healthz")
		return strings.Contains(body, `"leader": true`)
	}, time.Minute, 50*time.Millisecond, "the standby takes over from the paused leader")
	resume()

	require.Eventually(t, func() bool {
		return strings.Contains(logsA.String(), `"msg":"no longer leader","leader_id":"paused"`)
	}, time.Minute, 50*time.Millisecond, "the resumed leader logs that it lost leadership")
	require.Eventually(t, func() bool {
		_, body := httpGet("http://" + addrA + "/healthz")
		return strings.Contains(body, `"leader": false`)
	}, time.Minute, 50*time.Millisecond, "the resumed sidecar no longer says it leads")
}

// The console, /metrics and /healthz listen on loopback unless told
// otherwise (all interfaces exposed the console to the network by default).
func TestDefaultListenIsLoopback(t *testing.T) {
	t.Parallel()
	o, err := parseOptions("run", nil, noEnv)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9187", o.listen)
	o, err = parseOptions("run", []string{"--listen", ":9187"}, noEnv)
	require.NoError(t, err)
	require.Equal(t, ":9187", o.listen, "every interface, when asked")
}
