package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the scheduler's own series; statsCollector adds the topic and
// group series read from the database at scrape time.
type metrics struct {
	runs        *prometheus.CounterVec
	errors      *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	rows        *prometheus.CounterVec
	calls       *prometheus.CounterVec
	limited     *prometheus.CounterVec
	lastSuccess *prometheus.GaugeVec
	leader      prometheus.GaugeFunc
	bfRate      *prometheus.GaugeVec
	bfStep      *prometheus.HistogramVec
	gapAlerts   prometheus.Counter
}

// initJob creates every series of job name at 0 when the job is registered,
// so that increase(...) and rate(...) see the first error (or run, or
// backfill step) after a start instead of a series that appears with it.
func (m *metrics) initJob(name string, backfill *Backfill) {
	for _, c := range []*prometheus.CounterVec{m.runs, m.errors, m.rows, m.calls, m.limited} {
		c.WithLabelValues(name)
	}
	m.duration.WithLabelValues(name)
	if backfill != nil {
		m.bfRate.WithLabelValues(name).Set(backfill.Rate())
		backfill.setObserver(m.bfStep.WithLabelValues(name).Observe)
	}
}

// SequenceGapAlertsFunc is the maintenance function whose result counts the
// sequence gaps it reported (one fanout.event_log row each).
const SequenceGapAlertsFunc = "fanout._sequence_gap_alerts"

func newMetrics(reg prometheus.Registerer, isLeader func() bool) *metrics {
	job := []string{"job"}
	m := &metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgq_scheduler_job_runs_total", Help: "Runs of each job (including failed ones).",
		}, job),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgq_scheduler_job_errors_total", Help: "Failed runs of each job (errors, timeouts, panics).",
		}, job),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pgq_scheduler_job_duration_seconds",
			Help:    "Duration of each job run.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, job),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgq_scheduler_job_rows_total", Help: "Work done by each job as its SQL function reported it (rows, segments, steps).",
		}, job),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgq_scheduler_job_calls_total", Help: "SQL calls made by each job.",
		}, job),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgq_scheduler_job_batch_limited_total", Help: "Runs that stopped at the batch limit with work left.",
		}, job),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pgq_scheduler_job_last_success_timestamp_seconds", Help: "Unix time of each job's last successful run.",
		}, job),
		leader: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pgq_scheduler_leader", Help: "1 when this sidecar is the leader (runs the jobs), else 0.",
		}, func() float64 {
			if isLeader() {
				return 1
			}
			return 0
		}),
		bfRate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pgq_scheduler_backfill_steps_per_second", Help: "Current adaptive rate of each backfill job, in steps per second.",
		}, job),
		bfStep: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pgq_scheduler_backfill_step_duration_seconds",
			Help:    "Duration of each step of each backfill job (the adaptive rate halves when their p95 exceeds --backfill-target-latency).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, job),
		gapAlerts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pgq_sequence_gap_alerts_total",
			Help: "Sequence gaps older than their topic's gap_alert_after, reported by " + SequenceGapAlertsFunc + " (one event_log row each).",
		}),
	}
	reg.MustRegister(m.runs, m.errors, m.duration, m.rows, m.calls, m.limited, m.lastSuccess, m.leader, m.bfRate, m.bfStep,
		m.gapAlerts)
	return m
}

// statsCollector reads fanout.topics and fanout.groups on every scrape.
type statsCollector struct {
	db         DB
	leaderName string
	logger     *slog.Logger

	// published keeps each topic's (by id) highest published count
	// reported: at a rotation the jump of the sequence and the count of the
	// segment left behind commit apart, and a counter must not go down.
	publishedMu sync.Mutex
	published   map[int64]int64

	up, topicMessages, topicOldest, topicSegments, topicPartitions, topicBytes, topicDropped, topicGroups *prometheus.Desc
	topicPublished                                                                                        *prometheus.Desc
	lagMessages, lagSeconds, deadLetters, inFlight, lost, delivered, members, status                      *prometheus.Desc
	oldestUnacked, retryPending, bfProcessed, bfTotal, bfRate                                             *prometheus.Desc
	expired, waiting                                                                                      *prometheus.Desc
	kparts, kpartsUnowned, kpartImbalance, kpartMaxLag, kpartMaxLagSeconds                                *prometheus.Desc
	skippedTopics, skippedSeconds, skippedCalls                                                           *prometheus.Desc
	heartbeatAge, heartbeatTimeout, deadLettered, stuck, topicRetention, consistency                      *prometheus.Desc
	acked, nacked                                                                                         *prometheus.Desc
	filtered                                                                                              *prometheus.Desc

	// check_consistency() reads every table: at most once per
	// ConsistencyEvery, the scrapes in between repeat its last count.
	consMu      sync.Mutex
	consAt      time.Time
	consCount   float64
	consOK      bool
	consRunning bool
}

