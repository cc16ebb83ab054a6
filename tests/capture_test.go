package tests

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/testdb"
	"github.com/pgfanout/pgq/orchestrator"
)

// capturedMsg is one captured change as a consumer reads it.
type capturedMsg struct {
	Op      string          `json:"op"`
	Table   string          `json:"table"`
	Key     map[string]any  `json:"key"`
	New     map[string]any  `json:"new"`
	Old     map[string]any  `json:"old"`
	Changed []string        `json:"changed"`
	Group   *string         `json:"-"`
	Headers json.RawMessage `json:"-"`
}

// drainCaptured reads everything a topic (queue or group) has and acks it.
func (b *bundle) drainCaptured(t *testing.T, q querier, topic string, group *string) []capturedMsg {
	t.Helper()
	var out []capturedMsg
	for {
		ms := b.read(t, q, topic, group, "cap", 1000, "1 minute")
		if len(ms) == 0 {
			return out
		}
		for _, m := range ms {
			var c capturedMsg
			require.NoError(t, json.Unmarshal(m.Payload, &c))
			c.Group, c.Headers = m.Group, m.Headers
			out = append(out, c)
		}
		b.ack(t, q, ms[0].LeaseID, nil)
	}
}

func ops(ms []capturedMsg) []string {
	var out []string
	for _, m := range ms {
		out = append(out, fmt.Sprintf("%s %v", m.Op, m.Key["id"]))
	}
	return out
}

