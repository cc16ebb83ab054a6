package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// ElectorConfig configures an Elector.
type ElectorConfig struct {
	// ID names this sidecar in fanout.leader. Default: host-pid-random.
	ID string
	// Name is the elected role (p_name). Default "pgq-scheduler".
	Name string
	// TTL is how long one election holds on the database clock.
	// Default 15s; at most 1 hour.
	TTL time.Duration
	// RenewInterval is how often the leader renews. Default TTL/3.
	RenewInterval time.Duration
	// StandbyInterval is how often a standby tries to take over; short, so
	// that a resigned leader is replaced at once (one cheap statement).
	// Default min(RenewInterval, 1s).
	StandbyInterval time.Duration
	// Clock paces the attempts and bounds the local view of the lease.
	// Default RealClock.
	Clock Clock
	// Logger receives elections, losses and errors. Default slog.Default().
	Logger *slog.Logger
	// OnChange, when set, is called with the new state whenever this
	// sidecar gains or loses leadership.
	OnChange func(leader bool)
	// ConnConfig, when set, gives the election a connection of its own,
	// made with these settings (and made again after it breaks), instead of
	// the db passed to NewElector: jobs that hold every connection of a pool
	// (stuck on locks, say) cannot starve the renewals then. NewScheduler
	// sets it from its pool's settings.
	ConnConfig *pgx.ConnConfig
}

func (c ElectorConfig) withDefaults() ElectorConfig {
	if c.ID == "" {
		c.ID = DefaultLeaderID()
	}
	if c.Name == "" {
		c.Name = DefaultLeaderName
	}
	if c.TTL <= 0 {
		c.TTL = DefaultLeaderTTL
	}
	if c.RenewInterval <= 0 {
		c.RenewInterval = c.TTL / 3
	}
	if c.StandbyInterval <= 0 {
		c.StandbyInterval = min(c.RenewInterval, time.Second)
	}
	if c.Clock == nil {
		c.Clock = RealClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// DefaultLeaderID is host-pid-random: unique per process.
func DefaultLeaderID() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "pgq-scheduler"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Elector holds leadership through fanout.leader_attempt: a lease row with
// a TTL on the database clock, renewed every RenewInterval. Each attempt is
// one stateless statement, so it works through PgBouncer in transaction
// pooling mode (no session advisory locks). Locally, leadership is trusted
// only until TTL after the start of the last successful attempt (minus a
// tenth for safety), so a sidecar cut off from the database stops running
// jobs before another can be elected. Even if two leaders overlapped, every
// maintenance function takes its own advisory lock.
type Elector struct {
	cfg ElectorConfig
	db  DB

	connMu sync.Mutex
	conn   *pgx.Conn // the election's own connection (ConnConfig)

	mu       sync.Mutex
	leader   bool
	reported bool      // the state last logged and passed to OnChange
	until    time.Time // local deadline of the current lease
	since    time.Time // when this sidecar last became leader

	attempts atomic.Int64 // successful election attempts (won or lost)
}

// NewElector returns an elector on db; call Run to take part.
func NewElector(db DB, cfg ElectorConfig) *Elector {
	return &Elector{cfg: cfg.withDefaults(), db: db}
}

// ID is this sidecar's leader id.
func (e *Elector) ID() string { return e.cfg.ID }

// IsLeader tells whether this sidecar holds an unexpired lease.
func (e *Elector) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leader && e.cfg.Clock.Now().Before(e.until)
}

// Since is when this sidecar last became leader (zero if never).
func (e *Elector) Since() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.since
}

// Run takes part in the election until ctx is done. It does not resign:
// call Resign after Run returns for a clean handover. Errors (database
// down) are logged and retried with backoff from 250ms up to RenewInterval.
// A lease that ran out before it was renewed (renewals failed, or the
// process was paused past the TTL) is reported as lost before the next
// attempt, whatever that attempt finds.
func (e *Elector) Run(ctx context.Context) {
	failures := 0
	for {
		e.expire()
		wait := e.cfg.StandbyInterval
		if e.IsLeader() {
			wait = e.cfg.RenewInterval
		}
		if err := e.attempt(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			if failures == 1 || failures%10 == 0 {
				e.cfg.Logger.Warn("leader election failed", "error", err, "failures", failures)
			}
			wait = min(wait, 250*time.Millisecond<<min(failures-1, 10))
		} else {
			failures = 0
		}
		e.expire() // report a loss as soon as the local deadline passes
		if e.cfg.Clock.Sleep(ctx, wait) != nil {
			return
		}
	}
}