// StuckAfter is the age from which pgq_group_stuck_messages counts a
// message (fanout.stuck_messages(StuckAfter): under a lease or waiting for
// a retry that long).
const StuckAfter = 15 * time.Minute

// ConsistencyEvery bounds how often a scrape runs fanout.check_consistency().
const ConsistencyEvery = time.Minute

func newStatsCollector(db DB, leaderName string, logger *slog.Logger) *statsCollector {
	t := []string{"topic"}
	g := []string{"topic", "group"}
	d := prometheus.NewDesc
	return &statsCollector{
		db: db, leaderName: leaderName, logger: logger,
		up:            d("pgq_database_up", "1 when the scrape could read the fanout views, else 0.", nil, nil),
		topicMessages: d("pgq_topic_messages", "Messages retained in the topic.", t, nil),
		topicOldest:   d("pgq_topic_oldest_message_age_seconds", "Age of the oldest retained message.", t, nil),
		topicSegments: d("pgq_topic_segments", "Segments (PostgreSQL partitions) of the topic's message table.", t, nil),
		// The name of pgq_topic_segments before 0.2.0, emitted until the next
		// minor release (docs/releases.md, compatibility policy).
		topicPartitions: d("pgq_topic_partitions", "Deprecated: pgq_topic_segments (removed in the next minor release).", t, nil),
		topicBytes:      d("pgq_topic_bytes", "Bytes on disk of the topic's message table.", t, nil),
		topicDropped:    d("pgq_topic_dropped_unread_total", "Unread messages dropped by max_retention.", t, nil),
		topicGroups:     d("pgq_topic_active_groups", "Active consumer groups of the topic.", t, nil),
		topicPublished: d("pgq_topic_published_messages_total",
			"Message ids the topic has handed out: its published messages, also those of rolled-back transactions "+
				"(read from the topic's id sequence; absent when the sidecar's role may not read fanout_data's sequences).", t, nil),
		lagMessages:   d("pgq_group_lag_messages", "Messages the group has not consumed yet.", g, nil),
		lagSeconds:    d("pgq_group_lag_seconds", "Age of the oldest message the group has not consumed.", g, nil),
		oldestUnacked: d("pgq_group_oldest_unacked_age_seconds", "Age of the group's oldest un-acked message.", g, nil),
		deadLetters:   d("pgq_group_dead_letters", "Dead letters of the group.", g, nil),
		retryPending:  d("pgq_group_retry_pending", "Nacked messages of the group waiting for redelivery.", g, nil),
		inFlight:      d("pgq_group_in_flight", "Messages under a lease of the group that runs.", g, nil),
		expired:       d("pgq_group_expired", "Messages under a lease of the group that ran out, not taken over yet (the next read hands them out again).", g, nil),
		waiting:       d("pgq_group_waiting", "Messages of the group waiting for their sequence's turn (sequence-ordered topics).", g, nil),
		lost:          d("pgq_group_lost_messages_total", "Messages the group lost (dropped unread).", g, nil),
		delivered:     d("pgq_group_delivered_total", "Messages delivered to the group.", g, nil),
		members:       d("pgq_group_members", "Members (consumers) seen in the group.", g, nil),
		status:        d("pgq_group_status", "1 for the group's current status (active, paused, dead, cancelled).", append(g, "status"), nil),
		bfProcessed:   d("pgq_group_backfill_processed_messages", "Messages the group's backfill has processed (0 without a backfill).", g, nil),
		bfTotal:       d("pgq_group_backfill_target_messages", "Messages the group's backfill has to process (0 without a backfill).", g, nil),
		bfRate:        d("pgq_group_backfill_messages_per_second", "Backfill rate of the group in messages per second (0 without a backfill).", g, nil),
		// Partitioned topics: one series per group, never per partition.
		kparts:             d("pgq_group_key_partitions", "Key partitions of the group's (partitioned) topic.", g, nil),
		kpartsUnowned:      d("pgq_group_key_partitions_unowned", "Key partitions of the group with no owner (free, or explicit mode).", g, nil),
		kpartImbalance:     d("pgq_group_key_partition_imbalance", "Most minus fewest key partitions owned by one member of the group (0 or 1 when even).", g, nil),
		kpartMaxLag:        d("pgq_group_key_partition_max_lag_messages", "Largest lag of one key partition of the group, in messages.", g, nil),
		kpartMaxLagSeconds: d("pgq_group_key_partition_max_lag_seconds", "Largest lag of one key partition of the group, in seconds.", g, nil),
		// fanout.maint_skips(): series only for topics being passed by.
		skippedTopics:  d("pgq_maintenance_skipped_topics", "Topics the maintenance function is passing by because another transaction holds a lock it needs (fanout.maint_skips()).", []string{"job"}, nil),
		skippedSeconds: d("pgq_maintenance_skipped_seconds", "How long the maintenance function has been passing the topic by.", []string{"job", "topic"}, nil),
		skippedCalls:   d("pgq_maintenance_skipped_calls", "Calls of the maintenance function that passed the topic by since it last got through it.", []string{"job", "topic"}, nil),
		// Health (docs/troubleshooting.md).
		heartbeatAge:     d("pgq_group_heartbeat_age_seconds", "Seconds since the group's last sign of life (heartbeat, read or ack of any member).", g, nil),
		heartbeatTimeout: d("pgq_group_heartbeat_timeout_seconds", "The group's heartbeat_timeout (dead after dead_after_misses of them without a sign of life).", g, nil),
		deadLettered:     d("pgq_group_dead_lettered_total", "Messages the group dead-lettered since it was created (purges and replays do not lower it).", g, nil),
		acked:            d("pgq_group_acked_total", "Messages the group's members acked since it was created.", g, nil),
		nacked: d("pgq_group_nacked_total",
			"Messages the group's members nacked since it was created (retried or, at the last attempt, dead-lettered).", g, nil),
		filtered: d("pgq_group_filtered_total",
			"Messages the group passed over because their headers did not contain its subscription filter (docs/filters.md).", g, nil),
		stuck: d("pgq_group_stuck_messages",
			fmt.Sprintf("Messages of the group under a lease or waiting for a retry for over %v (fanout.stuck_messages).", StuckAfter), g, nil),
		topicRetention: d("pgq_topic_retention_seconds", "The topic's retention setting.", t, nil),
		consistency: d("pgq_consistency_problems",
			"Rows of fanout.check_consistency() (0 on a healthy system; run at most once a minute; absent when the role may not call it).", nil, nil),
	}
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.topicMessages, c.topicOldest, c.topicSegments, c.topicPartitions, c.topicBytes,
		c.topicDropped, c.topicGroups, c.topicPublished, c.lagMessages, c.lagSeconds, c.oldestUnacked, c.deadLetters, c.retryPending, c.inFlight,
		c.lost, c.delivered, c.members, c.status, c.bfProcessed, c.bfTotal, c.bfRate, c.expired, c.waiting,
		c.kparts, c.kpartsUnowned, c.kpartImbalance, c.kpartMaxLag, c.kpartMaxLagSeconds,
		c.skippedTopics, c.skippedSeconds, c.skippedCalls,
		c.heartbeatAge, c.heartbeatTimeout, c.deadLettered, c.stuck, c.topicRetention, c.consistency,
		c.acked, c.nacked, c.filtered} {
		ch <- d
	}
}

