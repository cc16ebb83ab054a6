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

	mu     sync.Mutex
	leader bool
	until  time.Time // local deadline of the current lease
	since  time.Time // when this sidecar last became leader

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
func (e *Elector) Run(ctx context.Context) {
	failures := 0
	for {
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
	var won bool
	err := e.db.QueryRow(actx,
		`SELECT fanout.leader_attempt($1, make_interval(secs => $2), $3)`,
		e.cfg.ID, e.cfg.TTL.Seconds(), e.cfg.Name).Scan(&won)
	if err != nil {
		return fmt.Errorf("leader_attempt: %w", err)
	}
	e.set(won, start.Add(e.cfg.TTL-e.cfg.TTL/10))
	e.attempts.Add(1)
	return nil
}

func (e *Elector) set(won bool, until time.Time) {
	e.mu.Lock()
	was := e.leader && e.cfg.Clock.Now().Before(e.until)
	e.leader = won
	if won {
		e.until = until
		if !was {
			e.since = e.cfg.Clock.Now()
		}
	}
	e.mu.Unlock()
	e.changed(was, won, "lease not renewed: another sidecar holds it")
}

func (e *Elector) expire() {
	e.mu.Lock()
	expired := e.leader && !e.cfg.Clock.Now().Before(e.until)
	if expired {
		e.leader = false
	}
	e.mu.Unlock()
	if expired {
		e.changed(true, false, "lease expired locally: renewals failed")
	}
}

func (e *Elector) changed(was, is bool, reason string) {
	if was == is {
		return
	}
	if is {
		e.cfg.Logger.Info("elected leader", "leader_id", e.cfg.ID, "ttl", e.cfg.TTL.String())
	} else {
		e.cfg.Logger.Info("no longer leader", "leader_id", e.cfg.ID, "reason", reason)
	}
	if e.cfg.OnChange != nil {
		e.cfg.OnChange(is)
	}
}

// Resign gives up leadership (fanout.leader_resign) so a standby takes over
// at its next attempt instead of waiting for the TTL.
func (e *Elector) Resign(ctx context.Context) error {
	e.mu.Lock()
	was := e.leader && e.cfg.Clock.Now().Before(e.until)
	e.leader = false
	e.mu.Unlock()
	e.changed(was, false, "resigning")
	var held bool
	if err := e.db.QueryRow(ctx, `SELECT fanout.leader_resign($1, $2)`, e.cfg.ID, e.cfg.Name).Scan(&held); err != nil {
		return fmt.Errorf("leader_resign: %w", err)
	}
	if held {
		e.cfg.Logger.Info("resigned leadership", "leader_id", e.cfg.ID)
	}
	return nil
}
