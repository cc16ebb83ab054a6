package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/release"
	"github.com/pgfanout/pgq/internal/testdb"
	"github.com/pgfanout/pgq/orchestrator"
)

// backupCluster is the second throwaway cluster of the backup/restore and
// uninstall test: a database is restored into it, and its roles are dropped.
// Port PGQ_TEST_BACKUP_PORT (make test sets it from BACKUP_PORT), 25448
// when unset.
const backupCluster = "backup"

func backupPort() string {
	if p := os.Getenv("PGQ_TEST_BACKUP_PORT"); p != "" {
		return p
	}
	return "25448"
}

// pgBin finds a PostgreSQL client program, preferring the newest server
// installation's (pg_dump must not be older than the server).
func pgBin(t *testing.T, name string) string {
	t.Helper()
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(matches) > 0 {
		return matches[len(matches)-1]
	}
	p, err := exec.LookPath(name)
	require.NoError(t, err, "%s is needed", name)
	return p
}

func runCmd(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	require.NoError(t, err, "%s %v: %s", name, args, out)
	return string(out)
}

func startCluster(t *testing.T, name, port string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot(t), "scripts", "devdb.sh"), "start", name, port)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "devdb.sh start %s %s: %s", name, port, stderr.String())
	t.Cleanup(func() {
		_ = exec.Command(filepath.Join(repoRoot(t), "scripts", "devdb.sh"), "stop", name).Run()
	})
	return strings.TrimSpace(string(out))
}

