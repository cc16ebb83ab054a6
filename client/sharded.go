package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CodeNotOnShard (PGQ26) is what a shard of a sharded deployment raises for
// a topic it does not hold (instead of PGQ01), and what the directory's
// fanout_directory.shard_for raises for a topic no placement matches.
// Sharded re-reads the directory on it and calls the new shard once more.
const CodeNotOnShard = "PGQ26"

// CodeProxyInTransaction (PGQ27) is what fanout_proxy's publish,
// publish_batch, ack and nack raise inside a larger transaction: a PL/Proxy
// call commits on the shard at once (docs/scaling-out.md).
const CodeProxyInTransaction = "PGQ27"

// ErrNotPlaced says that no placement of the directory matches the topic.
var ErrNotPlaced = errors.New("topic is placed on no shard")

// ErrShardUnreachable says that a call could not reach the topic's shard
// (connection refused or timed out, the server shutting down or starting,
// the connection lost): the shard is down, the others are not affected
// (one pool per shard). The error names the shard and keeps the cause.
var ErrShardUnreachable = errors.New("shard unreachable")

// DefaultShardConnectTimeout bounds a connection attempt to a shard whose
// conninfo sets no connect_timeout, so that a call to a topic on a shard
// that does not answer fails instead of hanging (WithShardPoolConfig
// changes it).
const DefaultShardConnectTimeout = 5 * time.Second

// shardError names the shard in err and marks it ErrShardUnreachable when
// the shard could not be reached.
func shardError(shard string, err error) error {
	if err == nil {
		return nil
	}
	if unreachable(err) {
		return fmt.Errorf("pgq client: shard %q: %w: %w", shard, ErrShardUnreachable, err)
	}
	return fmt.Errorf("pgq client: shard %q: %w", shard, err)
}

func unreachable(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	switch {
	case errors.As(err, &ce), errors.As(err, &ne), errors.Is(err, pgconn.ErrConnClosed),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return true
	}
	switch SQLState(err) {
	case "57P01", "57P02", "57P03": // admin shutdown, crash shutdown, cannot connect now
		return true
	}
	return false
}

// Sharded routes pgq calls by topic to the shard (a whole pgq database) that
// the directory places the topic on (docs/scaling-out.md). It caches the
// directory (fanout_directory.config) and re-reads it when its version
// changes (polled every DirectoryRefresh) or when a shard answers PGQ26; a
// directory that cannot be reached leaves the cached copy in use. One pool
// per shard: a shard that is down fails the calls of its own topics at once
// (ErrShardUnreachable, naming the shard; a connection attempt gives up
// after DefaultShardConnectTimeout) and leaves the other shards' calls
// alone. Safe for concurrent use.
//
// Leases are a shard's: Read returns a Lease that carries the shard that
// issued it and its topic, and Ack/Nack go to that shard, even when the
// topic has moved since (its old shard still holds the lease).
type Sharded struct {
	dir  *pgxpool.Pool
	cfg  shardedConfig
	stop context.CancelFunc
	done chan struct{}

	mu    sync.Mutex
	snap  *directorySnapshot
	pools map[string]*shardPool
}

type shardPool struct {
	conninfo string
	pool     *pgxpool.Pool
}

type shardedConfig struct {
	refresh    time.Duration
	poolConfig func(shard string, c *pgxpool.Config)
	logger     *slog.Logger
}

// ShardedOption configures NewSharded.
type ShardedOption func(*shardedConfig)

// WithDirectoryRefresh sets how often the directory's version is polled
// (default 1 s; a PGQ26 re-reads it at once whatever this is).
func WithDirectoryRefresh(d time.Duration) ShardedOption {
	return func(c *shardedConfig) { c.refresh = d }
}

// WithShardPoolConfig lets the caller adjust each shard's pool (size,
// credentials, tracing) before it is opened; shard is the shard's name.
func WithShardPoolConfig(f func(shard string, c *pgxpool.Config)) ShardedOption {
	return func(c *shardedConfig) { c.poolConfig = f }
}

// WithShardedLogger sets the logger of directory refreshes (default
// slog.Default()).
func WithShardedLogger(l *slog.Logger) ShardedOption {
	return func(c *shardedConfig) { c.logger = l }
}

