package tests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/testdb"
	"github.com/pgfanout/pgq/orchestrator"
)

// The tern CLI on sql/migrations and the pgq-scheduler binary's embedded
// migrations install the same schema: pg_dump --schema-only of a database
// migrated each way is identical.
func TestMigrationsTernCLIMatchesBinary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := testdb.ServerURL(t)
	root := repoRoot(t)
	pgDump := findPgDump(t)

	create := func(name string) string {
		conn, err := pgx.Connect(ctx, admin)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
		require.NoError(t, err)
		t.Cleanup(func() {
			c, err := pgx.Connect(context.Background(), admin)
			if err == nil {
				_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
				c.Close(context.Background())
			}
		})
		return testdb.WithDatabase(admin, name)
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	suffix := hex.EncodeToString(rnd[:])
	viaTern := create("pgq_mig_tern_" + suffix)
	viaBinary := create("pgq_mig_bin_" + suffix)

	cmd := exec.Command("go", "tool", "tern", "migrate", "--migrations", "sql/migrations",
		"--conn-string", viaTern, "--version-table", orchestrator.VersionTable)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "tern migrate: %s", out)

	_, err = orchestrator.MigrateURL(ctx, viaBinary)
	require.NoError(t, err)

	dump := func(url string) string {
		out, err := exec.Command(pgDump, "--schema-only", "--no-owner", "--no-privileges", "-d", url).Output()
		require.NoError(t, err)
		// Only the database name may differ (none appears in a schema dump,
		// but psql meta lines such as \restrict carry a random key).
		return regexp.MustCompile(`(?m)^\\(un)?restrict .*$`).ReplaceAllString(string(out), "")
	}
	a, b := dump(viaTern), dump(viaBinary)
	require.Contains(t, a, "CREATE FUNCTION fanout.read(")
	require.Equal(t, a, b, "tern CLI and pgq-scheduler migrate must install the same schema")

	var va, vb int
	for url, v := range map[string]*int{viaTern: &va, viaBinary: &vb} {
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		require.NoError(t, conn.QueryRow(ctx, "SELECT version FROM "+orchestrator.VersionTable).Scan(v))
		conn.Close(ctx)
	}
	require.Equal(t, va, vb)
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "go.mod not found")
		dir = parent
	}
}

// findPgDump prefers the pg_dump that matches the server's major version.
func findPgDump(t *testing.T) string {
	t.Helper()
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_dump")
	if len(matches) > 0 {
		return matches[len(matches)-1]
	}
	p, err := exec.LookPath("pg_dump")
	require.NoError(t, err, "pg_dump is needed to compare schemas")
	return p
}
