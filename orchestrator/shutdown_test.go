package orchestrator

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// blockingJob runs until released or cancelled.
type blockingJob struct {
	started  chan struct{}
	release  chan struct{}
	finished atomic.Bool
	canceled atomic.Bool
}

func newBlockingJob() *blockingJob {
	return &blockingJob{started: make(chan struct{}, 10), release: make(chan struct{})}
}

func (*blockingJob) Name() string     { return "blocking" }
func (*blockingJob) Schedule() string { return "@every 1s" }
func (j *blockingJob) Run(ctx context.Context) (Result, error) {
	j.started <- struct{}{}
	select {
	case <-j.release:
		j.finished.Store(true)
		return Result{Rows: 1}, nil
	case <-ctx.Done():
		j.canceled.Store(true)
		return Result{}, ctx.Err()
	}
}

// On stop the scheduler takes no new runs and waits for running ones,
// then resigns.
func TestShutdownWaitsForRunningJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.scheduler(t, SchedulerConfig{LeaderID: "w", LeaderTTL: 30 * time.Second, ShutdownTimeout: 10 * time.Second})
	j := newBlockingJob()
	require.NoError(t, s.Register(j))
	stop := start(t, s)
	select {
	case <-j.started:
	case <-time.After(time.Minute):
		t.Fatal("the job never started")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	require.Never(t, func() bool { return len(stopped) > 0 }, 300*time.Millisecond, 20*time.Millisecond,
		"Run waits for the running job")
	require.Equal(t, "w", b.leaderRow(t), "still leading while the job finishes")
	close(j.release)
	require.NoError(t, <-stopped)
	require.True(t, j.finished.Load())
	require.False(t, j.canceled.Load())
	require.Empty(t, b.leaderRow(t), "resigned after the job finished")
	require.Empty(t, j.started, "no new run after the stop")
}

// A job still running at the shutdown timeout is cancelled.
func TestShutdownTimeoutCancelsJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.scheduler(t, SchedulerConfig{LeaderID: "w", LeaderTTL: 30 * time.Second, ShutdownTimeout: 200 * time.Millisecond})
	j := newBlockingJob()
	require.NoError(t, s.Register(j))
	stop := start(t, s)
	select {
	case <-j.started:
	case <-time.After(time.Minute):
		t.Fatal("the job never started")
	}
	require.EqualError(t, stop(), "scheduler: running jobs were cancelled at the shutdown timeout")
	require.True(t, j.canceled.Load())
	require.Empty(t, b.leaderRow(t), "resigned all the same")
	require.Contains(t, b.logs.String(), "running jobs did not finish within the shutdown timeout")
}
