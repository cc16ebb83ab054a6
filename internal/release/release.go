// Package release holds pgq's release machinery: the list of releases
// (RELEASES), the upgrade migration generated from sql/functions and
// sql/triggers against the previous release, the catalog of function
// signatures each release records (sql/signatures.txt), and the catalog
// dump that make verify-sql compares between a fresh install and an
// upgrade of every recorded release (docs/releases.md).
//
// It is driven by scripts/pgqrelease (scripts/release.sh, scripts/gen-upgrade.sh,
// scripts/verify-sql.sh) and by the tests, against a real PostgreSQL.
package release

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

// VersionTable is where the migrations record the schema version (the same
// as orchestrator.VersionTable; not imported, to keep this package free of
// the sidecar).
const VersionTable = "public.fanout_schema_version"

// Release is one line of RELEASES.
type Release struct {
	Version string
	Commit  string
}

var releaseLine = regexp.MustCompile(`^(\d+\.\d+\.\d+)\s+([0-9a-f]{7,40})$`)

// ReadReleases parses root/RELEASES: "<version> <commit>" lines, oldest
// first; '#' starts a comment.
func ReadReleases(root string) ([]Release, error) {
	b, err := os.ReadFile(filepath.Join(root, "RELEASES"))
	if err != nil {
		return nil, fmt.Errorf("releases: %w", err)
	}
	var out []Release
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		m := releaseLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("releases: RELEASES line %d: want \"<major.minor.patch> <commit>\", got %q", n, line)
		}
		out = append(out, Release{Version: m[1], Commit: m[2]})
	}
	return out, sc.Err()
}

// Extract writes the tree of paths at commit into a new directory under
// tmp (git archive) and returns it.
func Extract(root, commit, tmp string, paths ...string) (string, error) {
	dst, err := os.MkdirTemp(tmp, "release-"+commit[:7]+"-")
	if err != nil {
		return "", fmt.Errorf("extract %s: %w", commit, err)
	}
	archive := exec.Command("git", append([]string{"archive", "--format=tar", commit}, paths...)...)
	archive.Dir = root
	tar := exec.Command("tar", "-x", "-C", dst)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", fmt.Errorf("extract %s: %w", commit, err)
	}
	tar.Stdin = pipe
	var stderr bytes.Buffer
	archive.Stderr, tar.Stderr = &stderr, &stderr
	if err := tar.Start(); err != nil {
		return "", fmt.Errorf("extract %s: tar: %w", commit, err)
	}
	if err := archive.Run(); err != nil {
		_ = tar.Wait()
		return "", fmt.Errorf("extract %s: git archive: %w: %s", commit, err, stderr.String())
	}
	if err := tar.Wait(); err != nil {
		return "", fmt.Errorf("extract %s: tar: %w: %s", commit, err, stderr.String())
	}
	return dst, nil
}

// Install applies the tern migrations of fsys (a sql/migrations directory)
// to the database at dbURL, up to the newest, and returns the version.
func Install(ctx context.Context, dbURL string, fsys fs.FS) (int32, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, fmt.Errorf("install: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	m, err := migrate.NewMigrator(ctx, conn, VersionTable)
	if err != nil {
		return 0, fmt.Errorf("install: %w", err)
	}
	if err := m.LoadMigrations(fsys); err != nil {
		return 0, fmt.Errorf("install: load: %w", err)
	}
	if err := m.Migrate(ctx); err != nil {
		return 0, fmt.Errorf("install: %w", err)
	}
	return m.GetCurrentVersion(ctx)
}

// TempDB creates a new database <prefix>_<random> on the server of adminURL
// and returns its URL and a function that drops it. Callers name it
// pgq_t_..., so scripts/test-cleanup.sh drops what a killed run left.
func TempDB(ctx context.Context, adminURL, prefix string) (string, func(), error) {
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := prefix + "_" + hex.EncodeToString(rnd[:])
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", nil, fmt.Errorf("temp database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("temp database %s: %w", name, err)
	}
	drop := func() {
		c, err := pgx.Connect(context.Background(), adminURL)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
			c.Close(context.Background())
		}
	}
	return WithDatabase(adminURL, name), drop, nil
}

// WithDatabase returns the URL u pointing at database name instead.
func WithDatabase(u, name string) string {
	parsed, err := url.Parse(u)
	if err != nil || parsed.Scheme == "" {
		return u + " dbname=" + name
	}
	parsed.Path = "/" + name
	return parsed.String()
}

