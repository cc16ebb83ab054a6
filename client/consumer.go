package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Config configures a Consumer. Zero values mean the defaults listed per
// field; they are filled in by one function (Config.withDefaults).
type Config struct {
	// Topic to consume (required).
	Topic string
	// Group is the consumer group on pubsub topics (required there; the
	// group must be subscribed with fanout.subscribe). On queue topics it is
	// attribution only and may be left empty (sent as NULL).
	Group string
	// Consumer names this member of the group (fanout.groups, leases).
	// Default: "<hostname>-<pid>-<4 random hex digits>".
	Consumer string

	// MaxMessages is the page size: messages claimed per fanout.read.
	// Default 100 (the server accepts 1..10000).
	MaxMessages int
	// MaxBytes bounds a page's size (payload + headers + message_group of
	// its messages; the first message always comes). Default 16 MiB, as
	// the server's (it accepts 1..536870912).
	MaxBytes int64
	// Partition, when set, reads only that key partition of a partitioned
	// topic (explicit assignment: fanout.read(..., partition => k)); nil
	// means automatic assignment. A group uses one mode (PGQ24).
	Partition *int
	// Lease is how long a page is reserved for this consumer before another
	// member may take its un-acked messages. While a page is handled, a
	// timer extends its lease (fanout.extend_lease) by Lease whenever only
	// half a lease is left, also while one handler runs long; when that fails for good
	// the handler's context is cancelled with ErrLeaseLost as its cause.
	// Default 30 s.
	Lease time.Duration

	// PollInterval bounds how long the consumer waits before reading again
	// when it has seen no notification: the fallback for lost or disabled
	// notifications. Default 1 s.
	PollInterval time.Duration
	// Linger, when > 0, is how long the consumer waits after a
	// notification before it reads, so that one page gathers what is
	// published meanwhile instead of a page per message (Kafka's
	// fetch.max.wait.ms with fetch.min.bytes). It trades up to Linger of
	// latency for fewer, fuller reads: with many groups every publish wakes
	// every group's consumer, and a read costs the server about the same
	// whether it returns one message or a hundred (docs/lt-matrix.md has
	// the figures). It applies only after a short page; a full page is
	// followed by the next read at once. Default 0: read at once.
	Linger time.Duration
	// DisableListen turns LISTEN off: the consumer only polls. The consumer
	// also polls only when the topic was created with notify => false.
	DisableListen bool
	// Channel overrides the LISTEN channel. Default: looked up once with
	// SELECT channel, notify FROM fanout.topics WHERE topic = Topic.
	Channel string
	// ListenURL is the connection string of the LISTEN connection. Default:
	// the pool's connection settings. Set it to a direct connection to
	// PostgreSQL when the pool goes through PgBouncer in transaction or
	// statement pooling mode: there, LISTEN succeeds but no notification
	// ever arrives (the consumer then only polls).
	ListenURL string
	// ListenCheckTimeout bounds the check the consumer makes once LISTEN is
	// in place: it sends itself a notification (payload "pgq-listen-check",
	// through the pool) and logs a warning if none arrives within this time,
	// which is what happens behind PgBouncer's transaction pooling. Other
	// consumers of the topic see that notification as one extra wake-up.
	// Default 5 s; negative turns the check off.
	ListenCheckTimeout time.Duration

	// HeartbeatInterval, when > 0, calls fanout.heartbeat(topic, group,
	// consumer) on that interval from a separate goroutine, so that a group
	// whose handlers run for a long time is not declared dead (reads and
	// acks count as heartbeats too, so idle polling consumers do not need
	// it). A server without fanout.heartbeat just turns it off (logged
	// once); a heartbeat that reports the group cancelled stops the consumer
	// with ErrGroupCancelled. Default 0: off.
	HeartbeatInterval time.Duration

	// DisablePipelinedAck turns off sending the ack of a page together with
	// the next read (one round trip and one commit instead of two; the
	// default) when that read follows at once: after a full page, or when a
	// notification arrived meanwhile. Other pages, and pages with failures,
	// are settled at once.
	DisablePipelinedAck bool

	// StopTimeout bounds how long the consumer keeps finishing its in-flight
	// page after Run's context is cancelled. Then the handler's context is
	// cancelled (cause ErrStopTimeout), no further handler is called, and
	// what succeeded is acked with a context that outlives the cancellation
	// (bounded by the later of the lease's expiry and StopTimeout); the
	// rest comes back after the lease. Default: Lease.
	StopTimeout time.Duration
	// ErrorBackoff is the first pause after a failed read; it doubles on
	// each further failure up to MaxErrorBackoff. Defaults 200 ms and 10 s.
	ErrorBackoff    time.Duration
	MaxErrorBackoff time.Duration

	// Logger receives warnings (failed reads, acks, reconnects).
	// Default slog.Default().
	Logger *slog.Logger

	// OnAckFailed, when set, is called with the messages whose handler
	// returned nil but whose ack did not commit: the ack failed for good
	// (fenced, lease gone, or connection errors until the lease ran out),
	// the page's lease was lost while it was handled, or a TxHandler's
	// transaction failed at its ack or commit. Each such message is
	// delivered again and handled a second time (docs/client.md lists every
	// case). err says why. It is called from the consumer's goroutine and
	// should return quickly. Default nil.
	OnAckFailed func(leaseID int64, messageIDs []int64, err error)

	// TracerProvider, when set, turns OpenTelemetry tracing on: a span per
	// read that returned messages and one per handler call, whose parent
	// is the publisher's trace context from the message's headers
	// (Publisher.WithTracerProvider puts it there). Default nil: off.
	TracerProvider trace.TracerProvider

	// MeterProvider, when set, turns OpenTelemetry metrics on: the
	// histogram messaging.process.duration of every handler call, per
	// topic and group (client/metrics.go; docs/go-client.md). Default nil:
	// off.
	MeterProvider metric.MeterProvider
}

// Defaults of Config, in one place.
const (
	DefaultMaxMessages     = 100
	DefaultMaxBytes        = 16 << 20
	DefaultLease           = 30 * time.Second
	DefaultPollInterval    = time.Second
	DefaultErrorBackoff    = 200 * time.Millisecond
	DefaultMaxErrorBackoff = 10 * time.Second
	DefaultListenCheck     = 5 * time.Second
)

