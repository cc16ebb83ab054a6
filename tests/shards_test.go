package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/client"
	"github.com/pgfanout/pgq/internal/testdb"
	"github.com/pgfanout/pgq/shards"
)

// shardsPort is the first of the shards test's two clusters (shards-a on
// it, shards-b on the next): PGQ_TEST_SHARDS_PORT (make test: TEST_PORT +
// 20), 25453 when unset.
func shardsPort(t *testing.T) int {
	t.Helper()
	if p := os.Getenv("PGQ_TEST_SHARDS_PORT"); p != "" {
		n, err := strconv.Atoi(p)
		require.NoError(t, err, "PGQ_TEST_SHARDS_PORT")
		return n
	}
	return 25453
}

// shardEnv is two shards (pgq databases on two clusters) and a directory
// with the proxy schema (a database on the first cluster).
type shardEnv struct {
	ctx    context.Context
	a, b   *testdb.Bundle
	dirURL string
	dir    *pgxpool.Pool
}

// kv is the key=value conninfo of a test database (PL/Proxy appends
// user=... to it, which a URL would not survive).
func kv(t *testing.T, u string) string {
	t.Helper()
	c, err := pgx.ParseConfig(u)
	require.NoError(t, err)
	return fmt.Sprintf("host=%s port=%d dbname=%s user=%s sslmode=disable", c.Host, c.Port, c.Database, c.User)
}

func newShardEnv(t *testing.T) *shardEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	port := shardsPort(t)
	adminA := startCluster(t, "shards-a", strconv.Itoa(port))
	adminB := startCluster(t, "shards-b", strconv.Itoa(port+1))
	e := &shardEnv{ctx: ctx, a: testdb.NewOn(t, adminA), b: testdb.NewOn(t, adminB)}

	dirDB := fmt.Sprintf("shards_dir_%d", time.Now().UnixNano())
	admin, err := pgx.Connect(ctx, adminA)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+dirDB)
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), adminA)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+dirDB+" WITH (FORCE)")
			_ = c.Close(context.Background())
		}
	})
	e.dirURL = testdb.WithDatabase(adminA, dirDB)
	conn, err := pgx.Connect(ctx, e.dirURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = shards.MigrateDirectory(ctx, conn)
	require.NoError(t, err)
	_, err = shards.MigrateProxy(ctx, conn)
	require.NoError(t, err)
	_, err = shards.AddShard(ctx, conn, "sa", kv(t, e.a.URL))
	require.NoError(t, err)
	_, err = shards.AddShard(ctx, conn, "sb", kv(t, e.b.URL))
	require.NoError(t, err)
	for pattern, shard := range map[string]string{"a.%": "sa", "b.%": "sb", "b.special": "sa"} {
		_, err = shards.Place(ctx, conn, pattern, shard)
		require.NoError(t, err)
	}
	e.dir, err = pgxpool.New(ctx, e.dirURL)
	require.NoError(t, err)
	t.Cleanup(e.dir.Close)
	return e
}

// topicsOn lists the topics of a shard (a new connection: it sees the
// database's fanout.shard setting).
func topicsOn(t *testing.T, ctx context.Context, u string) []string {
	t.Helper()
	return queryStrings(t, ctx, u, `SELECT topic FROM fanout.topic ORDER BY topic`)
}

