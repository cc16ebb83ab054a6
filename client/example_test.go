package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfanout/pgq/client"
)

// The examples run against DATABASE_URL, which TestMain (main_test.go)
// points at a freshly migrated database of their own.

// Publish one message, outside any transaction of yours.
func ExamplePublisher_Publish() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// Once, at deploy time: a queue topic (create_topic is idempotent).
	if _, err := pool.Exec(ctx, `SELECT fanout.create_topic('emails.send')`); err != nil {
		log.Fatal(err)
	}

	pub := client.NewPublisher(pool)
	id, err := pub.Publish(ctx, "emails.send", client.Message{Payload: []byte(`{"to":"a@example.com"}`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("published:", id > 0)
	// Output: published: true
}

// The transactional outbox: the message is delivered if, and only if, the
// business transaction commits.
func ExamplePublisher_WithTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `SELECT fanout.create_topic('orders.created')`); err != nil {
		log.Fatal(err)
	}

	pub := client.NewPublisher(pool)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// ... your business writes on tx ...
		_, err := pub.WithTx(tx).Publish(ctx, "orders.created", client.Message{Payload: []byte(`{"order":42}`)})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	// A rolled-back transaction publishes nothing.
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := pub.WithTx(tx).Publish(ctx, "orders.created", client.Message{Payload: []byte(`{"order":43}`)}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		log.Fatal(err)
	}

	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM fanout.read('orders.created', consumer => 'check')`).Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("delivered:", n)
	// Output: delivered: 1
}

// Publish many messages in one statement (one round trip, one NOTIFY); the
// ids come back in input order.
func ExamplePublisher_PublishBatch() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `SELECT fanout.create_topic('clicks')`); err != nil {
		log.Fatal(err)
	}

	msgs := []client.Message{
		{Payload: []byte(`{"page":"/"}`)},
		{Payload: []byte(`{"page":"/pricing"}`), MessageGroup: "user-7"},
		{Payload: []byte(`{"page":"/signup"}`), Headers: []byte(`{"source":"ad"}`)},
	}
	ids, err := client.NewPublisher(pool).PublishBatch(ctx, "clicks", msgs)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(ids), "ids, ascending:", ids[0] < ids[1] && ids[1] < ids[2])
	// Output: 3 ids, ascending: true
}

// A consumer group on a pubsub topic: the handler gets each message; nil
// acks it, an error nacks it for a later retry.
func ExampleNewConsumer() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// Once, at deploy time: the topic and the group.
	_, err = pool.Exec(ctx, `SELECT fanout.create_topic('orders.events', semantics => 'pubsub');
	                         SELECT fanout.subscribe('orders.events', 'billing')`)
	if err != nil {
		log.Fatal(err)
	}
	pub := client.NewPublisher(pool)
	for _, p := range []string{`{"order":1}`, `{"order":2}`, `{"order":3}`} {
		if _, err := pub.Publish(ctx, "orders.events", client.Message{Payload: []byte(p)}); err != nil {
			log.Fatal(err)
		}
	}

	runCtx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	seen := 0
	c, err := client.NewConsumer(pool, client.Config{Topic: "orders.events", Group: "billing"},
		func(ctx context.Context, m *client.Delivery) error {
			fmt.Printf("billing %s (attempt %d)\n", m.Payload, m.Attempt)
			if seen++; seen == 3 {
				stop() // Run settles the page in hand, then returns nil
			}
			return nil
		})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(runCtx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("acked:", c.Stats().Acked)
	// Output:
	// billing {"order": 1} (attempt 1)
	// billing {"order": 2} (attempt 1)
	// billing {"order": 3} (attempt 1)
	// acked: 3
}

// A transactional handler: the handler's writes and the ack commit
// together, so a database side effect happens once.
func ExampleNewTxConsumer() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	_, err = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS invoices (order_id int PRIMARY KEY);
	                         SELECT fanout.create_topic('invoices.todo')`)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.NewPublisher(pool).Publish(ctx, "invoices.todo", client.Message{Payload: []byte(`{"order":7}`)}); err != nil {
		log.Fatal(err)
	}

	runCtx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	c, err := client.NewTxConsumer(pool, client.Config{Topic: "invoices.todo"},
		func(ctx context.Context, tx pgx.Tx, m *client.Delivery) error {
			defer stop()
			_, err := tx.Exec(ctx, `INSERT INTO invoices SELECT ($1::jsonb->>'order')::int`, m.Payload)
			return err
		})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(runCtx); err != nil {
		log.Fatal(err)
	}
	var order int
	if err := pool.QueryRow(ctx, `SELECT order_id FROM invoices`).Scan(&order); err != nil {
		log.Fatal(err)
	}
	fmt.Println("invoiced order", order, "acked:", c.Stats().Acked)
	// Output: invoiced order 7 acked: 1
}

// Errors keep their SQLSTATE: branch on it with the helpers of errors.go.
func ExampleIsFenced() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	_, err = client.NewPublisher(pool).Publish(ctx, "no.such.topic", client.Message{Payload: []byte(`{}`)})
	fmt.Println("not found:", client.IsNotFound(err), client.SQLState(err))

	// An ack of a lease that lost its messages to another consumer is fenced.
	_, err = pool.Exec(ctx, `SELECT fanout.create_topic('jobs')`)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.NewPublisher(pool).Publish(ctx, "jobs", client.Message{Payload: []byte(`{}`)}); err != nil {
		log.Fatal(err)
	}
	var stale int64
	err = pool.QueryRow(ctx, `SELECT lease_id FROM fanout.read('jobs', consumer => 'slow', lease => '1 millisecond')`).Scan(&stale)
	if err != nil {
		log.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // the lease runs out; another member takes the message
	if _, err := pool.Exec(ctx, `SELECT * FROM fanout.read('jobs', consumer => 'fast')`); err != nil {
		log.Fatal(err)
	}
	_, err = pool.Exec(ctx, `SELECT fanout.ack($1)`, stale)
	if client.IsFenced(err) {
		fmt.Println("fenced: roll back, the new holder processes it")
	}
	var pgErr *pgconn.PgError
	fmt.Println(errors.As(err, &pgErr), pgErr.Code == client.CodeFenced)
	// Output:
	// not found: true PGQ01
	// fenced: roll back, the new holder processes it
	// true true
}
