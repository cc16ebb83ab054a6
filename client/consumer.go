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
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
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
	// Lease is how long a page is reserved for this consumer before another
	// member may take its un-acked messages. The consumer extends the lease
	// (fanout.extend_lease) when handling a page takes more than half of it.
	// Default 30 s.
	Lease time.Duration

	// PollInterval bounds how long the consumer waits before reading again
	// when it has seen no notification: the fallback for lost or disabled
	// notifications. Default 1 s.
	PollInterval time.Duration
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
	// page after Run's context is cancelled (handlers then get a cancelled
	// context; what is not settled comes back after the lease). Default:
	// Lease.
	StopTimeout time.Duration
	// ErrorBackoff is the first pause after a failed read; it doubles on
	// each further failure up to MaxErrorBackoff. Defaults 200 ms and 10 s.
	ErrorBackoff    time.Duration
	MaxErrorBackoff time.Duration

	// Logger receives warnings (failed reads, acks, reconnects).
	// Default slog.Default().
	Logger *slog.Logger
}

// Defaults of Config, in one place.
const (
	DefaultMaxMessages     = 100
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
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.Lease < time.Millisecond {
		return c, fmt.Errorf("pgq client: Config.Lease must be at least 1 ms, got %s", c.Lease)
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
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
// out.
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
	running   atomic.Bool

	reads, emptyReads, delivered, acked, nacked, errs atomic.Int64
	notifications, extensions, heartbeats             atomic.Int64
	listenChecked                                     atomic.Int64
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
	return &Consumer{pool: pool, cfg: cfg, handler: h, txHandler: th}, nil
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
	}
}

const (
	sqlRead = `SELECT lease_id, message_id, payload, headers, message_group, published_at, attempt
	           FROM fanout.read($1::text, $2::text, $3::text, $4::int, $5::interval)`
	sqlAckAll  = `SELECT fanout.ack($1::bigint, NULL::bigint[])`
	sqlAckIDs  = `SELECT fanout.ack($1::bigint, $2::bigint[])`
	sqlNack    = `SELECT fanout.nack($1::bigint, $2::bigint[], $3::interval, $4::text)`
	sqlExtend  = `SELECT fanout.extend_lease($1::bigint, $2::interval)`
	sqlHeart   = `SELECT fanout.heartbeat($1::text, $2::text, $3::text)::text`
	sqlChannel = `SELECT channel, notify FROM fanout.topics WHERE topic = $1`
)

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
		if n == c.cfg.MaxMessages {
			continue // a full page: more is probably waiting
		}
		if pending != nil {
			select { // the waiting notification is served by the read we do now
			case <-wake:
			default:
			}
			continue
		}
		timer.Reset(c.cfg.PollInterval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case err := <-fatal:
			timer.Stop()
			return err
		case <-wake:
			timer.Stop() // Go ≥ 1.23 timers: no stale tick after Stop/Reset
		case <-timer.C:
		}
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
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				break
			}
			c.notifications.Add(1)
			if n.Payload == listenCheckPayload && c.listenChecked.CompareAndSwap(0, 1) {
				close(checked)
			}
			poke()
		}
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
}

