package tests

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// stmtMsg is one statement-shaped captured message as a consumer reads it.
type stmtMsg struct {
	V          int              `json:"v"`
	Op         string           `json:"op"`
	Table      string           `json:"table"`
	Rows       int              `json:"rows"`
	Inserted   []map[string]any `json:"inserted"`
	Deleted    []map[string]any `json:"deleted"`
	ClaimCheck *struct {
		Inserted  int `json:"inserted"`
		Deleted   int `json:"deleted"`
		ChunkRows int `json:"chunk_rows"`
	} `json:"claim_check"`
	ID      int64           `json:"-"`
	Group   *string         `json:"-"`
	Headers json.RawMessage `json:"-"`
}

// drainStatements reads everything a topic (queue or group) has and acks it.
func (b *bundle) drainStatements(t *testing.T, q querier, topic string, group *string) []stmtMsg {
	t.Helper()
	var out []stmtMsg
	for {
		ms := b.read(t, q, topic, group, "cap", 1000, "1 minute")
		if len(ms) == 0 {
			return out
		}
		for _, m := range ms {
			var s stmtMsg
			require.NoError(t, json.Unmarshal(m.Payload, &s))
			s.ID, s.Group, s.Headers = m.MessageID, m.Group, m.Headers
			out = append(out, s)
		}
		b.ack(t, q, ms[0].LeaseID, nil)
	}
}

// captureRows pages through a claim-check with fanout.capture_rows, page
// rows at a time, and checks the row numbers run 1..n without a gap.
func (b *bundle) captureRows(t *testing.T, q querier, topic string, id int64, side string, page int) []map[string]any {
	t.Helper()
	var out []map[string]any
	after := int64(0)
	for {
		rows, err := q.Query(b.ctx, `SELECT row_no, image FROM fanout.capture_rows($1, $2, $3, $4, $5)`,
			topic, id, side, after, page)
		require.NoError(t, err)
		n := 0
		for rows.Next() {
			var no int64
			var img map[string]any
			require.NoError(t, rows.Scan(&no, &img))
			require.Equal(t, after+1, no, "row numbers run without a gap")
			after = no
			out = append(out, img)
			n++
		}
		require.NoError(t, rows.Err())
		require.LessOrEqual(t, n, page, "a page is bounded")
		if n < page {
			return out
		}
	}
}

func imageIDs(rows []map[string]any) []float64 {
	var out []float64
	for _, r := range rows {
		out = append(out, r["id"].(float64))
	}
	return out
}

