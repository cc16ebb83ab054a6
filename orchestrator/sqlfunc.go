package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is what the services need of a connection pool; *pgxpool.Pool
// satisfies it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Ping(ctx context.Context) error
}

var _ DB = (*pgxpool.Pool)(nil)

// resolveFunc turns a function name as fanout.maint_operations() lists it
// into a safely quoted identifier. The name must denote exactly one existing
// function (to_regproc) that returns an integer: the amount of work done.
func resolveFunc(ctx context.Context, db DB, name string) (string, error) {
	var schema, fn, ret string
	err := db.QueryRow(ctx, `
		SELECT n.nspname, p.proname, format_type(p.prorettype, NULL)
		FROM pg_catalog.pg_proc p
		JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
		WHERE p.oid = pg_catalog.to_regproc($1)`, name).Scan(&schema, &fn, &ret)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("function %q does not exist or is ambiguous", name)
	}
	if err != nil {
		return "", fmt.Errorf("resolve function %q: %w", name, err)
	}
	switch ret {
	case "smallint", "integer", "bigint":
	default:
		return "", fmt.Errorf("function %q returns %s, want an integer (the work done)", name, ret)
	}
	return pgx.Identifier{schema, fn}.Sanitize(), nil
}

// dueArgs returns the arguments with which fanout.maint_operations(now)
// lists function fn as due (nil = call without an argument). Empty when fn
// has nothing to do.
func dueArgs(ctx context.Context, db DB, fn string, now time.Time) ([]*string, error) {
	rows, err := db.Query(ctx,
		`SELECT arg FROM fanout.maint_operations($1) WHERE func = $2`, now, fn)
	if err != nil {
		return nil, fmt.Errorf("maint_operations: %w", err)
	}
	args, err := pgx.CollectRows(rows, pgx.RowTo[*string])
	if err != nil {
		return nil, fmt.Errorf("maint_operations: %w", err)
	}
	return args, nil
}

// callFunc calls the quoted function ident once, in a transaction of its
// own, as ident(p_now => now) or ident(arg, p_now => now), with
// SET LOCAL statement_timeout = timeout (or what is left of ctx's deadline,
// whichever is shorter). A NULL result counts as 0.
func callFunc(ctx context.Context, db DB, ident string, arg *string, now time.Time, timeout time.Duration) (int64, error) {
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); timeout <= 0 || left < timeout {
			timeout = left
		}
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if timeout > 0 {
		ms := max(timeout.Milliseconds(), 1)
		if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('statement_timeout', $1, true)`,
			fmt.Sprintf("%dms", ms)); err != nil {
			return 0, err
		}
	}
	var n *int64
	if arg == nil {
		err = tx.QueryRow(ctx, "SELECT "+ident+"(p_now => $1)", now).Scan(&n)
	} else {
		err = tx.QueryRow(ctx, "SELECT "+ident+"($1, p_now => $2)", *arg, now).Scan(&n)
	}
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	if n == nil {
		return 0, nil
	}
	return *n, nil
}
