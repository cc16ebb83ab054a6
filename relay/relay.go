// Package relay forwards a pgq topic to NATS JetStream: a reference relay
// for the transactional outbox (docs/relay.md).
//
// A Relay is a pgq consumer (package client) of its own consumer group. For
// every message it publishes one NATS message to the configured subject and
// waits for JetStream's acknowledgement; only then does the handler return,
// so the message is acked in pgq after NATS has stored it. Each NATS message
// carries the header Nats-Msg-Id = "<topic>/<message id>" (MsgID): when the
// relay dies between NATS's acknowledgement and pgq's ack, pgq hands the
// message out again after the lease, the relay publishes it again, and
// JetStream drops the copy as a duplicate (within the stream's Duplicates
// window). Delivery into the stream is therefore exactly once, as long as
// a message comes back within that window (Config.Lease well below it; New
// checks).
//
// A failed NATS publish (the server down, a timeout) is retried with backoff
// inside the handler, for as long as the page's lease holds (the consumer
// extends it meanwhile): a NATS outage neither burns the message's attempts
// (no nack) nor reorders the topic. Messages go out in the order pgq hands
// them out, one at a time.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgfanout/pgq/client"
)

// NATS headers the relay sets besides Nats-Msg-Id.
const (
	HeaderTopic        = "Pgq-Topic"         // the pgq topic
	HeaderID           = "Pgq-Id"            // the pgq message id
	HeaderMessageGroup = "Pgq-Message-Group" // the message_group, when the message has one
	HeaderHeaders      = "Pgq-Headers"       // the message's headers, as JSON
	HeaderPublishedAt  = "Pgq-Published-At"  // RFC 3339 with nanoseconds
)

