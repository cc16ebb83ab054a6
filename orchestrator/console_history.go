package orchestrator

import (
	"sync"
	"time"
)

// LagSample is one point of a group's lag sparkline.
type LagSample struct {
	At       time.Time `json:"t"`
	Messages int64     `json:"messages"`
	Seconds  float64   `json:"seconds"`
}

type groupKey struct{ topic, group string }

// lagHistory keeps the lag samples of the last window per group, in
// memory: the sidecar's own observations, not a time-series database.
type lagHistory struct {
	window time.Duration

	mu      sync.Mutex
	samples map[groupKey][]LagSample
}

func newLagHistory(window time.Duration) *lagHistory {
	return &lagHistory{window: window, samples: map[groupKey][]LagSample{}}
}

// add appends one sample per group seen at now, drops groups not seen and
// samples older than the window.
func (h *lagHistory) add(now time.Time, seen map[groupKey]LagSample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cut := now.Add(-h.window)
	for k := range h.samples {
		if _, ok := seen[k]; !ok {
			delete(h.samples, k)
		}
	}
	for k, s := range seen {
		old := h.samples[k]
		i := 0
		for i < len(old) && old[i].At.Before(cut) {
			i++
		}
		h.samples[k] = append(old[i:len(old):len(old)], s)
	}
}

// get returns a copy of the group's samples, oldest first.
func (h *lagHistory) get(k groupKey) []LagSample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]LagSample{}, h.samples[k]...)
}
