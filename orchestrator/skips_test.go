package orchestrator

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A drop_topic left open in a transaction makes
// partition maintenance pass its topic by (never wait for it); /metrics
// counts it at once and /healthz turns "degraded" (still 200) once the topic
// has been passed by for longer than SkippedDegradedAfter, on the
// scheduler's clock, and "ok" again once maintenance gets through it.
func TestHealthzDegradedWhileATopicIsSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `SELECT fanout.create_topic('hold')`)
	b.exec(t, `SELECT fanout.create_topic('other')`)
	clk := newFakeClock(b.dbNow(t))
	s := b.scheduler(t, SchedulerConfig{Clock: clk, LeaderTTL: time.Hour, SkippedDegradedAfter: 10 * time.Minute})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)

	tx, err := b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx) //nolint:errcheck // rolled back below; no-op then
	_, err = tx.Exec(b.ctx, `SELECT fanout.drop_topic('hold', force => true)`)
	require.NoError(t, err)
	require.Equal(t, int64(1), b.int(t, `SELECT fanout._manage_partitions()`), "the other topic's partition")
	require.Equal(t, int64(2), b.int(t, `SELECT count(*) FROM fanout.partition p JOIN fanout.topic t USING (topic_id)
	                                      WHERE t.topic = 'other'`))

	code, h := health(t, srv.URL)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok", h.Status, "passed by only just now")
	require.Len(t, h.Skipped, 1)
	require.Equal(t, "hold", h.Skipped[0].Topic)
	require.Equal(t, "fanout._manage_partitions", h.Skipped[0].Func)
	_, body := get(t, srv.URL+"/metrics")
	require.Contains(t, body, `pgq_maintenance_skipped_topics{job="fanout._manage_partitions"} 1`)
	require.Contains(t, body, `pgq_maintenance_skipped_calls{job="fanout._manage_partitions",topic="hold"} 1`)
	require.Contains(t, body, `pgq_maintenance_skipped_seconds{job="fanout._manage_partitions",topic="hold"}`)

	clk.Advance(11 * time.Minute)
	code, h = health(t, srv.URL)
	require.Equal(t, http.StatusOK, code, "degraded is not unavailable: the sidecar works")
	require.Equal(t, "degraded", h.Status)
	require.Contains(t, h.Reason, `fanout._manage_partitions passes topic "hold" by since `)

	require.NoError(t, tx.Rollback(b.ctx))
	b.exec(t, `SELECT fanout._manage_partitions()`)
	require.Equal(t, int64(2), b.int(t, `SELECT count(*) FROM fanout.partition p JOIN fanout.topic t USING (topic_id)
	                                      WHERE t.topic = 'hold'`), "the held topic's partition, once let go")
	code, h = health(t, srv.URL)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok", h.Status, h.Reason)
	require.Empty(t, h.Skipped)
	_, body = get(t, srv.URL+"/metrics")
	require.Contains(t, body, `pgq_maintenance_skipped_topics{job="fanout._manage_partitions"} 0`)
}