// Config configures a Relay.
type Config struct {
	// Topic to forward (required) and the relay's consumer group on it
	// (required on a pubsub topic: subscribe it first with
	// fanout.subscribe(topic, group)).
	Topic string
	Group string
	// Consumer names this relay process in the group (default: the
	// client's hostname-pid-random).
	Consumer string
	// Subject is the NATS subject (required). A JetStream stream must cover
	// it (the relay does not create streams).
	Subject string
	// Stream, when set, is checked by New: it must exist and its Duplicates
	// window must be longer than twice the Lease, so a message pgq hands out
	// again after a crash is still recognised as a duplicate.
	Stream string
	// MaxMessages and Lease as in client.Config (defaults 100 and 30 s).
	MaxMessages int
	Lease       time.Duration
	// PollInterval as in client.Config (default 1 s).
	PollInterval time.Duration
	// PublishTimeout bounds one NATS publish attempt (default 5 s).
	PublishTimeout time.Duration
	// RetryBackoff is the first pause after a failed publish; it doubles up
	// to MaxRetryBackoff (defaults 100 ms and 5 s).
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Stats counts what a relay did.
type Stats struct {
	Published  int64 // NATS acknowledged the message as new
	Duplicates int64 // NATS acknowledged it as a duplicate (published before)
	Retries    int64 // failed publish attempts, retried
}

// Relay moves a topic to NATS JetStream. Create it with New, run it with Run.
type Relay struct {
	cfg      Config
	js       jetstream.JetStream
	consumer *client.Consumer

	published, duplicates, retries atomic.Int64
}

// MsgID is the idempotency key of a pgq message in NATS: Nats-Msg-Id.
func MsgID(topic string, id int64) string {
	return topic + "/" + strconv.FormatInt(id, 10)
}

// New returns a relay of cfg.Topic to cfg.Subject on js.
func New(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, cfg Config) (*Relay, error) {
	if cfg.Topic == "" || cfg.Subject == "" {
		return nil, errors.New("relay: Topic and Subject are required")
	}
	if js == nil {
		return nil, errors.New("relay: nil JetStream")
	}
	if cfg.Lease == 0 {
		cfg.Lease = client.DefaultLease
	}
	if cfg.PublishTimeout == 0 {
		cfg.PublishTimeout = 5 * time.Second
	}
	if cfg.RetryBackoff == 0 {
		cfg.RetryBackoff = 100 * time.Millisecond
	}
	if cfg.MaxRetryBackoff == 0 {
		cfg.MaxRetryBackoff = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Stream != "" {
		s, err := js.Stream(ctx, cfg.Stream)
		if err != nil {
			return nil, fmt.Errorf("relay: stream %q: %w", cfg.Stream, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("relay: stream %q: %w", cfg.Stream, err)
		}
		if d := info.Config.Duplicates; d <= 2*cfg.Lease {
			return nil, fmt.Errorf("relay: stream %q keeps message ids for %s, not more than twice the lease %s: "+
				"a message handed out again after a crash could be stored twice (raise the stream's duplicate_window "+
				"or lower the lease)", cfg.Stream, d, cfg.Lease)
		}
	}
	r := &Relay{cfg: cfg, js: js}
	c, err := client.NewConsumer(pool, client.Config{
		Topic: cfg.Topic, Group: cfg.Group, Consumer: cfg.Consumer, MaxMessages: cfg.MaxMessages,
		Lease: cfg.Lease, PollInterval: cfg.PollInterval, Logger: cfg.Logger,
	}, r.handle)
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	r.consumer = c
	return r, nil
}

// Run relays until ctx is cancelled (then it finishes the page in hand and
// returns nil) or the consumer meets an error it cannot retry.
func (r *Relay) Run(ctx context.Context) error {
	if err := r.consumer.Run(ctx); err != nil {
		return fmt.Errorf("relay %s -> %s: %w", r.cfg.Topic, r.cfg.Subject, err)
	}
	return nil
}

// Stats returns the relay's counters.
func (r *Relay) Stats() Stats {
	return Stats{Published: r.published.Load(), Duplicates: r.duplicates.Load(), Retries: r.retries.Load()}
}

// Consumer returns the relay's pgq consumer (its Stats, its Config).
func (r *Relay) Consumer() *client.Consumer { return r.consumer }

// handle publishes one message and returns once JetStream acknowledged it
// (the consumer then acks it in pgq), retrying failed attempts until ctx
// ends (the lease was lost, or the stop timeout ran out).
func (r *Relay) handle(ctx context.Context, d *client.Delivery) error {
	m := nats.NewMsg(r.cfg.Subject)
	m.Data = d.Payload
	m.Header.Set(jetstream.MsgIDHeader, MsgID(r.cfg.Topic, d.ID))
	m.Header.Set(HeaderTopic, r.cfg.Topic)
	m.Header.Set(HeaderID, strconv.FormatInt(d.ID, 10))
	if d.MessageGroup != "" {
		m.Header.Set(HeaderMessageGroup, d.MessageGroup)
	}
	if len(d.Headers) > 0 && string(d.Headers) != "{}" {
		m.Header.Set(HeaderHeaders, string(d.Headers))
	}
	m.Header.Set(HeaderPublishedAt, d.PublishedAt.UTC().Format(time.RFC3339Nano))
	backoff := r.cfg.RetryBackoff
	for {
		pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
		ack, err := r.js.PublishMsg(pctx, m)
		cancel()
		if err == nil {
			if ack.Duplicate {
				r.duplicates.Add(1)
			} else {
				r.published.Add(1)
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("relay: publish message %d to %s: %w (gave up: %w)", d.ID, r.cfg.Subject, err,
				context.Cause(ctx))
		}
		r.retries.Add(1)
		r.cfg.Logger.Warn("relay: NATS publish failed; retrying", "topic", r.cfg.Topic, "id", d.ID,
			"subject", r.cfg.Subject, "backoff", backoff, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("relay: publish message %d to %s: %w (gave up: %w)", d.ID, r.cfg.Subject, err,
				context.Cause(ctx))
		case <-t.C:
		}
		backoff = min(2*backoff, r.cfg.MaxRetryBackoff)
	}
}
