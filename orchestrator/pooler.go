package orchestrator

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PreparedStatementFix is what the sidecar logs (once) when PostgreSQL says
// that a prepared statement of pgx's statement cache already exists, or is
// missing: the sign of PgBouncer in transaction pooling mode (before 1.21,
// or without max_prepared_statements), which hands one server connection to
// several clients, so one client's prepared statements meet another's.
const PreparedStatementFix = "add default_query_exec_mode=exec to the database URL " +
	"(PgBouncer in transaction pooling mode shares server connections, and with them prepared statements)"

// WatchPreparedStatements makes the connections of cfg log, once, the fix
// for errors 42P05 ("prepared statement ... already exists") and 26000
// ("prepared statement stmtcache_... does not exist") from pgx's statement
// cache: every job fails with them behind PgBouncer in transaction pooling
// mode, and the errors alone do not say why. A tracer already set on cfg
// keeps getting every call.
func WatchPreparedStatements(cfg *pgx.ConnConfig, logger *slog.Logger) {
	cfg.Tracer = &preparedStatementTracer{next: cfg.Tracer, logger: logger}
}

type preparedStatementTracer struct {
	next   pgx.QueryTracer
	logger *slog.Logger
	once   sync.Once
}

// isStatementCacheConflict reports whether err is PostgreSQL refusing a
// statement of pgx's cache for a reason a shared server connection explains.
func isStatementCacheConflict(err error) (*pgconn.PgError, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return nil, false
	}
	switch pgErr.Code {
	case "42P05": // duplicate_prepared_statement
		return pgErr, true
	case "26000": // invalid_sql_statement_name: only pgx's own statements
		return pgErr, strings.Contains(pgErr.Message, "stmtcache_")
	}
	return nil, false
}

func (t *preparedStatementTracer) check(err error) {
	pgErr, ok := isStatementCacheConflict(err)
	if !ok {
		return
	}
	t.once.Do(func() {
		t.logger.Error("prepared statements clash: is the database URL a PgBouncer in transaction pooling mode? "+PreparedStatementFix,
			"sqlstate", pgErr.Code, "error", pgErr.Message, "fix", "default_query_exec_mode=exec")
	})
}

func (t *preparedStatementTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if t.next != nil {
		return t.next.TraceQueryStart(ctx, conn, data)
	}
	return ctx
}

func (t *preparedStatementTracer) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	t.check(data.Err)
	if t.next != nil {
		t.next.TraceQueryEnd(ctx, conn, data)
	}
}

func (t *preparedStatementTracer) TracePrepareStart(ctx context.Context, conn *pgx.Conn, data pgx.TracePrepareStartData) context.Context {
	if pt, ok := t.next.(pgx.PrepareTracer); ok {
		return pt.TracePrepareStart(ctx, conn, data)
	}
	return ctx
}

func (t *preparedStatementTracer) TracePrepareEnd(ctx context.Context, conn *pgx.Conn, data pgx.TracePrepareEndData) {
	t.check(data.Err)
	if pt, ok := t.next.(pgx.PrepareTracer); ok {
		pt.TracePrepareEnd(ctx, conn, data)
	}
}
