package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/release"
	"github.com/pgfanout/pgq/internal/testdb"
)

// synthClone copies this checkout's files (tracked and untracked, not
// ignored) into a new git repository in a temp dir with one commit, so the
// release scripts can cut releases there without touching this one.
func synthClone(t *testing.T, edit func(dir string)) string {
	t.Helper()
	root := repoRoot(t)
	dir := filepath.Join(t.TempDir(), "pgq")
	ls := exec.Command("git", "ls-files", "-co", "--exclude-standard", "-z")
	ls.Dir = root
	out, err := ls.Output()
	require.NoError(t, err)
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, f)
		st, err := os.Lstat(src)
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		}
		require.NoError(t, err)
		if !st.Mode().IsRegular() {
			continue
		}
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, st.Mode().Perm()))
	}
	if edit != nil {
		edit(dir)
	}
	git(t, dir, "init", "-q", "-b", "main")
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "synthetic base")
	return dir
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=pgq test", "-c", "user.email=test@example.invalid",
		"-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
	return string(out)
}

// script runs a repository script in dir with DATABASE_URL set.
func script(t *testing.T, dir, db string, args ...string) string {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "DATABASE_URL="+db, "RELEASE_DATE=2026-01-02",
		"GIT_AUTHOR_NAME=pgq test", "GIT_AUTHOR_EMAIL=test@example.invalid",
		"GIT_COMMITTER_NAME=pgq test", "GIT_COMMITTER_EMAIL=test@example.invalid")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%v: %s", args, out)
	return string(out)
}

func replaceIn(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(string(b), old), "%s: %q", path, old)
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o644))
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

const synthFn = `-- fanout.zz_synth(a): a function of the synthetic release (test only).
CREATE OR REPLACE FUNCTION fanout.zz_synth(a int)
RETURNS int LANGUAGE sql IMMUTABLE AS $fn$ SELECT a $fn$;
`

const synthGone = `-- fanout.zz_gone(a): removed by the next synthetic release (test only).
CREATE OR REPLACE FUNCTION fanout.zz_gone(a int)
RETURNS int LANGUAGE sql IMMUTABLE AS $fn$ SELECT a $fn$;
`

