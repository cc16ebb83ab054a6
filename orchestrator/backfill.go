package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// BackfillConfig configures the adaptive rate limiter of a Backfill.
type BackfillConfig struct {
	// TargetLatency is the step latency the driver aims at: when the p95
	// of recent steps exceeds it, the rate is halved. Default 10ms.
	TargetLatency time.Duration
	// MaxRate is the ceiling in steps per second; the driver starts there
	// and never exceeds it. Default 100.
	MaxRate float64
	// MinRate is the floor in steps per second. Default 1 (or MaxRate if
	// that is lower).
	MinRate float64
	// Window is how many recent steps the p95 is taken over. Default 20.
	Window int
	// MaxSteps bounds one Run; the next run goes on. Default 10000.
	MaxSteps int
	// Clock measures latencies and paces steps. Default RealClock.
	Clock Clock
}

// Validate rejects rates that are not finite numbers or are negative (a
// NaN MaxRate passed every "<= 0" check and left backfills unthrottled).
func (c BackfillConfig) Validate() error {
	for _, r := range []struct {
		name string
		v    float64
	}{{"max rate", c.MaxRate}, {"min rate", c.MinRate}} {
		if math.IsNaN(r.v) || math.IsInf(r.v, 0) || r.v < 0 {
			return fmt.Errorf("backfill %s %g: want a finite number >= 0 (0: the default)", r.name, r.v)
		}
	}
	return nil
}

func (c BackfillConfig) withDefaults() BackfillConfig {
	if c.TargetLatency <= 0 {
		c.TargetLatency = DefaultBackfillTargetLatency
	}
	if c.MaxRate <= 0 {
		c.MaxRate = DefaultBackfillMaxRate
	}
	if c.MinRate <= 0 {
		c.MinRate = DefaultBackfillMinRate
	}
	c.MinRate = min(c.MinRate, c.MaxRate)
	if c.Window <= 0 {
		c.Window = DefaultBackfillWindow
	}
	if c.MaxSteps <= 0 {
		c.MaxSteps = DefaultBackfillMaxSteps
	}
	if c.Clock == nil {
		c.Clock = RealClock{}
	}
	return c
}

// StepFunc does one bounded step of work and returns how much it did; 0
// means there is nothing left.
type StepFunc func(ctx context.Context) (int64, error)

// Backfill drives steps with adaptive rate limiting (AIMD): it starts at
// MaxRate steps per second and measures every step's latency. Once it has
// a few samples, a p95 over TargetLatency halves the rate (not below
// MinRate) and starts a fresh sample window, so one slow burst costs one
// halving and sustained slowness keeps lowering it; a p95 within target
// raises the rate by a quarter per step, up to MaxRate. The rate persists
// across runs, so a throttled backfill stays throttled on its next run.
type Backfill struct {
	cfg BackfillConfig

	mu      sync.Mutex
	rate    float64
	samples []time.Duration // ring of recent latencies
	next    int
	p95     time.Duration
	// observer, if set, is told every step's latency (the scheduler's
	// step-duration histogram).
	observer func(float64)
}

// setObserver makes the driver report every step's latency, in seconds.
func (b *Backfill) setObserver(f func(float64)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.observer = f
}

// NewBackfill returns a driver at MaxRate.
func NewBackfill(cfg BackfillConfig) *Backfill {
	cfg = cfg.withDefaults()
	return &Backfill{cfg: cfg, rate: cfg.MaxRate}
}

// Rate is the current rate in steps per second.
func (b *Backfill) Rate() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rate
}

// P95 is the p95 step latency of the current sample window (0 before
// enough samples).
func (b *Backfill) P95() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.p95
}

// minSamples is how many samples a decision needs.
func (b *Backfill) minSamples() int { return min(5, b.cfg.Window) }

// observe records one latency and adapts the rate.
func (b *Backfill) observe(lat time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.observer != nil {
		b.observer(lat.Seconds())
	}
	if len(b.samples) < b.cfg.Window {
		b.samples = append(b.samples, lat)
	} else {
		b.samples[b.next] = lat
		b.next = (b.next + 1) % b.cfg.Window
	}
	if len(b.samples) < b.minSamples() {
		return
	}
	sorted := slices.Clone(b.samples)
	slices.Sort(sorted)
	idx := (len(sorted)*95+99)/100 - 1 // nearest-rank p95
	b.p95 = sorted[idx]
	if b.p95 > b.cfg.TargetLatency {
		b.rate = max(b.cfg.MinRate, b.rate/2)
		b.samples = b.samples[:0]
		b.next = 0
		return
	}
	b.rate = min(b.cfg.MaxRate, b.rate*1.25)
}

// BackfillResult is what one Run did.
type BackfillResult struct {
	Steps int
	Rows  int64
	// Done is true when a step reported 0 (nothing left).
	Done bool
}

// Run calls step until it returns 0, MaxSteps steps have run, or ctx ends
// (then it returns what it did and no error: the next run goes on). Step
// starts are paced at most Rate() per second.
func (b *Backfill) Run(ctx context.Context, step StepFunc) (BackfillResult, error) {
	var res BackfillResult
	clk := b.cfg.Clock
	for res.Steps < b.cfg.MaxSteps {
		start := clk.Now()
		n, err := step(ctx)
		if err != nil {
			if isCancellation(err) && budgetSpent(ctx) {
				return res, nil // the run's time is up: the next run goes on
			}
			return res, fmt.Errorf("backfill step %d: %w", res.Steps+1, err)
		}
		lat := clk.Now().Sub(start)
		b.observe(lat)
		res.Steps++
		res.Rows += n
		if n <= 0 {
			res.Done = true
			return res, nil
		}
		pause := time.Duration(float64(time.Second)/b.Rate()) - lat
		if err := clk.Sleep(ctx, pause); err != nil {
			return res, nil
		}
	}
	return res, nil
}

// budgetSpent tells whether ctx is done or about to be (a statement that
// got the last milliseconds as its statement_timeout fails a hair early).
func budgetSpent(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) < 50*time.Millisecond // a context's deadline is on the wall clock
}

// isCancellation tells whether a step failed because its time ran out (the
// context, or the statement_timeout set from it: SQLSTATE 57014) rather
// than for a reason of its own, which is reported however close the
// deadline is.
func isCancellation(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return true
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "57014" // query_canceled (statement_timeout)
}
