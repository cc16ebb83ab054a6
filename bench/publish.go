package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfanout/pgq/client"
)

// plainDDL is the baseline for publishing: the same columns, defaults and
// types as a topic's message table (fanout_data.m<id>, see create_topic),
// unpartitioned, with a primary key on id instead of the (txid, id) index.
const plainDDL = `CREATE TABLE bench_plain (
    txid          xid8        NOT NULL DEFAULT pg_current_xact_id(),
    id            bigserial   PRIMARY KEY,
    published_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    message_group text,
    headers       jsonb       NOT NULL DEFAULT '{}',
    payload       jsonb       NOT NULL
)`

const plainInsert = `INSERT INTO bench_plain (headers, message_group, payload) VALUES ($1::jsonb, $2::text, $3::jsonb) RETURNING id`

// benchPayload is a ~220-byte order event, the same for pgq and baselines.
var (
	benchPayload = json.RawMessage(`{"order_id":1234567,"customer":"c-000042","items":[{"sku":"A-1001","qty":2,"price_cents":1299},{"sku":"B-2002","qty":1,"price_cents":2001}],"total_cents":4599,"currency":"EUR","note":"bench payload"}`)
	benchHeaders = json.RawMessage(`{"source":"bench","trace_id":"4bf92f3577b34da6"}`)
)

func init() {
	register(10, publishScenario{})
	register(20, batchScenario{})
}

// setupPublishDB creates a database with three topics (notify on, the
// default: only while a consumer waits, which none does here; notify on
// every publish, notify_when => 'always'; notify off) and the plain
// baseline table.
func setupPublishDB(ctx context.Context, env *Env, label string) (*DB, error) {
	db, err := env.NewDB(ctx, label, 0)
	if err != nil {
		return nil, err
	}
	for _, sql := range []string{
		`SELECT fanout.create_topic('bench.pub')`,
		`SELECT fanout.create_topic('bench.pub.quiet', notify => false)`,
		`SELECT fanout.create_topic('bench.pub.always', notify_when => 'always')`,
		plainDDL,
	} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			db.Close()
			return nil, fmt.Errorf("%s: %w", sql, err)
		}
	}
	env.Baseline("plain INSERT", plainDDL+";\n"+plainInsert+";  -- one row per transaction")
	return db, nil
}

// publishScenario: 1 message per transaction, 1 and 4 clients.
type publishScenario struct{}

func (publishScenario) Name() string { return "publish" }
func (publishScenario) Title() string {
	return "1. publish, 1 message per transaction, vs plain INSERT of the same row"
}

func (publishScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	db, err := setupPublishDB(ctx, env, "publish")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	pub := client.NewPublisher(db.Pool)
	msg := client.Message{Payload: benchPayload, Headers: benchHeaders}
	vs := []variant{
		{"fanout.publish", func(ctx context.Context, _ int) (int, error) {
			_, err := pub.Publish(ctx, "bench.pub", msg)
			return 1, err
		}},
		{"fanout.publish notify=>false", func(ctx context.Context, _ int) (int, error) {
			_, err := pub.Publish(ctx, "bench.pub.quiet", msg)
			return 1, err
		}},
		{"fanout.publish notify_when=>'always'", func(ctx context.Context, _ int) (int, error) {
			_, err := pub.Publish(ctx, "bench.pub.always", msg)
			return 1, err
		}},
		{"plain INSERT", func(ctx context.Context, _ int) (int, error) {
			var id int64
			return 1, db.Pool.QueryRow(ctx, plainInsert, benchHeaders, nil, benchPayload).Scan(&id)
		}},
	}
	var out []Result
	d := env.Dur(8*time.Second, 1200*time.Millisecond)
	for _, clients := range []int{1, 4} {
		r, err := abRounds(ctx, env, clients, d, 3, vs)
		if err != nil {
			return nil, err
		}
		if clients == 4 {
			env.SetSummary(sumPublish4c, ratio(r["fanout.publish"], r["plain INSERT"]))
		}
		out = append(out,
			throughputRow("publish", fmt.Sprintf("publish 1 msg/txn, %d client(s)", clients), "msg/s",
				r["fanout.publish"], r["plain INSERT"], "plain INSERT", 0.80),
			throughputRow("publish", fmt.Sprintf("publish 1 msg/txn, %d client(s), notify=>false", clients), "msg/s",
				r["fanout.publish notify=>false"], r["plain INSERT"], "plain INSERT", 0.80),
			throughputRow("publish", fmt.Sprintf("publish 1 msg/txn, %d client(s), notify_when=>'always'", clients), "msg/s",
				r["fanout.publish notify_when=>'always'"], r["plain INSERT"], "plain INSERT", 0.80),
		)
	}
	out[0].Note = "the target (docs/design.md §6) is for 4 clients; the default notify_when => 'waiters' with no consumer waiting (docs/wakeups.md)"
	return out, nil
}

// batchScenario: publish_batch of 100 vs a 100-row INSERT.
type batchScenario struct{}

func (batchScenario) Name() string { return "batch" }
func (batchScenario) Title() string {
	return "2. publish_batch of 100 vs the equivalent multi-row INSERT of 100 rows"
}

func plainBatchInsert(n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO bench_plain (headers, message_group, payload) VALUES ")
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "($%d::jsonb, $%d::text, $%d::jsonb)", 3*i+1, 3*i+2, 3*i+3)
	}
	b.WriteString(" RETURNING id")
	return b.String()
}

func (batchScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	const size = 100
	db, err := setupPublishDB(ctx, env, "batch")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	env.Baseline("plain multi-row INSERT",
		"INSERT INTO bench_plain (headers, message_group, payload) VALUES ($1::jsonb, $2::text, $3::jsonb), ... (100 rows, 300 parameters) RETURNING id;  -- table as for \"plain INSERT\"")
	pub := client.NewPublisher(db.Pool)
	msgs := make([]client.Message, size)
	args := make([]any, 0, 3*size)
	for i := range msgs {
		msgs[i] = client.Message{Payload: benchPayload, Headers: benchHeaders}
		args = append(args, benchHeaders, nil, benchPayload)
	}
	insert := plainBatchInsert(size)
	vs := []variant{
		{"fanout.publish_batch", func(ctx context.Context, _ int) (int, error) {
			ids, err := pub.PublishBatch(ctx, "bench.pub", msgs)
			return len(ids), err
		}},
		{"fanout.publish_batch notify=>false", func(ctx context.Context, _ int) (int, error) {
			ids, err := pub.PublishBatch(ctx, "bench.pub.quiet", msgs)
			return len(ids), err
		}},
		{"plain multi-row INSERT", func(ctx context.Context, _ int) (int, error) {
			rows, err := db.Pool.Query(ctx, insert, args...)
			if err != nil {
				return 0, err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			return len(ids), err
		}},
	}
	var out []Result
	d := env.Dur(6*time.Second, 1200*time.Millisecond)
	for _, clients := range []int{1, 4} {
		r, err := abRounds(ctx, env, clients, d, 3, vs)
		if err != nil {
			return nil, err
		}
		out = append(out,
			throughputRow("batch", fmt.Sprintf("publish_batch(100), %d client(s)", clients), "msg/s",
				r["fanout.publish_batch"], r["plain multi-row INSERT"], "plain multi-row INSERT", 0.80),
			throughputRow("batch", fmt.Sprintf("publish_batch(100), %d client(s), notify=>false", clients), "msg/s",
				r["fanout.publish_batch notify=>false"], r["plain multi-row INSERT"], "plain multi-row INSERT", 0.80),
		)
	}
	return out, nil
}