// SampleTopicsSQL creates a topic of every kind with a group, a message and
// a dedupe key each, through the API every release has (create_topic,
// subscribe, publish): their generated objects are what an upgrade must
// bring to the installed version.
const SampleTopicsSQL = `
SELECT fanout.create_topic('s_queue');
SELECT fanout.create_topic('s_pubsub', semantics => 'pubsub');
SELECT fanout.create_topic('s_reference', semantics => 'pubsub', completion => 'reference');
SELECT fanout.create_topic('s_partitioned', partitions => 4);
SELECT fanout.create_topic('s_sequence', sequence_ordering => true);
SELECT fanout.create_topic('s_quiet', notify => false);
SELECT fanout.create_topic('s_whole', partitions => 2, whole_transactions => true);
SELECT fanout.create_topic('s_ref_partitioned', semantics => 'pubsub', completion => 'reference', partitions => 2);
SELECT fanout.subscribe('s_pubsub', 'g1');
SELECT fanout.subscribe('s_reference', 'g1');
SELECT fanout.subscribe('s_reference', 'g2');
SELECT fanout.subscribe('s_ref_partitioned', 'g1');
SELECT fanout.publish('s_queue', '{"n": 1}', dedupe_key => 'k1');
SELECT fanout.publish('s_queue', '{"n": 2}', priority => 3);
SELECT fanout.publish('s_queue', '{"n": 3}', delay => '1 hour');
SELECT fanout.publish('s_pubsub', '{"n": 1}');
SELECT fanout.publish('s_reference', '{"n": 1}');
SELECT fanout.publish('s_partitioned', '{"n": 1}', message_group => 'a');
SELECT fanout.publish('s_sequence', '{"n": 1}', message_group => 'a', sequence => 1);
SELECT fanout.publish('s_quiet', '{"n": 1}');
SELECT fanout.publish('s_ref_partitioned', '{"n": 1}', message_group => 'b');
`

