package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/tern/v2/migrate"

	"github.com/pgfanout/pgq"
)

// VersionTable is where tern records the schema version. The tern CLI must be
// given the same name (--version-table) to manage the same database.
const VersionTable = "public.fanout_schema_version"

// Migrate applies every embedded migration that the database does not have
// yet and returns the resulting schema version. Concurrent callers are safe:
// tern serialises them with an advisory lock.
func Migrate(ctx context.Context, conn *pgx.Conn) (int32, error) {
	m, err := migrate.NewMigrator(ctx, conn, VersionTable)
	if err != nil {
		return 0, fmt.Errorf("migrate: %w", err)
	}
	if err := m.LoadMigrations(pgq.Migrations()); err != nil {
		return 0, fmt.Errorf("migrate: load: %w", err)
	}
	if err := m.Migrate(ctx); err != nil {
		if hint := ternDefaultTableHint(ctx, conn, err); hint != "" {
			return 0, fmt.Errorf("migrate: %w (%s)", err, hint)
		}
		return 0, fmt.Errorf("migrate: %w", err)
	}
	v, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrate: version: %w", err)
	}
	return v, nil
}

// ternDefaultTableHint explains a 42P06 (schema "fanout" already exists)
// from a database that the tern CLI migrated without --version-table: its
// version is in public.schema_version, so this migrator saw version 0.
func ternDefaultTableHint(ctx context.Context, conn *pgx.Conn, err error) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42P06" {
		return ""
	}
	var v *int32
	if conn.QueryRow(ctx, `SELECT (SELECT version FROM public.schema_version LIMIT 1)
		WHERE to_regclass('public.schema_version') IS NOT NULL`).Scan(&v) != nil || v == nil {
		return ""
	}
	return fmt.Sprintf("pgq was installed by the tern CLI without --version-table %[1]s: its version (%[2]d) is in "+
		"public.schema_version; run UPDATE %[1]s SET version = %[2]d (and DROP TABLE public.schema_version if it "+
		"tracks only pgq), then migrate again; always pass --version-table %[1]s to tern", VersionTable, *v)
}

// MigrateURL connects to databaseURL, migrates it and disconnects.
func MigrateURL(ctx context.Context, databaseURL string) (int32, error) {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return 0, fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return Migrate(ctx, conn)
}

// Uninstall removes pgq from the database conn is connected to: the schemas
// fanout_data (every topic's messages) and fanout (the catalog and the
// functions), and the version table, in one transaction; with dropRoles
// also the roles fanout_admin, fanout_producer and fanout_consumer (after
// revoking what they were granted in this database: DROP OWNED BY). Roles
// are cluster-wide: dropping them fails (2BP01) while another database
// still grants them something (pgq installed there too); nothing is dropped
// then. Nothing outside pgq's schemas is touched. Run it with no client or
// pgq-scheduler connected: the DROPs wait for every lock on pgq's tables.
func Uninstall(ctx context.Context, conn *pgx.Conn, dropRoles bool) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("uninstall: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	stmts := []string{
		"DROP SCHEMA IF EXISTS fanout_data CASCADE",
		"DROP SCHEMA IF EXISTS fanout CASCADE",
		"DROP TABLE IF EXISTS " + VersionTable,
	}
	if dropRoles {
		stmts = append(stmts, `DO $roles$
DECLARE r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['fanout_admin', 'fanout_producer', 'fanout_consumer'] LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('DROP OWNED BY %I', r);
            EXECUTE format('DROP ROLE %I', r);
        END IF;
    END LOOP;
END
$roles$`)
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("uninstall: %s: %w", strings.SplitN(s, "\n", 2)[0], err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("uninstall: %w", err)
	}
	return nil
}
