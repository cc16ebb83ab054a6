package release

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

// SignaturesFile is the catalog of the public SQL surface a tree installs:
// one line per function of schema fanout ("function <identity> returns
// <result>") and per view ("view <name>(<columns>)"), sorted. Each release
// commits it; the next upgrade migration drops what is gone or changed.
const SignaturesFile = "sql/signatures.txt"

const signaturesSQL = `
SELECT line FROM (
  SELECT format('function %s returns %s', p.oid::regprocedure, coalesce(pg_get_function_result(p.oid), 'nothing (a procedure)')) AS line
  FROM pg_proc p WHERE p.pronamespace = 'fanout'::regnamespace
  UNION ALL
  SELECT format('view %s(%s)', c.oid::regclass,
                (SELECT string_agg(format('%I %s', a.attname, format_type(a.atttypid, a.atttypmod)), ', ' ORDER BY a.attnum)
                 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped))
  FROM pg_class c WHERE c.relnamespace = 'fanout'::regnamespace AND c.relkind IN ('v', 'm')
) l ORDER BY line COLLATE "C"`

// Signatures lists the signature lines (SignaturesFile) of the database at dbURL.
func Signatures(ctx context.Context, dbURL string) ([]string, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("signatures: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SET search_path = pg_catalog"); err != nil {
		return nil, fmt.Errorf("signatures: %w", err)
	}
	rows, err := conn.Query(ctx, signaturesSQL)
	if err != nil {
		return nil, fmt.Errorf("signatures: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// FreshSignatures installs root's migrations into a temporary database on
// adminURL's server and returns its signature lines.
func FreshSignatures(ctx context.Context, adminURL, root string) ([]string, error) {
	db, drop, err := TempDB(ctx, adminURL, "pgq_t_sigs")
	if err != nil {
		return nil, err
	}
	defer drop()
	if _, err := Install(ctx, db, os.DirFS(filepath.Join(root, "sql", "migrations"))); err != nil {
		return nil, err
	}
	return Signatures(ctx, db)
}

// codeSignatures returns the signature lines of root's sql/functions and
// sql/triggers as they would be after upgrading from the release extracted
// in prevDir: that release installed, root's sql/upgrade/before.sql applied,
// every function and view of schema fanout dropped, root's code packages
// installed.
func codeSignatures(ctx context.Context, adminURL, root, prevDir string) ([]string, error) {
	db, drop, err := TempDB(ctx, adminURL, "pgq_t_sigs")
	if err != nil {
		return nil, err
	}
	defer drop()
	if _, err := Install(ctx, db, os.DirFS(filepath.Join(prevDir, "sql", "migrations"))); err != nil {
		return nil, fmt.Errorf("signatures: the previous release: %w", err)
	}
	var sql []string
	if b, ok, err := handWritten(root, "before.sql"); err != nil {
		return nil, err
	} else if ok {
		sql = append(sql, b)
	}
	sql = append(sql, `DO $drop$
DECLARE r record;
BEGIN
    FOR r IN SELECT c.oid::regclass AS v FROM pg_class c
             WHERE c.relnamespace = 'fanout'::regnamespace AND c.relkind IN ('v', 'm') LOOP
        EXECUTE format('DROP VIEW IF EXISTS %s CASCADE', r.v);
    END LOOP;
    FOR r IN SELECT p.oid::regprocedure AS f FROM pg_proc p WHERE p.pronamespace = 'fanout'::regnamespace LOOP
        EXECUTE format('DROP ROUTINE IF EXISTS %s CASCADE', r.f);
    END LOOP;
END
$drop$`)
	for _, pkg := range []string{"functions", "triggers"} {
		cp, err := migrate.LoadCodePackage(os.DirFS(filepath.Join(root, "sql", pkg)))
		if err != nil {
			return nil, fmt.Errorf("signatures: sql/%s: %w", pkg, err)
		}
		s, err := cp.Eval(map[string]any{})
		if err != nil {
			return nil, fmt.Errorf("signatures: sql/%s: %w", pkg, err)
		}
		sql = append(sql, s)
	}
	for i, s := range sql {
		if err := Exec(ctx, db, s); err != nil {
			return nil, fmt.Errorf("signatures: step %d: %w", i+1, err)
		}
	}
	return Signatures(ctx, db)
}

// handWritten reads sql/upgrade/<name>: the schema changes (before.sql, run
// before the functions) and backfills (after.sql, run after them) of the
// next release, written by hand. ok is false when it holds no statement.
func handWritten(root, name string) (string, bool, error) {
	b, err := os.ReadFile(filepath.Join(root, "sql", "upgrade", name))
	if os.IsNotExist(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("sql/upgrade/%s: %w", name, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "--") {
			return string(b), true, nil
		}
	}
	return string(b), false, nil
}

var migrationName = regexp.MustCompile(`^(\d+)_.*\.sql$`)

// lastMigration is the highest migration number in dir.
func lastMigration(dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("migrations: %w", err)
	}
	n := 0
	for _, e := range entries {
		if m := migrationName.FindStringSubmatch(e.Name()); m != nil && !e.IsDir() {
			v, _ := strconv.Atoi(m[1])
			n = max(n, v)
		}
	}
	return n, nil
}

var templateLine = regexp.MustCompile(`^\{\{ template "([^"]+)" \. \}\}$`)

// installOrder lists the files of sql/<pkg>/install.sql in install order.
func installOrder(root, pkg string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(root, "sql", pkg, "install.sql"))
	if err != nil {
		return nil, fmt.Errorf("sql/%s/install.sql: %w", pkg, err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if m := templateLine.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			out = append(out, m[1])
		}
	}
	return out, nil
}

// Upgrade is the generated upgrade migration of the working tree.
type Upgrade struct {
	From      Release
	Number    int               // its migration number (0: nothing changed, no migration)
	Files     map[string]string // path under the repository root -> content
	Changed   []string          // code files new or changed since From
	Dropped   []string          // signature lines gone or changed since From
	Signature []string          // the tree's signature lines
}

// GenerateUpgrade computes the one migration that brings a database from the
// last release in RELEASES to the working tree: sql/upgrade/before.sql, a
// DROP of every function or view whose signature line (SignaturesFile) is
// gone or changed, every code file of sql/functions and sql/triggers that
// is new or differs from the release (in install.sql order; the "_" files,
// grants and catalog triggers, always), sql/upgrade/after.sql, and then
// fanout.regenerate_topics(), which rebuilds every existing topic's
// generated functions with the generators installed. adminURL is a server
// where temporary databases may be created (signatures); tmp a directory.
func GenerateUpgrade(ctx context.Context, adminURL, root, tmp string) (*Upgrade, error) {
	rels, err := ReadReleases(root)
	if err != nil {
		return nil, err
	}
	if len(rels) == 0 {
		return nil, fmt.Errorf("upgrade: no release in RELEASES: before the first release, scripts/resnapshot-dev.sh re-freezes the migrations in place")
	}
	from := rels[len(rels)-1]
	prev, err := Extract(root, from.Commit, tmp, "sql")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(prev)
	n, err := lastMigration(filepath.Join(prev, "sql", "migrations"))
	if err != nil {
		return nil, err
	}
	up := &Upgrade{From: from, Files: map[string]string{}}
	oldSigs, err := os.ReadFile(filepath.Join(prev, SignaturesFile))
	if err != nil {
		return nil, fmt.Errorf("upgrade: release %s has no %s: %w", from.Version, SignaturesFile, err)
	}
	up.Signature, err = codeSignatures(ctx, adminURL, root, prev)
	if err != nil {
		return nil, err
	}
	up.Files[SignaturesFile] = strings.Join(up.Signature, "\n") + "\n"

	newByKey := map[string]string{}
	for _, l := range up.Signature {
		newByKey[sigKey(l)] = l
	}
	var drops []string
	for _, l := range strings.Split(strings.TrimSpace(string(oldSigs)), "\n") {
		if l == "" || newByKey[sigKey(l)] == l {
			continue
		}
		up.Dropped = append(up.Dropped, l)
		drops = append(drops, dropStatement(l))
	}

	snap := fmt.Sprintf("%03d", n+1)
	body := map[string]string{}
	var order []string
	for _, pkg := range []string{"functions", "triggers"} {
		files, err := installOrder(root, pkg)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			cur, err := os.ReadFile(filepath.Join(root, "sql", pkg, f))
			if err != nil {
				return nil, fmt.Errorf("upgrade: %w", err)
			}
			old, err := os.ReadFile(filepath.Join(prev, "sql", pkg, f))
			changed := err != nil || !bytes.Equal(old, cur)
			if changed {
				up.Changed = append(up.Changed, "sql/"+pkg+"/"+f)
			}
			if changed || strings.HasPrefix(f, "_") {
				if _, dup := body[f]; dup {
					return nil, fmt.Errorf("upgrade: %s is in both sql/functions and sql/triggers", f)
				}
				body[f] = string(cur)
				order = append(order, f)
			}
		}
	}
	before, hasBefore, err := handWritten(root, "before.sql")
	if err != nil {
		return nil, err
	}
	after, hasAfter, err := handWritten(root, "after.sql")
	if err != nil {
		return nil, err
	}
	if len(up.Changed) == 0 && len(drops) == 0 && !hasBefore && !hasAfter {
		return up, nil // nothing to migrate
	}
	up.Number = n + 1

	var ins strings.Builder
	fmt.Fprintf(&ins, "-- install.sql — upgrade from release %s (%s) to this tree. Generated by\n", from.Version, from.Commit)
	ins.WriteString("-- scripts/gen-upgrade.sh from sql/upgrade, sql/functions and sql/triggers; do not edit.\n")
	if hasBefore {
		body["_upgrade_before.sql"] = before
		ins.WriteString("-- Schema changes (sql/upgrade/before.sql).\n{{ template \"_upgrade_before.sql\" . }}\n")
	}
	if len(drops) > 0 {
		ins.WriteString("-- Functions and views whose signature is gone or changed (sql/signatures.txt).\n")
		for _, d := range drops {
			ins.WriteString(d + "\n")
		}
	}
	ins.WriteString("-- Code files new or changed since the release, in install order; grants and triggers always.\n")
	for _, f := range order {
		fmt.Fprintf(&ins, "{{ template %q . }}\n", f)
	}
	if hasAfter {
		body["_upgrade_after.sql"] = after
		ins.WriteString("-- Backfills (sql/upgrade/after.sql).\n{{ template \"_upgrade_after.sql\" . }}\n")
	}
	ins.WriteString("-- Every existing topic gets the generated functions of this version.\nSELECT fanout.regenerate_topics();\n")
	body["install.sql"] = ins.String()
	for f, c := range body {
		up.Files["sql/migrations/snapshots/"+snap+"/"+f] = c
	}
	up.Files["sql/migrations/"+snap+"_upgrade.sql"] = fmt.Sprintf(
		"-- %s_upgrade.sql — from release %s to the next: everything that changed since\n"+
			"-- (snapshots/%s/install.sql). Generated by scripts/gen-upgrade.sh; do not edit.\n"+
			"{{ install_snapshot %q }}\n", snap, from.Version, snap, snap)
	return up, nil
}

