package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
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
	// MessageGroup is the optional ordering key (key partitions, sequence
	// ordering's aggregate); "" means none (NULL).
	MessageGroup string
	// DedupeKey makes the publish idempotent within the topic's
	// dedupe_window: a repeated key returns the first message's id and
	// publishes nothing. "" means none. Set it to retry safely after
	// ErrCommitUnknown (a COMMIT whose outcome is unknown: docs/ha.md).
	DedupeKey string
	// Sequence is the message's number within its aggregate (MessageGroup)
	// on a topic created with sequence_ordering (required there, from 1);
	// 0 means none.
	Sequence int64
}

// PublishOption sets a per-call option of Publish and PublishBatch (the
// parameters of fanout.publish that apply to a whole call).
type PublishOption func(*publishOptions)

type publishOptions struct {
	notify    *bool
	deliverAt time.Time
	delay     time.Duration
	priority  *int
}

// WithNotify overrides the topic's NOTIFY setting for this call; pass false
// inside a transaction that will be prepared (two-phase commit).
func WithNotify(notify bool) PublishOption { return func(o *publishOptions) { o.notify = &notify } }

// WithDeliverAt holds the messages back from every group until t.
func WithDeliverAt(t time.Time) PublishOption { return func(o *publishOptions) { o.deliverAt = t } }

// WithDelay holds the messages back from every group for d from now (at
// most 366 days; not together with WithDeliverAt).
func WithDelay(d time.Duration) PublishOption { return func(o *publishOptions) { o.delay = d } }

// WithPriority hands the messages out before those of lower priorities
// (0..9, default 0).
func WithPriority(p int) PublishOption { return func(o *publishOptions) { o.priority = &p } }

func (o *publishOptions) args() (notify, deliverAt, delay, priority any) {
	if o.notify != nil {
		notify = *o.notify
	}
	if !o.deliverAt.IsZero() {
		deliverAt = o.deliverAt
	}
	if o.delay != 0 {
		delay = pgtype.Interval{Microseconds: o.delay.Microseconds(), Valid: true}
	}
	if o.priority != nil {
		priority = *o.priority
	}
	return
}

// The statements (named notation: the API test checks that every
// parameter of the SQL functions appears in one); pgx prepares each once
// per connection (statement cache).
const (
	sqlPublish = `SELECT fanout.publish(topic => $1::text, payload => $2::jsonb, headers => $3::jsonb,
		message_group => $4::text, notify => $5::boolean, dedupe_key => $6::text, deliver_at => $7::timestamptz,
		delay => $8::interval, priority => $9::int, sequence => $10::bigint)`
	sqlPublishBatch = `SELECT id FROM fanout.publish_batch(topic => $1::text, payloads => $2::jsonb[],
		headers => $3::jsonb[], message_groups => $4::text[], notify => $5::boolean, dedupe_keys => $6::text[],
		deliver_at => $7::timestamptz, delay => $8::interval, priority => $9::int, sequences => $10::bigint[]) AS id`
)

// Publisher publishes messages with fanout.publish / fanout.publish_batch.
// It holds no state but the DB it runs on and is safe for concurrent use
// when that DB is (a pool is; a single connection or transaction is not).
type Publisher struct {
	db     DB
	tracer trace.Tracer // nil: tracing off (WithTracerProvider)
}

// NewPublisher returns a Publisher that runs on db: a pool (every call is its
// own transaction) or a transaction (messages become visible when, and only
// if, it commits).
//
// On a *pgxpool.Pool every call is an explicit transaction whose COMMIT is
// never cancelled (see Commit: a cancelled wait for a synchronous standby
// returns OK without a standby having the message); a connection lost
// during that COMMIT returns a *CommitUnknownError (errors.Is
// ErrCommitUnknown): publish again with the same Message.DedupeKey. A
// 25006 (the pool's connections are on a node that is now a standby) resets
// the pool, so the next call connects again (to the new primary, with a
// multi-host URL and target_session_attrs=read-write).
func NewPublisher(db DB) *Publisher {
	return &Publisher{db: db}
}