// Lease is a page's lease in a sharded deployment: the lease id is the
// shard's, so it travels with the shard that issued it and its topic.
type Lease struct {
	Topic string
	Shard string
	ID    int64
}

// ShardedPage is what Sharded.Read returns: one lease and its messages
// (none when there was nothing to hand out; Lease.ID is 0 then).
type ShardedPage struct {
	Lease    Lease
	Messages []Delivery
}

// directorySnapshot is one read of fanout_directory.config().
type directorySnapshot struct {
	Version int64 `json:"version"`
	Shards  map[string]struct {
		Conninfo   string `json:"conninfo"`
		ProxyIndex int    `json:"proxy_index"`
	} `json:"shards"`
	Placements map[string]string `json:"placements"`
	// Draining maps a moved topic to the shard it moved from, while groups
	// still drain its older messages there (fanout_directory.draining).
	Draining map[string]string `json:"draining"`
	prefixes []string          // patterns ending in %, longest first
}

// index lists the prefix placements, longest first.
func (d *directorySnapshot) index() {
	d.prefixes = d.prefixes[:0]
	for p := range d.Placements {
		if strings.HasSuffix(p, "%") {
			d.prefixes = append(d.prefixes, p)
		}
	}
	sort.Slice(d.prefixes, func(i, j int) bool { return len(d.prefixes[i]) > len(d.prefixes[j]) })
}

// shardFor is fanout_directory.shard_for: the exact name, else the longest
// matching prefix.
func (d *directorySnapshot) shardFor(topic string) (string, bool) {
	if s, ok := d.Placements[topic]; ok {
		return s, true
	}
	for _, p := range d.prefixes {
		if strings.HasPrefix(topic, p[:len(p)-1]) {
			return d.Placements[p], true
		}
	}
	return "", false
}

// NewSharded connects to the directory database at directoryURL, reads the
// directory and returns a client that routes by it. Close it when done.
func NewSharded(ctx context.Context, directoryURL string, opts ...ShardedOption) (*Sharded, error) {
	cfg := shardedConfig{refresh: time.Second, logger: slog.Default()}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.refresh <= 0 {
		return nil, errors.New("pgq client: sharded: the directory refresh interval must be positive")
	}
	dir, err := pgxpool.New(ctx, directoryURL)
	if err != nil {
		return nil, fmt.Errorf("pgq client: sharded: directory: %w", err)
	}
	s := &Sharded{dir: dir, cfg: cfg, pools: map[string]*shardPool{}, done: make(chan struct{})}
	if _, err := s.reload(ctx); err != nil {
		dir.Close()
		return nil, err
	}
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stop = stop
	go s.poll(bg)
	return s, nil
}

// Close stops the directory polling and closes every pool.
func (s *Sharded) Close() {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pools {
		p.pool.Close()
	}
	s.pools = map[string]*shardPool{}
	s.dir.Close()
}

func (s *Sharded) poll(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.cfg.refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var v int64
		if err := s.dir.QueryRow(ctx, `SELECT fanout_directory.version()`).Scan(&v); err != nil {
			if ctx.Err() == nil {
				s.cfg.logger.Warn("pgq sharded: directory version poll failed; routing by the cached copy",
					"err", err, "version", s.version())
			}
			continue
		}
		if v != s.version() {
			if _, err := s.reload(ctx); err != nil && ctx.Err() == nil {
				s.cfg.logger.Warn("pgq sharded: directory re-read failed; routing by the cached copy", "err", err)
			}
		}
	}
}

// DirectoryVersion returns the version of the cached directory.
func (s *Sharded) DirectoryVersion() int64 { return s.version() }

func (s *Sharded) version() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap.Version
}

// reload reads the directory and installs it unless a newer one is cached.
func (s *Sharded) reload(ctx context.Context) (*directorySnapshot, error) {
	var raw []byte
	if err := s.dir.QueryRow(ctx, `SELECT fanout_directory.config()`).Scan(&raw); err != nil {
		return nil, fmt.Errorf("pgq client: sharded: read the directory: %w", err)
	}
	d := &directorySnapshot{}
	if err := json.Unmarshal(raw, d); err != nil {
		return nil, fmt.Errorf("pgq client: sharded: directory: %w", err)
	}
	d.index()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.snap == nil || d.Version > s.snap.Version {
		if s.snap != nil {
			s.cfg.logger.Info("pgq sharded: directory changed", "from", s.snap.Version, "to", d.Version)
		}
		s.snap = d
	}
	return s.snap, nil
}