var groupStatuses = []string{"active", "paused", "dead", "cancelled"}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
	defer cancel()
	// First: the series that tell which topic a tenant's lock holds up,
	// while reading the views below may wait for that very lock.
	c.collectSkips(ctx, ch)
	st, err := ReadStats(ctx, c.db, "")
	if err != nil {
		c.logger.Warn("metrics: reading fanout views failed", "error", err)
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	emit := func(d *prometheus.Desc, vt prometheus.ValueType, r Row, col string, labels ...string) {
		if v, ok := r.Float(col); ok {
			ch <- prometheus.MustNewConstMetric(d, vt, finite(v), labels...)
		}
	}
	emitOr0 := func(d *prometheus.Desc, r Row, col string, labels ...string) {
		v, ok := r.Float(col)
		if !ok {
			v = 0
		}
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, finite(v), labels...)
	}
	var now time.Time
	if err := c.db.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		c.logger.Warn("metrics: reading the database clock failed", "error", err)
	}
	stuck, err := readStuck(ctx, c.db)
	if err != nil {
		c.logger.Warn("metrics: reading fanout.stuck_messages failed", "error", err)
	}
	c.collectConsistency(ctx, ch)
	published, err := readPublished(ctx, c.db)
	if err != nil {
		c.logger.Warn("metrics: reading the topics' id sequences failed", "error", err)
	} else {
		c.forgetPublishedExcept(published)
	}
	for _, r := range st.Topics {
		t := r.Text("topic")
		if p, ok := published[t]; ok {
			ch <- prometheus.MustNewConstMetric(c.topicPublished, prometheus.CounterValue, float64(c.notBelow(p)), t)
		}
		emit(c.topicMessages, prometheus.GaugeValue, r, "messages", t)
		emit(c.topicOldest, prometheus.GaugeValue, r, "oldest_message_age", t)
		emit(c.topicSegments, prometheus.GaugeValue, r, r.SegmentsCol(), t)
		emit(c.topicPartitions, prometheus.GaugeValue, r, r.SegmentsCol(), t)
		emit(c.topicBytes, prometheus.GaugeValue, r, "bytes", t)
		emit(c.topicDropped, prometheus.CounterValue, r, "dropped_unread", t)
		emit(c.topicGroups, prometheus.GaugeValue, r, "active_groups", t)
		emit(c.topicRetention, prometheus.GaugeValue, r, "retention", t)
	}
	for _, r := range st.Groups {
		t, g := r.Text("topic"), r.Text("group_name") // "" for a queue topic's implicit group
		emit(c.lagMessages, prometheus.GaugeValue, r, "lag_messages", t, g)
		emit(c.lagSeconds, prometheus.GaugeValue, r, "lag_seconds", t, g)
		emit(c.oldestUnacked, prometheus.GaugeValue, r, "oldest_unacked_age", t, g)
		emit(c.deadLetters, prometheus.GaugeValue, r, "dead_letters", t, g)
		emit(c.retryPending, prometheus.GaugeValue, r, "retry_pending", t, g)
		emit(c.inFlight, prometheus.GaugeValue, r, "in_flight", t, g)
		emit(c.expired, prometheus.GaugeValue, r, "expired", t, g)
		emit(c.waiting, prometheus.GaugeValue, r, "waiting", t, g)
		emit(c.lost, prometheus.CounterValue, r, "lost_messages", t, g)
		emit(c.delivered, prometheus.CounterValue, r, "delivered", t, g)
		emit(c.members, prometheus.GaugeValue, r, "members", t, g)
		// A group without a backfill has NULL there: 0, so the series exist
		// before a group's first backfill.
		emitOr0(c.bfProcessed, r, "backfill_processed", t, g)
		emitOr0(c.bfTotal, r, "backfill_total", t, g)
		emitOr0(c.bfRate, r, "backfill_rate", t, g)
		emit(c.heartbeatTimeout, prometheus.GaugeValue, r, "heartbeat_timeout", t, g)
		if hb, ok := r.Time("last_heartbeat"); ok && !now.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.heartbeatAge, prometheus.GaugeValue, max(now.Sub(hb).Seconds(), 0), t, g)
		}
		emit(c.deadLettered, prometheus.CounterValue, r, "dead_lettered_total", t, g)
		emit(c.acked, prometheus.CounterValue, r, "acked_total", t, g)
		emit(c.nacked, prometheus.CounterValue, r, "nacked_total", t, g)
		emit(c.filtered, prometheus.CounterValue, r, "filtered_total", t, g)
		if stuck != nil {
			ch <- prometheus.MustNewConstMetric(c.stuck, prometheus.GaugeValue, float64(stuck[[2]string{t, g}]), t, g)
		}
		cur := r.Text("status")
		for _, s := range groupStatuses {
			v := 0.0
			if s == cur {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.status, prometheus.GaugeValue, v, t, g, s)
		}
	}
	for _, r := range st.KeyPartitions {
		t, g := r.Text("topic"), r.Text("group_name")
		emit(c.kparts, prometheus.GaugeValue, r, "partitions", t, g)
		emit(c.kpartsUnowned, prometheus.GaugeValue, r, "unowned", t, g)
		emit(c.kpartImbalance, prometheus.GaugeValue, r, "imbalance", t, g)
		emit(c.kpartMaxLag, prometheus.GaugeValue, r, "max_lag_messages", t, g)
		emit(c.kpartMaxLagSeconds, prometheus.GaugeValue, r, "max_lag_seconds", t, g)
	}
}

