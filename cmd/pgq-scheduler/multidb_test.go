package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/testdb"
	"github.com/pgfanout/pgq/orchestrator"
)

// One sidecar, two databases (--database-url twice): each database has its
// own leader election (here another sidecar already leads the second, so
// this one leads only the first and says so), maintenance runs in the
// database it leads, /metrics labels every series with its database,
// /healthz reports each, and the console's index lists both, each with its
// own console under /db/<name>/.
func TestBinaryServesSeveralDatabases(t *testing.T) {
	t.Parallel()
	one, two := setup(t), setup(t)
	for _, b := range []*bundle{one, two} {
		b.exec(t, `SELECT fanout.create_topic('events.`+b.DBName+`', semantics => 'pubsub')`)
		b.exec(t, `SELECT fanout.subscribe('events.`+b.DBName+`', 'billing', heartbeat_timeout => '1 second', dead_after_misses => 1)`)
	}
	// Another sidecar leads the second database.
	_, _, _, _ = startBinary(t, two)

	cmd := exec.Command(binary(t), "run", "--listen", "127.0.0.1:0", "--jitter", "0",
		"--discover-schedule", "@every 1s", "--default-schedule", "@every 1s",
		"--database-url", one.URL, "--database-url", two.URL)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "PGQ_LEADER_ID=multi-1"}
	stderr := &testdb.SyncBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("stderr:\n%s", stderr.String())
		}
	})
	addr := "http://" + listenedAddr(t, stderr)

	var h orchestrator.MultiHealth
	require.Eventually(t, func() bool {
		code, body := httpGet(addr + "/healthz")
		h = orchestrator.MultiHealth{}
		return code == http.StatusOK && json.Unmarshal([]byte(body), &h) == nil &&
			len(h.Databases) == 2 && h.Databases[0].Health.Leader
	}, time.Minute, 100*time.Millisecond, "healthy, leader of the first database")
	require.Equal(t, "ok", h.Status)
	require.Equal(t, one.DBName, h.Databases[0].Database)
	require.Equal(t, two.DBName, h.Databases[1].Database)
	require.False(t, h.Databases[1].Health.Leader, "the other sidecar keeps leading the second database")
	require.Equal(t, "up", h.Databases[1].Health.Database)

	// Its own election per database.
	var leader string
	require.NoError(t, one.Pool.QueryRow(one.ctx, `SELECT leader_id FROM fanout.leader`).Scan(&leader))
	require.Equal(t, "multi-1", leader)
	require.NoError(t, two.Pool.QueryRow(two.ctx, `SELECT leader_id FROM fanout.leader`).Scan(&leader))
	require.NotEqual(t, "multi-1", leader)

	// Maintenance of the database it leads: the silent group is dead.
	require.Eventually(t, func() bool {
		var status string
		require.NoError(t, one.Pool.QueryRow(one.ctx, `SELECT status FROM fanout.groups WHERE group_name = 'billing'`).Scan(&status))
		return status == "dead"
	}, time.Minute, 100*time.Millisecond, "dead-group detection ran in the first database")

	// Every series, labelled with its database.
	var metrics string
	require.Eventually(t, func() bool {
		_, metrics = httpGet(addr + "/metrics")
		return strings.Contains(metrics, `pgq_group_status{database="`+one.DBName+`",group="billing",status="dead",topic="events.`+one.DBName+`"} 1`)
	}, time.Minute, 100*time.Millisecond, "the first database's dead group, labelled")
	require.Contains(t, metrics, `pgq_scheduler_leader{database="`+one.DBName+`"} 1`)
	require.Contains(t, metrics, `pgq_scheduler_leader{database="`+two.DBName+`"} 0`)
	require.Contains(t, metrics, `pgq_group_lag_messages{database="`+two.DBName+`",group="billing",topic="events.`+two.DBName+`"} 0`)

	// The console: an index of both, and each database's own console.
	code, index := httpGet(addr + "/")
	require.Equal(t, http.StatusOK, code)
	for _, b := range []*bundle{one, two} {
		require.Contains(t, index, `data-database="`+b.DBName+`"`)
		require.Contains(t, index, `<a href="db/`+b.DBName+`/">`)
		code, page := httpGet(addr + "/db/" + b.DBName + "/")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, page, `<b id="site-name">`+b.DBName+`</b>`)
		code, overview := httpGet(addr + "/db/" + b.DBName + "/api/overview")
		require.Equal(t, http.StatusOK, code, overview)
		require.Contains(t, overview, `"events.`+b.DBName+`"`)
		other := two
		if b == two {
			other = one
		}
		require.NotContains(t, overview, `"events.`+other.DBName+`"`)
	}
	require.Contains(t, index, `data-database="`+one.DBName+`" data-status="ok" data-leader="true"`)
	require.Contains(t, index, `data-database="`+two.DBName+`" data-status="ok" data-leader="false"`)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err, "clean exit on SIGTERM")
	case <-time.After(time.Minute):
		t.Fatal("no exit after SIGTERM")
	}
	require.NoError(t, one.Pool.QueryRow(one.ctx, `SELECT count(*)::text FROM fanout.leader`).Scan(&leader))
	require.Equal(t, "0", leader, "resigned the first database's leadership on SIGTERM")
	require.Contains(t, stderr.String(), `"msg":"serving database","database":"`+one.DBName+`"`)
}

