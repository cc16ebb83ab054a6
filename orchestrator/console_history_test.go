package orchestrator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The console's rates: publish rate from the id sequence, except across
// its jump into the next storage partition (about 2^32 ids at once, which
// is no publish); settle rate (acked and dead-lettered) and nack rate from
// the group's counters; none on the first sample.
func TestLagHistoryRates(t *testing.T) {
	t.Parallel()
	h := newLagHistory(time.Hour)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	k := groupKey{"orders", "billing"}
	h.add(t0, map[groupKey]LagSample{k: {At: t0, Delivered: 10, Acked: 5, Nacked: 1, DeadLettered: 1}},
		map[string]int64{"orders": 100})
	first := h.get(k)[0]
	require.Nil(t, first.DeliverRate)
	require.Nil(t, first.SettleRate)
	require.Nil(t, first.NackRate)
	require.Nil(t, h.getTopic("orders")[0].PublishRate)

	t1 := t0.Add(10 * time.Second)
	h.add(t1, map[groupKey]LagSample{k: {At: t1, Delivered: 110, Acked: 85, Nacked: 11, DeadLettered: 1}},
		map[string]int64{"orders": 300})
	s := h.get(k)[1]
	require.InDelta(t, 10.0, *s.DeliverRate, 1e-9)
	require.InDelta(t, 8.0, *s.SettleRate, 1e-9, "80 acked, 0 dead-lettered in 10 s")
	require.InDelta(t, 1.0, *s.NackRate, 1e-9)
	require.InDelta(t, 20.0, *h.getTopic("orders")[1].PublishRate, 1e-9)

	// A count read lower than the last (a topic dropped and created again
	// under its name) gives a rate of 0, never a negative one.
	t2 := t1.Add(10 * time.Second)
	h.add(t2, map[groupKey]LagSample{k: {At: t2}}, map[string]int64{"orders": 5})
	require.InDelta(t, 0.0, *h.getTopic("orders")[2].PublishRate, 1e-9)
	t3 := t2.Add(10 * time.Second)
	h.add(t3, map[groupKey]LagSample{k: {At: t3}}, map[string]int64{"orders": 105})
	require.InDelta(t, 10.0, *h.getTopic("orders")[3].PublishRate, 1e-9)
}