// shape => 'statement': one message per statement, the rows inline, for
// every DML kind, in the writer's transaction (rollbacks and savepoints
// publish nothing), with the column lists applied; message_group is the
// table's name.
func TestCaptureStatementDML(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := b.Pool
	b.createTopic(t, db, "orders.stmts")
	_, err := db.Exec(b.ctx, `CREATE TABLE orders (id int PRIMARY KEY, status text, total numeric, secret text)`)
	require.NoError(t, err)
	_, err = db.Exec(b.ctx, `SELECT fanout.capture_table('orders', 'orders.stmts', exclude_columns => ARRAY['secret'], shape => 'statement')`)
	require.NoError(t, err)
	var shape string
	var cc int
	require.NoError(t, db.QueryRow(b.ctx, `SELECT shape, claim_check_rows FROM fanout.captures`).Scan(&shape, &cc))
	require.Equal(t, "statement", shape)
	require.Equal(t, 100, cc, "the default threshold")

	for _, sql := range []string{
		`INSERT INTO orders VALUES (1, 'new', 10, 's1'), (2, 'new', 20, 's2')`,
		`UPDATE orders SET status = 'paid' WHERE id = 1`,
		`UPDATE orders SET id = 3 WHERE id = 2`,
		`DELETE FROM orders WHERE id = 1`,
		`DELETE FROM orders WHERE id = -1`, // no row: nothing
		`INSERT INTO orders VALUES (3, 'up', 1, 's'), (4, 'new', 4, 's') ON CONFLICT (id) DO UPDATE SET status = excluded.status`,
	} {
		_, err := db.Exec(b.ctx, sql)
		require.NoError(t, err, sql)
	}
	got := b.drainStatements(t, db, "orders.stmts", nil)
	var seen []string
	for _, m := range got {
		seen = append(seen, fmt.Sprintf("%s %d", m.Op, m.Rows))
		require.Equal(t, 1, m.V)
		require.Equal(t, "public.orders", m.Table)
		require.Equal(t, "public.orders", *m.Group, "message_group is the table")
		require.Nil(t, m.ClaimCheck, "small statements are inline")
	}
	// The upsert: its UPDATE's statement trigger runs before its INSERT's.
	require.Equal(t, []string{"insert 2", "update 1", "update 1", "delete 1", "update 1", "insert 1"}, seen)
	require.Equal(t, []map[string]any{{"id": 1.0, "status": "new", "total": 10.0}, {"id": 2.0, "status": "new", "total": 20.0}},
		got[0].Inserted, "secret is excluded")
	require.Nil(t, got[0].Deleted)
	require.Equal(t, "new", got[1].Deleted[0]["status"], "an update: the old image in deleted")
	require.Equal(t, "paid", got[1].Inserted[0]["status"], "and the new one in inserted")
	require.Equal(t, 2.0, got[2].Deleted[0]["id"], "a key change: old key in deleted[i]")
	require.Equal(t, 3.0, got[2].Inserted[0]["id"], "new key in inserted[i]")
	require.Equal(t, 1.0, got[3].Deleted[0]["id"])
	require.Nil(t, got[3].Inserted)
	require.JSONEq(t, `{"pgq_capture": "public.orders", "op": "insert"}`, string(got[0].Headers))

	// Rolled back, and rolled back to a savepoint: nothing published.
	tx, err := db.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `INSERT INTO orders VALUES (10, 'x', 1, '')`)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.ctx))
	tx, err = db.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `INSERT INTO orders VALUES (11, 'kept', 1, '')`)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `SAVEPOINT s; INSERT INTO orders SELECT g, 'undone', 1, '' FROM generate_series(100, 399) g; ROLLBACK TO SAVEPOINT s`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
	got = b.drainStatements(t, db, "orders.stmts", nil)
	require.Len(t, got, 1)
	require.Equal(t, []float64{11}, imageIDs(got[0].Inserted))
	var n int
	require.NoError(t, db.QueryRow(b.ctx, `SELECT count(*) FROM fanout.capture_chunk`).Scan(&n))
	require.Zero(t, n, "the savepoint's claim-check rolled back with it")

	// TRUNCATE is one message.
	_, err = db.Exec(b.ctx, `TRUNCATE orders`)
	require.NoError(t, err)
	got = b.drainStatements(t, db, "orders.stmts", nil)
	require.Len(t, got, 1)
	require.Equal(t, "truncate", got[0].Op)

	// A column list, and schema changes: a column added appears, a renamed
	// one under its new name, a dropped one disappears.
	_, err = db.Exec(b.ctx, `SELECT fanout.capture_table('orders', 'orders.stmts', columns => ARRAY['id', 'status'], shape => 'statement')`)
	require.NoError(t, err)
	_, err = db.Exec(b.ctx, `INSERT INTO orders VALUES (20, 'listed', 1, 's')`)
	require.NoError(t, err)
	_, err = db.Exec(b.ctx, `SELECT fanout.capture_table('orders', 'orders.stmts', shape => 'statement');
	    ALTER TABLE orders ADD COLUMN note text; ALTER TABLE orders RENAME COLUMN total TO amount; ALTER TABLE orders DROP COLUMN secret`)
	require.NoError(t, err)
	_, err = db.Exec(b.ctx, `INSERT INTO orders VALUES (21, 'altered', 2, 'hi')`)
	require.NoError(t, err)
	got = b.drainStatements(t, db, "orders.stmts", nil)
	require.Len(t, got, 2)
	require.Equal(t, []map[string]any{{"id": 20.0, "status": "listed"}}, got[0].Inserted)
	require.Equal(t, []map[string]any{{"id": 21.0, "status": "altered", "amount": 2.0, "note": "hi"}}, got[1].Inserted)

	// Bad arguments.
	for _, sql := range []string{
		`SELECT fanout.capture_table('orders', 'orders.stmts', shape => 'rows')`,
		`SELECT fanout.capture_table('orders', 'orders.stmts', shape => NULL)`,
		`SELECT fanout.capture_table('orders', 'orders.stmts', shape => 'statement', claim_check_rows => 10001)`,
		`SELECT fanout.capture_table('orders', 'orders.stmts', shape => 'statement', claim_check_rows => -1)`,
		`SELECT fanout.capture_table('orders', 'orders.stmts', claim_check_rows => 5)`,
	} {
		_, err := db.Exec(b.ctx, sql)
		requireSQLState(t, err, "PGQ03")
	}
	// Back to one message per row.
	_, err = db.Exec(b.ctx, `SELECT fanout.capture_table('orders', 'orders.stmts')`)
	require.NoError(t, err)
	_, err = db.Exec(b.ctx, `INSERT INTO orders VALUES (30, 'r', 1, ''), (31, 'r', 1, '')`)
	require.NoError(t, err)
	require.Equal(t, []string{"insert 30", "insert 31"}, ops(b.drainCaptured(t, db, "orders.stmts", nil)))
}

