package tests

// Tenant isolation of the recently changed functions (a hostile review):
// publish_batch with sequences and dedupe keys, replay, seek, partitioned
// read, partition_of, sequence_gaps, dead_letters, partitions,
// message_status. Tenant a's roles hold grants on 'a.%' only; every call
// on a 'b.*' topic must raise PGQ21 and change nothing.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

type rvFixture struct {
	b                       *bundle
	conns                   tenantConns
	bq, bseq, bp, bps       string
	bLease, bSeqLease       int64
	bPLease                 int64
	bMsg, bSeqMsg, bPsMsg   int64
	bqID, bseqID, bpID      int64
	bPsGroupID, bSeqGroupID int64
}

func rvSetup(t *testing.T) *rvFixture {
	b := setup(t)
	b.tIsolate(t)
	f := &rvFixture{b: b, conns: b.tTenants(t), bq: "b.q", bseq: "b.seq", bp: "b.p", bps: "b.ps"}
	f.bqID = b.createTopic(t, b.Pool, f.bq, "max_attempts => 1")
	f.bseqID = b.createTopic(t, b.Pool, f.bseq, "'pubsub'", "sequence_ordering => true")
	f.bpID = b.createTopic(t, b.Pool, f.bp, "partitions => 4")
	b.createTopic(t, b.Pool, f.bps, "'pubsub'")
	b.createTopic(t, b.Pool, "a.q")
	b.createTopic(t, b.Pool, "a.p", "partitions => 4")
	b.createTopic(t, b.Pool, "a.seq", "'pubsub'", "sequence_ordering => true")
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.subscribe('b.seq', 'gs', 'earliest')")
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.subscribe('b.ps', 'gp', 'earliest')")
	require.NoError(t, err)
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT group_id FROM fanout.consumer_group WHERE group_name = 'gp'").Scan(&f.bPsGroupID))
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT group_id FROM fanout.consumer_group WHERE group_name = 'gs'").Scan(&f.bSeqGroupID))
	// b.seq: sequences 1 and 3 of key k (a gap at 2), read once.
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.publish_batch('b.seq', ARRAY['{"s":1}','{"s":3}']::jsonb[],
		message_groups => ARRAY['k','k'], sequences => ARRAY[1,3]::bigint[], dedupe_keys => ARRAY['d1','d3'])`)
	require.NoError(t, err)
	ms := b.read(t, b.Pool, "b.seq", ptr("gs"), "c", 10, "1 hour")
	require.Len(t, ms, 1)
	f.bSeqLease, f.bSeqMsg = ms[0].LeaseID, ms[0].MessageID
	// b.q: one open lease and one dead letter.
	f.bMsg = b.publish(t, b.Pool, "b.q", `{"secret":"b"}`)
	dl := b.publish(t, b.Pool, "b.q", `{"secret":"dead"}`)
	_ = dl
	ms = b.read(t, b.Pool, "b.q", nil, "c", 1, "1 hour")
	f.bLease = ms[0].LeaseID
	ms2 := b.read(t, b.Pool, "b.q", nil, "c", 1, "1 hour")
	b.qNack(t, b.Pool, ms2[0].LeaseID, nil, nil, "boom") // max_attempts 1: dead letter
	// b.p: a partitioned page.
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.publish('b.p', '{}', message_group => 'x')")
	require.NoError(t, err)
	ms = b.read(t, b.Pool, "b.p", nil, "c", 10, "1 hour")
	require.Len(t, ms, 1)
	f.bPLease = ms[0].LeaseID
	f.bPsMsg = b.publish(t, b.Pool, "b.ps", `{}`)
	return f
}

// Every new/changed entry point on tenant b's topics, from tenant a's roles
// (and roles with no grant): PGQ21, nothing changed.
func TestTenantEdgeForeignCalls(t *testing.T) {
	t.Parallel()
	f := rvSetup(t)
	b := f.b
	calls := []struct{ kind, sql string }{
		{"prod", "SELECT fanout.publish_batch('b.seq', ARRAY['{}']::jsonb[], message_groups => ARRAY['k'], sequences => ARRAY[2]::bigint[])"},
		{"prod", "SELECT fanout.publish_batch('b.seq', ARRAY['{}','{}']::jsonb[], message_groups => ARRAY['k','k'], sequences => ARRAY[2,4]::bigint[], dedupe_keys => ARRAY['d1','x'])"},
		{"prod", "SELECT fanout.publish_batch('b.q', ARRAY['{}']::jsonb[], dedupe_keys => ARRAY['k'])"},
		{"prod", "SELECT fanout.publish_batch('b.p', ARRAY['{}']::jsonb[], message_groups => ARRAY['x'], dedupe_keys => ARRAY['k'])"},
		{"prod", "SELECT fanout.publish('b.seq', '{}', message_group => 'k', sequence => 2, dedupe_key => 'd1')"},
		{"prod", "SELECT fanout.partition_of('b.p', 'x')"},
		{"cons", "SELECT fanout.partition_of('b.p', 'x')"},
		{"cons", "SELECT * FROM fanout.read('b.p', consumer => 'c')"},
		{"cons", "SELECT * FROM fanout.read('b.p', consumer => 'c', partition => 0)"},
		{"cons", "SELECT * FROM fanout.read('b.seq', 'gs', 'c')"},
		{"cons", fmt.Sprintf("SELECT * FROM fanout.read('b.p', consumer => 'c', ack => %d)", f.bPLease)},
		{"cons", fmt.Sprintf("SELECT fanout.ack(%d)", f.bSeqLease)},
		{"cons", fmt.Sprintf("SELECT fanout.nack(%d)", f.bPLease)},
		{"cons", fmt.Sprintf("SELECT fanout.extend_lease(%d, '1 hour')", f.bPLease)},
		{"adm", fmt.Sprintf("SELECT fanout.replay('b.q', NULL, ARRAY[%d::bigint])", f.bMsg)},
		{"adm", fmt.Sprintf("SELECT fanout.replay('b.seq', 'gs', ARRAY[%d::bigint])", f.bSeqMsg)},
		{"adm", "SELECT fanout.seek('b.q', NULL, 'latest')"},
		{"adm", "SELECT fanout.seek('b.p', NULL, 'earliest')"},
		{"adm", "SELECT fanout.seek('b.seq', 'gs', 'latest')"},
		{"adm", fmt.Sprintf("SELECT * FROM fanout.message_status('b.q', %d)", f.bMsg)},
		{"adm", fmt.Sprintf("SELECT * FROM fanout.message_status('b.seq', %d)", f.bSeqMsg)},
		{"adm", "SELECT fanout.replay_dead_letters('b.q', NULL, ARRAY[1::bigint])"},
		{"adm", "SELECT fanout.log_action('b.q', NULL, 'x')"},
		// a nonexistent topic looks the same as a forbidden one
		{"adm", "SELECT fanout.seek('b.nope', 'g', 'latest')"},
		{"prod", "SELECT fanout.partition_of('b.nope', 'x')"},
	}
	for _, c := range calls {
		for _, rel := range []string{"own", "none"} { // "own" = tenant a
			before := b.qDigest(t)
			_, err := f.conns[c.kind][rel].Exec(b.ctx, c.sql)
			want := "PGQ21"
			if leaseCall(c.sql) {
				want = "PGQ10" // another tenant's lease: as one that does not exist
			}
			require.Equal(t, want, qState(err), "%s %s: %s: %v", c.kind, rel, c.sql, err)
			require.Equal(t, before, b.qDigest(t), "%s %s: %s changed state", c.kind, rel, c.sql)
		}
	}
	// B's leases still work for B.
	require.Equal(t, 1, b.ack(t, b.Pool, f.bPLease, nil))
}

// read(ack => lease of tenant b) from tenant a: refused, nothing acked or
// locked. It answers as for a lease that does not exist (PGQ10, the same
// text): a foreign lease is not told apart from no lease.
func TestTenantEdgeReadAckForeignLease(t *testing.T) {
	t.Parallel()
	f := rvSetup(t)
	b := f.b
	for _, lease := range []int64{f.bLease, f.bPLease} {
		before := b.qDigest(t)
		_, err := f.conns["cons"]["own"].Exec(b.ctx, fmt.Sprintf("SELECT * FROM fanout.read('a.q', consumer => 'c', ack => %d)", lease))
		st := qState(err)
		t.Logf("read(a.q, ack => foreign %d): %s %v", lease, st, err)
		require.Equal(t, "PGQ10", st)
		require.Equal(t, before, b.qDigest(t))
		_, err = f.conns["cons"]["own"].Exec(b.ctx, fmt.Sprintf("SELECT * FROM fanout.read('a.p', consumer => 'c', partition => 1, ack => %d)", lease))
		st = qState(err)
		require.Equal(t, "PGQ10", st)
		require.Equal(t, before, b.qDigest(t))
	}
	// a foreign lease is not blocked: tenant b acks without waiting.
	tx, err := f.conns["cons"]["own"].Begin(b.ctx)
	require.NoError(t, err)
	_, _ = tx.Exec(b.ctx, fmt.Sprintf("SELECT * FROM fanout.read('a.q', consumer => 'c', ack => %d)", f.bLease))
	_, err = b.Pool.Exec(b.ctx, "SET lock_timeout = '2s'")
	require.NoError(t, err)
	conn := b.qConnAs(t, b.URL)
	_, err = conn.Exec(b.ctx, "SET lock_timeout = '2s'")
	require.NoError(t, err)
	var n int
	require.NoError(t, conn.QueryRow(b.ctx, fmt.Sprintf("SELECT fanout.ack(%d)", f.bLease)).Scan(&n))
	require.Equal(t, 1, n)
	_ = tx.Rollback(b.ctx)
}

// Views and their helpers show tenant a nothing of tenant b.
func TestTenantEdgeViews(t *testing.T) {
	t.Parallel()
	f := rvSetup(t)
	b := f.b
	// tenant a has its own rows in each, so an empty answer is meaningful
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.subscribe('a.seq', 'ga', 'earliest')")
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.publish_batch('a.seq', ARRAY['{}','{}']::jsonb[], message_groups => ARRAY['k','k'], sequences => ARRAY[1,3]::bigint[])`)
	require.NoError(t, err)
	b.read(t, b.Pool, "a.seq", ptr("ga"), "c", 10, "1 hour")
	count := func(c *pgx.Conn, sql string) int {
		var n int
		require.NoError(t, c.QueryRow(b.ctx, sql).Scan(&n), sql)
		return n
	}
	// superuser sees b's rows (fixture sanity)
	for _, v := range []string{
		"SELECT count(*) FROM fanout.sequence_gaps WHERE topic LIKE 'b.%'",
		"SELECT count(*) FROM fanout.dead_letters WHERE topic LIKE 'b.%'",
		"SELECT count(*) FROM fanout.partitions WHERE topic LIKE 'b.%'",
		"SELECT count(*) FROM fanout.partition_stats() WHERE topic LIKE 'b.%'",
	} {
		require.Positive(t, count(b.Conn(t), v), v)
	}
	for _, kind := range []string{"prod", "cons", "adm"} {
		for _, rel := range []string{"own", "none"} {
			c := f.conns[kind][rel]
			for _, v := range []string{
				"SELECT count(*) FROM fanout.sequence_gaps WHERE topic NOT LIKE 'a.%'",
				"SELECT count(*) FROM fanout._sequence_gap_rows() WHERE topic NOT LIKE 'a.%'",
				"SELECT count(*) FROM fanout.dead_letters WHERE topic NOT LIKE 'a.%'",
				"SELECT count(*) FROM fanout.partitions WHERE topic NOT LIKE 'a.%'",
				"SELECT count(*) FROM fanout.partition_stats() WHERE topic NOT LIKE 'a.%'",
				"SELECT count(*) FROM fanout.topics WHERE topic NOT LIKE 'a.%'",
				"SELECT count(*) FROM fanout.groups WHERE topic NOT LIKE 'a.%'",
				fmt.Sprintf("SELECT count(*) FROM fanout._kpart_view(%d, 0) WHERE messages IS NOT NULL",
					b.groupOf(t, f.bpID)),
				fmt.Sprintf("SELECT count(*) FROM fanout._group_view(%d) WHERE messages IS NOT NULL", f.bPsGroupID),
				fmt.Sprintf("SELECT count(*) FROM fanout._topic_group_view(%d)", f.bqID),
				fmt.Sprintf("SELECT count(*) FROM fanout._topic_view(%d) WHERE messages IS NOT NULL", f.bqID),
				fmt.Sprintf("SELECT count(*) FROM (SELECT fanout._scheduled_count(%d) n) x WHERE n IS NOT NULL", f.bqID),
			} {
				var n int
				err := c.QueryRow(b.ctx, v).Scan(&n)
				if err != nil {
					require.Equal(t, "42501", qState(err), "%s %s: %s: %v", kind, rel, v, err)
					continue
				}
				require.Zero(t, n, "%s %s: %s", kind, rel, v)
			}
		}
	}
	// own tenant sees its own gap
	require.Positive(t, count(f.conns["cons"]["own"], "SELECT count(*) FROM fanout.sequence_gaps WHERE topic = 'a.seq'"))
}

