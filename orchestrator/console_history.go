package orchestrator

import (
	"sync"
	"time"
)

// LagSample is one point of a group's sparklines: its lag, and its
// throughput since the previous sample.
type LagSample struct {
	At       time.Time `json:"t"`
	Messages int64     `json:"messages"`
	Seconds  float64   `json:"seconds"`
	// Delivered is the group's delivered counter (fanout.groups.delivered).
	Delivered int64 `json:"delivered"`
	// DeliverRate is messages handed out per second since the previous
	// sample (redeliveries included); null on the first sample.
	DeliverRate *float64 `json:"deliver_rate"`
	// Acked, Nacked and DeadLettered are the group's counters
	// (fanout.groups.acked_total, nacked_total, dead_lettered_total).
	Acked        int64 `json:"acked"`
	Nacked       int64 `json:"nacked"`
	DeadLettered int64 `json:"dead_lettered"`
	// SettleRate is messages the group was done with (acked or
	// dead-lettered) per second since the previous sample; NackRate the
	// messages its members nacked per second. Null on the first sample.
	SettleRate *float64 `json:"settle_rate"`
	NackRate   *float64 `json:"nack_rate"`
}

// TopicSample is one point of a topic's publish sparkline.
type TopicSample struct {
	At time.Time `json:"t"`
	// Published is the topic's published count as the metrics read it
	// (readPublished: ids handed out, rolled-back publishes included,
	// continuous across storage rotations).
	Published int64 `json:"published"`
	// PublishRate is messages published per second since the previous
	// sample; null on the first.
	PublishRate *float64 `json:"publish_rate"`
}

type groupKey struct{ topic, group string }

// lagHistory keeps the samples of the last window per group and per topic,
// in memory: the sidecar's own observations, not a time-series database.
type lagHistory struct {
	window time.Duration

	mu      sync.Mutex
	samples map[groupKey][]LagSample
	topics  map[string][]TopicSample
}

func newLagHistory(window time.Duration) *lagHistory {
	return &lagHistory{window: window, samples: map[groupKey][]LagSample{}, topics: map[string][]TopicSample{}}
}

func perSecond(d int64, dt time.Duration) *float64 {
	if dt <= 0 {
		return nil
	}
	r := max(0, float64(d)/dt.Seconds())
	return &r
}

// add appends one sample per group and topic seen at now (computing the
// rates from the previous sample), drops groups and topics not seen and
// samples older than the window. published holds the topics whose publish
// counter was readable.
func (h *lagHistory) add(now time.Time, seen map[groupKey]LagSample, published map[string]int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cut := now.Add(-h.window)
	for k := range h.samples {
		if _, ok := seen[k]; !ok {
			delete(h.samples, k)
		}
	}
	for t := range h.topics {
		if _, ok := published[t]; !ok {
			delete(h.topics, t)
		}
	}
	for t, n := range published {
		old := h.topics[t]
		s := TopicSample{At: now, Published: n}
		if len(old) > 0 {
			p := old[len(old)-1]
			s.PublishRate = perSecond(n-p.Published, now.Sub(p.At))
		}
		i := 0
		for i < len(old) && old[i].At.Before(cut) {
			i++
		}
		h.topics[t] = append(old[i:len(old):len(old)], s)
	}
	for k, s := range seen {
		old := h.samples[k]
		if len(old) > 0 {
			p := old[len(old)-1]
			dt := now.Sub(p.At)
			s.DeliverRate = perSecond(s.Delivered-p.Delivered, dt)
			s.SettleRate = perSecond(s.Acked+s.DeadLettered-p.Acked-p.DeadLettered, dt)
			s.NackRate = perSecond(s.Nacked-p.Nacked, dt)
		}
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

// getTopic returns a copy of the topic's samples, oldest first.
func (h *lagHistory) getTopic(t string) []TopicSample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]TopicSample{}, h.topics[t]...)
}