// Every kind of DML on a captured table becomes one message per row, in the
// writer's transaction, keyed by the primary key.
func TestCaptureTableDML(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := b.Pool
	b.createTopic(t, db, "orders.changes")
	_, err := db.Exec(b.ctx, `CREATE TABLE orders (id int PRIMARY KEY, status text, total numeric, secret text)`)
	require.NoError(t, err)
	var id int64
	require.NoError(t, db.QueryRow(b.ctx,
		`SELECT fanout.capture_table('orders', 'orders.changes', exclude_columns => ARRAY['secret'])`).Scan(&id))
	var again int64
	require.NoError(t, db.QueryRow(b.ctx,
		`SELECT fanout.capture_table('orders', 'orders.changes', exclude_columns => ARRAY['secret'])`).Scan(&again))
	require.Equal(t, id, again, "capturing again into the same topic is idempotent")

	for _, sql := range []string{
		`INSERT INTO orders VALUES (1, 'new', 10, 's1'), (2, 'new', 20, 's2')`,
		`UPDATE orders SET status = 'paid' WHERE id = 1`,
		`UPDATE orders SET secret = 'changed' WHERE id = 2`, // only an excluded column: nothing
		`UPDATE orders SET id = 3 WHERE id = 2`,             // a key change: delete + insert
		`DELETE FROM orders WHERE id = 1`,
	} {
		_, err := db.Exec(b.ctx, sql)
		require.NoError(t, err, sql)
	}
	got := b.drainCaptured(t, db, "orders.changes", nil)
	require.Equal(t, []string{"insert 1", "insert 2", "update 1", "delete 2", "insert 3", "delete 1"}, ops(got))
	require.Equal(t, map[string]any{"id": 1.0, "status": "new", "total": 10.0}, got[0].New, "secret is excluded")
	require.Equal(t, "1", *got[0].Group, "message_group is the primary key")
	require.Equal(t, []string{"status"}, got[2].Changed)
	require.Equal(t, map[string]any{"status": "new"}, got[2].Old, "an update's old image has the changed columns")
	require.Equal(t, "paid", got[2].New["status"])
	require.Equal(t, "public.orders", got[0].Table)
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
	_, err = tx.Exec(b.ctx, `SAVEPOINT s; INSERT INTO orders VALUES (12, 'undone', 1, ''); ROLLBACK TO SAVEPOINT s`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
	require.Equal(t, []string{"insert 11"}, ops(b.drainCaptured(t, db, "orders.changes", nil)))

	// TRUNCATE is one message.
	_, err = db.Exec(b.ctx, `TRUNCATE orders`)
	require.NoError(t, err)
	got = b.drainCaptured(t, db, "orders.changes", nil)
	require.Len(t, got, 1)
	require.Equal(t, "truncate", got[0].Op)

	// Uncapture: no more messages; a second uncapture says it was not captured.
	var was bool
	require.NoError(t, db.QueryRow(b.ctx, `SELECT fanout.uncapture_table('orders')`).Scan(&was))
	require.True(t, was)
	require.NoError(t, db.QueryRow(b.ctx, `SELECT fanout.uncapture_table('orders')`).Scan(&was))
	require.False(t, was)
	_, err = db.Exec(b.ctx, `INSERT INTO orders VALUES (20, 'after', 1, '')`)
	require.NoError(t, err)
	require.Empty(t, b.drainCaptured(t, db, "orders.changes", nil))
	var n int
	require.NoError(t, db.QueryRow(b.ctx, `SELECT count(*) FROM fanout.captures`).Scan(&n))
	require.Zero(t, n)
}

// A statement of 10,000 rows publishes 10,000 messages (never truncated),
// in the order it wrote them; a key-partitioned pubsub topic keeps each
// row's changes in order; composite keys; schema changes.
func TestCaptureTableLargeAndPartitioned(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := b.Pool
	b.createTopic(t, db, "items.changes", "semantics => 'pubsub'", "partitions => 4")
	_, err := db.Exec(b.ctx, `SELECT fanout.subscribe('items.changes', 'g')`)
	require.NoError(t, err)
	_, err = db.Exec(b.ctx, `CREATE TABLE items (shop int, sku int, qty int, PRIMARY KEY (shop, sku))`)
	require.NoError(t, err)
	_, err = db.Exec(b.ctx, `SELECT fanout.capture_table('items', 'items.changes')`)
	require.NoError(t, err)
	_, err = db.Exec(b.ctx, `INSERT INTO items SELECT 1, s, 0 FROM generate_series(1, 10000) s`)
	require.NoError(t, err)
	_, err = db.Exec(b.ctx, `UPDATE items SET qty = qty + 1 WHERE sku <= 3`)
	require.NoError(t, err)
	_, err = db.Exec(b.ctx, `ALTER TABLE items ADD COLUMN note text; ALTER TABLE items RENAME COLUMN qty TO quantity`)
	require.NoError(t, err)
	_, err = db.Exec(b.ctx, `UPDATE items SET note = 'hi', quantity = 7 WHERE sku = 2`)
	require.NoError(t, err)

	tbl := b.dataTable(t, "items.changes")
	var n int
	require.NoError(t, db.QueryRow(b.ctx,
		`SELECT count(*) FROM fanout_data.`+tbl+` WHERE payload->>'op' = 'insert'`).Scan(&n))
	require.Equal(t, 10000, n)

	// Per key: the changes of sku 2, in order.
	perKey := map[string][]string{}
	rows, err := db.Query(b.ctx, `SELECT message_group, payload FROM fanout_data.`+tbl+` ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var g string
		var p []byte
		require.NoError(t, rows.Scan(&g, &p))
		var c capturedMsg
		require.NoError(t, json.Unmarshal(p, &c))
		perKey[g] = append(perKey[g], c.Op)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"insert", "update", "update"}, perKey[`{"sku": 2, "shop": 1}`])
	var last capturedMsg
	var raw []byte
	require.NoError(t, db.QueryRow(b.ctx, `SELECT payload FROM fanout_data.`+tbl+` ORDER BY id DESC LIMIT 1`).Scan(&raw))
	require.NoError(t, json.Unmarshal(raw, &last))
	require.Equal(t, []string{"note", "quantity"}, last.Changed, "added and renamed columns are captured")
	require.Equal(t, map[string]any{"shop": 1.0, "sku": 2.0}, last.Key)

	// Read through the group, per key partition, with the partition of the key.
	var kp int
	require.NoError(t, db.QueryRow(b.ctx, `SELECT fanout.partition_of('items.changes', $1)`, `{"sku": 2, "shop": 1}`).Scan(&kp))
	var seen []string
	for {
		ms := b.readPartition(t, db, "items.changes", "g", kp)
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			if m.Group != nil && *m.Group == `{"sku": 2, "shop": 1}` {
				var c capturedMsg
				require.NoError(t, json.Unmarshal(m.Payload, &c))
				seen = append(seen, c.Op)
			}
		}
		b.ack(t, db, ms[0].LeaseID, nil)
	}
	require.Equal(t, []string{"insert", "update", "update"}, seen)
}

func (b *bundle) dataTable(t *testing.T, topic string) string {
	t.Helper()
	var tbl string
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT data_table FROM fanout.topic WHERE topic = $1`, topic).Scan(&tbl))
	return tbl
}

func (b *bundle) readPartition(t *testing.T, q querier, topic, group string, partition int) []msg {
	t.Helper()
	rows, err := q.Query(b.ctx, `SELECT lease_id, message_id, payload, headers, message_group, published_at, attempt
	                             FROM fanout.read($1, $2, partition => $3, max_messages => 1000)`, topic, group, partition)
	require.NoError(t, err)
	ms, err := pgx.CollectRows(rows, pgx.RowToStructByPos[msg])
	require.NoError(t, err)
	return ms
}

