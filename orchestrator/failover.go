package orchestrator

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// discardConn reports whether err means the connection it happened on must
// be replaced (docs/ha.md): the node is read-only (25006: a standby, e.g. a
// demoted primary that kept its connections), shutting down or not
// accepting connections (57P01, 57P02, 57P03), a connection exception
// (class 08), or no server error at all (network, closed connection). With
// a multi-host URL and target_session_attrs=read-write the new connection
// finds the new primary.
func discardConn(err error) bool {
	if err == nil {
		return false
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return true
	}
	switch pe.Code {
	case "25006", "57P01", "57P02", "57P03":
		return true
	}
	return strings.HasPrefix(pe.Code, "08")
}

// resetOnReadOnly discards every connection of db (when it is a pool) on a
// 25006: pgxpool would hand out the same live connections to the demoted
// node again and again. Other connection errors close their connection
// themselves.
func resetOnReadOnly(db DB, err error) {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "25006" {
		return
	}
	if p, ok := db.(*pgxpool.Pool); ok {
		p.Reset()
	}
}