// route returns the shard of topic and its pool.
func (s *Sharded) route(ctx context.Context, topic string) (string, *pgxpool.Pool, error) {
	s.mu.Lock()
	name, ok := s.snap.shardFor(topic)
	v := s.snap.Version
	s.mu.Unlock()
	if !ok {
		return "", nil, fmt.Errorf("pgq client: topic %q (directory version %d): %w", topic, v, ErrNotPlaced)
	}
	p, err := s.shardPool(ctx, name)
	return name, p, err
}

// shardPool returns the pool of shard name, opening it (or reopening it
// after its conninfo changed) as needed.
func (s *Sharded) shardPool(ctx context.Context, name string) (*pgxpool.Pool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sh, ok := s.snap.Shards[name]
	if !ok {
		return nil, fmt.Errorf("pgq client: shard %q is not in the directory (version %d)", name, s.snap.Version)
	}
	if p := s.pools[name]; p != nil {
		if p.conninfo == sh.Conninfo {
			return p.pool, nil
		}
		p.pool.Close()
		delete(s.pools, name)
	}
	pc, err := pgxpool.ParseConfig(sh.Conninfo)
	if err != nil {
		return nil, fmt.Errorf("pgq client: shard %q: %w", name, err)
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = DefaultShardConnectTimeout
	}
	if s.cfg.poolConfig != nil {
		s.cfg.poolConfig(name, pc)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("pgq client: shard %q: %w", name, err)
	}
	s.pools[name] = &shardPool{conninfo: sh.Conninfo, pool: pool}
	return pool, nil
}

// Do runs fn on the pool of topic's shard. When fn fails with PGQ26 (the
// shard does not hold the topic: the cached directory is stale), Do re-reads
// the directory and, if the topic's shard changed, runs fn again there
// (at most twice more). fn must be safe to repeat after a PGQ26 (it was
// refused before it changed anything).
func (s *Sharded) Do(ctx context.Context, topic string, fn func(ctx context.Context, shard string, db *pgxpool.Pool) error) error {
	var err error
	var last string
	for attempt := 0; attempt < 3; attempt++ {
		name, pool, rerr := s.route(ctx, topic)
		last = name
		if rerr != nil {
			return rerr
		}
		if err = fn(ctx, name, pool); SQLState(err) != CodeNotOnShard {
			return shardError(name, err)
		}
		if _, rerr := s.reload(ctx); rerr != nil {
			return errors.Join(err, rerr)
		}
		if next, _, rerr := s.route(ctx, topic); rerr != nil || next == name {
			return shardError(name, err) // the directory still says this shard: the topic does not exist there
		}
	}
	return shardError(last, err)
}

// ShardPool returns the name and pool of topic's shard: for a transactional
// outbox, begin the business transaction there and publish with
// NewPublisher(pool).WithTx(tx) (the shard that holds the tenant's data
// should hold its topics: place them by the tenant's prefix).
func (s *Sharded) ShardPool(ctx context.Context, topic string) (string, *pgxpool.Pool, error) {
	return s.route(ctx, topic)
}

// Publish publishes one message to topic on its shard (Publisher.Publish).
func (s *Sharded) Publish(ctx context.Context, topic string, m Message, opts ...PublishOption) (int64, error) {
	var id int64
	err := s.Do(ctx, topic, func(ctx context.Context, _ string, db *pgxpool.Pool) error {
		var err error
		id, err = NewPublisher(db).Publish(ctx, topic, m, opts...)
		return err
	})
	return id, err
}

// PublishBatch publishes msgs to topic on its shard in one statement
// (Publisher.PublishBatch).
func (s *Sharded) PublishBatch(ctx context.Context, topic string, msgs []Message, opts ...PublishOption) ([]int64, error) {
	var ids []int64
	err := s.Do(ctx, topic, func(ctx context.Context, _ string, db *pgxpool.Pool) error {
		var err error
		ids, err = NewPublisher(db).PublishBatch(ctx, topic, msgs, opts...)
		return err
	})
	return ids, err
}