// Who may capture, and who may write a captured table: the table's owner
// with a publish grant captures; a writer needs a publish grant on the
// topic itself (no grant: its write fails, PGQ21), also through a trigger
// forged on its own table with another capture's id; bad arguments.
func TestCaptureTableGrantsAndErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := b.Pool
	b.createTopic(t, db, "a.changes")
	b.createTopic(t, db, "b.changes")
	b.tIsolate(t)
	owner, ownerConn := b.tRole(t, "cap_owner", "fanout_producer")
	b.tGrant(t, db, "a.%", owner, "publish")
	writer, writerConn := b.tRole(t, "cap_writer", "fanout_producer")
	strangerName, stranger := b.tRole(t, "cap_stranger", "fanout_producer")
	// Runs before the roles are dropped (cleanups run last first): the
	// roles own objects in the schema.
	t.Cleanup(func() { _, _ = db.Exec(b.ctx, `DROP SCHEMA IF EXISTS capt CASCADE`) })
	for _, sql := range []string{
		`CREATE SCHEMA capt`,
		fmt.Sprintf(`GRANT USAGE, CREATE ON SCHEMA capt TO %s, %s`, pgx.Identifier{owner}.Sanitize(), pgx.Identifier{writer}.Sanitize()),
		fmt.Sprintf(`GRANT USAGE ON SCHEMA capt TO %s`, pgx.Identifier{strangerName}.Sanitize()),
		`CREATE TABLE capt.nokey (x int)`,
	} {
		_, err := db.Exec(b.ctx, sql)
		require.NoError(t, err, sql)
	}
	_, err := ownerConn.Exec(b.ctx, `CREATE TABLE capt.t (id int PRIMARY KEY, v text)`)
	require.NoError(t, err)
	_, err = ownerConn.Exec(b.ctx, fmt.Sprintf(`GRANT INSERT, UPDATE, DELETE, SELECT ON capt.t TO %s`, pgx.Identifier{writer}.Sanitize()))
	require.NoError(t, err)

	// Not the owner; no grant on the topic; bad arguments.
	_, err = stranger.Exec(b.ctx, `SELECT fanout.capture_table('capt.t', 'a.changes')`)
	requireSQLState(t, err, "PGQ21")
	_, err = ownerConn.Exec(b.ctx, `SELECT fanout.capture_table('capt.t', 'b.changes')`)
	requireSQLState(t, err, "PGQ21")
	_, err = ownerConn.Exec(b.ctx, `SELECT fanout.capture_table('capt.t', 'a.nope')`)
	requireSQLState(t, err, "PGQ01")
	_, err = db.Exec(b.ctx, `SELECT fanout.capture_table('capt.nokey', 'a.changes')`)
	requireSQLState(t, err, "PGQ03")
	_, err = ownerConn.Exec(b.ctx, `SELECT fanout.capture_table('capt.t', 'a.changes', columns => ARRAY['v', 'nope'])`)
	requireSQLState(t, err, "PGQ03")
	_, err = ownerConn.Exec(b.ctx, `SELECT fanout.capture_table(NULL, 'a.changes')`)
	requireSQLState(t, err, "PGQ03")
	_, err = ownerConn.Exec(b.ctx, `SELECT fanout.capture_table('capt.t', 'a.changes', columns => ARRAY[NULL])`)
	requireSQLState(t, err, "PGQ03")
	var n int
	require.NoError(t, db.QueryRow(b.ctx, `SELECT count(*) FROM fanout.capture`).Scan(&n))
	require.Zero(t, n, "failed captures leave nothing behind")

	_, err = ownerConn.Exec(b.ctx, `SELECT fanout.capture_table('capt.t', 'a.changes', columns => ARRAY['v'])`)
	require.NoError(t, err)
	// Only the owner may uncapture it, too (the check capture_table makes).
	_, err = stranger.Exec(b.ctx, `SELECT fanout.uncapture_table('capt.t')`)
	requireSQLState(t, err, "PGQ21")
	_, err = stranger.Exec(b.ctx, `SELECT fanout.uncapture_table(NULL)`)
	requireSQLState(t, err, "PGQ03")
	_, err = ownerConn.Exec(b.ctx, `SELECT fanout.capture_table('capt.t', 'b.changes')`)
	requireSQLState(t, err, "PGQ21")
	_, err = db.Exec(b.ctx, `SELECT fanout.capture_table('capt.t', 'b.changes')`)
	requireSQLState(t, err, "PGQ03") // captured into another topic already

	// The writer has no publish grant on a.changes: its write fails.
	_, err = writerConn.Exec(b.ctx, `INSERT INTO capt.t VALUES (1, 'w')`)
	requireSQLState(t, err, "PGQ21")
	b.tGrant(t, db, "a.changes", writer, "publish")
	_, err = writerConn.Exec(b.ctx, `INSERT INTO capt.t VALUES (1, 'w')`)
	require.NoError(t, err)
	_, err = ownerConn.Exec(b.ctx, `INSERT INTO capt.t VALUES (2, 'o')`)
	require.NoError(t, err)
	got := b.drainCaptured(t, db, "a.changes", nil)
	require.Equal(t, []string{"insert 1", "insert 2"}, ops(got))
	require.Equal(t, map[string]any{"v": "w"}, got[0].New, "only the listed columns")

	// A trigger forged on the writer's own table, naming the capture, still
	// publishes only where the writer may: into a.changes, not b.changes.
	var capID int64
	require.NoError(t, db.QueryRow(b.ctx, `SELECT capture_id FROM fanout.captures`).Scan(&capID))
	_, err = db.Exec(b.ctx, `UPDATE fanout.capture SET topic = 'b.changes'`) // a capture into b
	require.NoError(t, err)
	_, err = writerConn.Exec(b.ctx, `CREATE TABLE capt.mine (id int PRIMARY KEY)`)
	require.NoError(t, err)
	_, err = writerConn.Exec(b.ctx, fmt.Sprintf(`CREATE TRIGGER forged AFTER INSERT ON capt.mine REFERENCING NEW TABLE AS fanout_new
	    FOR EACH STATEMENT EXECUTE FUNCTION fanout_data.capture_%d('%d')`, capID, capID))
	requireSQLState(t, err, "42501") // no EXECUTE on the generated trigger function: cannot even create it
	require.NoError(t, db.QueryRow(b.ctx, `SELECT count(*) FROM fanout_data.`+b.dataTable(t, "b.changes")).Scan(&n))
	require.Zero(t, n, "nothing reached b.changes")

	// A dropped table's capture is forgotten by maintenance.
	_, err = db.Exec(b.ctx, `UPDATE fanout.capture SET topic = 'a.changes'; DROP TABLE capt.t`)
	require.NoError(t, err)
	_, err = db.Exec(b.ctx, `SELECT fanout._cleanup_bookkeeping(now() + interval '2 hours')`)
	require.NoError(t, err)
	require.NoError(t, db.QueryRow(b.ctx, `SELECT count(*) FROM fanout.capture`).Scan(&n))
	require.Zero(t, n)
}

