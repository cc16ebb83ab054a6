package orchestrator

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgq/pgq/internal/testdb"
)

// bundle is what every database test gets: its own migrated database, a
// context bounded well below the suite's budget, and captured logs.
type bundle struct {
	*testdb.Bundle
	ctx  context.Context
	logs *syncBuffer
	log  *slog.Logger
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{ctx: testContext(t), logs: &syncBuffer{}}
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
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
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

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ensureGroupsView installs a stand-in fanout.groups in this test's
// database when the schema does not have the view yet, with the columns of
// the contract and three fixed rows. It reports whether it did.
func (b *bundle) ensureGroupsView(t *testing.T) bool {
	t.Helper()
	if b.int(t, `SELECT count(*) FROM pg_class WHERE oid = to_regclass('fanout.groups')`) > 0 {
		return false
	}
	b.exec(t, standInGroupsView)
	return true
}

// standInGroupsView has the columns fanout.groups is specified with.
const standInGroupsView = `
CREATE VIEW fanout.groups AS
SELECT * FROM (VALUES
  ('orders'::text, NULL::text, 'active'::text, 2, now() - interval '3 seconds', 7::bigint, 12.5::float8,
   interval '9 seconds', 3::bigint, 0::bigint, 0::bigint, 40::bigint, NULL::text, NULL::bigint, NULL::bigint,
   NULL::float8, NULL::interval),
  ('events', 'billing', 'dead', 0, now() - interval '2 hours', 1500, 7200.0,
   interval '2 hours', 0, 4, 12, 900, NULL, NULL, NULL, NULL, NULL),
  ('events', 'search', 'active', 3, now() - interval '1 second', 250, 3.0,
   NULL, 10, 0, 0, 5000, 'running', 4000, 10000, 812.5, interval '8 seconds')
) AS g(topic, group_name, status, members, last_heartbeat, lag_messages, lag_seconds,
       oldest_unacked_age, in_flight, dead_letters, lost_messages, delivered,
       backfill_status, backfill_processed, backfill_total, backfill_rate, backfill_eta)`

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

func newTestLogger(w *syncBuffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
