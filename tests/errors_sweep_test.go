package tests

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// Every public fanout function (every function of
// schema fanout whose name does not start with '_', read from pg_proc, so a
// new one is covered without touching this test), called with each argument
// in turn NULL, empty, over-long, non-NFC, with a control character, at
// ±infinity or out of range (the others valid), raises only codes that
// docs/errors.md documents, and a pgq code (PGQnn) only from a function its
// row names. Each call runs in a transaction that is rolled back.
func TestErrorsSweepEveryPublicFunction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	topicID := b.createTopic(t, b.Pool, "sweep", "semantics => 'pubsub'")
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.subscribe('sweep', 'g')")
	require.NoError(t, err)
	msgID := b.publish(t, b.Pool, "sweep", `{"n":1}`)
	ms := b.read(t, b.Pool, "sweep", ptr("g"), "c", 10, "1 hour")
	require.Len(t, ms, 1)
	leaseID := ms[0].LeaseID

	documented, rowOf := errorsDoc(t)

	// Valid values of required arguments, by name; else by type.
	byName := map[string]string{
		"topic": "sweep", "group_name": "g", "consumer": "c", "pattern": "sweep", "role": "fanout_admin",
		"privilege": "consume", "payload": "{}", "payloads": `{"{}"}`, "message_ids": fmt.Sprintf("{%d}", msgID),
		"message_id": strconv.FormatInt(msgID, 10), "lease_id": strconv.FormatInt(leaseID, 10),
		"extend_by": "1 minute", "older_than": "1 day", "topic_id": strconv.FormatInt(topicID, 10),
		"leader_id": "sweep-leader", "ttl": "1 minute", "kind": "console_sweep", "message_group": "mg",
	}
	byType := map[string]string{
		"text": "x", "bigint": "1", "integer": "1", "smallint": "1", "interval": "1 minute",
		"timestamp with time zone": "now", "jsonb": "{}", "boolean": "false", "regrole": "fanout_admin",
		"regclass": "pg_class",
	}
	long := strings.Repeat("x", 600)
	hostile := map[string][]*string{
		"text": {nil, ptr(""), ptr(long), ptr(strings.Repeat("\U0001D160", 512)), ptr("e\u0301"),
			ptr("a\x01b"), ptr(" \u200b ")},
		"timestamp with time zone": {nil, ptr("infinity"), ptr("-infinity")},
		"interval":                 {nil, ptr("178000000 years"), ptr("-178000000 years"), ptr("0")},
		"bigint":                   {nil, ptr("-1"), ptr("0"), ptr("9223372036854775807")},
		"integer":                  {nil, ptr("-1"), ptr("0"), ptr("2147483647")},
		"smallint":                 {nil, ptr("-1"), ptr("32767")},
		"boolean":                  {nil},
		"jsonb":                    {nil, ptr(`"s"`), ptr(`[]`), ptr(`{"k":"` + long + `"}`)},
		"jsonb[]":                  {nil, ptr("{}"), ptr("{NULL}")},
		"text[]":                   {nil, ptr("{}"), ptr("{NULL}"), ptr(`{""}`), ptr("{" + long + "}"), ptr(`{"a\u0001"}`)},
		"bigint[]":                 {nil, ptr("{}"), ptr("{NULL}"), ptr("{-1}")},
		"regrole":                  {nil, ptr(b.DBName + "_no_such_role")},
		"regclass":                 {nil, ptr(""), ptr("no_such_table"), ptr(long), ptr("pg_class")},
	}

	type fn struct {
		name  string
		args  []string
		types []string
		ndef  int
	}
	var fns []fn
	rows, err := b.Pool.Query(b.ctx, `
		SELECT p.proname, p.proargnames[1:p.pronargs],
		       array(SELECT format_type(u.t, NULL) FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY u(t, i) ORDER BY u.i),
		       p.pronargdefaults
		FROM pg_proc p
		WHERE p.pronamespace = 'fanout'::regnamespace AND p.proname !~ '^_' AND p.prorettype <> 'trigger'::regtype
		  AND p.prokind = 'f' -- fanout.maintain, a procedure that commits, cannot run in the sweep's transactions: TestMaintainCommitsAfterEachOperation
		ORDER BY 1`)
	require.NoError(t, err)
	for rows.Next() {
		var f fn
		require.NoError(t, rows.Scan(&f.name, &f.args, &f.types, &f.ndef))
		fns = append(fns, f)
	}
	require.NoError(t, rows.Err())
	require.Greater(t, len(fns), 30, "the public functions")

	conn, err := b.Pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	call := func(sql string, args []any) error {
		tx, err := conn.Begin(b.ctx)
		require.NoError(t, err)
		defer tx.Rollback(b.ctx) //nolint:errcheck // always rolled back
		_, err = tx.Exec(b.ctx, "SET LOCAL statement_timeout = '30s'")
		require.NoError(t, err)
		var n int64
		return tx.QueryRow(b.ctx, sql, args...).Scan(&n)
	}

	var calls int
	var problems []string
	for _, f := range fns {
		for i := range f.args {
			vals, ok := hostile[f.types[i]]
			require.True(t, ok, "no hostile values for type %s (%s.%s): add them", f.types[i], f.name, f.args[i])
			for _, v := range vals {
				var named []string
				var args []any
				for j, a := range f.args {
					var val *string
					switch {
					case j == i:
						val = v
					case j >= len(f.args)-f.ndef:
						continue // its default
					default:
						s, ok := byName[a]
						if !ok {
							s, ok = byType[f.types[j]]
						}
						require.True(t, ok, "no valid value for %s.%s (%s)", f.name, a, f.types[j])
						val = &s
					}
					args = append(args, val)
					named = append(named, fmt.Sprintf("%s => $%d::text::%s", pgx.Identifier{a}.Sanitize(), len(args), f.types[j]))
				}
				sql := fmt.Sprintf("SELECT count(*) FROM fanout.%s(%s)", pgx.Identifier{f.name}.Sanitize(), strings.Join(named, ", "))
				calls++
				err := call(sql, args)
				if err == nil {
					continue
				}
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) {
					problems = append(problems, fmt.Sprintf("%s(%s => %s): %v", f.name, f.args[i], show(v), err))
					continue
				}
				switch {
				case !documented[pgErr.Code]:
					problems = append(problems, fmt.Sprintf("%s(%s => %s): %s undocumented: %s",
						f.name, f.args[i], show(v), pgErr.Code, clip(pgErr.Message)))
				case strings.HasPrefix(pgErr.Code, "PGQ") && !strings.Contains(rowOf[pgErr.Code], "`"+f.name+"`"):
					problems = append(problems, fmt.Sprintf("%s(%s => %s): %s, whose row in docs/errors.md does not name %s: %s",
						f.name, f.args[i], show(v), pgErr.Code, f.name, clip(pgErr.Message)))
				}
			}
		}
	}
	t.Logf("%d calls of %d public functions", calls, len(fns))
	require.Empty(t, problems, "\n%s", strings.Join(problems, "\n"))
}