// docs/capture.md's walkthrough runs as written (psql, statement by
// statement) and prints what its comment shows.
func TestCaptureDocWalkthrough(t *testing.T) {
	t.Parallel()
	b := setup(t)
	doc, err := os.ReadFile(filepath.Join("..", "docs", "capture.md"))
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)```sql\n(.*?)```").FindSubmatch(doc)
	require.NotNil(t, m, "docs/capture.md has a sql block")
	t.Cleanup(func() { _, _ = b.Pool.Exec(b.ctx, `DROP TABLE IF EXISTS shop_orders`) })
	cmd := exec.CommandContext(b.ctx, "psql", "-X", "-v", "ON_ERROR_STOP=1", "-A", "-F", "|", "-d", b.URL)
	cmd.Stdin = bytes.NewReader(m[1])
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, want := range []string{"1|insert|\n", "1|update|[\"status\"]\n", "1|delete|\n",
		"shop_orders|shop.orders.changes|{id}|{card_token}\n"} {
		require.Contains(t, string(out), want)
	}
}

// Schema changes and edge cases of the generated trigger function: a dropped
// column leaves the images; a renamed key column fails the write (PGQ03)
// until capture_table is called again; upserts publish an insert or an
// update per row; a row over max_payload_bytes (PGQ05) and a key that is no
// valid message_group (PGQ04: too long) fail the statement; a dropped topic fails it
// (PGQ01) and a topic created again under the same name is published to;
// a sequence-ordered topic cannot be captured; uncapture_table drops the
// generated function.
func TestCaptureSchemaChangesAndEdges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := b.Pool
	b.createTopic(t, db, "acct.changes", "max_payload_bytes => 2000")
	b.createTopic(t, db, "seq.changes", "sequence_ordering => true")
	exec := func(sql string) {
		t.Helper()
		_, err := db.Exec(b.ctx, sql)
		require.NoError(t, err, sql)
	}
	exec(`CREATE TABLE acct (id text PRIMARY KEY, balance int, memo text, extra text)`)
	var capID int64
	require.NoError(t, db.QueryRow(b.ctx, `SELECT fanout.capture_table('acct', 'acct.changes')`).Scan(&capID))

	exec(`ALTER TABLE acct DROP COLUMN extra`)
	exec(`INSERT INTO acct VALUES ('a', 1, 'm')`)
	exec(`INSERT INTO acct VALUES ('a', 5, 'm'), ('b', 2, 'n') ON CONFLICT (id) DO UPDATE SET balance = excluded.balance`)
	got := b.drainCaptured(t, db, "acct.changes", nil)
	// An upsert's statement-level triggers: PostgreSQL runs the UPDATE's
	// before the INSERT's.
	require.Equal(t, []string{"insert a", "update a", "insert b"}, ops(got))
	require.Equal(t, map[string]any{"id": "a", "balance": 1.0, "memo": "m"}, got[0].New, "the dropped column is gone")
	require.Equal(t, []string{"balance"}, got[1].Changed)
	require.Equal(t, "a", *got[1].Group)

	// Too large a row, a key that is no message_group: the statement fails.
	_, err := db.Exec(b.ctx, `INSERT INTO acct VALUES ('big', 1, repeat('x', 3000))`)
	requireSQLState(t, err, "PGQ05")
	_, err = db.Exec(b.ctx, `INSERT INTO acct VALUES (repeat('k', 600), 1, '')`)
	requireSQLState(t, err, "PGQ04")

	// The key column renamed: writes fail until the capture is renewed.
	exec(`ALTER TABLE acct RENAME COLUMN id TO acct_id`)
	_, err = db.Exec(b.ctx, `UPDATE acct SET balance = 9 WHERE acct_id = 'b'`)
	requireSQLState(t, err, "PGQ03")
	exec(`SELECT fanout.capture_table('acct', 'acct.changes')`)
	exec(`UPDATE acct SET balance = 9 WHERE acct_id = 'b'`)
	got = b.drainCaptured(t, db, "acct.changes", nil)
	require.Len(t, got, 1)
	require.Equal(t, map[string]any{"acct_id": "b"}, got[0].Key)

	// The topic dropped, then created again under the same name.
	exec(`SELECT fanout.drop_topic('acct.changes')`)
	_, err = db.Exec(b.ctx, `DELETE FROM acct WHERE acct_id = 'a'`)
	requireSQLState(t, err, "PGQ01")
	b.createTopic(t, db, "acct.changes")
	exec(`DELETE FROM acct WHERE acct_id = 'a'`)
	got = b.drainCaptured(t, db, "acct.changes", nil)
	require.Equal(t, []string{"delete <nil>"}, ops(got))
	require.Equal(t, map[string]any{"acct_id": "a"}, got[0].Key)

	_, err = db.Exec(b.ctx, `CREATE TABLE s (id int PRIMARY KEY); SELECT fanout.capture_table('s', 'seq.changes')`)
	requireSQLState(t, err, "PGQ03")

	var fn *string
	require.NoError(t, db.QueryRow(b.ctx, `SELECT to_regprocedure(format('fanout_data.capture_%s()', $1::bigint))::text`,
		capID).Scan(&fn))
	require.NotNil(t, fn)
	exec(`SELECT fanout.uncapture_table('acct')`)
	require.NoError(t, db.QueryRow(b.ctx, `SELECT to_regprocedure(format('fanout_data.capture_%s()', $1::bigint))::text`,
		capID).Scan(&fn))
	require.Nil(t, fn, "uncapture_table drops the generated function")
	exec(`INSERT INTO acct VALUES ('c', 1, '')`)
}