// read claims one page. With a pending ack, the ack and the read go to the
// server in one round trip (a pipeline: one implicit transaction, one
// commit); if that fails, the ack is retried alone and the read follows.
func (c *Consumer) read(ctx context.Context, pending *pendingAck) ([]Delivery, error) {
	args := []any{c.cfg.Topic, nullText(c.cfg.Group), c.cfg.Consumer, c.cfg.MaxMessages, c.interval(c.cfg.Lease)}
	if pending != nil {
		b := &pgx.Batch{}
		b.Queue(sqlAckAll, pending.leaseID)
		b.Queue(sqlRead, args...)
		br := c.pool.SendBatch(ctx, b)
		_, err := br.Exec()
		var out []Delivery
		if err == nil {
			var rows pgx.Rows
			if rows, err = br.Query(); err == nil {
				out, err = c.scan(rows)
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			c.acked.Add(int64(pending.n))
			return out, nil
		}
		// Nothing of the pipeline committed: settle the page on its own.
		c.flush(ctx, pending)
	}
	rows, err := c.pool.Query(ctx, sqlRead, args...)
	if err != nil {
		return nil, classify(err)
	}
	return c.scan(rows)
}

// flush acks a pending page on its own (even when ctx is cancelled, within
// StopTimeout).
func (c *Consumer) flush(ctx context.Context, p *pendingAck) {
	if p == nil {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.StopTimeout)
	defer cancel()
	if c.settle(fctx, sqlAckAll, p.leaseID) {
		c.acked.Add(int64(p.n))
	}
}

func (c *Consumer) scan(rows pgx.Rows) ([]Delivery, error) {
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
	if err := rows.Err(); err != nil {
		return nil, classify(err)
	}
	return out, nil
}

// page settles `pending` (see read), reads one page, hands it to the
// handler and settles it — except a page handled without error, while ctx
// is live, that will be followed by a read at once (it was full, or more()
// says a notification is waiting): its ack is returned as pending, to
// travel with that read. It returns the number of messages read.
func (c *Consumer) page(ctx context.Context, pending *pendingAck, more func() bool) (int, *pendingAck, error) {
	leasedAt := time.Now()
	ds, err := c.read(ctx, pending)
	if err != nil {
		return 0, nil, err
	}
	c.reads.Add(1)
	if len(ds) == 0 {
		c.emptyReads.Add(1)
		return 0, nil, nil
	}
	c.delivered.Add(int64(len(ds)))

	// The page is ours now: finish it even when ctx is cancelled, within
	// StopTimeout of the cancellation.
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stopWatch := context.AfterFunc(ctx, func() { time.AfterFunc(c.cfg.StopTimeout, cancel) })
	defer stopWatch()

	leaseID := ds[0].LeaseID
	extend := func() {
		if time.Since(leasedAt) < c.cfg.Lease/2 {
			return
		}
		if _, err := c.pool.Exec(pctx, sqlExtend, leaseID, c.interval(c.cfg.Lease)); err != nil {
			c.errs.Add(1)
			c.cfg.Logger.Warn("pgq client: extend_lease failed", "lease_id", leaseID, "error", err)
			return
		}
		c.extensions.Add(1)
		leasedAt = time.Now()
	}

	if c.txHandler != nil {
		for i := range ds {
			extend()
			c.handleTx(pctx, &ds[i])
		}
		return len(ds), nil, nil
	}

	type failure struct {
		id  int64
		err error
	}
	ok := make([]int64, 0, len(ds))
	var failed []failure
	for i := range ds {
		extend()
		if err := c.call(pctx, &ds[i]); err != nil {
			failed = append(failed, failure{ds[i].ID, err})
		} else {
			ok = append(ok, ds[i].ID)
		}
	}
	if len(failed) == 0 {
		if ctx.Err() == nil && !c.cfg.DisablePipelinedAck && (len(ds) == c.cfg.MaxMessages || more()) {
			return len(ds), &pendingAck{leaseID: leaseID, n: len(ds)}, nil
		}
		if c.settle(pctx, sqlAckAll, leaseID) {
			c.acked.Add(int64(len(ok)))
		}
		return len(ds), nil, nil
	}
	if len(ok) > 0 && c.settle(pctx, sqlAckIDs, leaseID, ok) {
		c.acked.Add(int64(len(ok)))
	}
	for _, f := range failed {
		c.nack(pctx, leaseID, f.id, f.err)
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

func (c *Consumer) handleTx(ctx context.Context, d *Delivery) {
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("pgq client: handler panicked: %v", r)
			}
		}()
		if err := c.txHandler(ctx, tx, d); err != nil {
			return &handlerError{err}
		}
		_, err = tx.Exec(ctx, sqlAckIDs, d.LeaseID, []int64{d.ID})
		return err
	})
	if err == nil {
		c.acked.Add(1)
		return
	}
	var he *handlerError
	if errors.As(err, &he) {
		c.nack(ctx, d.LeaseID, d.ID, he.err)
		return
	}
	// The ack or the commit failed. Everything rolled back; the message
	// comes back after the lease or is already with its new holder.
	c.errs.Add(1)
	if IsFenced(err) {
		c.cfg.Logger.Warn("pgq client: fenced: the lease expired and the message went to another consumer; "+
			"the transaction rolled back", "lease_id", d.LeaseID, "message_id", d.ID, "error", err)
		return
	}
	c.cfg.Logger.Warn("pgq client: transaction with ack failed; rolled back", "lease_id", d.LeaseID,
		"message_id", d.ID, "error", err)
}

type handlerError struct{ err error }

func (e *handlerError) Error() string { return e.err.Error() }
func (e *handlerError) Unwrap() error { return e.err }

func (c *Consumer) settle(ctx context.Context, sql string, args ...any) bool {
	if _, err := c.pool.Exec(ctx, sql, args...); err != nil {
		c.errs.Add(1)
		switch {
		case IsFenced(err):
			c.cfg.Logger.Warn("pgq client: ack fenced: the lease expired and its messages went to another consumer",
				"lease_id", args[0], "error", err)
		case IsNotFound(err):
			c.cfg.Logger.Warn("pgq client: ack of a lease the server no longer has", "lease_id", args[0], "error", err)
		default:
			c.cfg.Logger.Warn("pgq client: ack failed; the messages come back after the lease",
				"lease_id", args[0], "error", err)
		}
		return false
	}
	return true
}

func (c *Consumer) nack(ctx context.Context, leaseID, id int64, herr error) {
	var retry any // NULL: the server's exponential backoff
	var re *RetryError
	if errors.As(herr, &re) {
		retry = c.interval(max(re.After, 0))
	}
	msg := herr.Error()
	if r := []rune(msg); len(r) > maxNackError { // fanout.nack refuses longer error texts (PGQ03)
		msg = string(r[:maxNackError])
	}
	if _, err := c.pool.Exec(ctx, sqlNack, leaseID, []int64{id}, retry, msg); err != nil {
		c.errs.Add(1)
		c.cfg.Logger.Warn("pgq client: nack failed; the message comes back after the lease",
			"lease_id", leaseID, "message_id", id, "error", err)
		return
	}
	c.nacked.Add(1)
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
