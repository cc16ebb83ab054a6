package orchestrator

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/testdb"
)

// promtool returns the promtool that make test uses (scripts/deps.sh: on
// PATH, or extracted from Debian's prometheus package). Missing, it fails
// the test saying what to run.
func promtool(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	var stderr strings.Builder
	cmd := exec.Command(filepath.Join(root, "scripts", "deps.sh"), "path", "promtool")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "promtool is required by this test (scripts/deps.sh ensure promtool): %s", stderr.String())
	return strings.TrimSpace(string(out))
}

// backfillTestJob makes maint_operations list public.test_backfill_step (a
// step function doing `remaining` steps) beside pgq's own functions.
func backfillTestJob(t *testing.T, b *bundle, remaining int) {
	t.Helper()
	b.exec(t, `CREATE TABLE public.bf_state (remaining int NOT NULL)`)
	b.exec(t, `INSERT INTO public.bf_state VALUES ($1)`, remaining)
	b.exec(t, `CREATE FUNCTION public.test_backfill_step(p_topic text, p_now timestamptz DEFAULT now()) RETURNS int
	           LANGUAGE plpgsql AS $$
	           BEGIN
	             UPDATE public.bf_state SET remaining = remaining - 1 WHERE remaining > 0;
	             RETURN CASE WHEN FOUND THEN 1 ELSE 0 END;
	           END $$`)
	b.exec(t, `ALTER FUNCTION fanout.maint_operations(timestamptz) RENAME TO maint_operations_orig`)
	b.exec(t, `CREATE FUNCTION fanout.maint_operations(p_now timestamptz DEFAULT now())
	           RETURNS TABLE(func text, arg text) LANGUAGE sql AS $$
	             SELECT * FROM fanout.maint_operations_orig(p_now)
	             UNION ALL SELECT 'public.test_backfill_step', 'events' FROM public.bf_state WHERE remaining > 0
	           $$`)
}

