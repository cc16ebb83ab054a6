package tests

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/testdb"
)

// bundle is what every test gets: its own migrated database.
type bundle struct {
	*testdb.Bundle
	ctx context.Context
}

func setup(t *testing.T) *bundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	return &bundle{Bundle: testdb.New(t), ctx: ctx}
}

// msg is one row of fanout.read.
type msg struct {
	LeaseID   int64
	MessageID int64
	Payload   []byte
	Headers   []byte
	Group     *string
	Published time.Time
	Attempt   int32
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

var _ querier = (*pgxpool.Pool)(nil)

func (b *bundle) createTopic(t *testing.T, q querier, topic string, opts ...string) int64 {
	t.Helper()
	sql := "SELECT fanout.create_topic($1"
	for _, o := range opts {
		sql += ", " + o
	}
	sql += ")"
	var id int64
	require.NoError(t, q.QueryRow(b.ctx, sql, topic).Scan(&id))
	return id
}

func (b *bundle) publish(t *testing.T, q querier, topic, payload string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, q.QueryRow(b.ctx, "SELECT fanout.publish($1, $2::jsonb)", topic, payload).Scan(&id))
	return id
}

func readMsgs(ctx context.Context, q querier, topic string, group *string, consumer string, max int, lease string) ([]msg, error) {
	rows, err := q.Query(ctx,
		`SELECT lease_id, message_id, payload, headers, message_group, published_at, attempt
		   FROM fanout.read($1, $2, $3, $4, $5::interval)`, topic, group, consumer, max, lease)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (msg, error) {
		var m msg
		err := r.Scan(&m.LeaseID, &m.MessageID, &m.Payload, &m.Headers, &m.Group, &m.Published, &m.Attempt)
		return m, err
	})
}

func (b *bundle) read(t *testing.T, q querier, topic string, group *string, consumer string, max int, lease string) []msg {
	t.Helper()
	ms, err := readMsgs(b.ctx, q, topic, group, consumer, max, lease)
	require.NoError(t, err)
	return ms
}

func (b *bundle) ack(t *testing.T, q querier, leaseID int64, ids []int64) int {
	t.Helper()
	var n int
	require.NoError(t, q.QueryRow(b.ctx, "SELECT fanout.ack($1, $2)", leaseID, ids).Scan(&n))
	return n
}

// requireSQLState asserts that err is a PostgreSQL error with that SQLSTATE.
func requireSQLState(t *testing.T, err error, state string) {
	t.Helper()
	require.Error(t, err)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want a PostgreSQL error %s, got %v", state, err)
	require.Equal(t, state, pgErr.Code, "message: %s", pgErr.Message)
}

func ids(ms []msg) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.MessageID
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// keepLeaseHistory keeps every page of every lease slot for audits (the
// view audit.lease_all; testdb.KeepLeaseHistory): fanout.lease holds only
// each slot's current page.
func (b *bundle) keepLeaseHistory(t *testing.T) {
	t.Helper()
	require.NoError(t, testdb.KeepLeaseHistory(b.ctx, b.Pool, "audit"))
}