// attempt runs one election and updates the local state.
func (e *Elector) attempt(ctx context.Context) error {
	start := e.cfg.Clock.Now()
	actx, cancel := context.WithTimeout(ctx, max(e.cfg.RenewInterval, time.Second))
	defer cancel()
	won, err := e.queryBool(actx,
		`SELECT fanout.leader_attempt($1, make_interval(secs => $2), $3)`,
		e.cfg.ID, e.cfg.TTL.Seconds(), e.cfg.Name)
	if err != nil {
		return fmt.Errorf("leader_attempt: %w", err)
	}
	e.expire() // a lease that lapsed while the attempt ran is lost, even if this one won
	e.set(won, start.Add(e.cfg.TTL-e.cfg.TTL/10))
	e.attempts.Add(1)
	return nil
}

// queryBool runs a statement that returns one boolean, on the election's
// own connection when ConnConfig is set (connecting, or reconnecting after
// it broke), else on db.
func (e *Elector) queryBool(ctx context.Context, sql string, args ...any) (bool, error) {
	var v bool
	if e.cfg.ConnConfig == nil {
		err := e.db.QueryRow(ctx, sql, args...).Scan(&v)
		resetOnReadOnly(e.db, err)
		return v, err
	}
	e.connMu.Lock()
	defer e.connMu.Unlock()
	if e.conn != nil && e.conn.IsClosed() {
		e.conn = nil
	}
	if e.conn == nil {
		conn, err := pgx.ConnectConfig(ctx, e.cfg.ConnConfig.Copy())
		if err != nil {
			return false, fmt.Errorf("election connection: %w", err)
		}
		e.conn = conn
	}
	err := e.conn.QueryRow(ctx, sql, args...).Scan(&v)
	if discardConn(err) {
		// Not an error of the statement: the connection is unusable
		// (timed out, broken) or on a node that is no longer the primary
		// (25006, shutting down); the next attempt makes a new one.
		e.closeConnLocked()
	}
	return v, err
}

func (e *Elector) closeConnLocked() {
	if e.conn == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = e.conn.Close(cctx)
	e.conn = nil
}

// Close closes the election's own connection (if any). Call it after Run
// and Resign.
func (e *Elector) Close() {
	e.connMu.Lock()
	defer e.connMu.Unlock()
	e.closeConnLocked()
}

// set records the result of an attempt that won or lost.
func (e *Elector) set(won bool, until time.Time) {
	e.mu.Lock()
	was := e.reported
	e.leader = won
	e.reported = won
	if won {
		e.until = until
		if !was {
			e.since = e.cfg.Clock.Now()
		}
	}
	e.mu.Unlock()
	e.changed(was, won, "lease not renewed: another sidecar holds it")
}

// expire reports the loss of a lease whose local deadline has passed.
func (e *Elector) expire() {
	e.mu.Lock()
	expired := e.reported && !e.cfg.Clock.Now().Before(e.until)
	if expired {
		e.leader = false
		e.reported = false
	}
	e.mu.Unlock()
	if expired {
		e.changed(true, false, "lease expired locally before it was renewed (renewals failed, or this process was paused past the TTL)")
	}
}

const reasonResign = "resigning"

func (e *Elector) changed(was, is bool, reason string) {
	if was == is {
		return
	}
	if is {
		e.cfg.Logger.Info("elected leader", "leader_id", e.cfg.ID, "ttl", e.cfg.TTL.String())
	} else {
		level := slog.LevelWarn
		if reason == reasonResign {
			level = slog.LevelInfo
		}
		e.cfg.Logger.Log(context.Background(), level, "no longer leader", "leader_id", e.cfg.ID, "reason", reason)
	}
	if e.cfg.OnChange != nil {
		e.cfg.OnChange(is)
	}
}

// Resign gives up leadership (fanout.leader_resign) so a standby takes over
// at its next attempt instead of waiting for the TTL.
func (e *Elector) Resign(ctx context.Context) error {
	e.mu.Lock()
	was := e.reported
	e.leader = false
	e.reported = false
	e.mu.Unlock()
	e.changed(was, false, reasonResign)
	held, err := e.queryBool(ctx, `SELECT fanout.leader_resign($1, $2)`, e.cfg.ID, e.cfg.Name)
	if err != nil {
		return fmt.Errorf("leader_resign: %w", err)
	}
	if held {
		e.cfg.Logger.Info("resigned leadership", "leader_id", e.cfg.ID)
	}
	return nil
}