// listenCheckPayload is the payload of the consumer's LISTEN self-check.
const listenCheckPayload = "pgq-listen-check"

// withDefaults validates c and returns it with every zero field defaulted.
func (c Config) withDefaults() (Config, error) {
	if c.Topic == "" {
		return c, errors.New("pgq client: Config.Topic is required")
	}
	if c.MaxMessages == 0 {
		c.MaxMessages = DefaultMaxMessages
	}
	if c.MaxMessages < 1 || c.MaxMessages > 10000 {
		return c, fmt.Errorf("pgq client: Config.MaxMessages must be 1..10000, got %d", c.MaxMessages)
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MaxBytes < 1 || c.MaxBytes > 512<<20 {
		return c, fmt.Errorf("pgq client: Config.MaxBytes must be 1..536870912, got %d", c.MaxBytes)
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.Lease < time.Millisecond {
		return c, fmt.Errorf("pgq client: Config.Lease must be at least 1 ms, got %s", c.Lease)
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.Linger < 0 || c.Linger >= c.PollInterval {
		return c, fmt.Errorf("pgq client: Config.Linger must be 0 or more and below PollInterval (%s), got %s", c.PollInterval, c.Linger)
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = c.Lease
	}
	if c.ListenCheckTimeout == 0 {
		c.ListenCheckTimeout = DefaultListenCheck
	}
	if c.ListenURL != "" {
		if _, err := pgx.ParseConfig(c.ListenURL); err != nil {
			return c, fmt.Errorf("pgq client: Config.ListenURL: %w", err)
		}
	}
	if c.ErrorBackoff <= 0 {
		c.ErrorBackoff = DefaultErrorBackoff
	}
	if c.MaxErrorBackoff <= 0 {
		c.MaxErrorBackoff = DefaultMaxErrorBackoff
	}
	if c.MaxErrorBackoff < c.ErrorBackoff {
		c.MaxErrorBackoff = c.ErrorBackoff
	}
	if c.Consumer == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "consumer"
		}
		var b [2]byte
		_, _ = rand.Read(b[:])
		c.Consumer = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Delivery is one message handed to a handler.
type Delivery struct {
	LeaseID      int64           // the page's lease (fanout.ack / nack / extend_lease)
	ID           int64           // message id
	Payload      json.RawMessage // the message body
	Headers      json.RawMessage // JSON object
	MessageGroup string          // "" when the message has none
	PublishedAt  time.Time       // server clock at insert
	Attempt      int             // 1 on first delivery
}

// Handler processes one message. Returning nil acks it; returning an error
// nacks it (redelivery after the server's exponential backoff, or after the
// delay of a RetryAfter error). A panic counts as an error. ctx is not
// cancelled when the consumer is asked to stop, only when StopTimeout runs
// out (context.Cause(ctx) is ErrStopTimeout) or when the page's lease was
// lost (the cause wraps ErrLeaseLost); an error returned after that is not
// a nack: the message comes back after the lease.
type Handler func(ctx context.Context, d *Delivery) error

// TxHandler processes one message inside tx; the consumer acks the message
// in tx and commits, so the handler's writes and the ack commit together.
// Returning an error rolls tx back and nacks the message.
type TxHandler func(ctx context.Context, tx pgx.Tx, d *Delivery) error

// RetryError is a handler error that asks for redelivery after a given delay.
type RetryError struct {
	After time.Duration
	Err   error
}

func (e *RetryError) Error() string { return e.Err.Error() }
func (e *RetryError) Unwrap() error { return e.Err }

// RetryAfter wraps err so that the message is redelivered after d
// (0 = as soon as possible) instead of the server's exponential backoff.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &RetryError{After: d, Err: err}
}

// ErrGroupCancelled is returned by Run when the server reports that the
// consumer group was cancelled (unsubscribed or removed).
var ErrGroupCancelled = errors.New("pgq client: consumer group is cancelled")

// ErrLeaseLost is the cause (context.Cause) of a handler's context when the
// consumer lost the lease of the page in hand while the handler ran: the
// server says its messages went to another consumer (PGQ11), or the lease
// ran out before an extension got through (database unreachable, pool
// exhausted). The handler should stop and not commit side effects: the
// message (and the rest of the page, which is not handed out) is handled
// again by its new holder. The cause wraps the error that was met.
var ErrLeaseLost = errors.New("pgq client: the lease of the page in hand was lost")

// ErrStopTimeout is the cause (context.Cause) of a handler's context when
// Config.StopTimeout passed after Run's context was cancelled. No further
// handler of the page is called; what succeeded is acked.
var ErrStopTimeout = errors.New("pgq client: StopTimeout passed after Run's context was cancelled")

// Stats are counters of one Consumer (monotonic since NewConsumer).
type Stats struct {
	Reads           int64 // fanout.read calls that returned
	EmptyReads      int64 // ... of which returned nothing
	Delivered       int64 // messages handed to the handler
	Acked           int64 // messages acked
	Nacked          int64 // messages nacked
	Errors          int64 // failed statements (read, ack, nack, extend, heartbeat)
	Notifications   int64 // NOTIFYs received
	LeaseExtensions int64 // fanout.extend_lease calls
	Heartbeats      int64 // fanout.heartbeat calls that succeeded
	// Retries counts ack, nack and extend_lease statements tried again on a
	// fresh connection after a connection error.
	Retries int64
	// SettleFailures counts acks and nacks given up for good (fenced, or
	// still failing when the lease ran out): their messages are delivered
	// again.
	SettleFailures int64
	// LeasesLost counts pages whose lease was lost while they were handled
	// (see ErrLeaseLost).
	LeasesLost int64
	// ListenChecked is 1 once the LISTEN self-check received its own
	// notification, -1 when it timed out (LISTEN does not work on that
	// connection: see Config.ListenURL), 0 before the check ends or when
	// it is off.
	ListenChecked int64
}

// Consumer is a consumer loop on one topic (and group). Create it with
// NewConsumer or NewTxConsumer and call Run.
type Consumer struct {
	pool      *pgxpool.Pool
	cfg       Config
	handler   Handler
	txHandler TxHandler
	tracer    trace.Tracer // nil: tracing off
	running   atomic.Bool

	// procHist records each handler call's duration (nil: metrics off).
	procHist  metric.Float64Histogram
	procAttrs processAttrs

	reads, emptyReads, delivered, acked, nacked, errs atomic.Int64
	notifications, extensions, heartbeats             atomic.Int64
	retries, settleFailures, leasesLost               atomic.Int64
	listenChecked                                     atomic.Int64

	// listenMu guards listenCancel: it ends the LISTEN connection's wait,
	// so that the listener connects again (relisten).
	listenMu     sync.Mutex
	listenCancel context.CancelFunc
}

// relisten makes the listener drop its connection and LISTEN again on a new
// one, then poll once: after a failover the old connection may sit on the
// demoted node, where no notification of the new primary arrives (NOTIFY is
// not replicated).
func (c *Consumer) relisten() {
	c.listenMu.Lock()
	defer c.listenMu.Unlock()
	if c.listenCancel != nil {
		c.listenCancel()
	}
}

// NewConsumer returns a consumer that calls h for every message and settles
// each page with one ack (plus one nack per failed message).
func NewConsumer(pool *pgxpool.Pool, cfg Config, h Handler) (*Consumer, error) {
	if h == nil {
		return nil, errors.New("pgq client: nil handler")
	}
	return newConsumer(pool, cfg, h, nil)
}

// NewTxConsumer returns a consumer that runs h for every message in its own
// transaction and acks the message in that transaction.
func NewTxConsumer(pool *pgxpool.Pool, cfg Config, h TxHandler) (*Consumer, error) {
	if h == nil {
		return nil, errors.New("pgq client: nil handler")
	}
	return newConsumer(pool, cfg, nil, h)
}

func newConsumer(pool *pgxpool.Pool, cfg Config, h Handler, th TxHandler) (*Consumer, error) {
	if pool == nil {
		return nil, errors.New("pgq client: nil pool")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Consumer{pool: pool, cfg: cfg, handler: h, txHandler: th}
	if cfg.TracerProvider != nil {
		c.tracer = cfg.TracerProvider.Tracer(tracerName)
	}
	if c.procHist, err = newProcessHistogram(cfg.MeterProvider); err != nil {
		return nil, err
	}
	c.procAttrs = newProcessAttrs(cfg.Topic, cfg.Group)
	return c, nil
}

// Config returns the consumer's configuration with defaults filled in.
func (c *Consumer) Config() Config { return c.cfg }

// Stats returns a snapshot of the consumer's counters.
func (c *Consumer) Stats() Stats {
	return Stats{
		Reads: c.reads.Load(), EmptyReads: c.emptyReads.Load(), Delivered: c.delivered.Load(),
		Acked: c.acked.Load(), Nacked: c.nacked.Load(), Errors: c.errs.Load(),
		Notifications: c.notifications.Load(), LeaseExtensions: c.extensions.Load(),
		Heartbeats: c.heartbeats.Load(), ListenChecked: c.listenChecked.Load(),
		Retries: c.retries.Load(), SettleFailures: c.settleFailures.Load(), LeasesLost: c.leasesLost.Load(),
	}
}

// The consumer's statements, in named notation (the API test checks that
// every parameter of the SQL functions appears in one). sqlRead's ack is
// the lease of the previous page, acked in the same statement (NULL: none).
const (
	sqlRead = `SELECT lease_id, message_id, payload, headers, message_group, published_at, attempt
	           FROM fanout.read(topic => $1::text, group_name => $2::text, consumer => $3::text,
	                            max_messages => $4::int, lease => $5::interval, max_bytes => $6::bigint,
	                            partition => $7::int, ack => $8::bigint)`
	sqlAckAll  = `SELECT fanout.ack(lease_id => $1::bigint, message_ids => NULL::bigint[])`
	sqlAckIDs  = `SELECT fanout.ack(lease_id => $1::bigint, message_ids => $2::bigint[])`
	sqlNack    = `SELECT fanout.nack(lease_id => $1::bigint, message_ids => $2::bigint[], retry_in => $3::interval, error => $4::text)`
	sqlExtend  = `SELECT fanout.extend_lease(lease_id => $1::bigint, extend_by => $2::interval)`
	sqlHeart   = `SELECT fanout.heartbeat(topic => $1::text, group_name => $2::text, consumer => $3::text)::text`
	sqlChannel = `SELECT channel, notify FROM fanout.topics WHERE topic = $1`
	// The announced wait of docs/wakeups.md: true, announced (read once
	// more, then sleep); false, a publisher was in flight (read again soon);
	// NULL, the topic notifies on every publish (or never).
	sqlWaitBegin = `SELECT fanout.wait_begin(topic => $1::text, waiter => $2::text, wait_for => $3::interval)`
	sqlWaitEnd   = `SELECT fanout.wait_end(topic => $1::text, waiter => $2::text)`
)

// maxAnnounce is the longest wait fanout.wait_begin accepts; a consumer
// with a longer PollInterval announces again after it.
const maxAnnounce = time.Hour

// Run consumes until ctx is cancelled (then it finishes the in-flight page
// and returns nil) or a non-retryable error happens: unknown topic or group,
// cancelled group (ErrGroupCancelled), bad configuration, missing privilege
// or schema. Failed reads are retried with backoff. Run may be called again
// after it returned, but not concurrently.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("pgq client: Run is already running")
	}
	defer c.running.Store(false)
	if ctx.Err() != nil {
		return nil
	}

	auxCtx, cancelAux := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancelAux()
		wg.Wait()
	}()
	wake := make(chan struct{}, 1)
	fatal := make(chan error, 1)
	listening := false // LISTEN runs: announced waits are worth it

	if !c.cfg.DisableListen {
		channel, notify := c.cfg.Channel, true
		if channel == "" {
			var err error
			channel, notify, err = c.lookupChannel(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if isFatal(err) {
					return err
				}
				c.cfg.Logger.Warn("pgq client: cannot look up the topic's channel; polling only",
					"topic", c.cfg.Topic, "error", err)
				notify = false
			}
		}
		if notify {
			listening = true
			ready := make(chan struct{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.listen(auxCtx, channel, wake, ready)
			}()
			// Read only once LISTEN is in place, so that nothing published
			// between the first read and LISTEN waits for the poll.
			select {
			case <-ready:
			case <-ctx.Done():
				return nil
			}
		}
	}
	if c.cfg.HeartbeatInterval > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.heartbeatLoop(auxCtx, fatal)
		}()
	}

	backoff := c.cfg.ErrorBackoff
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var pending *pendingAck // a handled full page, acked with the next read
	defer func() { c.flush(ctx, pending) }()
	w := c.newWaiter(listening)
	defer func() { // Run's ctx is done by now: end the wait on a context of its own
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		w.end(ectx)
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-fatal:
			return err
		default:
		}
		more := func() bool { return len(wake) > 0 } // a notification is waiting: we read again at once
		n, next, err := c.page(ctx, pending, more)
		pending = next // the previous one was settled by page (or by its fallback)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if isFatal(err) {
				return err
			}
			if resetOnReadOnly(c.pool, err) {
				// The pool's connections are on a standby (a failover
				// demoted their node): new ones, and a new LISTEN.
				c.relisten()
			}
			c.errs.Add(1)
			c.cfg.Logger.Warn("pgq client: read failed; retrying", "topic", c.cfg.Topic,
				"group", c.cfg.Group, "backoff", backoff, "error", err)
			timer.Reset(backoff)
			select {
			case <-ctx.Done():
				return nil
			case <-timer.C:
			}
			backoff = min(backoff*2, c.cfg.MaxErrorBackoff)
			continue
		}
		backoff = c.cfg.ErrorBackoff
		if n > 0 {
			w.end(ctx) // announced before this page: publishers need not wake us now
		}
		if n == c.cfg.MaxMessages {
			continue // a full page: more is probably waiting
		}
		if pending != nil {
			select { // the waiting notification is served by the read we do now
			case <-wake:
			default:
			}
			if !c.linger(ctx, timer) {
				return nil
			}
			continue
		}
		var sleep time.Duration
		switch w.announce(ctx) {
		case announceRead:
			continue // announced: read once more before sleeping
		case announceRetry:
			sleep = w.pause // a publisher was in flight: read again soon
		default:
			sleep = w.sleep()
		}
		timer.Reset(sleep)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case err := <-fatal:
			timer.Stop()
			return err
		case <-wake:
			timer.Stop() // Go ≥ 1.23 timers: no stale tick after Stop/Reset
			if !c.linger(ctx, timer) {
				return nil
			}
		case <-timer.C:
		}
	}
}

