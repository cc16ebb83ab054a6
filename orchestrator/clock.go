package orchestrator

import (
	"context"
	"time"
)

// Clock is the time source of every service. Production uses RealClock;
// tests pass a stub so that jobs see a chosen "now" (p_now) and waits
// return at once instead of sleeping.
type Clock interface {
	// Now is the current time; maintenance functions receive it as p_now.
	Now() time.Time
	// Sleep waits for d, or until ctx is done (then it returns ctx.Err()).
	Sleep(ctx context.Context, d time.Duration) error
}

// RealClock is the wall clock.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// Sleep waits for d or ctx.
func (RealClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