// A capture made on release 0.1.0 (its triggers ran fanout._capture_trigger)
// keeps working after the upgrade: the upgrade re-creates its triggers on
// the generated function, and the capture stays in fanout.captures.
func TestCaptureUpgradeFromRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := testdb.ServerURL(t)
	root := repoRoot(t)
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := "pgq_cap_up_" + hex.EncodeToString(rnd[:])
	conn, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	conn.Close(ctx)
	require.NoError(t, err)
	t.Cleanup(func() {
		if c, err := pgx.Connect(context.Background(), admin); err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	url := testdb.WithDatabase(admin, name)
	migrate := func(args ...string) {
		cmd := exec.Command("go", append([]string{"tool", "tern", "migrate", "--migrations", "sql/migrations",
			"--conn-string", url, "--version-table", orchestrator.VersionTable}, args...)...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "tern migrate: %s", out)
	}
	migrate("--destination", "3") // release 0.1.0
	db, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer db.Close(ctx)
	for _, sql := range []string{
		`SELECT fanout.create_topic('up.changes')`,
		`CREATE TABLE upt (id int PRIMARY KEY, v text)`,
		`SELECT fanout.capture_table('upt', 'up.changes')`,
		`INSERT INTO upt VALUES (1, 'before')`,
	} {
		_, err := db.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	migrate()
	_, err = db.Exec(ctx, `INSERT INTO upt VALUES (2, 'after'); UPDATE upt SET v = 'x' WHERE id = 1`)
	require.NoError(t, err)
	rows, err := db.Query(ctx, `SELECT payload->>'op' || ' ' || (payload->'key'->>'id') FROM fanout.read('up.changes', NULL, 'x', 10)`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"insert 1", "insert 2", "update 1"}, got)
	var fns []string
	rows, err = db.Query(ctx, `SELECT DISTINCT tgfoid::regproc::text FROM pg_trigger WHERE tgrelid = 'upt'::regclass`)
	require.NoError(t, err)
	fns, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"fanout_data.capture_1"}, fns)
	var n int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM fanout.captures WHERE table_name = 'upt'::regclass`).Scan(&n))
	require.Equal(t, 1, n)
}

// UPDATE pairs each old row with its new row: on a partitioned table also
// when rows move between partitions, and a statement that swaps two keys
// publishes deletes and inserts with the right images.
func TestCaptureUpdatePairsRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := b.Pool
	b.createTopic(t, db, "pt.changes")
	for _, sql := range []string{
		`CREATE TABLE pt (id int, region text, v int, PRIMARY KEY (id, region)) PARTITION BY LIST (region)`,
		`CREATE TABLE pt_eu PARTITION OF pt FOR VALUES IN ('eu')`,
		`CREATE TABLE pt_us PARTITION OF pt FOR VALUES IN ('us')`,
		`SELECT fanout.capture_table('pt', 'pt.changes')`,
		`INSERT INTO pt SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, g FROM generate_series(1, 6) g`,
		`UPDATE pt SET v = v * 10 WHERE id <= 4`,                               // in place
		`UPDATE pt SET region = 'us', v = -id WHERE region = 'eu' AND id <= 4`, // moves partition: key change
		`CREATE TABLE sw (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED, v text)`,
		`SELECT fanout.capture_table('sw', 'pt.changes')`,
		`INSERT INTO sw VALUES (1, 'one'), (2, 'two')`,
		`UPDATE sw SET id = 3 - id`,
	} {
		_, err := db.Exec(b.ctx, sql)
		require.NoError(t, err, sql)
	}
	got := b.drainCaptured(t, db, "pt.changes", nil)
	var desc []string
	for _, m := range got {
		img := m.New
		if m.Op == "delete" {
			img = m.Old
		}
		desc = append(desc, fmt.Sprintf("%s %v/%v v=%v", m.Op, m.Key["id"], m.Key["region"], img["v"]))
	}
	require.Equal(t, []string{
		"insert 1/us v=1", "insert 2/eu v=2", "insert 3/us v=3", "insert 4/eu v=4", "insert 5/us v=5", "insert 6/eu v=6",
		"update 2/eu v=20", "update 4/eu v=40", "update 1/us v=10", "update 3/us v=30", // partitions in scan order
		"delete 2/eu v=20", "delete 4/eu v=40", "insert 2/us v=-2", "insert 4/us v=-4",
		"insert 1/<nil> v=one", "insert 2/<nil> v=two",
		"delete 1/<nil> v=one", "delete 2/<nil> v=two", "insert 2/<nil> v=one", "insert 1/<nil> v=two",
	}, desc)
}

// The generated trigger function compiles the topic's and the columns'
// names in: names that contain a dollar quote (the fixed tag the body was
// once quoted with) are captured as any other and cannot end the body.
func TestCaptureNamesWithDollarQuotes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := b.Pool
	const topic = `q$body$x'; SELECT 1; --`
	b.createTopic(t, db, topic)
	for _, sql := range []string{
		`CREATE TABLE "t$body$" ("id$body$" int PRIMARY KEY, "secret$body$" text, v text)`,
		`SELECT fanout.capture_table('"t$body$"', $1, exclude_columns => ARRAY['secret$body$'])`,
		`INSERT INTO "t$body$" VALUES (1, 's', 'v')`,
	} {
		var err error
		if strings.Contains(sql, "$1") {
			_, err = db.Exec(b.ctx, sql, topic)
		} else {
			_, err = db.Exec(b.ctx, sql)
		}
		require.NoError(t, err, sql)
	}
	var payload []byte
	require.NoError(t, db.QueryRow(b.ctx, `SELECT payload FROM fanout_data.`+b.dataTable(t, topic)).Scan(&payload))
	var c capturedMsg
	require.NoError(t, json.Unmarshal(payload, &c))
	require.Equal(t, map[string]any{"id$body$": 1.0}, c.Key)
	require.Equal(t, map[string]any{"id$body$": 1.0, "v": "v"}, c.New)
}

