package client

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Across a failover (docs/ha.md) the client treats these as "discard this
// connection and connect again" (with a multi-host URL and
// target_session_attrs=read-write the new connection finds the new primary):
//
//   - 25006 read_only_sql_transaction: the connection is on a node that is
//     (now) a standby, e.g. "cannot execute LISTEN during recovery";
//   - 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now;
//   - class 08 (connection exception) and network errors.
const (
	CodeReadOnlyTransaction = "25006" // PostgreSQL: read-only transaction (a standby)
	CodeAdminShutdown       = "57P01" // PostgreSQL: terminated by administrator / fast shutdown
	CodeCrashShutdown       = "57P02" // PostgreSQL: crash of another backend
	CodeCannotConnectNow    = "57P03" // PostgreSQL: starting up, shutting down or in recovery
)

// IsReconnect reports whether err means that the connection it happened on
// should be discarded and the statement tried on a new connection: a lost
// or refused connection, a server shutting down, or a connection on a
// read-only node (25006). Context errors and errors the server raised for
// the statement itself are not.
func IsReconnect(err error) bool {
	return isConnError(err) || SQLState(err) == CodeReadOnlyTransaction
}

// ErrCommitUnknown: the connection was lost while COMMIT was under way, so
// the transaction may or may not have committed. Publish again with the same
// Message.DedupeKey: if the first COMMIT did commit, the topic returns the
// first message's id and inserts nothing (within its dedupe_window).
var ErrCommitUnknown = errors.New("pgq client: COMMIT outcome unknown (the connection was lost during COMMIT); " +
	"retry with the same dedupe_key: a repeated key returns the first message instead of a second one")

// CommitUnknownError wraps the error met during COMMIT; errors.Is(err,
// ErrCommitUnknown) is true for it.
type CommitUnknownError struct{ Err error }

func (e *CommitUnknownError) Error() string {
	return ErrCommitUnknown.Error() + ": " + e.Err.Error()
}
func (e *CommitUnknownError) Unwrap() []error { return []error{ErrCommitUnknown, e.Err} }

// Commit commits tx without ever cancelling the COMMIT: ctx's cancellation
// and deadline are not passed to the server. A COMMIT waiting for a
// synchronous standby that is cancelled returns OK with only a WARNING
// ("canceling wait for synchronous replication ... already committed
// locally"), although no standby has the transaction: a failover then loses
// it. If the connection is lost during COMMIT the error is a
// *CommitUnknownError (errors.Is ErrCommitUnknown): retry with the same
// dedupe_key.
func Commit(ctx context.Context, tx pgx.Tx) error {
	err := tx.Commit(context.WithoutCancel(ctx))
	if err != nil && isConnError(err) {
		return &CommitUnknownError{Err: err}
	}
	return err
}

// resetOnReadOnly discards every connection of pool when err says that the
// connection is on a read-only node (25006): pgxpool would otherwise hand
// out the same live connections to the demoted node again and again.
func resetOnReadOnly(pool *pgxpool.Pool, err error) bool {
	if pool == nil || SQLState(err) != CodeReadOnlyTransaction {
		return false
	}
	pool.Reset()
	return true
}

// inTx runs f in a transaction on pool and commits it with Commit (never
// cancelled; a lost connection during COMMIT is a *CommitUnknownError).
func inTx(ctx context.Context, pool *pgxpool.Pool, f func(pgx.Tx) error) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		resetOnReadOnly(pool, err)
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		resetOnReadOnly(pool, err)
		return err
	}
	err = Commit(ctx, tx)
	resetOnReadOnly(pool, err)
	return err
}
