package orchestrator

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pgq_group_filtered_total: messages a group passed over because their
// headers did not contain its subscription filter (fanout.groups
// filtered_total), 0 for a group without a filter; on a key-partitioned
// topic the sum over its key partitions.
func TestMetricsFilteredTotal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, topic := range []string{"orders", "keyed"} {
		opts := ""
		if topic == "keyed" {
			opts = ", partitions => 2"
		}
		b.exec(t, `SELECT fanout.create_topic($1, semantics => 'pubsub'`+opts+`)`, topic)
		b.exec(t, `SELECT fanout.subscribe($1, 'eu', filter => '{"region": "eu"}')`, topic)
		b.exec(t, `SELECT fanout.subscribe($1, 'all')`, topic)
		b.exec(t, `SELECT fanout.publish($1, '{}', jsonb_build_object('region', CASE WHEN i % 4 = 0 THEN 'eu' ELSE 'us' END),
		                                message_group => 'k' || i)
		           FROM generate_series(1, 8) AS i`, topic)
		// Every key partition's page: one read per partition at most.
		for i := 0; i < 4; i++ {
			b.exec(t, `SELECT count(*) FROM fanout.read($1, 'eu', 'c', 100)`, topic)
		}
	}
	s := b.scheduler(t, SchedulerConfig{LeaderTTL: time.Hour})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	code, body := get(t, srv.URL+"/metrics")
	require.Equal(t, http.StatusOK, code)
	for _, want := range []string{
		"# TYPE pgq_group_filtered_total counter",
		`pgq_group_filtered_total{group="eu",topic="orders"} 6`,
		`pgq_group_filtered_total{group="all",topic="orders"} 0`,
		`pgq_group_filtered_total{group="eu",topic="keyed"} 6`,
	} {
		require.True(t, strings.Contains(body, want), "/metrics lacks %s", want)
	}
}