// The generated trigger function enters the topic on every statement, as
// every publish does, with its own static SQL (not fanout._enter): a grant
// revoked between two statements of one transaction refuses the second
// (PGQ21); a topic's bytes quota blocks writes (PGQ25); drop_topic waits for
// a writer that is mid-transaction (whose next statement still publishes)
// and then drops; a writer that comes in while a drop is under way waits
// for it and gets PGQ01, not an error about the topic's vanished table.
func TestCaptureFencesEachStatement(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := b.Pool
	b.createTopic(t, db, "f.changes")
	b.tIsolate(t)
	writer, w := b.tRole(t, "capf_writer", "fanout_producer")
	b.tGrant(t, db, "f.changes", writer, "publish")
	for _, sql := range []string{
		`CREATE TABLE capf (id int PRIMARY KEY, v text)`,
		fmt.Sprintf(`GRANT INSERT, UPDATE, DELETE, SELECT ON capf TO %s`, pgx.Identifier{writer}.Sanitize()),
		`SELECT fanout.capture_table('capf', 'f.changes')`,
	} {
		_, err := db.Exec(b.ctx, sql)
		require.NoError(t, err, sql)
	}
	t.Cleanup(func() { _, _ = db.Exec(b.ctx, `DROP TABLE IF EXISTS capf`) })
	// A transaction left open by a failed step would hold the table the
	// cleanup drops: rolled back first (cleanups run last first).
	begin := func(c *pgx.Conn) pgx.Tx {
		tx, err := c.Begin(b.ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		return tx
	}
	waiting := func(pid uint32) func() bool {
		return func() bool {
			return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, pid) == 1
		}
	}

	// A REVOKE between two statements of one transaction: the second fails.
	tx := begin(w)
	_, err := tx.Exec(b.ctx, `INSERT INTO capf VALUES (1, 'a')`)
	require.NoError(t, err)
	var removed bool
	require.NoError(t, db.QueryRow(b.ctx, `SELECT fanout.revoke_topic('f.changes', $1::regrole, 'publish')`, writer).Scan(&removed))
	require.True(t, removed)
	_, err = tx.Exec(b.ctx, `UPDATE capf SET v = 'b' WHERE id = 1`)
	requireSQLState(t, err, "PGQ21")
	require.NoError(t, tx.Rollback(b.ctx))
	_, err = w.Exec(b.ctx, `INSERT INTO capf VALUES (1, 'a')`)
	requireSQLState(t, err, "PGQ21")
	b.tGrant(t, db, "f.changes", writer, "publish")

	// The topic's bytes quota blocks the writes; lifted, they go through.
	topicID := b.count(t, `SELECT topic_id FROM fanout.topic WHERE topic = 'f.changes'`)
	_, err = db.Exec(b.ctx, `INSERT INTO fanout.quota_block (topic_id, pattern, bytes, max_bytes, since)
	                         VALUES ($1, 'f.%', 2, 1, now())`, topicID)
	require.NoError(t, err)
	_, err = w.Exec(b.ctx, `INSERT INTO capf VALUES (1, 'a')`)
	requireSQLState(t, err, "PGQ25")
	_, err = db.Exec(b.ctx, `DELETE FROM fanout.quota_block WHERE topic_id = $1`, topicID)
	require.NoError(t, err)
	_, err = w.Exec(b.ctx, `INSERT INTO capf VALUES (1, 'a')`)
	require.NoError(t, err)
	require.Equal(t, []string{"insert 1"}, ops(b.drainCaptured(t, db, "f.changes", nil)))

	// drop_topic while the writer is mid-transaction: the drop waits for the
	// writer, whose next statement still publishes; then the drop goes
	// through, and the writer's next transaction finds no topic.
	admin := b.Conn(t)
	adminPID := admin.PgConn().PID()
	tx = begin(w)
	_, err = tx.Exec(b.ctx, `INSERT INTO capf VALUES (2, 'b')`)
	require.NoError(t, err)
	dropped := make(chan error, 1)
	go func() {
		_, err := admin.Exec(b.ctx, `SELECT fanout.drop_topic('f.changes', force => true)`)
		dropped <- err
	}()
	require.Eventually(t, waiting(adminPID), time.Minute, 10*time.Millisecond, "the drop waits for the writer")
	_, err = tx.Exec(b.ctx, `UPDATE capf SET v = 'c' WHERE id = 2`)
	require.NoError(t, err, "the writer's next statement in its transaction still publishes")
	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, <-dropped)
	_, err = w.Exec(b.ctx, `DELETE FROM capf WHERE id = 2`)
	requireSQLState(t, err, "PGQ01")

	// A writer that comes in while a drop is under way waits for it, then
	// gets PGQ01 (the topic created again and captured again first, so that
	// the writer takes the generated function's own way).
	b.createTopic(t, db, "f.changes")
	_, err = db.Exec(b.ctx, `SELECT fanout.capture_table('capf', 'f.changes')`)
	require.NoError(t, err)
	_, err = w.Exec(b.ctx, `INSERT INTO capf VALUES (3, 'c')`)
	require.NoError(t, err)
	atx := begin(admin)
	_, err = atx.Exec(b.ctx, `SELECT fanout.drop_topic('f.changes', force => true)`)
	require.NoError(t, err)
	wrote := make(chan error, 1)
	go func() {
		_, err := w.Exec(b.ctx, `INSERT INTO capf VALUES (4, 'd')`)
		wrote <- err
	}()
	require.Eventually(t, waiting(w.PgConn().PID()), time.Minute, 10*time.Millisecond, "the writer waits for the drop")
	require.NoError(t, atx.Commit(b.ctx))
	requireSQLState(t, <-wrote, "PGQ01")
}