func queryStrings(t *testing.T, ctx context.Context, url, sql string) []string {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, sql)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// The backup and restore into another cluster of docs/operations.md (its
// block, verbatim): roles
// first (pg_dumpall --roles-only), then pg_dump -Fc / pg_restore. The
// restored database has the same catalog (every topic's generated objects
// too), check_consistency() is clean, an in-flight lease is still acked,
// publish and read work, the user's table came along and migrate is a
// no-op. Then the uninstall of docs/operations.md on it: --roles refuses (2BP01, nothing
// dropped) while another database of the cluster still uses the roles; once
// that one is uninstalled, everything pgq made is gone, roles too, and the
// user's table, its rows and the user's own role are untouched.
func TestBackupRestoreOtherClusterAndUninstall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := testdb.ServerURL(t)
	other := startCluster(t, backupCluster, backupPort())

	src, drop, err := release.TempDB(ctx, admin, "pgq_t_backup_src")
	require.NoError(t, err)
	t.Cleanup(drop)
	_, err = orchestrator.MigrateURL(ctx, src)
	require.NoError(t, err)
	require.NoError(t, release.Exec(ctx, src, release.SampleTopicsSQL+`
		CREATE TABLE public.orders (id int PRIMARY KEY, note text);
		INSERT INTO public.orders SELECT g, 'order ' || g FROM generate_series(1, 3) g;`))
	conn, err := pgx.Connect(ctx, src)
	require.NoError(t, err)
	inflight, err := readMsgs(ctx, conn, "s_pubsub", ptr("g1"), "c1", 10, "1 hour")
	require.NoError(t, err)
	require.Len(t, inflight, 1)
	conn.Close(ctx)
	srcCatalog, err := release.Catalog(ctx, src)
	require.NoError(t, err)

	// Backup and restore: the block of docs/operations.md, verbatim. Roles
	// first: they are cluster-wide, pg_dump does not carry them (psql goes
	// on past "role ... already exists"). It creates database app in the
	// second cluster (dropped first, should a killed run have left it).
	const page = "docs/operations.md"
	dst := testdb.WithDatabase(other, "app")
	dropApp := func() {
		runCmd(t, pgBin(t, "psql"), "-qX", "-d", other, "-c", "DROP DATABASE IF EXISTS app WITH (FORCE)")
	}
	dropApp()
	t.Cleanup(dropApp)
	pgDir := filepath.Dir(pgBin(t, "pg_dump"))
	runShell(t, t.TempDir(), []string{pgDir}, []string{"SOURCE_URL=" + src, "SOURCE_SERVER_URL=" + admin,
		"TARGET_SERVER_URL=" + other, "TARGET_URL=" + dst},
		docBlock(t, page, "tests/install_test.go", "sh", "pg_restore"))

	dstCatalog, err := release.Catalog(ctx, dst)
	require.NoError(t, err)
	d, err := release.Diff(t.TempDir(), "source", srcCatalog, "restored", dstCatalog)
	require.NoError(t, err)
	require.Empty(t, d, "the restored catalog differs")
	require.Empty(t, queryStrings(t, ctx, dst, `SELECT coalesce(topic, '') || ': ' || problem FROM fanout.check_consistency()`))
	conn, err = pgx.Connect(ctx, dst)
	require.NoError(t, err)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT fanout.ack($1, $2)", inflight[0].LeaseID, []int64{inflight[0].MessageID}).Scan(&n))
	require.Equal(t, 1, n, "a lease taken before the backup is acked after the restore")
	var id int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT fanout.publish('s_queue', '{"after": "restore"}')`).Scan(&id))
	got, err := readMsgs(ctx, conn, "s_queue", nil, "c1", 100, "1 minute")
	require.NoError(t, err)
	require.Contains(t, ids(got), id)
	conn.Close(ctx)
	v, err := orchestrator.MigrateURL(ctx, dst)
	require.NoError(t, err)
	vSrc, err := orchestrator.MigrateURL(ctx, src)
	require.NoError(t, err)
	require.Equal(t, vSrc, v)

	// The user's own role, member of a pgq role, and a second pgq
	// database in the same cluster.
	require.NoError(t, release.Exec(ctx, dst, `
		DO $r$ BEGIN
		    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgq_test_app') THEN CREATE ROLE pgq_test_app LOGIN; END IF;
		END $r$;
		GRANT fanout_producer TO pgq_test_app;
		GRANT SELECT ON public.orders TO pgq_test_app`))
	second, dropSecond, err := release.TempDB(ctx, other, "pgq_t_second")
	require.NoError(t, err)
	t.Cleanup(dropSecond)
	_, err = orchestrator.MigrateURL(ctx, second)
	require.NoError(t, err)

	uninstall := func(url string, roles bool) error {
		c, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		defer c.Close(ctx)
		return orchestrator.Uninstall(ctx, c, roles)
	}
	pgqObjects := `SELECT n.nspname FROM pg_namespace n WHERE n.nspname IN ('fanout', 'fanout_data')
		UNION ALL SELECT 'version table' WHERE to_regclass('public.fanout_schema_version') IS NOT NULL
		UNION ALL SELECT rolname FROM pg_roles WHERE rolname IN ('fanout_admin', 'fanout_producer', 'fanout_consumer')
		ORDER BY 1`
	all := []string{"fanout", "fanout_admin", "fanout_consumer", "fanout_data", "fanout_producer", "version table"}
	requireSQLState(t, uninstall(dst, true), "2BP01")
	require.Equal(t, all, queryStrings(t, ctx, dst, pgqObjects), "a failed uninstall drops nothing")

	require.NoError(t, uninstall(second, false))
	require.Equal(t, []string{"fanout_admin", "fanout_consumer", "fanout_producer"}, queryStrings(t, ctx, second, pgqObjects))
	// The uninstall block of docs/operations.md, verbatim: the schemas,
	// then the roles too.
	runShell(t, t.TempDir(), []string{filepath.Dir(buildScheduler(t))}, []string{"DATABASE_URL=" + dst},
		docBlock(t, page, "tests/install_test.go", "sh", "pgq-scheduler uninstall"))
	require.Empty(t, queryStrings(t, ctx, dst, pgqObjects))
	require.NoError(t, uninstall(dst, true), "uninstall again: nothing left, no error")

	require.Equal(t, []string{"order 1", "order 2", "order 3"}, queryStrings(t, ctx, dst, `SELECT note FROM public.orders ORDER BY id`))
	require.Equal(t, []string{"pgq_test_app=r/postgres"},
		queryStrings(t, ctx, dst, `SELECT a::text FROM pg_class c, unnest(c.relacl) a
			WHERE c.oid = 'public.orders'::regclass AND a::text LIKE 'pgq_test_app=%'`))
	require.Equal(t, []string{"pgq_test_app"}, queryStrings(t, ctx, dst, `SELECT rolname::text FROM pg_roles WHERE rolname = 'pgq_test_app'`))
}