// WithTx returns a Publisher that publishes inside tx (the transactional
// outbox): the messages are delivered only if tx commits.
func (p *Publisher) WithTx(tx pgx.Tx) *Publisher {
	return &Publisher{db: tx, tracer: p.tracer}
}

// Publish appends one message to topic and returns its id. Errors from the
// server keep their SQLSTATE (see docs/errors.md; *pgconn.PgError).
func (p *Publisher) Publish(ctx context.Context, topic string, m Message, opts ...PublishOption) (int64, error) {
	if len(m.Payload) == 0 {
		return 0, errors.New("pgq client: publish: empty payload")
	}
	var o publishOptions
	for _, f := range opts {
		f(&o)
	}
	notify, deliverAt, delay, priority := o.args()
	ctx, end, headers := p.startPublish(ctx, topic, []Message{m})
	var id int64
	run := func(db DB) error {
		return db.QueryRow(ctx, sqlPublish, topic, m.Payload, nullJSON(headers[0]), nullText(m.MessageGroup), notify,
			nullText(m.DedupeKey), deliverAt, delay, priority, nullInt(m.Sequence)).Scan(&id)
	}
	var err error
	if pool, ok := p.db.(*pgxpool.Pool); ok {
		err = inTx(ctx, pool, func(tx pgx.Tx) error { return run(tx) })
	} else {
		err = run(p.db)
	}
	end(err)
	if err != nil {
		return 0, fmt.Errorf("pgq client: publish to %q: %w", topic, err)
	}
	return id, nil
}

// PublishBatch appends msgs to topic in one statement (one round trip, one
// NOTIFY) and returns their ids in input order. Nothing is published when
// any message is rejected.
func (p *Publisher) PublishBatch(ctx context.Context, topic string, msgs []Message, opts ...PublishOption) ([]int64, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	var o publishOptions
	for _, f := range opts {
		f(&o)
	}
	ctx, end, traced := p.startPublish(ctx, topic, msgs)
	ids, err := p.publishBatch(ctx, topic, msgs, traced, o)
	end(err)
	return ids, err
}

func (p *Publisher) publishBatch(ctx context.Context, topic string, msgs []Message, traced []json.RawMessage,
	o publishOptions) ([]int64, error) {
	payloads := make([]string, len(msgs))
	var headers []*string
	var groups, keys []*string
	var seqs []*int64
	for i, m := range msgs {
		if len(m.Payload) == 0 {
			return nil, fmt.Errorf("pgq client: publish_batch: empty payload at element %d", i+1)
		}
		payloads[i] = string(m.Payload)
		if len(traced[i]) > 0 {
			if headers == nil {
				headers = make([]*string, len(msgs))
			}
			h := string(traced[i])
			headers[i] = &h
		}
		if m.MessageGroup != "" {
			if groups == nil {
				groups = make([]*string, len(msgs))
			}
			g := m.MessageGroup
			groups[i] = &g
		}
		if m.DedupeKey != "" {
			if keys == nil {
				keys = make([]*string, len(msgs))
			}
			k := m.DedupeKey
			keys[i] = &k
		}
		if m.Sequence != 0 {
			if seqs == nil {
				seqs = make([]*int64, len(msgs))
			}
			n := m.Sequence
			seqs[i] = &n
		}
	}
	var hArg, gArg, kArg, sArg any // untyped nil = SQL NULL (no per-element arrays)
	if headers != nil {
		hArg = headers
	}
	if groups != nil {
		gArg = groups
	}
	if keys != nil {
		kArg = keys
	}
	if seqs != nil {
		sArg = seqs
	}
	notify, deliverAt, delay, priority := o.args()
	var ids []int64
	run := func(db DB) error {
		rows, err := db.Query(ctx, sqlPublishBatch, topic, payloads, hArg, gArg, notify, kArg, deliverAt, delay,
			priority, sArg)
		if err != nil {
			return err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	}
	var err error
	if pool, ok := p.db.(*pgxpool.Pool); ok {
		err = inTx(ctx, pool, func(tx pgx.Tx) error { return run(tx) })
	} else {
		err = run(p.db)
	}
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

func nullInt(n int64) any {
	if n == 0 {
		return nil
	}
	return n
}

func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}