// The checks the generated trigger function makes on its way into the
// topic's table, at their edges: the size (payload, headers and
// message_group as text) refused one byte over max_payload_bytes and taken
// at exactly max_payload_bytes, for every operation, naming the element; a
// numeric key's message_group (no regular expression: over 512 characters
// refused); text keys the cheap test cannot vouch for (a leading space or
// non-ASCII letter: published; a control character: refused); statements
// of no row (nothing published, no error); a pubsub
// topic that blocks writes without subscriptions (PGQ07, but not for a
// statement that changes nothing); and on a key-partitioned topic each
// message's partition by fanout.partition_of, over a count raised since the
// capture was made.
func TestCaptureChecksAtTheEdges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := b.Pool
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := db.Exec(b.ctx, sql, args...)
		require.NoError(t, err, sql)
	}
	const max = 1000
	b.createTopic(t, db, "edge.changes", fmt.Sprintf("max_payload_bytes => %d", max))
	exec(`CREATE TABLE edge (id bigint PRIMARY KEY, memo text)`)
	exec(`SELECT fanout.capture_table('edge', 'edge.changes')`)
	tbl := b.dataTable(t, "edge.changes")
	size := func() int {
		t.Helper()
		var n int
		require.NoError(t, db.QueryRow(b.ctx, `SELECT octet_length(payload::text) + octet_length(headers::text)
		                                              + coalesce(octet_length(message_group), 0)
		                                       FROM fanout_data.`+tbl+` ORDER BY id DESC LIMIT 1`).Scan(&n))
		return n
	}
	count := func() int {
		t.Helper()
		var n int
		require.NoError(t, db.QueryRow(b.ctx, `SELECT count(*) FROM fanout_data.`+tbl).Scan(&n))
		return n
	}
	exec(`INSERT INTO edge VALUES (1, 'a')`)
	exact := 1 + max - size() // the memo's length that makes a message of exactly max bytes
	exec(`INSERT INTO edge VALUES (2, repeat('b', $1))`, exact)
	require.Equal(t, max, size(), "a message of exactly max_payload_bytes is published")
	_, err := db.Exec(b.ctx, `INSERT INTO edge VALUES (3, repeat('c', $1))`, exact+1)
	requireSQLState(t, err, "PGQ05")
	_, err = db.Exec(b.ctx, `INSERT INTO edge VALUES (4, 'd'), (5, repeat('e', $1))`, exact+1)
	requireSQLState(t, err, "PGQ05")
	require.Contains(t, err.Error(), "(element 2)")
	require.Equal(t, 2, count(), "a refused statement publishes nothing")
	// A delete's message has the size of the insert's ('delete', 'insert').
	exec(`DELETE FROM edge WHERE id = 2`)
	require.Equal(t, max, size())
	exec(`INSERT INTO edge VALUES (2, repeat('b', $1))`, exact)
	exec(`ALTER TABLE edge ADD COLUMN pad text`)
	_, err = db.Exec(b.ctx, `DELETE FROM edge WHERE id = 2`) // its image now has "pad": null
	requireSQLState(t, err, "PGQ05")
	exec(`ALTER TABLE edge DROP COLUMN pad`)
	// An update's message carries the new row and the changed old value.
	_, err = db.Exec(b.ctx, `UPDATE edge SET memo = repeat('f', $1) WHERE id = 2`, exact)
	requireSQLState(t, err, "PGQ05")
	exec(`UPDATE edge SET memo = memo WHERE id = 2`) // nothing changed: nothing published
	// Statements of no row publish nothing and fail nothing (an INSERT or
	// DELETE of no row failed with "dimension values cannot be null").
	exec(`DELETE FROM edge WHERE id = -1`)
	exec(`INSERT INTO edge SELECT 9, 'x' WHERE false`)
	exec(`UPDATE edge SET memo = 'x' WHERE id = -1`)
	require.Equal(t, 4, count())

	// Message groups: a numeric key without a regular expression, text keys.
	b.createTopic(t, db, "keys.changes")
	exec(`CREATE TABLE nkey (id numeric PRIMARY KEY); CREATE TABLE tkey (id text PRIMARY KEY)`)
	exec(`SELECT fanout.capture_table('nkey', 'keys.changes'); SELECT fanout.capture_table('tkey', 'keys.changes')`)
	exec(`INSERT INTO nkey VALUES (1.5), (('1' || repeat('0', 510))::numeric)`)
	_, err = db.Exec(b.ctx, `INSERT INTO nkey VALUES (('1' || repeat('0', 512))::numeric)`)
	requireSQLState(t, err, "PGQ04")
	exec(`INSERT INTO tkey VALUES (' x'), ('éa')`)
	_, err = db.Exec(b.ctx, `INSERT INTO tkey VALUES (E'a\x7f')`)
	requireSQLState(t, err, "PGQ04")
	var groups []string
	require.NoError(t, db.QueryRow(b.ctx, `SELECT array_agg(message_group ORDER BY id) FROM fanout_data.`+
		b.dataTable(t, "keys.changes")).Scan(&groups))
	require.Equal(t, []string{"1.5", "1" + strings.Repeat("0", 510), " x", "éa"}, groups)

	// A pubsub topic that blocks writes without subscriptions.
	b.createTopic(t, db, "blk.changes", "semantics => 'pubsub'", "block_writes_without_subscriptions => true")
	exec(`CREATE TABLE blk (id int PRIMARY KEY)`)
	exec(`SELECT fanout.capture_table('blk', 'blk.changes')`)
	_, err = db.Exec(b.ctx, `INSERT INTO blk VALUES (1)`)
	requireSQLState(t, err, "PGQ07")
	exec(`UPDATE blk SET id = 2 WHERE id = 1`) // no row: no message, no error
	exec(`SELECT fanout.subscribe('blk.changes', 'g')`)
	exec(`INSERT INTO blk VALUES (1)`)

	// Key partitions, over the count of the moment.
	b.createTopic(t, db, "kp.changes", "partitions => 3")
	exec(`CREATE TABLE kp (id int PRIMARY KEY, v int)`)
	exec(`SELECT fanout.capture_table('kp', 'kp.changes')`)
	exec(`INSERT INTO kp SELECT g, 0 FROM generate_series(1, 50) g`)
	exec(`SELECT fanout.alter_topic('kp.changes', partitions => 7)`)
	exec(`UPDATE kp SET v = 1`)
	kt := b.dataTable(t, "kp.changes")
	var wrong, over int
	require.NoError(t, db.QueryRow(b.ctx, `SELECT count(*) FILTER (WHERE kpart <> CASE payload->>'op' WHEN 'insert' THEN fanout._kpart_of(message_group, 3)
	                                                                                      ELSE fanout.partition_of('kp.changes', message_group) END),
	                                              count(*) FILTER (WHERE kpart >= 3)
	                                       FROM fanout_data.`+kt).Scan(&wrong, &over))
	require.Zero(t, wrong, "every message in its key's partition")
	require.Positive(t, over, "the raised count is used")
}
