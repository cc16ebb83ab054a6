package orchestrator

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
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
		return 0, fmt.Errorf("migrate: %w", err)
	}
	v, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrate: version: %w", err)
	}
	return v, nil
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