// linger waits Config.Linger before a read that a notification asked for,
// so that the page gathers what is published meanwhile. It returns false
// when ctx ended first.
func (c *Consumer) linger(ctx context.Context, timer *time.Timer) bool {
	if c.cfg.Linger <= 0 {
		return true
	}
	timer.Reset(c.cfg.Linger)
	select {
	case <-ctx.Done():
		timer.Stop()
		return false
	case <-timer.C:
		return true
	}
}

// waiter is the consumer's side of announced waits (docs/wakeups.md): on a
// topic with notify_when => 'waiters', publishers NOTIFY only while some
// consumer announced its wait with fanout.wait_begin, so before it sleeps
// the consumer announces (unless its announcement still holds), reads once
// more, and sleeps only if that read was empty too. A read that finds
// messages ends the wait (fanout.wait_end): no NOTIFYs while it works.
type waiter struct {
	c         *Consumer
	on        bool          // LISTEN runs and the server has fanout.wait_begin
	token     string        // this consumer's waiter name (unique per Run)
	announced bool          // our announcement is in place (wait_begin true, no wait_end since)
	until     time.Time     // ... until then (client clock, counted from before wait_begin was sent)
	retry     time.Duration // the next pause after a publisher in flight
	pause     time.Duration // the pause announceRetry asks for
}