// publishedSQL reads how many message ids each topic's sequence has handed
// out (fanout_data.m<topic_id>.id is an identity column), where the role may
// read the sequence: a role without USAGE on fanout_data or SELECT on the
// sequence gets no row for it. One catalog look-up per topic, no table read.
// publishedSQL: per topic, the ids its sequence handed out: those of the
// segments it has jumped past (fanout.topic_ids_left, added at
// each jump) and those of the segment it is in (from that segment's
// first id). The sequence alone jumps by 2^32 at each rotation.
const publishedSQL = `
SELECT t.topic, t.topic_id, coalesce(l.ids, 0) + coalesce(s.last - greatest(p.lo_id, 1) + 1, 0)
FROM fanout.topics t
CROSS JOIN LATERAL (
    SELECT CASE WHEN pg_catalog.has_schema_privilege('fanout_data', 'USAGE')
                THEN pg_catalog.pg_get_serial_sequence(format('fanout_data.%I', 'm' || t.topic_id), 'id') END AS seq) q
CROSS JOIN LATERAL (SELECT pg_catalog.pg_sequence_last_value(q.seq::regclass) AS last) s
LEFT JOIN fanout.topic_ids_left l ON l.topic_id = t.topic_id
LEFT JOIN LATERAL (
    SELECT p.lo_id FROM fanout.partition p
    WHERE p.topic_id = t.topic_id AND p.lo_id <= s.last
    ORDER BY p.lo_id DESC LIMIT 1) p ON true
WHERE q.seq IS NOT NULL
  AND pg_catalog.has_sequence_privilege(q.seq, 'SELECT, USAGE')`