func countOn(t *testing.T, ctx context.Context, u, topic string) int64 {
	t.Helper()
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT messages FROM fanout.topics WHERE topic = $1`, topic).Scan(&n))
	return n
}

// TestShardsRouting: the Go client routes create_topic, publish, read and
// ack by the directory (the most specific placement wins); each topic's
// rows exist only on its shard; a shard answers PGQ26 for a topic it does
// not hold (an unsharded database still PGQ01); a client whose cached
// directory is stale re-reads it on PGQ26 and lands on the new shard.
func TestShardsRouting(t *testing.T) {
	e := newShardEnv(t)
	ctx := e.ctx
	sc, err := client.NewSharded(ctx, e.dirURL, client.WithDirectoryRefresh(time.Hour))
	require.NoError(t, err)
	defer sc.Close()

	for _, topic := range []string{"a.orders", "b.orders", "b.special"} {
		_, err := sc.CreateTopic(ctx, topic, "queue")
		require.NoError(t, err, topic)
	}
	require.Equal(t, []string{"a.orders", "b.special"}, topicsOn(t, ctx, e.a.URL))
	require.Equal(t, []string{"b.orders"}, topicsOn(t, ctx, e.b.URL))

	_, err = sc.Publish(ctx, "a.orders", client.Message{Payload: json.RawMessage(`{"n":1}`)})
	require.NoError(t, err)
	batch := make([]client.Message, 5)
	for i := range batch {
		batch[i] = client.Message{Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
	}
	ids, err := sc.PublishBatch(ctx, "b.orders", batch)
	require.NoError(t, err)
	require.Len(t, ids, 5)
	_, err = sc.Publish(ctx, "b.special", client.Message{Payload: json.RawMessage(`{"n":9}`)})
	require.NoError(t, err)
	require.EqualValues(t, 2, countOn(t, ctx, e.a.URL, "a.orders")+countOn(t, ctx, e.a.URL, "b.special"))
	require.EqualValues(t, 5, countOn(t, ctx, e.b.URL, "b.orders"))

	page, err := sc.Read(ctx, "b.orders", client.ReadOptions{MaxMessages: 10})
	require.NoError(t, err)
	require.Len(t, page.Messages, 5)
	require.Equal(t, client.Lease{Topic: "b.orders", Shard: "sb", ID: page.Messages[0].LeaseID}, page.Lease)
	n, err := sc.Ack(ctx, page.Lease)
	require.NoError(t, err)
	require.Equal(t, 5, n)
	again, err := sc.Read(ctx, "b.orders", client.ReadOptions{MaxMessages: 10})
	require.NoError(t, err)
	require.Empty(t, again.Messages)

	// A shard that does not hold a topic: PGQ26, on every topic look-up.
	connB, err := pgx.Connect(ctx, e.b.URL)
	require.NoError(t, err)
	defer connB.Close(ctx)
	var id int64
	requireSQLState(t, connB.QueryRow(ctx, `SELECT fanout.publish('a.orders', '{}')`).Scan(&id), client.CodeNotOnShard)
	_, err = connB.Exec(ctx, `SELECT * FROM fanout.read('a.orders')`)
	requireSQLState(t, err, client.CodeNotOnShard)
	// ... and an unsharded database still says PGQ01.
	plain := setup(t)
	requireSQLState(t, plain.Pool.QueryRow(ctx, `SELECT fanout.publish('a.orders', '{}')`).Scan(&id), client.CodeTopicNotFound)

	// The directory moves "a.moved" from shard sa to sb after the client
	// cached it (refresh: an hour): the stale route meets PGQ26 on sa, the
	// client re-reads the directory and publishes on sb.
	_, err = e.dir.Exec(ctx, `SELECT fanout_directory.place('a.moved', 'sb')`)
	require.NoError(t, err)
	_, err = connB.Exec(ctx, `SELECT fanout.create_topic('a.moved')`)
	require.NoError(t, err)
	before := sc.DirectoryVersion()
	_, err = sc.Publish(ctx, "a.moved", client.Message{Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.Greater(t, sc.DirectoryVersion(), before)
	require.EqualValues(t, 1, countOn(t, ctx, e.b.URL, "a.moved"))
	require.NotContains(t, topicsOn(t, ctx, e.a.URL), "a.moved")

	// A client that polls the directory follows a new version by itself.
	polling, err := client.NewSharded(ctx, e.dirURL, client.WithDirectoryRefresh(10*time.Millisecond))
	require.NoError(t, err)
	defer polling.Close()
	var v int64
	require.NoError(t, e.dir.QueryRow(ctx, `SELECT fanout_directory.place('d.%', 'sb')`).Scan(&v))
	require.Eventually(t, func() bool { return polling.DirectoryVersion() >= v }, time.Minute, 10*time.Millisecond)
	shard, _, err := polling.ShardPool(ctx, "d.x")
	require.NoError(t, err)
	require.Equal(t, "sb", shard)

	// A topic no placement matches.
	_, err = sc.Publish(ctx, "c.nowhere", client.Message{Payload: json.RawMessage(`{}`)})
	require.ErrorIs(t, err, client.ErrNotPlaced)
}

// TestShardsProxy: the fanout_proxy functions (PL/Proxy, in the directory
// database) create topics, publish, read and ack on the topic's shard, the
// views run on every shard, and a proxied write inside a larger
// transaction is refused (PGQ27) without publishing.
func TestShardsProxy(t *testing.T) {
	e := newShardEnv(t)
	ctx := e.ctx
	for _, topic := range []string{"a.px", "b.px"} {
		var id int64
		require.NoError(t, e.dir.QueryRow(ctx, `SELECT fanout_proxy.create_topic($1)`, topic).Scan(&id))
	}
	require.Equal(t, []string{"a.px"}, topicsOn(t, ctx, e.a.URL))
	require.Equal(t, []string{"b.px"}, topicsOn(t, ctx, e.b.URL))

	var id int64
	require.NoError(t, e.dir.QueryRow(ctx, `SELECT fanout_proxy.publish('a.px', '{"n":1}')`).Scan(&id))
	rows, err := e.dir.Query(ctx, `SELECT * FROM fanout_proxy.publish_batch('b.px', ARRAY['{"n":1}', '{"n":2}', '{"n":3}']::jsonb[])`)
	require.NoError(t, err)
	batchIDs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, batchIDs, 3)
	require.EqualValues(t, 1, countOn(t, ctx, e.a.URL, "a.px"))
	require.EqualValues(t, 3, countOn(t, ctx, e.b.URL, "b.px"))

	rows, err = e.dir.Query(ctx, `SELECT lease_id, message_id FROM fanout_proxy.read('b.px', max_messages => 10)`)
	require.NoError(t, err)
	type lm struct{ Lease, ID int64 }
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (lm, error) {
		var v lm
		return v, r.Scan(&v.Lease, &v.ID)
	})
	require.NoError(t, err)
	require.Len(t, got, 3)
	var acked int
	require.NoError(t, e.dir.QueryRow(ctx, `SELECT fanout_proxy.ack('b.px', $1)`, got[0].Lease).Scan(&acked))
	require.Equal(t, 3, acked)
	var left int
	require.NoError(t, e.dir.QueryRow(ctx, `SELECT count(*) FROM fanout_proxy.read('b.px')`).Scan(&left))
	require.Zero(t, left)

	// The views, on every shard, each row with its shard.
	vrows, err := e.dir.Query(ctx, `SELECT shard || ':' || (data->>'topic') FROM fanout_proxy.topics() ORDER BY 1`)
	require.NoError(t, err)
	seen, err := pgx.CollectRows(vrows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"sa:a.px", "sb:b.px"}, seen)

	// Inside a larger transaction: a second proxied write, or one after a
	// local write, is refused and publishes nothing.
	tx, err := e.dir.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(ctx, `SELECT fanout_proxy.publish('a.px', '{"n":2}')`).Scan(&id))
	requireSQLState(t, tx.QueryRow(ctx, `SELECT fanout_proxy.publish('a.px', '{"n":3}')`).Scan(&id), client.CodeProxyInTransaction)
	require.NoError(t, tx.Rollback(ctx))
	tx, err = e.dir.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `CREATE TEMP TABLE business (n int)`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO business VALUES (1)`)
	require.NoError(t, err)
	requireSQLState(t, tx.QueryRow(ctx, `SELECT fanout_proxy.publish('a.px', '{"n":4}')`).Scan(&id), client.CodeProxyInTransaction)
	require.NoError(t, tx.Rollback(ctx))
	// The first publish of the rolled-back transaction had committed on
	// the shard already (what PGQ27 guards the second one from); the others
	// did not publish.
	require.EqualValues(t, 2, countOn(t, ctx, e.a.URL, "a.px"))
}