type announceStep int

const (
	announceSleep announceStep = iota // sleep (announced, or nothing to announce)
	announceRead                      // announced: read once more first
	announceRetry                     // a publisher was in flight: sleep w.pause, read, announce again
)

const (
	// firstRetry is the first pause after wait_begin found a publisher in
	// flight; it doubles up to PollInterval while that goes on.
	firstRetry = 2 * time.Millisecond
	// minAnnounce is the shortest announcement: a consumer announces again
	// only when its announcement ran out, so with the default PollInterval
	// an idle consumer announces once per 10 s, and one that dies costs
	// publishers NOTIFYs for at most 11 s.
	minAnnounce = 10 * time.Second
)

func (c *Consumer) newWaiter(listening bool) *waiter {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := c.cfg.Consumer
	if len(name) > 180 {
		name = name[:180]
	}
	return &waiter{c: c, on: listening, token: name + "/" + hex.EncodeToString(b[:]), retry: firstRetry}
}

// sleep is how long the consumer may sleep now: PollInterval, and while
// announced no longer than the announcement holds.
func (w *waiter) sleep() time.Duration {
	d := w.c.cfg.PollInterval
	if w.announced {
		d = max(0, min(d, time.Until(w.until)))
	}
	return d
}

// announce decides what the consumer does before it sleeps.
func (w *waiter) announce(ctx context.Context) announceStep {
	c := w.c
	if !w.on || c.listenChecked.Load() < 0 {
		return announceSleep // nothing to announce: polling, or LISTEN does not work
	}
	if w.announced && time.Until(w.until) > 0 {
		return announceSleep // the announcement holds, and a read followed it
	}
	var ready *bool
	at := time.Now()
	waitFor := min(max(c.cfg.PollInterval, minAnnounce), maxAnnounce)
	err := c.pool.QueryRow(ctx, sqlWaitBegin, c.cfg.Topic, w.token, c.interval(waitFor)).Scan(&ready)
	switch {
	case err == nil && ready == nil:
		return announceSleep // the topic notifies on every publish (or never)
	case err == nil && *ready:
		w.announced, w.until, w.retry = true, at.Add(waitFor), firstRetry
		return announceRead
	case err == nil:
		w.pause = min(w.retry, c.cfg.PollInterval)
		w.retry = min(w.retry*2, c.cfg.PollInterval)
		return announceRetry
	case ctx.Err() != nil:
		w.announced = true // it may have committed: Run's last end removes it
		return announceSleep
	case SQLState(err) == CodeUndefinedFunction:
		w.on = false
		c.cfg.Logger.Info("pgq client: the server has no fanout.wait_begin; waiting as before (notified on every publish)",
			"topic", c.cfg.Topic)
		return announceSleep
	default:
		c.errs.Add(1)
		c.cfg.Logger.Warn("pgq client: cannot announce the wait; polling every PollInterval",
			"topic", c.cfg.Topic, "error", err)
		return announceSleep
	}
}

