package release

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
)

// CheckCatalog is make verify-sql's catalog diff. It installs root's
// migrations into a fresh database and creates the sample topics
// (SampleTopicsSQL); then
//   - fanout.version() must be root's VERSION;
//   - fanout.regenerate_topics() must leave that catalog unchanged (the
//     generated functions it rebuilds are those create_topic makes);
//   - for every release in RELEASES: a database installed from the
//     release's commit with the same topics created at that version, then
//     migrated with root's migrations, must end in the same catalog
//     (Catalog: functions, signatures and definitions, privileges,
//     tables, columns, indexes, constraints, triggers, each topic's
//     generated objects).
//
// It returns one report per mismatch, each with its diff. log gets progress.
func CheckCatalog(ctx context.Context, adminURL, root, tmp string, log func(string)) ([]string, error) {
	migrations := os.DirFS(filepath.Join(root, "sql", "migrations"))
	fresh, drop, err := TempDB(ctx, adminURL, "pgq_t_fresh")
	if err != nil {
		return nil, err
	}
	defer drop()
	if _, err := Install(ctx, fresh, migrations); err != nil {
		return nil, fmt.Errorf("fresh install: %w", err)
	}
	if err := Exec(ctx, fresh, SampleTopicsSQL); err != nil {
		return nil, fmt.Errorf("fresh install: sample topics: %w", err)
	}
	want, err := Catalog(ctx, fresh)
	if err != nil {
		return nil, err
	}
	var problems []string

	vb, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		return nil, fmt.Errorf("VERSION: %w", err)
	}
	conn, err := pgx.Connect(ctx, fresh)
	if err != nil {
		return nil, fmt.Errorf("fresh install: %w", err)
	}
	var sqlVersion string
	err = conn.QueryRow(ctx, "SELECT fanout.version()").Scan(&sqlVersion)
	conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return nil, fmt.Errorf("fanout.version(): %w", err)
	}
	if v := strings.TrimSpace(string(vb)); sqlVersion != v {
		problems = append(problems, fmt.Sprintf("fanout.version() returns %q but VERSION says %q (sql/functions/fanout.version.sql)", sqlVersion, v))
	}

	if err := Exec(ctx, fresh, "SELECT fanout.regenerate_topics()"); err != nil {
		return nil, fmt.Errorf("regenerate: %w", err)
	}
	got, err := Catalog(ctx, fresh)
	if err != nil {
		return nil, err
	}
	if d, err := Diff(tmp, "created", want, "regenerated", got); err != nil {
		return nil, err
	} else if d != "" {
		problems = append(problems, "fanout.regenerate_topics() changes what create_topic made:\n"+d)
	}
	log("catalog: fresh install and fanout.regenerate_topics() agree")

	rels, err := ReadReleases(root)
	if err != nil {
		return nil, err
	}
	for _, r := range rels {
		d, err := upgradeDiff(ctx, adminURL, root, tmp, r, want)
		if err != nil {
			return nil, fmt.Errorf("release %s: %w", r.Version, err)
		}
		if d != "" {
			problems = append(problems, fmt.Sprintf("release %s (%s) upgraded to this tree differs from a fresh install (- fresh, + upgraded):\n%s", r.Version, r.Commit, d))
		} else {
			log(fmt.Sprintf("catalog: release %s upgraded to this tree equals a fresh install", r.Version))
		}
	}
	return problems, nil
}

// upgradeDiff installs release r from its commit, creates the sample topics,
// migrates with root's migrations and diffs its catalog against want.
func upgradeDiff(ctx context.Context, adminURL, root, tmp string, r Release, want string) (string, error) {
	dir, err := Extract(root, r.Commit, tmp, "sql/migrations")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	db, drop, err := TempDB(ctx, adminURL, "pgq_t_upgraded")
	if err != nil {
		return "", err
	}
	defer drop()
	if _, err := Install(ctx, db, os.DirFS(filepath.Join(dir, "sql", "migrations"))); err != nil {
		return "", fmt.Errorf("install: %w", err)
	}
	if err := Exec(ctx, db, SampleTopicsSQL); err != nil {
		return "", fmt.Errorf("sample topics: %w", err)
	}
	if _, err := Install(ctx, db, os.DirFS(filepath.Join(root, "sql", "migrations"))); err != nil {
		return "", fmt.Errorf("upgrade: %w", err)
	}
	got, err := Catalog(ctx, db)
	if err != nil {
		return "", err
	}
	return Diff(tmp, "fresh", want, "upgraded", got)
}
