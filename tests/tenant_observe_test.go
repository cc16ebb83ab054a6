package tests

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// What a role without any grant (a stranger: no fanout group role) and a
// role of another tenant can try against tenant b's topic, with counts:
// row locks and LOCK TABLE in every mode on every table of pgq's schemas
// (refused: 42501), every view and table read (refused or empty), error
// texts of a foreign tenant for an existing and a missing topic (the
// same). What PostgreSQL itself allows every role is recorded as such
// (docs/tenants.md, "What a role without a grant can still see or hold"):
// pg_relation_size by oid (whose lock is released at once), LISTEN
// on the topic's channel, pg_stat_user_tables counters.
func TestTenantNoGrantObservations(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.tIsolate(t)
	admName, adm := b.tRole(t, "adm_b", "fanout_admin")
	b.tGrant(t, b.Pool, "b.%", admName, "admin")
	_, stranger := b.tRole(t, "stranger", "")
	otherName, other := b.tRole(t, "prod_c", "fanout_producer")
	b.tGrant(t, b.Pool, "c.%", otherName, "publish")
	b.createTopic(t, adm, "b.q")

	tried, refused := map[string]int{}, map[string]int{}
	try := func(kind, sql string, want ...string) {
		t.Helper()
		tried[kind]++
		tx, err := stranger.Begin(b.ctx)
		require.NoError(t, err)
		defer tx.Rollback(b.ctx) //nolint:errcheck
		_, err = tx.Exec(b.ctx, sql)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			for _, w := range want {
				if pgErr.Code == w {
					refused[kind]++
					return
				}
			}
		}
		t.Errorf("%s: %s: want %v, got %v", kind, sql, want, err)
	}
	rows, err := b.Pool.Query(b.ctx, `SELECT format('%I.%I', n.nspname, c.relname), c.relkind::text
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname IN ('fanout', 'fanout_data') AND c.relkind IN ('r', 'p', 'v') ORDER BY 1`)
	require.NoError(t, err)
	type rel struct{ Name, Kind string }
	rels, err := pgx.CollectRows(rows, pgx.RowToStructByPos[rel])
	require.NoError(t, err)
	for _, r := range rels {
		try("read", "SELECT * FROM "+r.Name+" LIMIT 1", "42501")
		if r.Kind == "v" {
			continue
		}
		for _, m := range []string{"KEY SHARE", "SHARE", "NO KEY UPDATE", "UPDATE"} {
			try("row lock", fmt.Sprintf("SELECT 1 FROM %s FOR %s", r.Name, m), "42501")
		}
		for _, m := range []string{"ACCESS SHARE", "ROW SHARE", "ROW EXCLUSIVE", "SHARE UPDATE EXCLUSIVE", "SHARE",
			"SHARE ROW EXCLUSIVE", "EXCLUSIVE", "ACCESS EXCLUSIVE"} {
			try("LOCK TABLE", fmt.Sprintf("LOCK TABLE %s IN %s MODE NOWAIT", r.Name, m), "42501")
		}
	}
	// Every function of schema fanout: no EXECUTE (nor USAGE on the schema).
	var nProcs, nCallable int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*), count(*) FILTER (WHERE
			has_schema_privilege($1, 'fanout', 'USAGE') AND has_function_privilege($1, p.oid, 'EXECUTE'))
		FROM pg_proc p WHERE p.pronamespace = 'fanout'::regnamespace`, b.DBName+"_stranger").Scan(&nProcs, &nCallable))
	tried["EXECUTE"], refused["EXECUTE"] = nProcs, nProcs-nCallable
	// Error texts: a foreign tenant learns nothing about whether a topic exists.
	_, errExists := other.Exec(b.ctx, `SELECT fanout.publish('b.q', '{}')`)
	_, errMissing := other.Exec(b.ctx, `SELECT fanout.publish('b.zz', '{}')`)
	var e1, e2 *pgconn.PgError
	require.ErrorAs(t, errExists, &e1)
	require.ErrorAs(t, errMissing, &e2)
	tried["error text"]++
	if e1.Code == "PGQ21" && e1.Code == e2.Code && strings.ReplaceAll(e1.Message, "b.q", "b.zz") == e2.Message &&
		strings.ReplaceAll(e1.Hint, "b.q", "b.zz") == e2.Hint {
		refused["error text"]++
	}
	for k, n := range tried {
		require.Equal(t, n, refused[k], "%s: every try refused", k)
		t.Logf("refused %d of %d: %s", refused[k], n, k)
	}

	// What PostgreSQL allows every role (documented, not refused).
	var table string
	var oid uint32
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT data_table, format('fanout_data.%I', data_table)::regclass::oid
		FROM fanout.topic WHERE topic = 'b.q'`).Scan(&table, &oid))
	tx, err := stranger.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `SELECT pg_relation_size($1::oid)`, oid)
	require.NoError(t, err)
	var held int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		WHERE a.usename = $1 AND l.relation = $2::oid`, b.DBName+"_stranger", oid).Scan(&held))
	require.Zero(t, held, "pg_relation_size(oid) keeps no lock on %s", table)
	t.Logf("allowed by PostgreSQL: pg_relation_size(oid) of %s (no lock kept)", table)
	require.NoError(t, tx.Rollback(b.ctx))
	_, err = stranger.Exec(b.ctx, `LISTEN `+pgx.Identifier{"fanout_" + strings.TrimPrefix(table, "m")}.Sanitize())
	t.Logf("allowed by PostgreSQL: LISTEN on the topic's channel: %v", err == nil)
	var seen int
	require.NoError(t, stranger.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_user_tables WHERE schemaname = 'fanout_data'`).Scan(&seen))
	t.Logf("allowed by PostgreSQL: pg_stat_user_tables rows of fanout_data: %d", seen)
}