// The release machinery end to end, with a synthetic previous release: in a
// temp clone, scripts/release.sh cuts 0.0.1 (tag, RELEASES, VERSION,
// fanout.version(), CHANGELOG heading, signatures); then the next version
// changes a generator (the page functions get one more setting), changes a
// function's signature and result, removes a function, adds one and a
// column; scripts/gen-upgrade.sh writes ONE migration with only that, the
// DROPs of the two signatures and the regeneration of every topic; and
// verify-sql's catalog diff says a database of 0.0.1 with topics of every
// kind, migrated twice, equals a fresh install (so the generator change
// reached the old topics). Without the regeneration the diff fails.
func TestReleaseSyntheticUpgrade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := testdb.ServerURL(t)
	dir := synthClone(t, func(dir string) {
		writeFile(t, filepath.Join(dir, "sql/functions/fanout.zz_synth.sql"), synthFn)
		writeFile(t, filepath.Join(dir, "sql/functions/fanout.zz_gone.sql"), synthGone)
		// The tree as if it had never been released (once real releases
		// exist: no RELEASES lines, no upgrade migrations, no signatures),
		// migrations 002/003 re-frozen from it.
		b, err := os.ReadFile(filepath.Join(dir, "RELEASES"))
		require.NoError(t, err)
		writeFile(t, filepath.Join(dir, "RELEASES"), regexp.MustCompile(`(?m)^\d+\.\d+\.\d+\s.*\n`).ReplaceAllString(string(b), ""))
		for _, pat := range []string{"sql/migrations/[0-9]*_upgrade.sql", "sql/migrations/snapshots/*", release.SignaturesFile} {
			matches, err := filepath.Glob(filepath.Join(dir, pat))
			require.NoError(t, err)
			for _, m := range matches {
				if base := filepath.Base(m); base != "002" && base != "003" {
					require.NoError(t, os.RemoveAll(m))
				}
			}
		}
		// Schema changes made since the last release (sql/upgrade) belong,
		// in a tree never released, to the schema migration itself.
		for _, f := range []string{"sql/upgrade/before.sql", "sql/upgrade/after.sql"} {
			up, err := os.ReadFile(filepath.Join(dir, f))
			require.NoError(t, err)
			schema, err := os.ReadFile(filepath.Join(dir, "sql/migrations/001_schema.sql"))
			require.NoError(t, err)
			writeFile(t, filepath.Join(dir, "sql/migrations/001_schema.sql"), string(schema)+"\n"+string(up))
			header := regexp.MustCompile(`(?s)^((?:--[^\n]*\n)*).*$`).ReplaceAllString(string(up), "$1")
			writeFile(t, filepath.Join(dir, f), header)
		}
		cmd := exec.Command("scripts/resnapshot-dev.sh")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	})

	// Cut 0.0.1.
	script(t, dir, admin, "scripts/release.sh", "0.0.1")
	rels, err := release.ReadReleases(dir)
	require.NoError(t, err)
	require.Len(t, rels, 1)
	require.Equal(t, "0.0.1", rels[0].Version)
	tagged := strings.TrimSpace(git(t, dir, "rev-list", "-n", "1", "v0.0.1"))
	require.Equal(t, tagged, rels[0].Commit, "RELEASES names the tagged commit")
	require.Equal(t, "0.0.1\n", git(t, dir, "show", "v0.0.1:VERSION"))
	require.Contains(t, git(t, dir, "show", "v0.0.1:sql/functions/fanout.version.sql"), "SELECT '0.0.1'::text")
	require.Contains(t, git(t, dir, "show", "v0.0.1:CHANGELOG.md"), "## [Unreleased]\n\n## [0.0.1] - 2026-01-02\n")
	sigs := git(t, dir, "show", "v0.0.1:sql/signatures.txt")
	require.Contains(t, sigs, "function fanout.zz_gone(integer) returns integer\n")
	require.Contains(t, sigs, "function fanout.publish(text,jsonb,jsonb,text,boolean,text,timestamp with time zone,interval,integer,bigint) returns bigint\n")
	require.Empty(t, git(t, dir, "status", "--porcelain"))
	// The first release re-froze 002/003 in place: still three migrations.
	require.Equal(t, "sql/migrations/001_schema.sql\nsql/migrations/002_install_functions.sql\nsql/migrations/003_install_triggers.sql\nsql/migrations/snapshots\n",
		git(t, dir, "ls-tree", "--name-only", "v0.0.1", "sql/migrations/"))
	// Nothing changed yet: no upgrade migration, verify-sql passes.
	out := script(t, dir, admin, "scripts/gen-upgrade.sh")
	require.Contains(t, out, "nothing changed since release 0.0.1")
	require.Empty(t, git(t, dir, "status", "--porcelain"))

	// The next version.
	replaceIn(t, filepath.Join(dir, "sql/functions/fanout._create_page_function.sql"),
		"        SET enable_bitmapscan = off\n", "        SET enable_bitmapscan = off\n        SET work_mem = '8MB'\n")
	writeFile(t, filepath.Join(dir, "sql/functions/fanout.zz_synth.sql"), strings.Replace(synthFn,
		"zz_synth(a int)\nRETURNS int LANGUAGE sql IMMUTABLE AS $fn$ SELECT a $fn$",
		"zz_synth(a int, b int DEFAULT 0)\nRETURNS bigint LANGUAGE sql IMMUTABLE AS $fn$ SELECT a + b $fn$", 1))
	require.NoError(t, os.Remove(filepath.Join(dir, "sql/functions/fanout.zz_gone.sql")))
	writeFile(t, filepath.Join(dir, "sql/functions/fanout.zz_new.sql"), strings.ReplaceAll(synthGone, "zz_gone", "zz_new"))
	b, err := os.ReadFile(filepath.Join(dir, "sql/upgrade/before.sql"))
	require.NoError(t, err)
	writeFile(t, filepath.Join(dir, "sql/upgrade/before.sql"), string(b)+"ALTER TABLE fanout.topic ADD COLUMN zz_note text;\n")
	out = script(t, dir, admin, "scripts/resnapshot-dev.sh") // after a release: gen-upgrade.sh
	require.Contains(t, out, "migration 004: upgrade from 0.0.1")

	ins, err := os.ReadFile(filepath.Join(dir, "sql/migrations/snapshots/004/install.sql"))
	require.NoError(t, err)
	require.Contains(t, string(ins), "DROP ROUTINE IF EXISTS fanout.zz_synth(integer);\n")
	require.Contains(t, string(ins), "DROP ROUTINE IF EXISTS fanout.zz_gone(integer);\n")
	require.Contains(t, string(ins), `{{ template "fanout._create_page_function.sql" . }}`)
	require.Contains(t, string(ins), `{{ template "fanout.zz_new.sql" . }}`)
	require.Contains(t, string(ins), `{{ template "_upgrade_before.sql" . }}`)
	require.Contains(t, string(ins), "SELECT fanout.regenerate_topics();")
	require.NotContains(t, string(ins), "fanout.publish.sql", "only what changed")
	snap, err := os.ReadDir(filepath.Join(dir, "sql/migrations/snapshots/004"))
	require.NoError(t, err)
	require.Less(t, len(snap), 12, "the upgrade holds only the changed files, the grants and the hand-written SQL")
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "next")

	// verify-sql: the migration is current and the catalogs agree.
	out = script(t, dir, admin, "scripts/verify-sql.sh")
	require.Contains(t, out, "the upgrade migration from 0.0.1 is current")
	require.Contains(t, out, "release 0.0.1 upgraded to this tree equals a fresh install")

	// By hand: 0.0.1 with topics; the old page function; migrate (twice).
	old, err := release.Extract(dir, rels[0].Commit, t.TempDir(), "sql/migrations")
	require.NoError(t, err)
	db, drop, err := release.TempDB(ctx, admin, "pgq_t_synth")
	require.NoError(t, err)
	t.Cleanup(drop)
	v, err := release.Install(ctx, db, os.DirFS(filepath.Join(old, "sql/migrations")))
	require.NoError(t, err)
	require.EqualValues(t, 3, v)
	require.NoError(t, release.Exec(ctx, db, release.SampleTopicsSQL))
	pageConfig := func() string {
		conn, err := pgx.Connect(ctx, db)
		require.NoError(t, err)
		defer conn.Close(ctx)
		var s string
		require.NoError(t, conn.QueryRow(ctx, `SELECT array_to_string(p.proconfig, ',') FROM pg_proc p
			JOIN fanout.topic t ON p.proname = t.data_table || '_page'
			WHERE t.topic = 's_reference' AND p.pronamespace = 'fanout_data'::regnamespace`).Scan(&s))
		return s
	}
	require.NotContains(t, pageConfig(), "work_mem")
	for range 2 {
		v, err = release.Install(ctx, db, os.DirFS(filepath.Join(dir, "sql/migrations")))
		require.NoError(t, err)
		require.EqualValues(t, 4, v)
	}
	require.Contains(t, pageConfig(), "work_mem=8MB", "the generator change reached a topic created at 0.0.1")

	// The catalog diff fails when the upgrade does not regenerate the topics.
	replaceIn(t, filepath.Join(dir, "sql/migrations/snapshots/004/install.sql"), "SELECT fanout.regenerate_topics();\n", "")
	problems, err := release.CheckCatalog(ctx, admin, dir, t.TempDir(), func(string) {})
	require.NoError(t, err)
	require.Len(t, problems, 1)
	require.Regexp(t, regexp.MustCompile(`(?m)^-function fanout_data\.m\{s_queue\}_page\(.*work_mem=8MB`), problems[0])
	require.Regexp(t, regexp.MustCompile(`(?m)^\+function fanout_data\.m\{s_queue\}_page\(`), problems[0])

	// make build from the release's tag stamps its version; past the tag,
	// the commit is appended.
	git(t, dir, "checkout", "-q", "-f", "v0.0.1")
	script(t, dir, admin, "make", "-s", "build")
	out = script(t, dir, admin, "bin/pgq-scheduler", "version")
	require.Regexp(t, `^pgq-scheduler v0\.0\.1 \(go[0-9.]+, schema version 3, SQL 0\.0\.1\)\n$`, out)
	// The README's install line: go install from the checkout (no -ldflags:
	// the version comes from the embedded VERSION).
	gobin := t.TempDir()
	cmd := exec.Command("go", "install", "./cmd/pgq-scheduler")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOBIN="+gobin)
	o, err := cmd.CombinedOutput()
	require.NoError(t, err, "go install: %s", o)
	out = script(t, dir, admin, filepath.Join(gobin, "pgq-scheduler"), "version")
	require.Regexp(t, `^pgq-scheduler v0\.0\.1(\+[0-9a-f]{12})? \(go[0-9.]+, schema version 3, SQL 0\.0\.1\)\n$`, out)
	git(t, dir, "checkout", "-q", "-f", "main")
	script(t, dir, admin, "make", "-s", "build")
	out = script(t, dir, admin, "bin/pgq-scheduler", "version")
	require.Regexp(t, `^pgq-scheduler v0\.0\.1\+[0-9a-f]{12} \(go[0-9.]+, schema version 4, SQL 0\.0\.1\)\n$`, out)
}