// publishedReadableSQL: whether publishedSQL's tables may be read.
const publishedReadableSQL = `
SELECT pg_catalog.has_table_privilege('fanout.topic_ids_left', 'SELECT')
   AND pg_catalog.has_table_privilege('fanout.partition', 'SELECT')`

// publishedCount is a topic's published count as read (publishedSQL).
type publishedCount struct {
	topicID, n int64
}

// notBelow returns p's count, or the highest reported for its topic if that
// is higher (see statsCollector.published).
func (c *statsCollector) notBelow(p publishedCount) int64 {
	c.publishedMu.Lock()
	defer c.publishedMu.Unlock()
	if c.published == nil {
		c.published = map[int64]int64{}
	}
	n := max(p.n, c.published[p.topicID])
	c.published[p.topicID] = n
	return n
}

// forgetPublishedExcept drops the highest counts kept for topics that are no
// longer there (dropped), so a sidecar that runs for years among topics that
// come and go keeps one entry per live topic, not per topic it ever saw.
func (c *statsCollector) forgetPublishedExcept(live map[string]publishedCount) {
	ids := make(map[int64]bool, len(live))
	for _, p := range live {
		ids[p.topicID] = true
	}
	c.publishedMu.Lock()
	defer c.publishedMu.Unlock()
	for id := range c.published {
		if !ids[id] {
			delete(c.published, id)
		}
	}
}