// Read claims one page of topic on its shard (fanout.read). While a moved
// topic drains on its previous shard (docs/scaling-out.md), Read reads
// there first and reads the new shard when the old one hands out nothing
// (or cannot be reached): messages published before and after a move are
// not ordered with each other. o.Ack must be 0: settle the previous page
// with Ack(page.Lease), which goes to the shard that issued it.
func (s *Sharded) Read(ctx context.Context, topic string, o ReadOptions) (ShardedPage, error) {
	if o.Ack != 0 {
		return ShardedPage{}, errors.New("pgq client: sharded read: ReadOptions.Ack is not routed; call Ack with the page's Lease")
	}
	s.mu.Lock()
	from := s.snap.Draining[topic]
	s.mu.Unlock()
	if from != "" {
		pool, err := s.shardPool(ctx, from)
		var ds []Delivery
		if err == nil {
			ds, err = Read(ctx, pool, topic, o)
		}
		if err == nil && len(ds) > 0 {
			return ShardedPage{Lease: Lease{Topic: topic, Shard: from, ID: ds[0].LeaseID}, Messages: ds}, nil
		}
		if err != nil && ctx.Err() == nil {
			s.cfg.logger.Warn("pgq sharded: read of a moved topic's previous shard failed; reading its new shard",
				"topic", topic, "shard", from, "err", err)
		}
	}
	var page ShardedPage
	err := s.Do(ctx, topic, func(ctx context.Context, shard string, db *pgxpool.Pool) error {
		ds, err := Read(ctx, db, topic, o)
		if err != nil {
			return err
		}
		page = ShardedPage{Lease: Lease{Topic: topic, Shard: shard}, Messages: ds}
		if len(ds) > 0 {
			page.Lease.ID = ds[0].LeaseID
		}
		return nil
	})
	return page, err
}

// Ack acks messages of lease l (all when none are named) on the shard that
// issued it (fanout.ack).
func (s *Sharded) Ack(ctx context.Context, l Lease, messageIDs ...int64) (int, error) {
	pool, err := s.leasePool(ctx, l)
	if err != nil {
		return 0, err
	}
	n, err := Ack(ctx, pool, l.ID, messageIDs...)
	return n, shardError(l.Shard, err)
}

// Nack gives messages of lease l back (Nack) on the shard that issued it.
func (s *Sharded) Nack(ctx context.Context, l Lease, messageIDs []int64, retryIn time.Duration, reason string) (int, error) {
	pool, err := s.leasePool(ctx, l)
	if err != nil {
		return 0, err
	}
	n, err := Nack(ctx, pool, l.ID, messageIDs, retryIn, reason)
	return n, shardError(l.Shard, err)
}

func (s *Sharded) leasePool(ctx context.Context, l Lease) (*pgxpool.Pool, error) {
	if l.Shard == "" {
		return nil, fmt.Errorf("pgq client: lease %d of topic %q names no shard (take it from Sharded.Read)", l.ID, l.Topic)
	}
	return s.shardPool(ctx, l.Shard)
}

// CreateTopic creates topic on the shard it is placed on
// (fanout.create_topic with semantics "queue" or "pubsub" and the other
// settings at their defaults) and returns its id there.
func (s *Sharded) CreateTopic(ctx context.Context, topic, semantics string) (int64, error) {
	var id int64
	err := s.Do(ctx, topic, func(ctx context.Context, shard string, db *pgxpool.Pool) error {
		if err := db.QueryRow(ctx, `SELECT fanout.create_topic(topic => $1::text, semantics => $2::text)`,
			topic, semantics).Scan(&id); err != nil {
			return fmt.Errorf("pgq client: create_topic %q on shard %q: %w", topic, shard, err)
		}
		return nil
	})
	return id, err
}

// Subscribe subscribes group to topic on its shard (fanout.subscribe, the
// other settings at their defaults) and returns the group's status.
func (s *Sharded) Subscribe(ctx context.Context, topic, group string) (string, error) {
	var status string
	err := s.Do(ctx, topic, func(ctx context.Context, shard string, db *pgxpool.Pool) error {
		if err := db.QueryRow(ctx, `SELECT status FROM fanout.subscribe(topic => $1::text, group_name => $2::text)`,
			topic, group).Scan(&status); err != nil {
			return fmt.Errorf("pgq client: subscribe %q to %q on shard %q: %w", group, topic, shard, err)
		}
		return nil
	})
	return status, err
}