// A statement of 10,000 rows publishes one message whose rows are a
// claim-check, read in full through fanout.capture_rows in bounded pages,
// for INSERT, UPDATE (both sides, in step) and DELETE; a statement inline
// over the topic's max_payload_bytes becomes a claim-check; the chunks go
// when the message's storage partition goes, or its topic.
func TestCaptureStatementClaimCheck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := b.Pool
	b.createTopic(t, db, "big.stmts", "max_payload_bytes => 2000", "retention => '1 minute'")
	_, err := db.Exec(b.ctx, `CREATE TABLE big (id int PRIMARY KEY, v text)`)
	require.NoError(t, err)
	_, err = db.Exec(b.ctx, `SELECT fanout.capture_table('big', 'big.stmts', shape => 'statement', claim_check_rows => 50)`)
	require.NoError(t, err)
	for _, sql := range []string{
		`INSERT INTO big SELECT g, 'v' || g FROM generate_series(1, 10000) g`,
		`UPDATE big SET v = 'u' || id`,
		`DELETE FROM big WHERE id > 3`,
		`UPDATE big SET v = repeat('x', 900)`, // 3 rows, inline over 2,000 bytes
		`UPDATE big SET v = 'y' WHERE id = 1`, // inline
	} {
		_, err := db.Exec(b.ctx, sql)
		require.NoError(t, err, sql)
	}
	var chunks, maxRows int
	require.NoError(t, db.QueryRow(b.ctx, `SELECT count(*), max(n_rows) FROM fanout.capture_chunk`).Scan(&chunks, &maxRows))
	require.Equal(t, 20+40+20+2, chunks, "500 rows per chunk row")
	require.Equal(t, 500, maxRows)

	got := b.drainStatements(t, db, "big.stmts", nil)
	require.Len(t, got, 5)
	want := make([]float64, 10000)
	for i := range want {
		want[i] = float64(i + 1)
	}
	ins := got[0]
	require.Equal(t, "insert", ins.Op)
	require.NotNil(t, ins.ClaimCheck)
	require.Equal(t, 10000, ins.ClaimCheck.Inserted)
	require.Nil(t, ins.Inserted, "a claim-check carries no rows inline")
	rows := b.captureRows(t, db, "big.stmts", ins.ID, "inserted", 777)
	require.Equal(t, want, imageIDs(rows), "every row, in the statement's order, none truncated")
	require.Equal(t, "v9999", rows[9998]["v"])
	require.Empty(t, b.captureRows(t, db, "big.stmts", ins.ID, "deleted", 1000))

	upd := got[1]
	require.Equal(t, "update", upd.Op)
	require.Equal(t, 10000, upd.ClaimCheck.Deleted)
	newRows := b.captureRows(t, db, "big.stmts", upd.ID, "inserted", 10000)
	oldRows := b.captureRows(t, db, "big.stmts", upd.ID, "deleted", 333)
	require.Len(t, newRows, 10000)
	for i := range newRows {
		require.Equal(t, oldRows[i]["id"], newRows[i]["id"], "deleted[i] is inserted[i]'s old image")
		require.Equal(t, fmt.Sprintf("u%d", int(newRows[i]["id"].(float64))), newRows[i]["v"])
		require.Equal(t, fmt.Sprintf("v%d", int(oldRows[i]["id"].(float64))), oldRows[i]["v"])
	}
	del := got[2]
	require.Equal(t, 9997, del.ClaimCheck.Deleted)
	require.Equal(t, want[3:], imageIDs(b.captureRows(t, db, "big.stmts", del.ID, "deleted", 1000)))
	require.NotNil(t, got[3].ClaimCheck, "over max_payload_bytes inline: a claim-check")
	require.Len(t, b.captureRows(t, db, "big.stmts", got[3].ID, "inserted", 10), 3)
	require.Nil(t, got[4].ClaimCheck)
	require.Len(t, got[4].Inserted, 1)

	// capture_rows' arguments.
	for _, args := range [][]any{
		{"big.stmts", ins.ID, "both", 0, 10}, {"big.stmts", ins.ID, "inserted", -1, 10},
		{"big.stmts", ins.ID, "inserted", 0, 0}, {"big.stmts", ins.ID, "inserted", 0, 10001},
		{"big.stmts", nil, "inserted", 0, 10},
	} {
		_, err := db.Exec(b.ctx, `SELECT * FROM fanout.capture_rows($1, $2, $3, $4, $5)`, args...)
		requireSQLState(t, err, "PGQ03")
	}
	_, err = db.Exec(b.ctx, `SELECT * FROM fanout.capture_rows('nope', 1)`)
	requireSQLState(t, err, "PGQ01")

	// Released with the message's storage: rotate on a clock ahead until
	// the first messages' partition is gone; their chunks go with the next
	// bookkeeping call, a later message's stay.
	later := int64(0)
	for i := 1; i <= 6; i++ {
		clock := fmt.Sprintf("now() + interval '%d hours'", 2*i)
		for j := 0; j < 5; j++ { // a jump takes several calls
			_, err = db.Exec(b.ctx, `SELECT fanout._manage_partitions(`+clock+`)`)
			require.NoError(t, err)
		}
		if later == 0 {
			_, err = db.Exec(b.ctx, `INSERT INTO big SELECT g, 'later' FROM generate_series(100, 199) g`)
			require.NoError(t, err)
			require.NoError(t, db.QueryRow(b.ctx, `SELECT max(message_id) FROM fanout.capture_chunk`).Scan(&later))
		}
		b.drainStatements(t, db, "big.stmts", nil)
		_, err = db.Exec(b.ctx, `SELECT fanout._cleanup_partitions(`+clock+`)`)
		require.NoError(t, err)
		var alive bool
		require.NoError(t, db.QueryRow(b.ctx, `SELECT EXISTS (SELECT 1 FROM fanout.partition p JOIN fanout.topic t USING (topic_id)
		    WHERE t.topic = 'big.stmts' AND p.truncated_at IS NULL AND $1 BETWEEN p.lo_id AND p.hi_id)`, ins.ID).Scan(&alive))
		if !alive {
			break
		}
	}
	var before int
	require.NoError(t, db.QueryRow(b.ctx, `SELECT count(*) FROM fanout.capture_chunk WHERE message_id = $1`, ins.ID).Scan(&before))
	require.Equal(t, 20, before, "nothing released before cleanup")
	var alive bool
	require.NoError(t, db.QueryRow(b.ctx, `SELECT EXISTS (SELECT 1 FROM fanout.partition p JOIN fanout.topic t USING (topic_id)
	    WHERE t.topic = 'big.stmts' AND p.truncated_at IS NULL AND $1 BETWEEN p.lo_id AND p.hi_id)`, ins.ID).Scan(&alive))
	require.False(t, alive, "the first messages' partition went")
	_, err = db.Exec(b.ctx, `SELECT fanout._cleanup_bookkeeping()`)
	require.NoError(t, err)
	var left, leftLater int
	require.NoError(t, db.QueryRow(b.ctx, `SELECT count(*) FILTER (WHERE message_id < $1), count(*) FILTER (WHERE message_id = $1)
	    FROM fanout.capture_chunk`, later).Scan(&left, &leftLater))
	require.Zero(t, left, "the chunks of messages whose storage is gone are released")
	require.Equal(t, 1, leftLater, "a message still stored keeps its chunks")
	require.Len(t, b.captureRows(t, db, "big.stmts", later, "inserted", 1000), 100)

	// The topic dropped: its chunks go too.
	_, err = db.Exec(b.ctx, `SELECT fanout.uncapture_table('big'); SELECT fanout.drop_topic('big.stmts')`)
	require.NoError(t, err)
	_, err = db.Exec(b.ctx, `SELECT fanout._cleanup_bookkeeping()`)
	require.NoError(t, err)
	require.NoError(t, db.QueryRow(b.ctx, `SELECT count(*) FROM fanout.capture_chunk`).Scan(&left))
	require.Zero(t, left)
}

