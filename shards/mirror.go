package shards

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfanout/pgq/client"
)

// MirrorConfig configures a Mirror.
type MirrorConfig struct {
	// Topic is the source topic and Group the mirror's consumer group on
	// it (subscribe it first on a pubsub topic); both required.
	Topic string
	Group string
	// TargetTopic is the topic it copies into on the target database
	// (default: Topic). It must exist there; create it with the same
	// partitions as the source to keep per-key order for its readers.
	TargetTopic string
	// Consumer names this mirror process in the group (default
	// "mirror-<pid>"; key partitions need a name).
	Consumer string
	// MaxMessages per page (default 100) and the page's Lease (default
	// 30 s). The target topic's dedupe_window must be longer than twice
	// the lease (NewMirror checks): a page handed out again after a crash
	// must still find its first copy's dedupe keys.
	MaxMessages int
	Lease       time.Duration
	// PollInterval is the pause after a read that found nothing or a
	// failed step (default 200 ms).
	PollInterval time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// MirrorStats counts what a mirror did.
type MirrorStats struct {
	Pages    int64 // pages copied and acked
	Messages int64 // messages in them (a page copied again counts again)
	Failures int64 // failed reads, copies or acks (each retried)
}

// Mirror copies a topic of one pgq database into a topic of another (a
// regional copy, a read replica of one topic), the cascade pattern of
// PgQ's pgq_node: a consumer group on the source, read page by page; each
// page is published into the target topic in one publish_batch (one
// transaction) with dedupe_key = MirrorKey(source topic, source id and
// publication time), and
// acked on the source only after that commit. A mirror that dies between
// the two gets the page again after its lease and publishes it again; the
// target's dedupe keys make the copy exactly once (within the target
// topic's dedupe_window). Per-key order: a page's messages are published
// in the order they were read, and pages are copied one at a time, so a
// key-partitioned source's order per message_group holds in the target
// with one mirror process per group. Payload, headers and message_group
// are copied; the target assigns its own ids, published_at, and priority,
// delay and sequence numbers are not carried.
type Mirror struct {
	src, dst *pgxpool.Pool
	cfg      MirrorConfig

	pages, messages, failures atomic.Int64
}

// MirrorKey is the dedupe key in the target of the source message id of
// topic published at publishedAt (Delivery.PublishedAt, which a redelivery
// keeps). The id alone does not name a message: a source topic dropped and
// created again, or moved to another shard, numbers its messages from 1
// again, and its new messages would be taken for copies of the old ones
// within the target's dedupe_window, acked on the source and lost.
func MirrorKey(topic string, id int64, publishedAt time.Time) string {
	return "mirror:" + topic + "/" + strconv.FormatInt(id, 10) + "@" + strconv.FormatInt(publishedAt.UnixMicro(), 10)
}

// NewMirror returns a mirror of cfg.Topic on src into cfg.TargetTopic on
// dst. It checks that the target topic exists and keeps dedupe keys longer
// than twice the lease.
func NewMirror(ctx context.Context, src, dst *pgxpool.Pool, cfg MirrorConfig) (*Mirror, error) {
	if cfg.Topic == "" || cfg.Group == "" {
		return nil, errors.New("mirror: Topic and Group are required")
	}
	if cfg.TargetTopic == "" {
		cfg.TargetTopic = cfg.Topic
	}
	if cfg.Consumer == "" {
		cfg.Consumer = fmt.Sprintf("mirror-%d", os.Getpid())
	}
	if cfg.MaxMessages == 0 {
		cfg.MaxMessages = 100
	}
	if cfg.Lease == 0 {
		cfg.Lease = client.DefaultLease
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 200 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var secs float64
	err := dst.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM dedupe_window), 0)::float8
		FROM fanout.topics WHERE topic = $1`, cfg.TargetTopic).Scan(&secs)
	window := time.Duration(secs * float64(time.Second))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("mirror: target topic %q does not exist (create it first, with the source's partitions)", cfg.TargetTopic)
	}
	if err != nil {
		return nil, fmt.Errorf("mirror: target topic %q: %w", cfg.TargetTopic, err)
	}
	if window <= 2*cfg.Lease {
		return nil, fmt.Errorf("mirror: target topic %q keeps dedupe keys for %s, not more than twice the lease %s: "+
			"a page handed out again after a crash could be copied twice (raise its dedupe_window or lower the lease)",
			cfg.TargetTopic, window, cfg.Lease)
	}
	return &Mirror{src: src, dst: dst, cfg: cfg}, nil
}

// Stats returns the mirror's counters.
func (m *Mirror) Stats() MirrorStats {
	return MirrorStats{Pages: m.pages.Load(), Messages: m.messages.Load(), Failures: m.failures.Load()}
}

// Run copies until ctx is cancelled (it returns nil then). A failed read,
// copy or ack is logged and retried after PollInterval: an unacked page
// comes back when its lease expires, and its copy is deduplicated.
func (m *Mirror) Run(ctx context.Context) error {
	pub := client.NewPublisher(m.dst)
	for ctx.Err() == nil {
		n, err := m.step(ctx, pub)
		if err != nil && ctx.Err() == nil {
			m.failures.Add(1)
			m.cfg.Logger.Warn("mirror: page not copied; retrying", "topic", m.cfg.Topic, "target", m.cfg.TargetTopic, "err", err)
		}
		if n == 0 || err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(m.cfg.PollInterval):
			}
		}
	}
	return nil
}

// step copies one page; it returns how many messages it held.
func (m *Mirror) step(ctx context.Context, pub *client.Publisher) (int, error) {
	ds, err := client.Read(ctx, m.src, m.cfg.Topic, client.ReadOptions{Group: m.cfg.Group, Consumer: m.cfg.Consumer,
		MaxMessages: m.cfg.MaxMessages, Lease: m.cfg.Lease})
	if err != nil || len(ds) == 0 {
		return 0, err
	}
	msgs := make([]client.Message, len(ds))
	for i, d := range ds {
		msgs[i] = client.Message{Payload: d.Payload, Headers: d.Headers, MessageGroup: d.MessageGroup,
			DedupeKey: MirrorKey(m.cfg.Topic, d.ID, d.PublishedAt)}
	}
	if _, err := pub.PublishBatch(ctx, m.cfg.TargetTopic, msgs); err != nil {
		return len(ds), fmt.Errorf("copy %d messages (lease %d): %w", len(ds), ds[0].LeaseID, err)
	}
	// The copy committed: ack on the source. A failure here (or a crash)
	// leaves the page to come back; its second copy is deduplicated.
	if _, err := client.Ack(context.WithoutCancel(ctx), m.src, ds[0].LeaseID); err != nil {
		return len(ds), fmt.Errorf("ack lease %d after its copy: %w", ds[0].LeaseID, err)
	}
	m.pages.Add(1)
	m.messages.Add(int64(len(ds)))
	return len(ds), nil
}