// A URL given twice is refused before anything starts; migrate, status and
// uninstall take one database.
func TestSeveralDatabasesBadCommandLines(t *testing.T) {
	t.Parallel()
	u := "postgres://u@127.0.0.1:1/app"
	_, _, err := cli(t.Context(), nil, "run", "--database-url", u, "--database-url", u)
	require.ErrorContains(t, err, `database "app@127.0.0.1:1" is given twice`)
	_, _, err = cli(t.Context(), nil, "status", "--database-url", u, "--database-url", "postgres://u@127.0.0.1:1/other")
	require.ErrorContains(t, err, "one --database-url at a time")
}

// --discover-databases: the sidecar finds, on the server of --database-url,
// the databases whose names match and that have pgq installed (a matching
// database without pgq is skipped, and says so), and serves each.
func TestBinaryDiscoversDatabases(t *testing.T) {
	t.Parallel()
	one, two := setup(t), setup(t)
	bare := "pgq_t_bare_" + randHex()
	admin, err := pgx.Connect(one.ctx, one.Admin)
	require.NoError(t, err)
	_, err = admin.Exec(one.ctx, `CREATE DATABASE `+bare)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), `DROP DATABASE IF EXISTS `+bare+` WITH (FORCE)`)
		admin.Close(context.Background())
	})
	re := "^(" + one.DBName + "|" + two.DBName + "|" + bare + ")$"
	cmd := exec.Command(binary(t), "run", "--listen", "127.0.0.1:0", "--jitter", "0",
		"--database-url", one.Admin, "--discover-databases", re)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "PGQ_LEADER_ID=discover-1"}
	stderr := &testdb.SyncBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("stderr:\n%s", stderr.String())
		}
	})
	addr := "http://" + listenedAddr(t, stderr)
	var h orchestrator.MultiHealth
	require.Eventually(t, func() bool {
		code, body := httpGet(addr + "/healthz")
		h = orchestrator.MultiHealth{}
		return code == http.StatusOK && json.Unmarshal([]byte(body), &h) == nil && len(h.Databases) == 2 &&
			h.Databases[0].Health.Leader && h.Databases[1].Health.Leader
	}, time.Minute, 100*time.Millisecond, "the leader of both databases with pgq")
	got := []string{h.Databases[0].Database, h.Databases[1].Database}
	want := []string{one.DBName, two.DBName}
	slices.Sort(want)
	require.Equal(t, want, got)
	require.Contains(t, stderr.String(), `"msg":"discovered database without pgq: skipped","database":"`+bare+`"`)
	_, metrics := httpGet(addr + "/metrics")
	for _, b := range []*bundle{one, two} {
		require.Contains(t, metrics, `pgq_scheduler_leader{database="`+b.DBName+`"} 1`)
	}
}
