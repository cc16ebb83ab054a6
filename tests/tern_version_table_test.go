package tests

import (
	"context"
	"os/exec"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/release"
	"github.com/pgfanout/pgq/internal/testdb"
	"github.com/pgfanout/pgq/orchestrator"
)

// The tern CLI without --version-table records pgq's version in
// public.schema_version; pgq-scheduler migrate then fails with 42P06, and
// says why and what to do (the tern line of docs/operations.md has the flag). After the
// update it names, migrate is a no-op at the same version.
func TestTernWithoutVersionTableHint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, drop, err := release.TempDB(ctx, testdb.ServerURL(t), "pgq_t_tern")
	require.NoError(t, err)
	t.Cleanup(drop)
	cmd := exec.Command("go", "tool", "tern", "migrate", "--migrations", "sql/migrations", "--conn-string", db)
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "tern migrate: %s", out)

	_, err = orchestrator.MigrateURL(ctx, db)
	requireSQLState(t, err, "42P06")
	require.ErrorContains(t, err, "installed by the tern CLI without --version-table public.fanout_schema_version")
	require.ErrorContains(t, err, "UPDATE public.fanout_schema_version SET version = ")

	conn, err := pgx.Connect(ctx, db)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var ternVersion int32
	require.NoError(t, conn.QueryRow(ctx, "SELECT version FROM public.schema_version").Scan(&ternVersion))
	_, err = conn.Exec(ctx, "UPDATE public.fanout_schema_version SET version = $1", ternVersion)
	require.NoError(t, err)
	v, err := orchestrator.MigrateURL(ctx, db)
	require.NoError(t, err)
	require.Equal(t, ternVersion, v)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM fanout.topics").Scan(&n))
}