func readPublished(ctx context.Context, db DB) (map[string]publishedCount, error) {
	// PostgreSQL checks a query's table privileges before it runs, whatever
	// its WHERE says: a role that may not read the counts' tables gets no
	// counter (as without rights on the sequences), not an error.
	var readable bool
	if err := db.QueryRow(ctx, publishedReadableSQL).Scan(&readable); err != nil {
		return nil, fmt.Errorf("read published counts: %w", err)
	}
	out := map[string]publishedCount{}
	if !readable {
		return out, nil
	}
	rows, err := db.Query(ctx, publishedSQL)
	if err != nil {
		return nil, fmt.Errorf("read published counts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var topic string
		var p publishedCount
		if err := rows.Scan(&topic, &p.topicID, &p.n); err != nil {
			return nil, fmt.Errorf("read published counts: %w", err)
		}
		out[topic] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read published counts: %w", err)
	}
	return out, nil
}

// collectSkips exports fanout.maint_skips(): per maintenance function the
// number of topics it is passing by (0 for the functions that pass none, so
// an alert can rely on the series), and per such topic since when and how
// many calls.
func (c *statsCollector) collectSkips(ctx context.Context, ch chan<- prometheus.Metric) {
	skips, err := ReadSkips(ctx, c.db)
	if err != nil {
		c.logger.Warn("metrics: reading fanout.maint_skips() failed", "error", err)
		return
	}
	var now time.Time
	if err := c.db.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		c.logger.Warn("metrics: reading the database clock failed", "error", err)
		return
	}
	per := map[string]int{}
	for _, k := range skips {
		per[k.Func]++
		ch <- prometheus.MustNewConstMetric(c.skippedSeconds, prometheus.GaugeValue,
			max(now.Sub(k.SkippedSince).Seconds(), 0), k.Func, k.Topic)
		ch <- prometheus.MustNewConstMetric(c.skippedCalls, prometheus.GaugeValue, float64(k.Skips), k.Func, k.Topic)
	}
	if _, ok := per[manageParts]; !ok {
		per[manageParts] = 0
	}
	for fn, n := range per {
		ch <- prometheus.MustNewConstMetric(c.skippedTopics, prometheus.GaugeValue, float64(n), fn)
	}
}

// manageParts is the maintenance function that passes topics by
// (fanout._manage_partitions); its pgq_maintenance_skipped_topics series is
// always there.
const manageParts = "fanout._manage_partitions"

// stuckSQL counts per group the messages fanout.stuck_messages reports.
const stuckSQL = `SELECT topic, coalesce(group_name, ''), count(*) FROM fanout.stuck_messages($1::interval) GROUP BY 1, 2`

// readStuck returns per (topic, group) the messages under a lease or
// waiting for a retry for over StuckAfter; nil when the schema has no
// fanout.stuck_messages.
func readStuck(ctx context.Context, db DB) (map[[2]string]int64, error) {
	var has bool
	if err := db.QueryRow(ctx, `SELECT to_regprocedure('fanout.stuck_messages(interval)') IS NOT NULL`).Scan(&has); err != nil {
		return nil, fmt.Errorf("read stuck messages: %w", err)
	}
	if !has {
		return nil, nil
	}
	rows, err := db.Query(ctx, stuckSQL, fmt.Sprintf("%d seconds", int64(StuckAfter.Seconds())))
	if err != nil {
		return nil, fmt.Errorf("read stuck messages: %w", err)
	}
	defer rows.Close()
	out := map[[2]string]int64{}
	for rows.Next() {
		var topic, group string
		var n int64
		if err := rows.Scan(&topic, &group, &n); err != nil {
			return nil, fmt.Errorf("read stuck messages: %w", err)
		}
		out[[2]string{topic, group}] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read stuck messages: %w", err)
	}
	return out, nil
}

// collectConsistency exports the row count of fanout.check_consistency(),
// run at most once per ConsistencyEvery (it reads every table); a role
// without an admin grant on '%' gets no series (PGQ21), logged once per run.
func (c *statsCollector) collectConsistency(ctx context.Context, ch chan<- prometheus.Metric) {
	c.consMu.Lock()
	due := !c.consRunning && (c.consAt.IsZero() || time.Since(c.consAt) >= ConsistencyEvery)
	if due {
		c.consRunning = true
	}
	c.consMu.Unlock()
	if due {
		var n int64
		err := c.db.QueryRow(ctx, `SELECT count(*) FROM fanout.check_consistency()`).Scan(&n)
		c.consMu.Lock()
		c.consRunning, c.consAt = false, time.Now()
		c.consOK, c.consCount = err == nil, float64(n)
		c.consMu.Unlock()
		if err != nil {
			c.logger.Info("metrics: fanout.check_consistency() not exported", "error", err)
		}
	}
	c.consMu.Lock()
	ok, n := c.consOK, c.consCount
	c.consMu.Unlock()
	if ok {
		ch <- prometheus.MustNewConstMetric(c.consistency, prometheus.GaugeValue, n)
	}
}