func (b *bundle) groupOf(t *testing.T, topicID int64) int64 {
	var id int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT min(group_id) FROM fanout.consumer_group WHERE topic_id = $1", topicID).Scan(&id))
	return id
}

// No internal function and no table is reachable by a tenant role.
func TestTenantEdgeInternals(t *testing.T) {
	t.Parallel()
	f := rvSetup(t)
	b := f.b
	allowed := map[string]bool{}
	for _, s := range []string{"_may", "_may_see_grant", "_topic_view", "_scheduled_count", "_sequence_gap_rows",
		"_group_view", "_kpart_view", "_topic_group_view",
		// admin-only maintenance entry points; they check an admin grant on '%'
		"_manage_partitions", "_cleanup_partitions", "_cleanup_bookkeeping", "_detect_dead_groups",
		"_cleanup_groups", "_sequence_gap_alerts", "_bitmap_step", "_refresh_topic_state", "_measure_usage", "_maint_call",
		// trigger functions (not callable directly)
		"_group_mask_trigger", "_notify_trigger", "_required_groups_trigger", "_tally_trigger"} {
		allowed[s] = true
	}
	for _, kind := range []string{"prod", "cons", "adm"} {
		rows, err := b.Pool.Query(b.ctx, `
			SELECT n.nspname || '.' || p.proname
			FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
			WHERE n.nspname IN ('fanout', 'fanout_data') AND has_function_privilege($1, p.oid, 'EXECUTE')
			  AND has_schema_privilege($1, n.oid, 'USAGE') AND (n.nspname = 'fanout_data' OR p.proname LIKE '\_%')`,
			b.DBName+"_"+kind+"_own")
		require.NoError(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		for _, nm := range names {
			require.True(t, allowed[strings.TrimPrefix(nm, "fanout.")], "%s may execute %s", kind, nm)
		}
		var tables int
		require.NoError(t, b.Pool.QueryRow(b.ctx, `
			SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname IN ('fanout','fanout_data') AND c.relkind IN ('r','p','S')
			  AND (has_table_privilege($1, c.oid, 'SELECT') OR has_table_privilege($1, c.oid, 'INSERT')
			       OR has_table_privilege($1, c.oid, 'UPDATE') OR has_table_privilege($1, c.oid, 'DELETE'))`,
			b.DBName+"_"+kind+"_own").Scan(&tables))
		require.Zero(t, tables, kind)
		c := f.conns[kind]["own"]
		for _, sql := range []string{
			fmt.Sprintf("SELECT fanout_data.m%d_insert_keyed(ARRAY['{}']::jsonb[], NULL, ARRAY['k'], ARRAY['x'], NULL, NULL, NULL)", f.bseqID),
			"SELECT count(*) FROM fanout.topic",
			"SELECT count(*) FROM fanout.seq_wait",
			fmt.Sprintf("SELECT count(*) FROM fanout_data.m%d_dedupe", f.bqID),
			fmt.Sprintf("SELECT fanout_data.m%d_claim('k', 1, '1 hour')", f.bqID),
			fmt.Sprintf("SELECT fanout_data.m%d_insert_claimed('k', '1 hour', '{}', '{}', NULL, NULL, NULL)", f.bqID),
			fmt.Sprintf("SELECT count(*) FROM fanout_data.m%d", f.bqID),
			"SELECT * FROM fanout._publish_sequenced(NULL::fanout.topic, NULL::jsonb[], NULL::jsonb[], NULL::text[], NULL::text[], NULL::bigint[])",
			"SELECT * FROM fanout._kpart_read(NULL::fanout.topic, NULL, NULL, 1, '1 minute', 1, NULL, now())",
		} {
			_, err := c.Exec(b.ctx, sql)
			st := qState(err)
			require.True(t, st == "42501" || st == "42883" || st == "3F000", "%s: %s: %v", kind, sql, err)
		}
		// maintenance: admin on a.% only is refused
		if kind == "adm" {
			for _, sql := range []string{"SELECT fanout._cleanup_partitions(now() + interval '10 years')",
				"SELECT fanout._sequence_gap_alerts(now())", "SELECT fanout._bitmap_step(now(), 1)",
				"SELECT fanout.run_maintenance(now() + interval '10 years')"} {
				_, err := c.Exec(b.ctx, sql)
				require.Equal(t, "PGQ21", qState(err), sql)
			}
		}
	}
}

// Names with quotes, semicolons, format specifiers, unicode and 512
// characters go through every touched function as data.
func TestTenantEdgeHostileNames(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.tIsolate(t)
	conns := b.tTenants(t)
	adm, prod, cons := conns["adm"]["own"], conns["prod"]["own"], conns["cons"]["own"]
	names := []string{
		`a.x'); DROP TABLE fanout.topic; --`,
		`a."q"; SELECT 1`,
		`a.%I%s%L%1$s`,
		`a.$$ $fn$ $q$ $body$`,
		"a.caf\u00e9",
		"a.\u202eRTL",
		"a." + strings.Repeat("é", 510),
	}
	for i, n := range names {
		seqT := n
		partT := n + "#p"
		if len([]rune(partT)) > 512 {
			partT = "a.p" + fmt.Sprint(i)
		}
		grp := `g'"; DROP SCHEMA fanout CASCADE; --%I` + string([]rune(n)[2:min(len([]rune(n)), 40)])
		key := `k'; %s` + string([]rune(n)[:min(len([]rune(n)), 40)])
		for _, sql := range []string{
			"SELECT fanout.create_topic($1, 'pubsub', sequence_ordering => true)",
		} {
			_, err := adm.Exec(b.ctx, sql, seqT)
			require.NoError(t, err, "%q", seqT)
		}
		_, err := adm.Exec(b.ctx, "SELECT fanout.create_topic($1, partitions => 3)", partT)
		require.NoError(t, err, "%q", partT)
		_, err = cons.Exec(b.ctx, "SELECT fanout.subscribe($1, $2, 'earliest')", seqT, grp)
		require.NoError(t, err)
		var ids []int64
		rows, err := prod.Query(b.ctx, "SELECT fanout.publish_batch($1, ARRAY['{}','{}']::jsonb[], message_groups => ARRAY[$2,$2], sequences => ARRAY[1,2]::bigint[], dedupe_keys => ARRAY[$3, $3 || 'x'])", seqT, key, key)
		require.NoError(t, err)
		ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		require.Len(t, ids, 2)
		rows, err = prod.Query(b.ctx, "SELECT fanout.publish_batch($1, ARRAY['{}']::jsonb[], message_groups => ARRAY[$2], dedupe_keys => ARRAY[$3])", partT, key, key)
		require.NoError(t, err)
		rows.Close()
		var p int
		require.NoError(t, prod.QueryRow(b.ctx, "SELECT fanout.partition_of($1, $2)", partT, key).Scan(&p))
		ms, err := readMsgs(b.ctx, cons, seqT, &grp, string([]rune(n)[:min(len([]rune(n)), 60)]), 10, "1 hour")
		require.NoError(t, err)
		require.Len(t, ms, 1) // one in flight per key on a sequence-ordered topic
		b.ack(t, cons, ms[0].LeaseID, nil)
		ms, err = readMsgs(b.ctx, cons, seqT, &grp, "c2", 10, "1 hour")
		require.NoError(t, err)
		require.Len(t, ms, 1)
		b.ack(t, cons, ms[0].LeaseID, nil)
		var k int
		require.NoError(t, adm.QueryRow(b.ctx, "SELECT fanout.replay($1, $2, $3)", seqT, grp, ids).Scan(&k))
		require.Equal(t, 2, k)
		_, err = adm.Exec(b.ctx, "SELECT fanout.seek($1, $2, 'earliest')", seqT, grp)
		require.NoError(t, err)
		_, err = adm.Exec(b.ctx, "SELECT * FROM fanout.message_status($1, $2)", seqT, ids[0])
		require.NoError(t, err)
		pm, err := readMsgs(b.ctx, cons, partT, nil, "c'; --", 10, "1 hour")
		require.NoError(t, err)
		require.Len(t, pm, 1)
		_, err = cons.Exec(b.ctx, "SELECT * FROM fanout.read($1, NULL, 'c', partition => $2)", partT, p)
		require.Equal(t, "PGQ24", qState(err)) // automatic mode already; refused as data, not as SQL
		var seen int
		require.NoError(t, cons.QueryRow(b.ctx, "SELECT count(*) FROM fanout.partitions WHERE topic = $1", partT).Scan(&seen))
		require.Equal(t, 3, seen)
	}
	// too long / control characters are refused as names
	long := "a." + strings.Repeat("x", 511)
	_, err := adm.Exec(b.ctx, "SELECT fanout.create_topic($1)", long)
	require.Equal(t, "PGQ04", qState(err))
	_, err = adm.Exec(b.ctx, "SELECT fanout.create_topic($1)", "a.\u0007bell")
	require.Equal(t, "PGQ04", qState(err))
	// NFC: the decomposed spelling is the same topic (and same grant)
	var n int
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT count(*) FROM fanout.topic WHERE topic IN ($1, $2)", "a.caf\u00e9", "a.cafe\u0301").Scan(&n))
	require.Equal(t, 1, n)
	_, err = prod.Exec(b.ctx, "SELECT fanout.publish_batch($1, ARRAY['{}']::jsonb[], message_groups => ARRAY['k'], sequences => ARRAY[3]::bigint[])", "a.cafe\u0301")
	require.NoError(t, err)
	// the schema is intact
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT count(*) FROM fanout.topic").Scan(&n))
	require.Positive(t, n)
}
