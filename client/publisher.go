package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what the client runs statements on. *pgxpool.Pool, *pgxpool.Conn,
// *pgx.Conn and pgx.Tx all satisfy it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Message is one message to publish.
type Message struct {
	// Payload is the message body: one JSON document (required; the topic's
	// max_payload_bytes applies).
	Payload json.RawMessage
	// Headers is a JSON object of metadata; nil means '{}'.
	Headers json.RawMessage
	// MessageGroup is the optional ordering key; "" means none (NULL).
	MessageGroup string
}

// The statements; pgx prepares each once per connection (statement cache).
const (
	sqlPublish      = `SELECT fanout.publish($1::text, $2::jsonb, $3::jsonb, $4::text)`
	sqlPublishBatch = `SELECT id FROM fanout.publish_batch($1::text, $2::jsonb[], $3::jsonb[], $4::text[]) AS id`
)

// Publisher publishes messages with fanout.publish / fanout.publish_batch.
// It holds no state but the DB it runs on and is safe for concurrent use
// when that DB is (a pool is; a single connection or transaction is not).
type Publisher struct {
	db DB
}

// NewPublisher returns a Publisher that runs on db: a pool (every call is its
// own transaction) or a transaction (messages become visible when, and only
// if, it commits).
func NewPublisher(db DB) *Publisher {
	return &Publisher{db: db}
}

// WithTx returns a Publisher that publishes inside tx (the transactional
// outbox): the messages are delivered only if tx commits.
func (p *Publisher) WithTx(tx pgx.Tx) *Publisher {
	return &Publisher{db: tx}
}

// Publish appends one message to topic and returns its id. Errors from the
// server keep their SQLSTATE (see docs/errors.md; *pgconn.PgError).
func (p *Publisher) Publish(ctx context.Context, topic string, m Message) (int64, error) {
	if len(m.Payload) == 0 {
		return 0, errors.New("pgq client: publish: empty payload")
	}
	var id int64
	err := p.db.QueryRow(ctx, sqlPublish, topic, m.Payload, nullJSON(m.Headers), nullText(m.MessageGroup)).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("pgq client: publish to %q: %w", topic, err)
	}
	return id, nil
}

// PublishBatch appends msgs to topic in one statement (one round trip, one
// NOTIFY) and returns their ids in input order. Nothing is published when
// any message is rejected.
func (p *Publisher) PublishBatch(ctx context.Context, topic string, msgs []Message) ([]int64, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	payloads := make([]string, len(msgs))
	var headers []*string
	var groups []*string
	for i, m := range msgs {
		if len(m.Payload) == 0 {
			return nil, fmt.Errorf("pgq client: publish_batch: empty payload at element %d", i+1)
		}
		payloads[i] = string(m.Payload)
		if len(m.Headers) > 0 {
			if headers == nil {
				headers = make([]*string, len(msgs))
			}
			h := string(m.Headers)
			headers[i] = &h
		}
		if m.MessageGroup != "" {
			if groups == nil {
				groups = make([]*string, len(msgs))
			}
			g := m.MessageGroup
			groups[i] = &g
		}
	}
	var hArg, gArg any // untyped nil = SQL NULL (no per-element arrays)
	if headers != nil {
		hArg = headers
	}
	if groups != nil {
		gArg = groups
	}
	rows, err := p.db.Query(ctx, sqlPublishBatch, topic, payloads, hArg, gArg)
	if err != nil {
		return nil, fmt.Errorf("pgq client: publish_batch to %q: %w", topic, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("pgq client: publish_batch to %q: %w", topic, err)
	}
	return ids, nil
}

func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}