// end ends our announced wait: a read found messages, so publishers need not
// wake this consumer while it works (or Run returns). A failure only costs
// publishers NOTIFYs until the announcement expires.
func (w *waiter) end(ctx context.Context) {
	if !w.announced {
		return
	}
	w.announced = false
	if ctx.Err() != nil {
		return
	}
	if _, err := w.c.pool.Exec(ctx, sqlWaitEnd, w.c.cfg.Topic, w.token); err != nil && ctx.Err() == nil {
		w.c.cfg.Logger.Warn("pgq client: cannot end the announced wait (it expires by itself)",
			"topic", w.c.cfg.Topic, "error", err)
	}
}

func (c *Consumer) lookupChannel(ctx context.Context) (string, bool, error) {
	var channel string
	var notify bool
	err := c.pool.QueryRow(ctx, sqlChannel, c.cfg.Topic).Scan(&channel, &notify)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, &fatalError{fmt.Errorf("pgq client: topic %q does not exist", c.cfg.Topic)}
	}
	return channel, notify, err
}

// listen keeps a dedicated connection LISTENing on channel and signals wake
// on every notification (coalesced) and after every (re)connect. It closes
// ready once the first LISTEN succeeded or failed. After the first LISTEN
// it checks that notifications really arrive (checkListen).
func (c *Consumer) listen(ctx context.Context, channel string, wake chan<- struct{}, ready chan struct{}) {
	var once sync.Once
	signalReady := func() { once.Do(func() { close(ready) }) }
	defer signalReady()
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	connCfg := c.pool.Config().ConnConfig
	if c.cfg.ListenURL != "" {
		var err error
		if connCfg, err = pgx.ParseConfig(c.cfg.ListenURL); err != nil {
			signalReady()
			c.cfg.Logger.Warn("pgq client: bad ListenURL; polling only", "error", err)
			return
		}
	}
	c.listenChecked.Store(0)
	checked := make(chan struct{})
	var checkOnce sync.Once
	backoff := c.cfg.ErrorBackoff
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, connCfg)
		if err == nil {
			_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
		}
		if err != nil {
			if conn != nil {
				conn.Close(context.Background())
			}
			if ctx.Err() != nil {
				return
			}
			c.errs.Add(1)
			c.cfg.Logger.Warn("pgq client: LISTEN failed; polling until it works again",
				"topic", c.cfg.Topic, "channel", channel, "backoff", backoff, "error", err)
			signalReady()
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, c.cfg.MaxErrorBackoff)
			continue
		}
		backoff = c.cfg.ErrorBackoff
		signalReady()
		poke() // catch up with anything published while we were not listening
		if c.cfg.ListenCheckTimeout > 0 {
			checkOnce.Do(func() { go c.checkListen(ctx, channel, checked) })
		}
		wctx, cancel := context.WithCancel(ctx)
		c.listenMu.Lock()
		c.listenCancel = cancel
		c.listenMu.Unlock()
		for {
			n, err := conn.WaitForNotification(wctx)
			if err != nil {
				break
			}
			c.notifications.Add(1)
			if n.Payload == listenCheckPayload && c.listenChecked.CompareAndSwap(0, 1) {
				close(checked)
			}
			poke()
		}
		cancel()
		conn.Close(context.Background())
	}
}

// checkListen sends the listener a notification through the pool and warns
// when it does not arrive within ListenCheckTimeout: LISTEN "works" through
// PgBouncer in transaction pooling mode, but the notifications never reach
// the client.
func (c *Consumer) checkListen(ctx context.Context, channel string, checked <-chan struct{}) {
	if _, err := c.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, listenCheckPayload); err != nil {
		if ctx.Err() == nil {
			c.cfg.Logger.Warn("pgq client: cannot check LISTEN (pg_notify failed)", "channel", channel, "error", err)
		}
		return
	}
	t := time.NewTimer(c.cfg.ListenCheckTimeout)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-checked:
	case <-t.C:
		if c.listenChecked.CompareAndSwap(0, -1) {
			c.cfg.Logger.Warn("pgq client: LISTEN does not deliver notifications on this connection "+
				"(PgBouncer in transaction or statement pooling mode?); set Config.ListenURL to a direct "+
				"connection to PostgreSQL. Polling every PollInterval meanwhile",
				"topic", c.cfg.Topic, "channel", channel, "waited", c.cfg.ListenCheckTimeout.String(),
				"poll_interval", c.cfg.PollInterval.String())
		}
	}
}

func (c *Consumer) heartbeatLoop(ctx context.Context, fatal chan<- error) {
	t := time.NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var status *string
		err := c.pool.QueryRow(ctx, sqlHeart, c.cfg.Topic, nullText(c.cfg.Group), c.cfg.Consumer).Scan(&status)
		switch {
		case err == nil:
			c.heartbeats.Add(1)
			if status != nil && *status == "cancelled" {
				fatal <- ErrGroupCancelled
				return
			}
		case ctx.Err() != nil:
			return
		case SQLState(err) == CodeUndefinedFunction:
			c.cfg.Logger.Info("pgq client: the server has no fanout.heartbeat; heartbeats are off",
				"topic", c.cfg.Topic)
			return
		case SQLState(err) == CodeGroupCancelled:
			fatal <- fmt.Errorf("%w: %w", ErrGroupCancelled, err)
			return
		default:
			if resetOnReadOnly(c.pool, err) {
				c.relisten()
			}
			c.errs.Add(1)
			c.cfg.Logger.Warn("pgq client: heartbeat failed", "topic", c.cfg.Topic, "group", c.cfg.Group, "error", err)
		}
	}
}

func (c *Consumer) interval(d time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: d.Microseconds(), Valid: true}
}

// pendingAck is a fully handled page whose ack travels with the next read.
type pendingAck struct {
	leaseID int64
	n       int
	ids     []int64   // the page's messages
	until   time.Time // the lease's local deadline: retries stop there
}

