package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/testdb"
)

// bundle is what every database test gets: its own migrated database, a
// context bounded well below the suite's budget, and captured logs.
type bundle struct {
	*testdb.Bundle
	ctx  context.Context
	logs *testdb.SyncBuffer
	log  *slog.Logger
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{ctx: testContext(t), logs: &testdb.SyncBuffer{}}
	b.Bundle = testdb.New(t)
	b.log = newTestLogger(b.logs)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("scheduler logs:\n%s", b.logs.String())
		}
	})
	return b
}

func testContext(t *testing.T) context.Context {
	// A safety net against hangs, not a timing assertion: generous enough
	// for a loaded machine and a durable server.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func (b *bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := b.Pool.Exec(b.ctx, sql, args...)
	require.NoError(t, err, sql)
}

func (b *bundle) int(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, sql, args...).Scan(&n), sql)
	return n
}

// dbNow is the database's clock.
func (b *bundle) dbNow(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT clock_timestamp()").Scan(&now))
	return now
}

// scheduler returns a scheduler on the test database with its own metrics
// registry, the test's logs, no jitter and a per-test leader role.
func (b *bundle) scheduler(t *testing.T, cfg SchedulerConfig) *Scheduler {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = b.log
	}
	if cfg.Jitter == 0 {
		cfg.Jitter = -1
	}
	s, err := NewScheduler(b.Pool, cfg)
	require.NoError(t, err)
	return s
}

// start runs s until the test ends (or the returned stop is called; stop
// returns Run's error).
func start(t *testing.T, s *Scheduler) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func randomName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// jobStatus returns the named job's state.
func jobStatus(t *testing.T, s *Scheduler, name string) JobStatus {
	t.Helper()
	for _, j := range s.Jobs() {
		if j.Name == name {
			return j
		}
	}
	return JobStatus{}
}

// fakeClock is a stub clock: Now is what the test set, Sleep advances it
// at once (nothing ever waits), Advance moves it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock(now time.Time) *fakeClock { return &fakeClock{now: now} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d > 0 {
		c.Advance(d)
	}
	return nil
}

// histogramCount is the sample count of a job's histogram series.
func histogramCount(t *testing.T, s *Scheduler, name, job string) uint64 {
	t.Helper()
	mfs, err := s.Registry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "job" && l.GetValue() == job {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

func newTestLogger(w *testdb.SyncBuffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