// Statement messages on a key-partitioned pubsub topic all go to the key
// partition of the table's name (so one table's statements are read in
// commit order), and on a pubsub topic each group reads them.
func TestCaptureStatementPartitionedPubsub(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := b.Pool
	b.createTopic(t, db, "kp.stmts", "semantics => 'pubsub'", "partitions => 4")
	for _, g := range []string{"g1", "g2"} {
		_, err := db.Exec(b.ctx, `SELECT fanout.subscribe('kp.stmts', $1)`, g)
		require.NoError(t, err)
	}
	_, err := db.Exec(b.ctx, `CREATE TABLE kp (a int, b int, v text, PRIMARY KEY (a, b));
	    SELECT fanout.capture_table('kp', 'kp.stmts', shape => 'statement', claim_check_rows => 0)`)
	require.NoError(t, err)
	for i := 0; i < 5; i++ {
		_, err = db.Exec(b.ctx, fmt.Sprintf(`INSERT INTO kp SELECT %d, g, 'x' FROM generate_series(1, 3) g`, i))
		require.NoError(t, err)
	}
	var kp int
	require.NoError(t, db.QueryRow(b.ctx, `SELECT fanout.partition_of('kp.stmts', 'public.kp')`).Scan(&kp))
	for _, g := range []string{"g1", "g2"} {
		ms := b.readPartition(t, db, "kp.stmts", g, kp)
		require.Len(t, ms, 5, "every statement in the table's key partition")
		for i, m := range ms {
			var s stmtMsg
			require.NoError(t, json.Unmarshal(m.Payload, &s))
			require.NotNil(t, s.ClaimCheck, "claim_check_rows 0: always a claim-check")
			rows := b.captureRows(t, db, "kp.stmts", m.MessageID, "inserted", 2)
			require.Len(t, rows, 3)
			require.Equal(t, float64(i), rows[0]["a"], "in commit order")
		}
		b.ack(t, db, ms[0].LeaseID, nil)
	}
}