// read claims one page. With a pending ack, the ack travels in the read
// (fanout.read(..., ack => lease): one statement, one round trip, one
// commit); if that fails, nothing was acked or read: the ack is retried
// alone and a plain read follows.
func (c *Consumer) read(ctx context.Context, pending *pendingAck) ([]Delivery, error) {
	var partition any
	if c.cfg.Partition != nil {
		partition = *c.cfg.Partition
	}
	args := []any{c.cfg.Topic, nullText(c.cfg.Group), c.cfg.Consumer, c.cfg.MaxMessages, c.interval(c.cfg.Lease),
		c.cfg.MaxBytes, partition, nil}
	if pending != nil {
		args[7] = pending.leaseID
		rows, err := c.pool.Query(ctx, sqlRead, args...)
		var out []Delivery
		if err == nil {
			out, err = c.scan(rows)
		}
		args[7] = nil
		if err == nil {
			c.acked.Add(int64(pending.n))
			return out, nil
		}
		// Nothing was acked or read, or the reply was lost (then the ack
		// may have committed: acking again is harmless): ack the page on
		// its own.
		c.flush(ctx, pending)
	}
	rows, err := c.pool.Query(ctx, sqlRead, args...)
	if err != nil {
		return nil, classify(err)
	}
	return c.scan(rows)
}

// settleContext is the context a page is settled with: it outlives the
// cancellation of Run's context (the page was handled; its acks must not be
// dropped because the consumer is stopping), bounded by the later of the
// lease's local deadline and StopTimeout from now.
func (c *Consumer) settleContext(ctx context.Context, until time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(context.WithoutCancel(ctx), maxTime(until, time.Now().Add(c.cfg.StopTimeout)))
}

// flush acks a pending page on its own (even when ctx is cancelled),
// retrying connection errors while its lease is valid.
func (c *Consumer) flush(ctx context.Context, p *pendingAck) {
	if p == nil {
		return
	}
	fctx, cancel := c.settleContext(ctx, p.until)
	defer cancel()
	if c.settle(fctx, p.until, p.ids, sqlAckAll, p.leaseID) {
		c.acked.Add(int64(p.n))
	}
}

func (c *Consumer) scan(rows pgx.Rows) ([]Delivery, error) {
	out, err := scanDeliveries(rows)
	if err != nil {
		return nil, classify(err)
	}
	return out, nil
}

// scanDeliveries reads the rows of fanout.read.
func scanDeliveries(rows pgx.Rows) ([]Delivery, error) {
	var out []Delivery
	var group pgtype.Text
	var attempt int32
	for rows.Next() {
		var d Delivery
		if err := rows.Scan(&d.LeaseID, &d.ID, &d.Payload, &d.Headers, &group, &d.PublishedAt, &attempt); err != nil {
			rows.Close()
			return nil, err
		}
		d.MessageGroup = group.String
		d.Attempt = int(attempt)
		out = append(out, d)
	}
	return out, rows.Err()
}

// pageLease keeps the lease of one page while its handlers run: a timer
// extends it (fanout.extend_lease) by Lease whenever half a lease is left, and
// when it cannot (the page was taken over, or the lease ran out before an
// extension got through) the handlers' context is cancelled with a cause
// that wraps ErrLeaseLost. That context is also cancelled, with
// ErrStopTimeout, StopTimeout after Run's context.
type pageLease struct {
	c       *Consumer
	leaseID int64
	ctx     context.Context // the handlers' context
	cancel  context.CancelCauseFunc
	done    chan struct{} // closed when the handlers are finished
	exited  chan struct{} // closed when the keeper returned

	mu       sync.Mutex
	deadline time.Time // local view of the lease's expiry
	gone     bool      // the server says the lease lost its messages (PGQ11, PGQ10)
}

// startPage starts keeping the lease of a page read at leasedAt (the time
// the read was sent, so the local deadline is never later than the
// server's).
func (c *Consumer) startPage(ctx context.Context, leaseID int64, leasedAt time.Time) *pageLease {
	hctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	p := &pageLease{c: c, leaseID: leaseID, ctx: hctx, cancel: cancel, done: make(chan struct{}),
		exited: make(chan struct{}), deadline: leasedAt.Add(c.cfg.Lease)}
	// Stopping: handlers keep a live context for StopTimeout after ctx.
	stopWatch := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(c.cfg.StopTimeout, func() { cancel(ErrStopTimeout) })
		context.AfterFunc(hctx, func() { t.Stop() })
	})
	context.AfterFunc(hctx, func() { stopWatch() })
	go p.keep(ctx)
	return p
}

func (p *pageLease) until() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.deadline
}

// lost reports whether the server took the lease's messages away.
func (p *pageLease) lost() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gone
}

// finish stops the keeper (an extension in flight completes first) and
// cancels the handlers' context.
func (p *pageLease) finish() {
	close(p.done)
	<-p.exited
	p.cancel(context.Canceled)
}

// keep extends the lease by Lease whenever half a lease is left, until
// finish.
func (p *pageLease) keep(ctx context.Context) {
	defer close(p.exited)
	c := p.c
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		until := p.until()
		t.Reset(time.Until(until.Add(-c.cfg.Lease / 2)))
		select {
		case <-p.done:
			return
		case <-t.C:
		}
		start := time.Now()
		ectx, cancel := context.WithDeadline(context.WithoutCancel(ctx), until)
		err := c.execRetry(ectx, until, "extend_lease", sqlExtend, p.leaseID, c.interval(c.cfg.Lease))
		cancel()
		if err == nil {
			c.extensions.Add(1)
			// As the server: the expiry moves by Lease from the later of the
			// old expiry and now (so the local deadline stays no later than
			// the server's, and acks are retried as long as the lease holds).
			p.mu.Lock()
			p.deadline = maxTime(until, start).Add(c.cfg.Lease)
			p.mu.Unlock()
			continue
		}
		c.errs.Add(1)
		select {
		case <-p.done: // the page was finished meanwhile: nothing is lost
			return
		default:
		}
		if IsFenced(err) || IsNotFound(err) {
			p.mu.Lock()
			p.gone = true
			p.mu.Unlock()
			p.lose(fmt.Errorf("%w: extend_lease of lease %d: %w", ErrLeaseLost, p.leaseID, err))
			return
		}
		if !time.Now().Before(until) {
			p.lose(fmt.Errorf("%w: lease %d expired before it could be extended: %w", ErrLeaseLost, p.leaseID, err))
			return
		}
		c.cfg.Logger.Warn("pgq client: extend_lease failed; trying again while the lease is valid",
			"topic", c.cfg.Topic, "group", c.cfg.Group, "lease_id", p.leaseID, "error", err)
		t.Reset(min(c.cfg.ErrorBackoff, time.Until(until)))
		select {
		case <-p.done:
			return
		case <-t.C:
		}
	}
}