// Exec runs sql (several statements) on dbURL.
func Exec(ctx context.Context, dbURL, sql string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("exec: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	return nil
}

// catalogSQL lists pgq's catalog as sorted text lines: everything in the
// schemas fanout and fanout_data (functions with their definitions and
// privileges, relations with their columns, indexes, constraints,
// triggers, policies, views, sequences' settings, partition bounds), the
// schemas' privileges, the pgq roles' memberships and the schema version.
// Data and object ids are left out. A privilege list never set (NULL) is
// shown as the default it stands for: REVOKE ... FROM PUBLIC on an object
// that has only its owner's rights writes those out without changing them.
const catalogSQL = `
WITH ns AS (SELECT oid, nspname FROM pg_namespace WHERE nspname IN ('fanout', 'fanout_data'))
SELECT line FROM (
  SELECT format('schema %s acl=%s', n.nspname, coalesce(n.nspacl, acldefault('n', n.nspowner))) AS line FROM pg_namespace n JOIN ns USING (oid)
  UNION ALL
  SELECT format('function %s returns %s secdef=%s volatile=%s config=%s acl=%s%s%s',
                p.oid::regprocedure, pg_get_function_result(p.oid), p.prosecdef, p.provolatile,
                p.proconfig, coalesce(p.proacl, acldefault('f', p.proowner)), E'\n', pg_get_functiondef(p.oid))
  FROM pg_proc p JOIN ns ON ns.oid = p.pronamespace
  UNION ALL
  SELECT format('relation %s.%s kind=%s persistence=%s options=%s acl=%s partitioned_by=%s bound=%s inherits=%s',
                ns.nspname, c.relname, c.relkind, c.relpersistence, c.reloptions,
                coalesce(c.relacl, acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char", c.relowner)),
                CASE WHEN c.relkind = 'p' THEN pg_get_partkeydef(c.oid) END,
                pg_get_expr(c.relpartbound, c.oid),
                (SELECT string_agg(i.inhparent::regclass::text, ',' ORDER BY i.inhparent::regclass::text)
                 FROM pg_inherits i WHERE i.inhrelid = c.oid))
  FROM pg_class c JOIN ns ON ns.oid = c.relnamespace
  WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
  UNION ALL
  SELECT format('column %s.%s %s %s notnull=%s default=%s identity=%s generated=%s storage=%s compression=%s',
                ns.nspname, c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated, a.attstorage, a.attcompression)
         || ' after=' || coalesce((SELECT b.attname FROM pg_attribute b WHERE b.attrelid = a.attrelid
                   AND b.attnum > 0 AND NOT b.attisdropped AND b.attnum < a.attnum
                   ORDER BY b.attnum DESC LIMIT 1)::text, '-')
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN ns ON ns.oid = c.relnamespace
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  WHERE a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
  UNION ALL
  SELECT format('index %s.%s %s', ns.nspname, c.relname, pg_get_indexdef(c.oid))
  FROM pg_class c JOIN ns ON ns.oid = c.relnamespace WHERE c.relkind IN ('i', 'I')
  UNION ALL
  SELECT format('constraint %s.%s %s %s', ns.nspname, c.relname, k.conname, pg_get_constraintdef(k.oid))
  FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN ns ON ns.oid = c.relnamespace
  UNION ALL
  SELECT format('trigger %s.%s %s enabled=%s', ns.nspname, c.relname, pg_get_triggerdef(t.oid), t.tgenabled)
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN ns ON ns.oid = c.relnamespace
  WHERE NOT t.tgisinternal
  UNION ALL
  SELECT format('policy %s.%s %s %s %s using=%s check=%s', ns.nspname, c.relname, p.polname, p.polcmd,
                p.polroles::regrole[], pg_get_expr(p.polqual, p.polrelid), pg_get_expr(p.polwithcheck, p.polrelid))
  FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid JOIN ns ON ns.oid = c.relnamespace
  UNION ALL
  SELECT format('view %s.%s %s', ns.nspname, c.relname, pg_get_viewdef(c.oid))
  FROM pg_class c JOIN ns ON ns.oid = c.relnamespace WHERE c.relkind IN ('v', 'm')
  UNION ALL
  SELECT format('sequence %s.%s %s start=%s inc=%s min=%s max=%s cycle=%s owned_by=%s', ns.nspname, c.relname,
                format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmin, s.seqmax, s.seqcycle,
                (SELECT format('%s.%s', d.refobjid::regclass, a.attname) FROM pg_depend d
                 JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                 WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype IN ('a', 'i')
                   AND d.refclassid = 'pg_class'::regclass LIMIT 1))
  FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid JOIN ns ON ns.oid = c.relnamespace
  UNION ALL
  SELECT format('role %s member of %s', r.rolname, g.rolname)
  FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.member JOIN pg_roles g ON g.oid = m.roleid
  WHERE g.rolname IN ('fanout_admin', 'fanout_producer', 'fanout_consumer')
    AND r.rolname IN ('fanout_admin', 'fanout_producer', 'fanout_consumer')
  UNION ALL
  SELECT format('extension %s', e.extname) FROM pg_extension e
) l ORDER BY line COLLATE "C"`

var topicTable = regexp.MustCompile(`\bm(\d+)\b|\bm(\d+)_`)

// Catalog dumps pgq's catalog in the database at dbURL as sorted text (see
// catalogSQL), with each topic's id in generated names (m<id>, m<id>_...)
// replaced by its name (m{name}), so that the same topics created in two
// databases compare equal, and the schema version appended.
func Catalog(ctx context.Context, dbURL string) (string, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return "", fmt.Errorf("catalog: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	names := map[string]string{}
	rows, err := conn.Query(ctx, `SELECT topic_id::text, topic FROM fanout.topic`)
	if err != nil {
		return "", fmt.Errorf("catalog: topics: %w", err)
	}
	for rows.Next() {
		var id, name string
		if err := rows.Scan(&id, &name); err != nil {
			return "", fmt.Errorf("catalog: topics: %w", err)
		}
		names[id] = name
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("catalog: topics: %w", err)
	}
	catRows, err := conn.Query(ctx, catalogSQL)
	if err != nil {
		return "", fmt.Errorf("catalog: %w", err)
	}
	lines, err := pgx.CollectRows(catRows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("catalog: %w", err)
	}
	var version int
	if err := conn.QueryRow(ctx, "SELECT version FROM "+VersionTable).Scan(&version); err != nil {
		return "", fmt.Errorf("catalog: schema version: %w", err)
	}
	for i, l := range lines {
		lines[i] = topicTable.ReplaceAllStringFunc(l, func(s string) string {
			id := strings.TrimSuffix(strings.TrimPrefix(s, "m"), "_")
			name, ok := names[id]
			if !ok {
				return s
			}
			return "m{" + name + "}" + strings.TrimPrefix(s, "m"+id)
		})
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + fmt.Sprintf("\nschema version %d\n", version), nil
}

// Diff returns a unified diff of a and b (diff -u), empty when equal.
func Diff(tmp, nameA, a, nameB, b string) (string, error) {
	if a == b {
		return "", nil
	}
	dir, err := os.MkdirTemp(tmp, "catalog-diff-")
	if err != nil {
		return "", fmt.Errorf("diff: %w", err)
	}
	defer os.RemoveAll(dir)
	pa, pb := filepath.Join(dir, nameA), filepath.Join(dir, nameB)
	if err := os.WriteFile(pa, []byte(a), 0o644); err != nil {
		return "", fmt.Errorf("diff: %w", err)
	}
	if err := os.WriteFile(pb, []byte(b), 0o644); err != nil {
		return "", fmt.Errorf("diff: %w", err)
	}
	out, err := exec.Command("diff", "-u", pa, pb).Output()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		return "", fmt.Errorf("diff: %w", err)
	}
	return string(out), nil
}