func clip(s string) string {
	if r := []rune(s); len(r) > 100 {
		return string(r[:100]) + "..."
	}
	return s
}

func show(v *string) string {
	if v == nil {
		return "NULL"
	}
	if len(*v) > 40 {
		return fmt.Sprintf("%q... (%d bytes)", (*v)[:20], len(*v))
	}
	return fmt.Sprintf("%q", *v)
}

// errorsDoc reads the SQLSTATEs of docs/errors.md's tables and each one's row.
func errorsDoc(t *testing.T) (map[string]bool, map[string]string) {
	t.Helper()
	raw, err := os.ReadFile("../docs/errors.md")
	require.NoError(t, err)
	codes := map[string]bool{}
	rows := map[string]string{}
	re := regexp.MustCompile("^\\| `([0-9A-Z]{5})`")
	for _, line := range strings.Split(string(raw), "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			codes[m[1]] = true
			rows[m[1]] += line
		}
	}
	require.True(t, codes["PGQ01"] && codes["42501"], "docs/errors.md parsed")
	return codes, rows
}

// A delay of millions of
// years and an infinite clock are PGQ03 (they were PostgreSQL's 22008), an
// unknown role in grant_topic is 42704 (documented).
func TestErrorsOutOfRangeTimes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "t")
	for _, d := range []string{"178000000 years", "-178000000 years", "1001 days"} {
		_, err := b.Pool.Exec(b.ctx, "SELECT fanout.publish('t', '{}', delay => $1::interval)", d)
		requireSQLState(t, err, "PGQ03")
		_, err = b.Pool.Exec(b.ctx, "SELECT fanout.publish_batch('t', '{\"{}\"}', delay => $1::interval)", d)
		requireSQLState(t, err, "PGQ03")
	}
	for _, now := range []string{"infinity", "-infinity"} {
		for _, f := range []string{"groups_near_timeout", "run_maintenance", "maint_operations"} {
			_, err := b.Pool.Exec(b.ctx, "SELECT count(*) FROM fanout."+f+"($1::timestamptz)", now)
			requireSQLState(t, err, "PGQ03")
		}
	}
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.grant_topic('t', $1::regrole, 'admin')", b.DBName+"_nobody")
	requireSQLState(t, err, "42704")
}