func (p *pageLease) lose(cause error) {
	p.c.leasesLost.Add(1)
	p.c.cfg.Logger.Warn("pgq client: lost the lease of the page in hand; its handler's context is cancelled "+
		"and the rest of the page is not handed out (another consumer gets it)",
		"topic", p.c.cfg.Topic, "group", p.c.cfg.Group, "lease_id", p.leaseID, "error", cause)
	p.cancel(cause)
}

// page settles `pending` (see read), reads one page, hands it to the
// handler and settles it — except a page handled without error, while ctx
// is live, that will be followed by a read at once (it was full, or more()
// says a notification is waiting): its ack is returned as pending, to
// travel with that read. It returns the number of messages read.
//
// While the handlers run, the page's lease is kept (pageLease). No handler
// is called once the handlers' context is cancelled: StopTimeout after ctx,
// or when the lease is lost. A handler that returns an error after that
// cancellation is not nacked (its message comes back after the lease); what
// succeeded is acked with a context that outlives ctx.
func (c *Consumer) page(ctx context.Context, pending *pendingAck, more func() bool) (int, *pendingAck, error) {
	leasedAt := time.Now()
	ds, err := c.read(ctx, pending)
	readSpan := c.traceRead(ctx, leasedAt, len(ds), err)
	if err != nil {
		return 0, nil, err
	}
	c.reads.Add(1)
	if len(ds) == 0 {
		c.emptyReads.Add(1)
		return 0, nil, nil
	}
	c.delivered.Add(int64(len(ds)))

	leaseID := ds[0].LeaseID
	pl := c.startPage(ctx, leaseID, leasedAt)
	hctx := pl.ctx

	type failure struct {
		id  int64
		err error
	}
	ok := make([]int64, 0, len(ds))
	var failed []failure
	handled := 0
	for i := range ds {
		if hctx.Err() != nil {
			break
		}
		handled++
		if c.txHandler != nil {
			c.handleTx(pl, readSpan, &ds[i])
			continue
		}
		pctx, end := c.startProcess(hctx, readSpan, &ds[i])
		err := c.call(pctx, &ds[i])
		end(err)
		switch {
		case err == nil:
			ok = append(ok, ds[i].ID)
		case hctx.Err() != nil:
			// Interrupted (stop timeout or lost lease): not a failure of the
			// message; it comes back after the lease.
		default:
			failed = append(failed, failure{ds[i].ID, err})
		}
	}
	cause := context.Cause(hctx)
	pl.finish()
	until := pl.until()
	if handled < len(ds) {
		c.cfg.Logger.Warn("pgq client: stopped handing out the page in hand; the rest comes back after the lease",
			"topic", c.cfg.Topic, "group", c.cfg.Group, "lease_id", leaseID,
			"not_handled", len(ds)-handled, "reason", cause)
	}
	if c.txHandler != nil {
		return len(ds), nil, nil
	}
	if pl.lost() {
		if len(ok) > 0 {
			c.errs.Add(1)
			c.cfg.Logger.Warn("pgq client: the page was taken over while it was handled; its handled messages "+
				"cannot be acked and their new holder handles them again",
				"topic", c.cfg.Topic, "group", c.cfg.Group, "lease_id", leaseID, "handled", len(ok))
			c.ackFailed(leaseID, ok, context.Cause(hctx)) // (after finish: the keeper's cause)
		}
		return len(ds), nil, nil
	}
	if len(failed) == 0 && len(ok) == len(ds) {
		if ctx.Err() == nil && !c.cfg.DisablePipelinedAck && (len(ds) == c.cfg.MaxMessages || more()) {
			return len(ds), &pendingAck{leaseID: leaseID, n: len(ds), ids: ok, until: until}, nil
		}
	}
	sctx, cancel := c.settleContext(ctx, until)
	defer cancel()
	switch {
	case len(ok) == 0:
	case len(ok) == len(ds):
		if c.settle(sctx, until, ok, sqlAckAll, leaseID) {
			c.acked.Add(int64(len(ok)))
		}
	default:
		if c.settle(sctx, until, ok, sqlAckIDs, leaseID, ok) {
			c.acked.Add(int64(len(ok)))
		}
	}
	for _, f := range failed {
		c.nack(sctx, until, leaseID, f.id, f.err)
	}
	return len(ds), nil, nil
}

// call runs the handler, turning a panic into an error.
func (c *Consumer) call(ctx context.Context, d *Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pgq client: handler panicked: %v", r)
		}
	}()
	return c.handler(ctx, d)
}

func (c *Consumer) handleTx(pl *pageLease, readSpan trace.SpanContext, d *Delivery) {
	ctx := pl.ctx
	pctx, end := c.startProcess(ctx, readSpan, d)
	// The COMMIT (of the handler's work and the ack) is never cancelled,
	// not even when the lease is lost meanwhile: see Commit.
	err := inTx(pctx, c.pool, func(tx pgx.Tx) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("pgq client: handler panicked: %v", r)
			}
		}()
		if err := c.txHandler(pctx, tx, d); err != nil {
			return &handlerError{err}
		}
		_, err = tx.Exec(pctx, sqlAckIDs, d.LeaseID, []int64{d.ID})
		return err
	})
	end(err)
	if err == nil {
		c.acked.Add(1)
		return
	}
	var he *handlerError
	if errors.As(err, &he) && ctx.Err() == nil {
		until := pl.until()
		sctx, cancel := c.settleContext(ctx, until)
		defer cancel()
		c.nack(sctx, until, d.LeaseID, d.ID, he.err)
		return
	}
	// The ack or the commit failed, or the handler was interrupted.
	// Everything rolled back; the message comes back after the lease or is
	// already with its new holder.
	c.errs.Add(1)
	if !errors.As(err, &he) {
		if ctx.Err() != nil { // the ack met the handlers' cancellation: say why
			err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
		}
		// A COMMIT of unknown outcome is reported too: if it did not
		// commit, the message is delivered again.
		c.ackFailed(d.LeaseID, []int64{d.ID}, err)
	}
	if errors.Is(err, ErrCommitUnknown) {
		c.cfg.Logger.Warn("pgq client: the connection was lost during the COMMIT of the handler's transaction: "+
			"it may or may not have committed; if it did not, the message is delivered again (the handler must be "+
			"idempotent)", "lease_id", d.LeaseID, "message_id", d.ID, "error", err)
		return
	}
	if IsFenced(err) {
		c.cfg.Logger.Warn("pgq client: fenced: the lease expired and the message went to another consumer; "+
			"the transaction rolled back", "lease_id", d.LeaseID, "message_id", d.ID, "error", err)
		return
	}
	c.cfg.Logger.Warn("pgq client: transaction with ack failed or was interrupted; rolled back", "lease_id", d.LeaseID,
		"message_id", d.ID, "error", err, "cause", context.Cause(ctx))
}

