package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/testdb"
)

// TestExamplesAcrossFailover: the Python and Node examples on a multi-host
// URL whose first host is a read-only standby (target_session_attrs=
// read-write), while their backends are terminated again and again
// (pg_terminate_backend: 57P01, a lost connection, a COMMIT whose outcome
// is unknown). Each example exits 0 only if every message it published
// arrived exactly once. Not parallel: it uses FAILOVER_PORT and the next
// one before TestStaleAckAfterAsyncFailover does.
func TestExamplesAcrossFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel) // the subtests run after this function returned
	root, err := repoRoot()
	require.NoError(t, err)
	py := ""
	for _, c := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(c, "-c", "import psycopg").Run() == nil {
			py = c
			break
		}
	}
	require.NotEmpty(t, py, "no python3 with psycopg: sudo make deps")
	_, err = os.Stat(filepath.Join(root, "examples", "node", "node_modules", "pg"))
	require.NoError(t, err, "examples/node/node_modules/pg: sudo make deps")

	port := failoverPort(t)
	primary, adminP := freshCluster(ctx, t, "ha-p", port)
	standby := &cluster{root: primary.root, name: "ha-s", port: port + 1}
	require.NoError(t, standby.destroy(ctx))
	t.Cleanup(func() { _ = standby.destroy(context.Background()) })
	// A database per example: both create their tables at start, and two
	// CREATE TABLE IF NOT EXISTS of one name at once fail (23505).
	for _, db := range []string{"haex_python", "haex_node"} {
		_, err = freshDatabase(ctx, adminP, db)
		require.NoError(t, err)
	}
	_, err = standby.standbyOf(ctx, primary)
	require.NoError(t, err)

	for _, ex := range []struct {
		name, topic string
		cmd         []string
	}{
		{"python", "py.orders", []string{py, filepath.Join(root, "examples", "python", "pgq_example.py")}},
		{"node", "node.orders", []string{"node", filepath.Join(root, "examples", "node", "example.js")}},
	} {
		t.Run(ex.name, func(t *testing.T) {
			t.Parallel() // each example waits out a lease of its own killed reads (30 s)
			dbName := "haex_" + ex.name
			multi := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=3",
				standby.port, primary.port, dbName)
			admin := connect(ctx, t, adminP)
			db := connect(ctx, t, testdb.WithDatabase(adminP, dbName)+"&application_name=ha-monitor")
			cmd := exec.CommandContext(ctx, ex.cmd[0], append(ex.cmd[1:], "--url", multi, "--count", "300")...)
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			require.NoError(t, cmd.Start())
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			killed := 0
			var err error
		loop:
			for {
				select {
				case err = <-done:
					break loop
				case <-time.After(50 * time.Millisecond):
				}
				// While messages flow (after the example's setup, before its
				// closing fencing demo): one backend of the database at a
				// time.
				var processed int
				if err := db.QueryRow(ctx, `SELECT CASE WHEN to_regclass('processed') IS NULL THEN 0
					ELSE (SELECT count(*) FROM processed WHERE topic = $1) END`, ex.topic).Scan(&processed); err != nil {
					processed = 0
				}
				if killed < 6 && processed > 0 && processed < 250 {
					var n int
					require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
						FROM (SELECT pid FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'
						AND pid <> pg_backend_pid() AND application_name = '' ORDER BY random() LIMIT 1) t`, dbName).Scan(&n))
					killed += n
				}
			}
			t.Logf("%s example (%d backends terminated): %s", ex.name, killed, out.String())
			require.NoError(t, err, "%s example: %s", ex.name, out.String())
			require.Positive(t, killed, "the example ran long enough to meet terminated backends")
		})
	}
}