// A table writer without a publish grant on the topic cannot publish
// through a statement capture (its write fails, nothing is stored, no
// chunk); a consumer without a consume grant cannot read a claim-check.
func TestCaptureStatementGrants(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := b.Pool
	b.createTopic(t, db, "a.stmts")
	b.tIsolate(t)
	owner, ownerConn := b.tRole(t, "scap_owner", "fanout_producer")
	b.tGrant(t, db, "a.%", owner, "publish")
	writer, writerConn := b.tRole(t, "scap_writer", "fanout_producer")
	reader, readerConn := b.tRole(t, "scap_reader", "fanout_consumer")
	t.Cleanup(func() { _, _ = db.Exec(b.ctx, `DROP SCHEMA IF EXISTS scapt CASCADE`) })
	for _, sql := range []string{
		`CREATE SCHEMA scapt`,
		fmt.Sprintf(`GRANT USAGE, CREATE ON SCHEMA scapt TO %s, %s`, pgx.Identifier{owner}.Sanitize(), pgx.Identifier{writer}.Sanitize()),
	} {
		_, err := db.Exec(b.ctx, sql)
		require.NoError(t, err, sql)
	}
	_, err := ownerConn.Exec(b.ctx, `CREATE TABLE scapt.t (id int PRIMARY KEY, v text)`)
	require.NoError(t, err)
	_, err = ownerConn.Exec(b.ctx, fmt.Sprintf(`GRANT INSERT, UPDATE, DELETE, SELECT, TRUNCATE ON scapt.t TO %s`, pgx.Identifier{writer}.Sanitize()))
	require.NoError(t, err)
	_, err = ownerConn.Exec(b.ctx, `SELECT fanout.capture_table('scapt.t', 'a.stmts', shape => 'statement', claim_check_rows => 1)`)
	require.NoError(t, err)

	for _, sql := range []string{
		`INSERT INTO scapt.t VALUES (1, 'w')`,
		`INSERT INTO scapt.t SELECT g, 'w' FROM generate_series(2, 600) g`,
		`TRUNCATE scapt.t`,
	} {
		_, err = writerConn.Exec(b.ctx, sql)
		requireSQLState(t, err, "PGQ21")
	}
	var n int
	require.NoError(t, db.QueryRow(b.ctx, `SELECT (SELECT count(*) FROM fanout_data.`+b.dataTable(t, "a.stmts")+`)
	    + (SELECT count(*) FROM fanout.capture_chunk)`).Scan(&n))
	require.Zero(t, n, "nothing published, no chunk")

	b.tGrant(t, db, "a.stmts", writer, "publish")
	_, err = writerConn.Exec(b.ctx, `INSERT INTO scapt.t SELECT g, 'w' FROM generate_series(1, 600) g`)
	require.NoError(t, err)
	// Revoked between two statements of one transaction: the second fails.
	tx, err := writerConn.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `UPDATE scapt.t SET v = 'x' WHERE id <= 2`)
	require.NoError(t, err)
	var revoked bool
	require.NoError(t, db.QueryRow(b.ctx, `SELECT fanout.revoke_topic('a.stmts', $1::regrole, 'publish')`, writer).Scan(&revoked))
	require.True(t, revoked)
	_, err = tx.Exec(b.ctx, `DELETE FROM scapt.t WHERE id <= 2`)
	requireSQLState(t, err, "PGQ21")
	require.NoError(t, tx.Rollback(b.ctx))

	var id int64
	require.NoError(t, db.QueryRow(b.ctx, `SELECT max(message_id) FROM fanout.capture_chunk`).Scan(&id))
	_, err = readerConn.Exec(b.ctx, `SELECT * FROM fanout.capture_rows('a.stmts', $1)`, id)
	requireSQLState(t, err, "PGQ21")
	_, err = writerConn.Exec(b.ctx, `SELECT * FROM fanout.capture_rows('a.stmts', $1)`, id)
	requireSQLState(t, err, "42501") // no EXECUTE: a producer role only
	b.tGrant(t, db, "a.stmts", reader, "consume")
	rows := b.captureRows(t, readerConn, "a.stmts", id, "inserted", 1000)
	require.Len(t, rows, 600)
}