// sigKey is what identifies a signature line: the function's identity or
// the view's name.
func sigKey(line string) string {
	if strings.HasPrefix(line, "function ") {
		s, _, _ := strings.Cut(strings.TrimPrefix(line, "function "), " returns ")
		return "function " + s
	}
	s, _, _ := strings.Cut(line, "(")
	return s
}

func dropStatement(line string) string {
	k := sigKey(line)
	if strings.HasPrefix(k, "function ") {
		return "DROP ROUTINE IF EXISTS " + strings.TrimPrefix(k, "function ") + ";"
	}
	return "DROP VIEW IF EXISTS " + strings.TrimPrefix(k, "view ") + ";"
}

// pendingPaths lists the working tree's files of migrations numbered above
// n (and their snapshots) and the signatures file.
func pendingPaths(root string, n int) ([]string, error) {
	var out []string
	for _, sub := range []string{"sql/migrations", "sql/migrations/snapshots"} {
		entries, err := os.ReadDir(filepath.Join(root, sub))
		if err != nil {
			return nil, fmt.Errorf("pending: %w", err)
		}
		for _, e := range entries {
			num := strings.SplitN(e.Name(), "_", 2)[0]
			v, err := strconv.Atoi(num)
			if err != nil || v <= n {
				continue
			}
			p := sub + "/" + e.Name()
			if e.IsDir() {
				files, err := os.ReadDir(filepath.Join(root, p))
				if err != nil {
					return nil, fmt.Errorf("pending: %w", err)
				}
				for _, f := range files {
					out = append(out, p+"/"+f.Name())
				}
			} else {
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// Write replaces the working tree's pending migration (every migration
// numbered after the release's, with its snapshot) and SignaturesFile by up.
func (up *Upgrade) Write(root string) error {
	n := up.Number - 1
	if up.Number == 0 {
		var err error
		if n, err = up.releaseLast(root); err != nil {
			return err
		}
	}
	old, err := pendingPaths(root, n)
	if err != nil {
		return err
	}
	for _, p := range old {
		if err := os.Remove(filepath.Join(root, p)); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	for p, c := range up.Files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	// Empty snapshot directories of a removed pending migration.
	dirs, _ := filepath.Glob(filepath.Join(root, "sql/migrations/snapshots/*"))
	for _, d := range dirs {
		_ = os.Remove(d) // only succeeds when empty
	}
	return nil
}

func (up *Upgrade) releaseLast(root string) (int, error) {
	out, err := gitOutput(root, "ls-tree", "--name-only", up.From.Commit, "sql/migrations/")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if m := migrationName.FindStringSubmatch(filepath.Base(l)); m != nil {
			v, _ := strconv.Atoi(m[1])
			n = max(n, v)
		}
	}
	return n, nil
}

// Check reports how the working tree differs from up (nil when it holds
// exactly the generated migration and signatures).
func (up *Upgrade) Check(root string) []string {
	n, err := up.releaseLast(root)
	if err != nil {
		return []string{err.Error()}
	}
	have, err := pendingPaths(root, n)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	for _, p := range have {
		if _, ok := up.Files[p]; !ok {
			problems = append(problems, p+": not generated (stale)")
		}
	}
	paths := make([]string, 0, len(up.Files))
	for p := range up.Files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(root, p))
		switch {
		case err != nil:
			problems = append(problems, p+": missing")
		case string(b) != up.Files[p]:
			problems = append(problems, p+": differs from what the generator makes")
		}
	}
	return problems
}

func gitOutput(root string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}