// /metrics follows Prometheus' naming rules (promtool check metrics is
// clean: _total only on counters, units in names, no precomputed
// quantiles), and every job's counters and backfill series exist at 0 from
// its registration on, so increase(...) > 0 sees the first error after a
// start. A topic's published messages are a counter.
func TestMetricsPromtoolCleanAndStartAtZero(t *testing.T) {
	t.Parallel()
	tool := promtool(t)
	b := setup(t)
	b.exec(t, `SELECT fanout.create_topic('orders', semantics => 'pubsub')`)
	b.exec(t, `SELECT fanout.subscribe('orders', 'billing')`)
	b.exec(t, `SELECT fanout.publish('orders', '{}') FROM generate_series(1, 3)`)
	b.exec(t, `SELECT fanout.create_topic('quiet')`)
	b.exec(t, `BEGIN; SELECT fanout.publish('quiet', '{}'); ROLLBACK`)
	backfillTestJob(t, b, 4)
	// Not the leader: nothing runs but what the test runs.
	s := b.scheduler(t, SchedulerConfig{LeaderTTL: time.Hour})
	_, err := s.RunJob(b.ctx, discoverJobName)
	require.NoError(t, err)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)

	const bf = `job="public.test_backfill_step"`
	code, body := get(t, srv.URL+"/metrics")
	require.Equal(t, http.StatusOK, code)
	for _, want := range []string{
		// Registered, never run: every series at 0.
		`pgq_scheduler_job_errors_total{` + bf + `} 0`,
		`pgq_scheduler_job_runs_total{` + bf + `} 0`,
		`pgq_scheduler_job_errors_total{job="fanout._manage_partitions"} 0`,
		`pgq_scheduler_job_duration_seconds_count{` + bf + `} 0`,
		`pgq_scheduler_backfill_step_duration_seconds_count{` + bf + `} 0`,
		`pgq_scheduler_backfill_steps_per_second{` + bf + `} `,
		// Groups without a backfill: 0, not absent.
		`pgq_group_backfill_target_messages{group="billing",topic="orders"} 0`,
		`pgq_group_backfill_processed_messages{group="billing",topic="orders"} 0`,
		`pgq_group_backfill_messages_per_second{group="billing",topic="orders"} 0`,
		// Ids handed out, a rolled-back publish's too.
		"# TYPE pgq_topic_published_messages_total counter",
		`pgq_topic_published_messages_total{topic="orders"} 3`,
		`pgq_topic_published_messages_total{topic="quiet"} 1`,
	} {
		require.True(t, strings.Contains(body, want), "/metrics lacks %s", want)
	}
	for _, gone := range []string{"pgq_group_backfill_total", "pgq_scheduler_backfill_step_p95_seconds",
		"pgq_scheduler_backfill_rate", "pgq_group_backfill_rate{"} {
		require.False(t, strings.Contains(body, gone), "/metrics still has %s", gone)
	}

	// The backfill's steps land in the histogram (4 steps and the one that
	// found nothing left).
	_, err = s.RunJob(b.ctx, "public.test_backfill_step")
	require.NoError(t, err)
	_, body = get(t, srv.URL+"/metrics")
	for _, want := range []string{`pgq_scheduler_backfill_step_duration_seconds_count{` + bf + `} 5`,
		`pgq_scheduler_job_runs_total{` + bf + `} 1`} {
		require.True(t, strings.Contains(body, want), "/metrics lacks %s", want)
	}

	// Every series whose name ends in _total is a counter.
	typeRE := regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`)
	for _, m := range typeRE.FindAllStringSubmatch(body, -1) {
		if strings.HasSuffix(m[1], "_total") {
			require.Equal(t, "counter", m[2], m[1])
		}
	}

	cmd := exec.Command(tool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	require.NoError(t, err, "promtool check metrics:\n%s", out.String())
	require.Empty(t, strings.TrimSpace(out.String()), "promtool check metrics")
	if dir := os.Getenv("PGQ_TEST_METRICS_OUT"); dir != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "metrics.txt"), []byte(body), 0o644))
	}
}

// A sidecar whose role is a fanout_admin member, not the schema's owner,
// may not read the topics' id sequences: the scrape still answers, with
// every other series, and without pgq_topic_published_messages_total.
func TestMetricsPublishedWithoutSequenceRights(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `SELECT fanout.create_topic('orders')`)
	b.exec(t, `SELECT fanout.publish('orders', '{}')`)
	var r [5]byte
	_, _ = rand.Read(r[:])
	role := "pgq_metrics_" + hex.EncodeToString(r[:])
	b.exec(t, "CREATE ROLE "+role+" LOGIN IN ROLE fanout_admin")
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), b.Admin)
		if err == nil {
			defer conn.Close(context.Background())
			_, err = conn.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
		}
		if err != nil {
			t.Logf("drop role %s: %v", role, err)
		}
	})
	pool, err := pgxpool.New(b.ctx, testdb.WithUser(b.URL, role))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := NewScheduler(pool, SchedulerConfig{Logger: b.log, Jitter: -1})
	require.NoError(t, err)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	code, body := get(t, srv.URL+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.Contains(body, "pgq_database_up 1"))
	require.True(t, strings.Contains(body, `pgq_topic_messages{topic="orders"} 1`))
	require.False(t, strings.Contains(body, "pgq_topic_published_messages_total{"))
	require.NotContains(t, b.logs.String(), "reading the topics' id sequences failed")
}

// TestPublishedCounterAcrossRotations: a topic's published counter counts
// messages across storage-partition rotations. The id sequence jumps by
// 2^32 into the next partition, so read from the sequence alone the counter
// leapt by about 4 billion at each rotation and read 0 between the jump and
// the next publish.
func TestPublishedCounterAcrossRotations(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `SELECT fanout.create_topic('rotating', partition_interval => '1 hour')`)
	published := func() int64 {
		t.Helper()
		counts, err := readPublished(b.ctx, b.Pool)
		require.NoError(t, err)
		return counts["rotating"].n
	}
	rotate := func(hours int) {
		t.Helper()
		for step := 0; step < 3; step++ { // create, refresh, jump (fanout._manage_partitions)
			require.Positive(t, b.int(t, `SELECT fanout._manage_partitions(p_now => now() + make_interval(hours => $1))`, hours),
				"rotation step %d did nothing", step+1)
		}
	}
	b.exec(t, `SELECT fanout.publish('rotating', '{}') FROM generate_series(1, 3)`)
	require.Equal(t, int64(3), published())
	rotate(2)
	require.Greater(t, b.int(t, `SELECT max(lo_id) FROM fanout.partition p JOIN fanout.topic t USING (topic_id)
	                             WHERE t.topic = 'rotating' AND p.opened_at IS NOT NULL AND p.closed_at IS NULL`), int64(0),
		"the sequence is in a later partition")
	require.Equal(t, int64(3), published(), "right after the jump, before any publish")
	b.exec(t, `SELECT fanout.publish('rotating', '{}') FROM generate_series(1, 2)`)
	b.exec(t, `BEGIN; SELECT fanout.publish('rotating', '{}'); ROLLBACK`)
	require.Equal(t, int64(6), published(), "ids handed out, a rolled-back publish's too")
	rotate(4)
	b.exec(t, `SELECT fanout.publish('rotating', '{}')`)
	require.Equal(t, int64(7), published())

	// The reported counter never goes down for a topic, and starts afresh
	// for a topic created again under the same name.
	c := &statsCollector{}
	require.Equal(t, int64(7), c.notBelow(publishedCount{topicID: 1, n: 7}))
	require.Equal(t, int64(7), c.notBelow(publishedCount{topicID: 1, n: 5}))
	require.Equal(t, int64(2), c.notBelow(publishedCount{topicID: 2, n: 2}))
	// A dropped topic's entry goes at the next scrape; the live one stays.
	c.forgetPublishedExcept(map[string]publishedCount{"b": {topicID: 2, n: 2}})
	require.Len(t, c.published, 1)
	require.Equal(t, int64(2), c.notBelow(publishedCount{topicID: 2, n: 1}))
}