// A bulk UPDATE on a session whose cached plan of the capture's UPDATE
// query was made for single rows: the old and new rows are zipped without
// a join, so no step of the plan runs once per row over every row (a
// nested loop on the position, planned for one row, rescanned the old
// side per new row: 2.7 s for 1,000 rows). Counted from the plan's own
// figures (auto_explain of the nested statements), not timed.
func TestCaptureBulkUpdateAfterSingleRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := b.Pool
	b.createTopic(t, db, "zip.changes")
	_, err := db.Exec(b.ctx, `CREATE TABLE zip (id int PRIMARY KEY, v text);
	    SELECT fanout.capture_table('zip', 'zip.changes');
	    INSERT INTO zip SELECT g, 'a' FROM generate_series(1, 300) g`)
	require.NoError(t, err)
	cfg, err := pgx.ParseConfig(b.URL)
	require.NoError(t, err)
	var logs []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { logs = append(logs, n.Message) }
	conn, err := pgx.ConnectConfig(b.ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(b.ctx)
	for i := 0; i < 8; i++ { // past the plan cache's five custom plans
		_, err = conn.Exec(b.ctx, `UPDATE zip SET v = $1 WHERE id = 1`, fmt.Sprint("s", i))
		require.NoError(t, err)
	}
	_, err = conn.Exec(b.ctx, `LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0;
	    SET auto_explain.log_nested_statements = on; SET auto_explain.log_analyze = on;
	    SET auto_explain.log_timing = off; SET client_min_messages = log`)
	require.NoError(t, err)
	_, err = conn.Exec(b.ctx, `UPDATE zip SET v = 'bulk'`)
	require.NoError(t, err)
	_, err = conn.Exec(b.ctx, `RESET client_min_messages`)
	require.NoError(t, err)
	re := regexp.MustCompile(`actual rows=(\d+) loops=(\d+)`)
	worst, plans := 0, 0
	for _, l := range logs {
		if !strings.Contains(l, "fanout_new") {
			continue
		}
		plans++
		for _, m := range re.FindAllStringSubmatch(l, -1) {
			r, _ := strconv.Atoi(m[1])
			n, _ := strconv.Atoi(m[2])
			worst = max(worst, r*n)
		}
	}
	require.Positive(t, plans, "the capture's statement was explained")
	require.Less(t, worst, 300*10, "no plan node handles rows × loops of the order rows²")
	var n int
	require.NoError(t, db.QueryRow(b.ctx, `SELECT count(*) FROM fanout_data.`+b.dataTable(t, "zip.changes")+
		` WHERE payload->>'op' = 'update' AND payload->'new'->>'v' = 'bulk'`).Scan(&n))
	require.Equal(t, 300, n)
}