type handlerError struct{ err error }

func (e *handlerError) Error() string { return e.err.Error() }
func (e *handlerError) Unwrap() error { return e.err }

// ackFailed reports handled messages that were not acked
// (Config.OnAckFailed).
func (c *Consumer) ackFailed(leaseID int64, ids []int64, err error) {
	if c.cfg.OnAckFailed != nil && len(ids) > 0 {
		c.cfg.OnAckFailed(leaseID, ids, err)
	}
}

// settle acks ids (sql is sqlAckAll or sqlAckIDs), retrying connection errors
// on a fresh connection while the lease is valid (until). A final failure
// is counted (Stats.SettleFailures) and logged.
func (c *Consumer) settle(ctx context.Context, until time.Time, ids []int64, sql string, args ...any) bool {
	err := c.execRetry(ctx, until, "ack", sql, args...)
	if err == nil {
		return true
	}
	c.errs.Add(1)
	c.settleFailures.Add(1)
	c.ackFailed(args[0].(int64), ids, err)
	switch {
	case IsFenced(err):
		c.cfg.Logger.Warn("pgq client: ack fenced: the lease expired and its messages went to another consumer",
			"lease_id", args[0], "error", err)
	case IsNotFound(err):
		c.cfg.Logger.Warn("pgq client: ack of a lease the server no longer has", "lease_id", args[0], "error", err)
	default:
		c.cfg.Logger.Error("pgq client: ack failed for good; the messages come back after the lease and are handled again",
			"lease_id", args[0], "error", err)
	}
	return false
}

func (c *Consumer) nack(ctx context.Context, until time.Time, leaseID, id int64, herr error) {
	var retry any // NULL: the server's exponential backoff
	var re *RetryError
	if errors.As(herr, &re) {
		retry = c.interval(max(re.After, 0))
	}
	msg := herr.Error()
	if r := []rune(msg); len(r) > maxNackError { // fanout.nack refuses longer error texts (PGQ03)
		msg = string(r[:maxNackError])
	}
	if err := c.execRetry(ctx, until, "nack", sqlNack, leaseID, []int64{id}, retry, msg); err != nil {
		c.errs.Add(1)
		c.settleFailures.Add(1)
		c.cfg.Logger.Warn("pgq client: nack failed; the message comes back after the lease",
			"lease_id", leaseID, "message_id", id, "error", err)
		return
	}
	c.nacked.Add(1)
}

// execRetry runs one settling statement (ack, nack, extend_lease). On a
// connection error (killed backend, server restart, network) it tries again
// on a fresh connection, at once and then with backoff from ErrorBackoff up
// to MaxErrorBackoff, as long as the next try starts before until (the
// lease's local deadline: after it the messages may belong to another
// consumer) and ctx lives. It returns the last error.
func (c *Consumer) execRetry(ctx context.Context, until time.Time, what, sql string, args ...any) error {
	_, err := c.pool.Exec(ctx, sql, args...)
	backoff := time.Duration(0)
	for try := 1; err != nil && IsReconnect(err) && ctx.Err() == nil; try++ {
		if resetOnReadOnly(c.pool, err) {
			c.relisten()
		}
		if !time.Now().Add(backoff).Before(until) {
			return fmt.Errorf("%s: gave up after %d tries (the lease runs out): %w", what, try, err)
		}
		c.errs.Add(1)
		c.retries.Add(1)
		c.cfg.Logger.Warn("pgq client: "+what+" failed on a connection error; trying again on a fresh connection",
			"topic", c.cfg.Topic, "group", c.cfg.Group, "try", try, "backoff", backoff, "error", err)
		if backoff > 0 {
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("%s: %w (after %w)", what, ctx.Err(), err)
			case <-t.C:
			}
		}
		backoff = min(max(backoff*2, c.cfg.ErrorBackoff), c.cfg.MaxErrorBackoff)
		err = c.execFresh(ctx, sql, args...)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// execFresh runs sql on a new connection with the pool's settings (and its
// BeforeConnect and AfterConnect hooks), not on one of the pool's idle
// connections, which a server restart or pg_terminate_backend may have
// killed too.
func (c *Consumer) execFresh(ctx context.Context, sql string, args ...any) error {
	pcfg := c.pool.Config()
	cc := pcfg.ConnConfig
	if pcfg.BeforeConnect != nil {
		if err := pcfg.BeforeConnect(ctx, cc); err != nil {
			return fmt.Errorf("fresh connection: %w", err)
		}
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("fresh connection: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if pcfg.AfterConnect != nil {
		if err := pcfg.AfterConnect(ctx, conn); err != nil {
			return fmt.Errorf("fresh connection: %w", err)
		}
	}
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// isConnError tells whether err is a lost or refused connection (or a
// server shutting down): the statement may succeed on a new connection.
// Errors the server raised for the statement itself, and context errors,
// are not.
func isConnError(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || // connection_exception
			pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" || // admin/crash shutdown, cannot connect now
			pe.Code == "53300" // too_many_connections
	}
	return true // io and network errors, closed connections
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// maxNackError is the longest error text fanout.nack accepts (characters).
const maxNackError = 8192

// fatalError marks errors that retrying cannot fix.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

func isFatal(err error) bool {
	var f *fatalError
	return errors.As(err, &f) || errors.Is(err, ErrGroupCancelled)
}

// classify wraps errors that retrying cannot fix.
func classify(err error) error {
	switch SQLState(err) {
	case CodeGroupCancelled:
		return fmt.Errorf("%w: %w", ErrGroupCancelled, err)
	case CodeTopicNotFound, CodeInvalidArgument, CodeInvalidName, CodeReadCommitted, CodeGroupRequired,
		CodeGroupNotFound, CodeUndefinedFunction, CodeInsufficientPrivilege, CodeInvalidSchemaName:
		return &fatalError{err}
	}
	return err
}
