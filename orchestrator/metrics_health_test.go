package orchestrator

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"
)

// scrape serves collector c alone and scrapes it once.
func scrape(t *testing.T, c prometheus.Collector) (int, string) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return get(t, srv.URL)
}

// The health series behind deploy/prometheus's alerts: dead-lettered,
// acked and nacked totals per group (counters, 0 from the group's creation
// on; purging dead letters does not lower them),
// heartbeat age and timeout, stuck messages (0 for a group without any),
// check_consistency()'s row count and the topic's retention. Every group
// has each series from its creation on.
func TestMetricsHealthSeries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `SELECT fanout.create_topic('orders', semantics => 'pubsub', max_attempts => 1, retention => '2 hours')`)
	b.exec(t, `SELECT fanout.subscribe('orders', 'billing', heartbeat_timeout => '90 seconds')`)
	b.exec(t, `SELECT fanout.subscribe('orders', 'email')`)
	b.exec(t, `SELECT fanout.publish('orders', '{}') FROM generate_series(1, 3)`)
	// billing: two messages dead-lettered (nack at the last attempt), then
	// purged; the third waits for a retry that has been due for an hour.
	lease := b.int(t, `SELECT min(lease_id) FROM fanout.read('orders', 'billing', 'c', 2)`)
	require.Equal(t, int64(2), b.int(t, `SELECT fanout.nack($1)`, lease))
	require.Equal(t, int64(2), b.int(t, `SELECT fanout.purge_dead_letters('orders', 'billing', '0')`))
	b.exec(t, `SELECT fanout.create_topic('jobs')`)
	b.exec(t, `SELECT fanout.publish('jobs', '{}')`)
	jobs := b.int(t, `SELECT min(lease_id) FROM fanout.read('jobs', NULL, 'w', 1)`)
	require.Equal(t, int64(1), b.int(t, `SELECT fanout.nack($1, retry_in => '1 hour')`, jobs))
	b.exec(t, `UPDATE fanout.retry SET not_before = now() - interval '1 hour'`)

	s := b.scheduler(t, SchedulerConfig{LeaderTTL: time.Hour})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	code, body := get(t, srv.URL+"/metrics")
	require.Equal(t, http.StatusOK, code)
	for _, want := range []string{
		"# TYPE pgq_group_dead_lettered_total counter",
		`pgq_group_dead_lettered_total{group="billing",topic="orders"} 2`,
		`pgq_group_dead_lettered_total{group="email",topic="orders"} 0`,
		"# TYPE pgq_group_acked_total counter",
		"# TYPE pgq_group_nacked_total counter",
		`pgq_group_nacked_total{group="billing",topic="orders"} 2`,
		`pgq_group_acked_total{group="billing",topic="orders"} 0`,
		`pgq_group_acked_total{group="email",topic="orders"} 0`,
		`pgq_group_nacked_total{group="email",topic="orders"} 0`,
		`pgq_group_nacked_total{group="",topic="jobs"} 1`,
		`pgq_group_dead_letters{group="billing",topic="orders"} 0`,
		`pgq_group_heartbeat_timeout_seconds{group="billing",topic="orders"} 90`,
		`pgq_group_heartbeat_timeout_seconds{group="email",topic="orders"} 300`,
		`pgq_group_stuck_messages{group="billing",topic="orders"} 0`,
		`pgq_group_stuck_messages{group="",topic="jobs"} 1`,
		`pgq_topic_retention_seconds{topic="orders"} 7200`,
		"pgq_consistency_problems 0",
	} {
		require.True(t, strings.Contains(body, want), "/metrics lacks %s", want)
	}
	age := regexp.MustCompile(`pgq_group_heartbeat_age_seconds\{group="billing",topic="orders"\} (\S+)`).FindStringSubmatch(body)
	require.NotNil(t, age, "/metrics lacks the heartbeat age")
	v, err := strconv.ParseFloat(age[1], 64)
	require.NoError(t, err)
	require.GreaterOrEqual(t, v, 0.0)
	require.Less(t, v, 90.0, "billing read within its heartbeat timeout")

	// An inconsistency shows (a lease whose open counter disagrees with its
	// arrays).
	lease = b.int(t, `SELECT min(lease_id) FROM fanout.read('orders', 'email', 'c', 1)`)
	b.exec(t, `UPDATE fanout.lease SET open_count = open_count + 5 WHERE lease_id = fanout._lease_raw($1)`, lease)
	require.Positive(t, b.int(t, `SELECT count(*) FROM fanout.check_consistency()`))
	c := newStatsCollector(b.Pool, "", b.log)
	_, body = scrape(t, c)
	require.Regexp(t, `(?m)^pgq_consistency_problems [1-9]`, body)
}

// readGroups reads fanout.groups a chunk of topics per statement (each its
// own transaction, so a scrape of many topics never holds every topic's
// locks at once): the rows are those of one statement over every topic, in
// the same order; a topic not named is left out. ReadStats (/metrics) and
// the console's sampler read it so.
func TestReadGroupsInChunks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var names []string
	for i := range 5 {
		name := "chunk" + string(rune('a'+i))
		names = append(names, name)
		b.exec(t, `SELECT fanout.create_topic($1, semantics => 'pubsub')`, name)
		b.exec(t, `SELECT fanout.subscribe($1, 'g2')`, name)
		b.exec(t, `SELECT fanout.subscribe($1, 'g1')`, name)
		b.exec(t, `SELECT fanout.publish($1, '{}') FROM generate_series(1, $2)`, name, i+1)
	}
	b.exec(t, `SELECT fanout.create_topic('jobs')`)
	names = append(names, "jobs")
	all, err := queryRows(b.ctx, b.Pool, `SELECT topic, group_name, lag_messages FROM fanout.groups ORDER BY topic, group_name NULLS FIRST`)
	require.NoError(t, err)
	require.Len(t, all, 11)
	chunked, err := readGroups(b.ctx, b.Pool, "topic, group_name, lag_messages", names, 2)
	require.NoError(t, err)
	require.Equal(t, all, chunked)
	some, err := readGroups(b.ctx, b.Pool, "topic, group_name", []string{"chunkb", "chunkd"}, 1)
	require.NoError(t, err)
	require.Equal(t, []Row{{"topic": "chunkb", "group_name": "g1"}, {"topic": "chunkb", "group_name": "g2"},
		{"topic": "chunkd", "group_name": "g1"}, {"topic": "chunkd", "group_name": "g2"}}, some)
}
