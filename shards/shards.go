// Package shards installs and administers pgq beyond one primary
// (docs/scaling-out.md): the shard directory (schema fanout_directory) and
// the PL/Proxy schema fanout_proxy, both in a small directory database of
// their own, and the registration of pgq databases as shards.
//
// A shard is a whole pgq database (schema fanout, migrated as usual by
// pgq-scheduler migrate, with its own sidecar); nothing here changes its
// schema. Registering it sets its database setting fanout.shard, which makes
// it answer PGQ26 (not on this shard) instead of PGQ01 for a topic it does
// not hold, so that a client routed by a stale directory re-reads it.
package shards

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"

	"github.com/pgfanout/pgq"
)

// The version tables of the two migration sets (not tern's default, and not
// the one of schema fanout: public.fanout_schema_version).
const (
	DirectoryVersionTable = "public.fanout_directory_version"
	ProxyVersionTable     = "public.fanout_proxy_version"
)

// MigrateDirectory installs or upgrades schema fanout_directory in the
// database conn is connected to (the directory database, not a shard) and
// returns its version.
func MigrateDirectory(ctx context.Context, conn *pgx.Conn) (int32, error) {
	return run(ctx, conn, DirectoryVersionTable, pgq.DirectoryMigrations(), "directory")
}

// MigrateProxy installs or upgrades schema fanout_proxy (PL/Proxy: the
// extension must be available to the server, as root: scripts/deps.sh ensure
// plproxy) in the directory database conn is connected to, after the
// directory.
func MigrateProxy(ctx context.Context, conn *pgx.Conn) (int32, error) {
	return run(ctx, conn, ProxyVersionTable, pgq.ProxyMigrations(), "proxy")
}

func run(ctx context.Context, conn *pgx.Conn, table string, files fs.FS, what string) (int32, error) {
	m, err := migrate.NewMigrator(ctx, conn, table)
	if err != nil {
		return 0, fmt.Errorf("migrate %s: %w", what, err)
	}
	if err := m.LoadMigrations(files); err != nil {
		return 0, fmt.Errorf("migrate %s: load: %w", what, err)
	}
	if err := m.Migrate(ctx); err != nil {
		return 0, fmt.Errorf("migrate %s: %w", what, err)
	}
	v, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrate %s: version: %w", what, err)
	}
	return v, nil
}

// Querier is what the directory calls run on: *pgx.Conn, *pgxpool.Pool,
// pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var shardName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// ErrInvalidShardName says a shard name is not 1 to 63 of a-z, 0-9 and _.
var ErrInvalidShardName = errors.New("shard name must be 1 to 63 of a-z, 0-9 and _")

// AddShard registers the pgq database at conninfo (key=value form, as
// PL/Proxy needs it; no password: use .pgpass or a service file) as shard
// name: it sets the shard's database setting fanout.shard (new sessions of
// the shard see it) and then adds it to the directory that dir is connected
// to. It returns the shard's proxy index. Registering again with the same
// name and conninfo changes nothing.
func AddShard(ctx context.Context, dir Querier, name, conninfo string) (int, error) {
	if !shardName.MatchString(name) {
		return 0, fmt.Errorf("add shard %q: %w", name, ErrInvalidShardName)
	}
	sh, err := pgx.Connect(ctx, conninfo)
	if err != nil {
		return 0, fmt.Errorf("add shard %q: connect: %w", name, err)
	}
	defer sh.Close(context.WithoutCancel(ctx))
	var db string
	if err := sh.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		return 0, fmt.Errorf("add shard %q: %w", name, err)
	}
	// The name is checked above (no quoting needed), the database quoted.
	if _, err := sh.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s SET fanout.shard = '%s'",
		pgx.Identifier{db}.Sanitize(), name)); err != nil {
		return 0, fmt.Errorf("add shard %q: set fanout.shard on database %q: %w", name, db, err)
	}
	var idx int
	if err := dir.QueryRow(ctx, `SELECT fanout_directory.add_shard($1, $2)`, name, conninfo).Scan(&idx); err != nil {
		return 0, fmt.Errorf("add shard %q: directory: %w", name, err)
	}
	return idx, nil
}

// Place places a topic name or a prefix ("tenant.%") on a shard and returns
// the directory's new version.
func Place(ctx context.Context, dir Querier, pattern, shard string) (int, error) {
	var v int
	if err := dir.QueryRow(ctx, `SELECT fanout_directory.place($1, $2)`, pattern, shard).Scan(&v); err != nil {
		return 0, fmt.Errorf("place %q on %q: %w", pattern, shard, err)
	}
	return v, nil
}
