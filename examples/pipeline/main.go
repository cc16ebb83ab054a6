// Command pipeline is the inbox -> business logic -> outbox -> relay example
// of docs/relay.md, each step one transaction:
//
//   - inbox: order requests arrive as messages of the queue topic
//     shop.inbox (here: `pipeline submit`, from any producer);
//   - business logic (`pipeline worker`): for each request, in ONE
//     transaction, insert the order into shop_orders, add its total to the
//     customer's row in shop_customers, and ack the inbox message (a pgq
//     TxHandler): a crash at any point commits all three or none, so no
//     order is lost or counted twice;
//   - outbox: shop_orders is captured (fanout.capture_table) into the pubsub
//     topic shop.outbox, so each order's insert is published by the
//     worker's own transaction, with nothing more to write;
//   - relay (`pgq-relay`, package relay): the group nats-relay of
//     shop.outbox forwards every change to the NATS JetStream subject
//     shop.orders (Nats-Msg-Id = topic/id: exactly once in the stream).
//
// Usage (DATABASE_URL set, pgq migrated):
//
//	pipeline setup                      # topics, group, tables, capture (idempotent)
//	pipeline submit --count 100         # 100 order requests into shop.inbox
//	pipeline worker                     # business logic until SIGINT/SIGTERM
//	pgq-relay --topic shop.outbox --group nats-relay --subject shop.orders \
//	          --stream SHOP --create-stream --nats-url nats://127.0.0.1:4222
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfanout/pgq/client"
)

// Setup is idempotent: topics, the relay's group, the business tables and
// the capture of shop_orders into the outbox topic.
const Setup = `
SELECT fanout.create_topic('shop.inbox', semantics => 'queue')
WHERE NOT EXISTS (SELECT 1 FROM fanout.topics WHERE topic = 'shop.inbox');
SELECT fanout.create_topic('shop.outbox', semantics => 'pubsub', partitions => 4)
WHERE NOT EXISTS (SELECT 1 FROM fanout.topics WHERE topic = 'shop.outbox');
SELECT fanout.subscribe('shop.outbox', 'nats-relay')
WHERE NOT EXISTS (SELECT 1 FROM fanout.groups WHERE topic = 'shop.outbox' AND group_name = 'nats-relay');
CREATE TABLE IF NOT EXISTS shop_customers (customer text PRIMARY KEY, orders int NOT NULL, spent numeric NOT NULL);
CREATE TABLE IF NOT EXISTS shop_orders (order_id text PRIMARY KEY, customer text NOT NULL, total numeric NOT NULL,
                                        created_at timestamptz NOT NULL DEFAULT now());
SELECT fanout.capture_table('shop_orders', 'shop.outbox');
`

// Request is an inbox message.
type Request struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	Total    string `json:"total"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "pipeline: "+err.Error())
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: pipeline setup | submit [--count N] [--customers N] | worker [--lease D]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	url := fs.String("database-url", os.Getenv("DATABASE_URL"), "PostgreSQL connection string (DATABASE_URL)")
	count := fs.Int("count", 100, "submit: order requests to publish")
	customers := fs.Int("customers", 7, "submit: distinct customers")
	lease := fs.Duration("lease", 30*time.Second, "worker: page lease (a crashed worker's page comes back after it)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *url == "" {
		return errors.New("--database-url (or DATABASE_URL) is required")
	}
	pool, err := pgxpool.New(ctx, *url)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	switch args[0] {
	case "setup":
		if _, err := pool.Exec(ctx, Setup); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
		log.Info("set up: shop.inbox -> shop_orders (captured) -> shop.outbox -> group nats-relay")
		return nil
	case "submit":
		return submit(ctx, pool, *count, *customers)
	case "worker":
		return worker(ctx, pool, *lease, log)
	}
	return fmt.Errorf("unknown command %q", args[0])
}

// submit publishes count order requests (order ids o1..oN) in one batch.
func submit(ctx context.Context, pool *pgxpool.Pool, count, customers int) error {
	msgs := make([]client.Message, count)
	for i := range msgs {
		p, err := json.Marshal(Request{OrderID: fmt.Sprintf("o%d", i+1), Customer: fmt.Sprintf("c%d", i%customers),
			Total: fmt.Sprintf("%d.50", i%10+1)})
		if err != nil {
			return err
		}
		msgs[i] = client.Message{Payload: p}
	}
	if _, err := client.NewPublisher(pool).PublishBatch(ctx, "shop.inbox", msgs); err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	return nil
}

// worker is the business logic: the order, the customer's totals and the
// inbox ack in one transaction; the capture publishes the order to the
// outbox in that same transaction.
func worker(ctx context.Context, pool *pgxpool.Pool, lease time.Duration, log *slog.Logger) error {
	c, err := client.NewTxConsumer(pool, client.Config{Topic: "shop.inbox", Group: "orders", Lease: lease,
		MaxMessages: 20, PollInterval: 100 * time.Millisecond, Logger: log},
		func(ctx context.Context, tx pgx.Tx, d *client.Delivery) error {
			var r Request
			if err := json.Unmarshal(d.Payload, &r); err != nil {
				return fmt.Errorf("message %d: %w", d.ID, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO shop_orders (order_id, customer, total) VALUES ($1, $2, $3)`,
				r.OrderID, r.Customer, r.Total); err != nil {
				return fmt.Errorf("order %s: %w", r.OrderID, err)
			}
			_, err := tx.Exec(ctx, `INSERT INTO shop_customers AS c (customer, orders, spent) VALUES ($1, 1, $2)
			    ON CONFLICT (customer) DO UPDATE SET orders = c.orders + 1, spent = c.spent + excluded.spent`,
				r.Customer, r.Total)
			if err != nil {
				return fmt.Errorf("customer %s: %w", r.Customer, err)
			}
			return nil
		})
	if err != nil {
		return err
	}
	log.Info("worker: shop.inbox -> shop_orders")
	return c.Run(ctx)
}
