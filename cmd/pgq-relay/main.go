// Command pgq-relay forwards a pgq topic to NATS JetStream through its own
// consumer group (package relay, docs/relay.md): each message is published
// with Nats-Msg-Id = "<topic>/<id>" and acked in pgq only after JetStream
// acknowledged it.
//
//	pgq-relay --database-url URL --nats-url nats://127.0.0.1:4222 \
//	          --topic shop.orders.changes --group nats-relay --subject shop.orders \
//	          [--stream SHOP] [--create-stream] [--duplicate-window 10m] [--lease 30s] [--max-messages 100]
//
// Every flag also reads an environment variable (PGQ_RELAY_<FLAG>, and
// DATABASE_URL, NATS_URL). SIGINT/SIGTERM stop it after the page in hand.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgfanout/pgq/relay"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }()
	err := run(ctx, os.Args[1:], os.Getenv)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgq-relay: "+err.Error())
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string) error {
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	fs := flag.NewFlagSet("pgq-relay", flag.ContinueOnError)
	dbURL := fs.String("database-url", env("DATABASE_URL", ""), "PostgreSQL connection string (DATABASE_URL)")
	natsURL := fs.String("nats-url", env("NATS_URL", nats.DefaultURL), "NATS server URL(s), comma-separated (NATS_URL)")
	topic := fs.String("topic", env("PGQ_RELAY_TOPIC", ""), "pgq topic to forward (PGQ_RELAY_TOPIC)")
	group := fs.String("group", env("PGQ_RELAY_GROUP", ""), "the relay's consumer group (PGQ_RELAY_GROUP)")
	consumer := fs.String("consumer", env("PGQ_RELAY_CONSUMER", ""), "member name in the group (PGQ_RELAY_CONSUMER)")
	subject := fs.String("subject", env("PGQ_RELAY_SUBJECT", ""), "NATS subject (PGQ_RELAY_SUBJECT)")
	stream := fs.String("stream", env("PGQ_RELAY_STREAM", ""), "JetStream stream to check, or to create (PGQ_RELAY_STREAM)")
	create := fs.Bool("create-stream", env("PGQ_RELAY_CREATE_STREAM", "") == "true",
		"create --stream (file storage, --subject) when it does not exist (PGQ_RELAY_CREATE_STREAM=true)")
	window := fs.Duration("duplicate-window", durEnv(env("PGQ_RELAY_DUPLICATE_WINDOW", ""), 10*time.Minute),
		"the created stream's duplicate window (PGQ_RELAY_DUPLICATE_WINDOW)")
	lease := fs.Duration("lease", durEnv(env("PGQ_RELAY_LEASE", ""), 30*time.Second), "page lease (PGQ_RELAY_LEASE)")
	maxMessages := fs.Int("max-messages", 100, "page size")
	poll := fs.Duration("poll-interval", durEnv(env("PGQ_RELAY_POLL_INTERVAL", ""), time.Second),
		"longest wait between reads without a notification (PGQ_RELAY_POLL_INTERVAL)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dbURL == "" || *topic == "" || *subject == "" {
		return errors.New("--database-url, --topic and --subject are required")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	pool, err := pgxpool.New(ctx, *dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	nc, err := nats.Connect(*natsURL, nats.Name("pgq-relay "+*topic), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond), nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("NATS disconnected", "err", err) }),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("NATS reconnected", "url", c.ConnectedUrl()) }))
	if err != nil {
		return fmt.Errorf("NATS %s: %w", *natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("JetStream: %w", err)
	}
	if *create {
		if *stream == "" {
			return errors.New("--create-stream needs --stream")
		}
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: *stream, Subjects: []string{*subject},
			Storage: jetstream.FileStorage, Duplicates: *window})
		if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("create stream %s: %w", *stream, err)
		}
	}
	r, err := relay.New(ctx, pool, js, relay.Config{Topic: *topic, Group: *group, Consumer: *consumer,
		Subject: *subject, Stream: *stream, Lease: *lease, MaxMessages: *maxMessages, PollInterval: *poll, Logger: log})
	if err != nil {
		return err
	}
	log.Info("relaying", "topic", *topic, "group", *group, "subject", *subject, "nats", strings.Split(*natsURL, ",")[0])
	err = r.Run(ctx)
	s := r.Stats()
	log.Info("stopped", "published", s.Published, "duplicates", s.Duplicates, "retries", s.Retries)
	return err
}

func durEnv(v string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(v); err == nil {
		return d
	}
	return def
}
