package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// The JSON API's shapes. Group "" with Queue true is the implicit group of
// a queue topic (group_name NULL in SQL); pubsub group names are never
// empty. Ages and durations are in seconds; absent values are null.

// ConsoleOverview is everything the page shows, in one response
// (GET /api/overview).
type ConsoleOverview struct {
	GeneratedAt time.Time   `json:"generated_at"`
	Sidecar     SidecarView `json:"sidecar"`
	Leader      *LeaderView `json:"leader"`
	// Page says which topics Topics holds (and Groups: theirs).
	Page   PageView    `json:"page"`
	Topics []TopicView `json:"topics"`
	Groups []GroupView `json:"groups"`
	Jobs   []JobView   `json:"jobs"`
	Events []EventView `json:"events"`
	// EventsError says why Events is empty when fanout.event_log is not
	// readable (the sidecar's role is not the schema owner).
	EventsError string `json:"events_error,omitempty"`
}

// SidecarView is the sidecar serving the console.
type SidecarView struct {
	ID     string `json:"id"`
	Leader bool   `json:"leader"` // this sidecar runs the maintenance jobs
	Admin  bool   `json:"admin"`  // admin actions are enabled
	// RefreshSeconds is how often the page reloads its data.
	RefreshSeconds float64 `json:"refresh_seconds"`
	// SampleSeconds is the interval of the lag samples.
	SampleSeconds float64 `json:"sample_seconds"`
}

// LeaderView is the sidecar currently holding the scheduler role.
type LeaderView struct {
	ID               string  `json:"id"`
	ExpiresInSeconds float64 `json:"expires_in_seconds"`
}

// TopicView is one row of fanout.topics.
type TopicView struct {
	Topic         string   `json:"topic"`
	Semantics     string   `json:"semantics"`
	Completion    string   `json:"completion"`
	ActiveGroups  int64    `json:"active_groups"`
	Messages      int64    `json:"messages"`
	OldestAge     *float64 `json:"oldest_message_age_seconds"`
	Segments      int64    `json:"segments"`
	Bytes         int64    `json:"bytes"`
	DroppedUnread int64    `json:"dropped_unread"`
	Channel       string   `json:"channel"`
	// KeyPartitions is the topic's number of key partitions (P of
	// create_topic(partitions => P)); 0 when unpartitioned. Segments
	// above counts its storage segments (its message table's partitions).
	KeyPartitions int64 `json:"key_partitions"`
	// PublishRate is messages published per second between the last two
	// samples; null before the second sample or when not readable.
	PublishRate    *float64      `json:"publish_rate"`
	PublishHistory []TopicSample `json:"publish_history"`
}

// GroupView is one row of fanout.groups plus the newest dead letter's
// error, the members and the lag history.
type GroupView struct {
	Topic         string     `json:"topic"`
	Group         string     `json:"group"`
	Queue         bool       `json:"queue"`
	Status        string     `json:"status"`
	Members       int64      `json:"members"`
	MemberList    []Member   `json:"member_list"`
	LastHeartbeat *time.Time `json:"last_heartbeat"`
	LagMessages   int64      `json:"lag_messages"`
	LagSeconds    float64    `json:"lag_seconds"`
	OldestUnacked *float64   `json:"oldest_unacked_age_seconds"`
	InFlight      int64      `json:"in_flight"`
	RetryPending  int64      `json:"retry_pending"`
	DeadLetters   int64      `json:"dead_letters"`
	// NewestDeadLetterError is the last_error of the newest dead letter.
	NewestDeadLetterError *string    `json:"newest_dead_letter_error"`
	NewestDeadLetterAt    *time.Time `json:"newest_dead_letter_at"`
	LostMessages          int64      `json:"lost_messages"`
	Delivered             int64      `json:"delivered"`
	// AckedTotal, NackedTotal and DeadLetteredTotal are the group's
	// counters since its creation (fanout.groups).
	AckedTotal        int64 `json:"acked_total"`
	NackedTotal       int64 `json:"nacked_total"`
	DeadLetteredTotal int64 `json:"dead_lettered_total"`
	// Backfill is null when the group needs none (offset mode, or a
	// reference group that started at latest).
	Backfill   *BackfillView `json:"backfill"`
	LagHistory []LagSample   `json:"lag_history"`
	// DeliverRate, SettleRate and NackRate are the last sample's
	// throughput (LagSample); null before the second sample.
	DeliverRate *float64 `json:"deliver_rate"`
	SettleRate  *float64 `json:"settle_rate"`
	NackRate    *float64 `json:"nack_rate"`
	// KeyPartitions lists the group's key partitions (partitioned topics
	// only): owner and lag of each, as fanout.partitions shows them.
	KeyPartitions []KeyPartitionView `json:"key_partitions"`
}

// KeyPartitionView is one row of fanout.partitions.
type KeyPartitionView struct {
	Partition   int64   `json:"partition"`
	Owner       *string `json:"owner"`
	LagMessages int64   `json:"lag_messages"`
	LagSeconds  float64 `json:"lag_seconds"`
	InFlight    int64   `json:"in_flight"`
}

// Member is a consumer seen in a group.
type Member struct {
	Consumer string    `json:"consumer"`
	LastSeen time.Time `json:"last_seen"`
}

// BackfillView is a reference-mode group's backfill.
type BackfillView struct {
	Status     string   `json:"status"` // not_started, in_progress, completed, cancelled, failed
	Active     bool     `json:"active"` // not finished (or failed)
	Processed  *int64   `json:"processed"`
	Total      *int64   `json:"total"`
	Percent    *float64 `json:"percent"`
	Rate       *float64 `json:"rate"` // messages per second
	ETASeconds *float64 `json:"eta_seconds"`
}

// JobView is one maintenance job of this sidecar.
type JobView struct {
	Name            string     `json:"name"`
	Schedule        string     `json:"schedule"`
	Runs            int64      `json:"runs"`
	Errors          int64      `json:"errors"`
	LastRun         *time.Time `json:"last_run"`
	LastSuccess     *time.Time `json:"last_success"`
	LastDurationSec *float64   `json:"last_duration_seconds"`
	LastError       string     `json:"last_error"`
	Overdue         bool       `json:"overdue"`
}

// DeadLetterView is one row of fanout.dead_letters, payload truncated.
type DeadLetterView struct {
	Topic            string `json:"topic"`
	Group            string `json:"group"`
	MessageID        int64  `json:"message_id"`
	Payload          string `json:"payload"`
	PayloadChars     int64  `json:"payload_chars"`
	PayloadTruncated bool   `json:"payload_truncated"`
	// PayloadHidden: the console listens beyond loopback and the request
	// did not present the admin token, so Payload is empty.
	PayloadHidden bool       `json:"payload_hidden,omitempty"`
	Attempts      int64      `json:"attempts"`
	LastError     *string    `json:"last_error"`
	DeadAt        time.Time  `json:"dead_at"`
	PublishedAt   *time.Time `json:"published_at"`
	MessageGroup  *string    `json:"message_group"`
}

// EventView is one row of fanout.event_log, its detail cut to
// MaxConsoleEventDetail bytes.
type EventView struct {
	ID     int64           `json:"id"`
	At     time.Time       `json:"at"`
	Topic  string          `json:"topic"`
	Group  *string         `json:"group"`
	Kind   string          `json:"kind"`
	Count  int64           `json:"count"`
	Detail json.RawMessage `json:"detail"`
}

func intOf(r Row, col string) int64 {
	v, _ := r.Float(col)
	return int64(finite(v))
}

func floatPtr(r Row, col string) *float64 {
	v, ok := r.Float(col)
	if !ok {
		return nil
	}
	v = finite(v)
	return &v
}

func intPtr(r Row, col string) *int64 {
	v, ok := r.Float(col)
	if !ok {
		return nil
	}
	n := int64(finite(v))
	return &n
}

// queryRowsArgs is queryRows with arguments.
func queryRowsArgs(ctx context.Context, db DB, sql string, args ...any) ([]Row, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Row
	fields := rows.FieldDescriptions()
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		r := make(Row, len(vals))
		for i, f := range fields {
			r[f.Name] = vals[i]
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func topicView(r Row) TopicView {
	return TopicView{
		Topic: r.Text("topic"), Semantics: r.Text("semantics"), Completion: r.Text("completion"),
		ActiveGroups: intOf(r, "active_groups"), Messages: intOf(r, "messages"),
		OldestAge: floatPtr(r, "oldest_message_age"), Segments: intOf(r, r.SegmentsCol()),
		Bytes: intOf(r, "bytes"), DroppedUnread: intOf(r, "dropped_unread"), Channel: r.Text("channel"),
		PublishHistory: []TopicSample{},
	}
}

func groupView(r Row) GroupView {
	g := GroupView{
		Topic: r.Text("topic"), Group: r.Text("group_name"), Status: r.Text("status"),
		Members: intOf(r, "members"), MemberList: []Member{},
		LagMessages: intOf(r, "lag_messages"), OldestUnacked: floatPtr(r, "oldest_unacked_age"),
		InFlight: intOf(r, "in_flight"), RetryPending: intOf(r, "retry_pending"),
		DeadLetters: intOf(r, "dead_letters"), LostMessages: intOf(r, "lost_messages"),
		Delivered: intOf(r, "delivered"), AckedTotal: intOf(r, "acked_total"), NackedTotal: intOf(r, "nacked_total"),
		DeadLetteredTotal: intOf(r, "dead_lettered_total"), LagHistory: []LagSample{}, KeyPartitions: []KeyPartitionView{},
	}
	_, named := r["group_name"].(string)
	g.Queue = !named
	g.LagSeconds, _ = r.Float("lag_seconds")
	g.LagSeconds = finite(g.LagSeconds)
	if t, ok := r.Time("last_heartbeat"); ok {
		g.LastHeartbeat = &t
	}
	if st := r.Text("backfill_status"); st != "" && st != "not_needed" {
		b := &BackfillView{Status: st, Active: backfillActive(r), Processed: intPtr(r, "backfill_processed"),
			Total: intPtr(r, "backfill_total"), Rate: floatPtr(r, "backfill_rate"), ETASeconds: floatPtr(r, "backfill_eta")}
		if b.Processed != nil && b.Total != nil && *b.Total > 0 {
			p := min(100, 100*float64(*b.Processed)/float64(*b.Total))
			b.Percent = &p
		}
		g.Backfill = b
	}
	return g
}

// nullIfEmpty maps "" to NULL: the group_name of a queue topic's implicit
// group, or an absent filter.
func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// overview reads everything the page shows: the topics of one page of f
// (and their groups).
func (c *Console) overview(ctx context.Context, f consoleFilter) (*ConsoleOverview, error) {
	var installed bool
	if err := c.db.QueryRow(ctx, `SELECT to_regclass('fanout.topics') IS NOT NULL`).Scan(&installed); err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	if !installed {
		return nil, ErrNotInstalled
	}
	ov := &ConsoleOverview{
		GeneratedAt: c.cfg.Clock.Now().UTC(),
		Sidecar: SidecarView{ID: c.sched.elector.ID(), Leader: c.sched.IsLeader(), Admin: c.cfg.Admin,
			RefreshSeconds: c.cfg.RefreshInterval.Seconds(), SampleSeconds: c.cfg.SampleInterval.Seconds()},
		Jobs: c.jobs(),
	}
	ov.Leader = c.leader(ctx)
	topics, groups, page, err := c.pageRows(ctx, f)
	if err != nil {
		return nil, err
	}
	ov.Page = page
	ov.Topics = make([]TopicView, 0, len(topics))
	for _, r := range topics {
		ov.Topics = append(ov.Topics, topicView(r))
	}
	if ov.Groups, err = c.groupViews(ctx, groups); err != nil {
		return nil, err
	}
	c.addTopicDetails(ctx, ov.Topics, ov.Groups)
	if ov.Events, err = c.events(ctx, DefaultConsoleEvents); err != nil {
		if !isPrivilegeError(err) {
			return nil, err
		}
		ov.Events, ov.EventsError = []EventView{}, oneLine(err.Error())
	}
	return ov, nil
}

// groups reads fanout.groups (of one topic when topic != "").
func (c *Console) groups(ctx context.Context, topic string) ([]GroupView, error) {
	var rows []Row
	var err error
	if topic == "" {
		rows, err = queryRows(ctx, c.db, `SELECT * FROM fanout.groups ORDER BY topic, group_name NULLS FIRST`)
	} else {
		rows, err = queryRowsArgs(ctx, c.db, `SELECT * FROM fanout.groups WHERE topic = $1
			ORDER BY group_name NULLS FIRST`, topic)
	}
	if err != nil {
		return nil, fmt.Errorf("console: fanout.groups: %w", err)
	}
	return c.groupViews(ctx, rows)
}

// groupViews adds the newest dead letter's error, the members and the
// lag history to rows of fanout.groups.
func (c *Console) groupViews(ctx context.Context, rows []Row) ([]GroupView, error) {
	out := make([]GroupView, 0, len(rows))
	idx := map[groupKey]int{}
	var dlTopics, dlGroups []*string
	for _, r := range rows {
		g := groupView(r)
		k := groupKey{g.Topic, g.Group}
		idx[k] = len(out)
		g.LagHistory = c.hist.get(k)
		if n := len(g.LagHistory); n > 0 {
			last := g.LagHistory[n-1]
			g.DeliverRate, g.SettleRate, g.NackRate = last.DeliverRate, last.SettleRate, last.NackRate
		}
		if g.DeadLetters > 0 {
			dlTopics = append(dlTopics, &g.Topic)
			dlGroups = append(dlGroups, nullIfEmpty(g.Group))
		}
		out = append(out, g)
	}
	if len(dlTopics) > 0 {
		// The newest dead letter of each group that has any.
		q, err := c.db.Query(ctx, `
			SELECT k.topic, k.group_name, left(d.last_error, $3), d.dead_at
			FROM unnest($1::text[], $2::text[]) AS k(topic, group_name)
			CROSS JOIN LATERAL (SELECT dl.last_error, dl.dead_at FROM fanout.dead_letters dl
			                    WHERE dl.topic = k.topic AND dl.group_name IS NOT DISTINCT FROM k.group_name
			                    ORDER BY dl.dead_at DESC, dl.message_id DESC LIMIT 1) d`, dlTopics, dlGroups,
			MaxConsoleErrorText)
		if err != nil {
			return nil, fmt.Errorf("console: dead letters: %w", err)
		}
		defer q.Close()
		for q.Next() {
			var topic string
			var group, lastErr *string
			var at time.Time
			if err := q.Scan(&topic, &group, &lastErr, &at); err != nil {
				return nil, fmt.Errorf("console: dead letters: %w", err)
			}
			if i, ok := idx[groupKey{topic, deref(group)}]; ok {
				out[i].NewestDeadLetterError, out[i].NewestDeadLetterAt = lastErr, &at
			}
		}
		if err := q.Err(); err != nil {
			return nil, fmt.Errorf("console: dead letters: %w", err)
		}
	}
	if len(out) > 0 {
		c.addMembers(ctx, out, idx)
		c.addKeyPartitions(ctx, out, idx)
	}
	return out, nil
}

// addMembers lists the members of each group (the newest first, at most
// consoleMembersPerGroup). No view exposes them, so this reads
// fanout.member itself; without the privilege the lists stay empty.
func (c *Console) addMembers(ctx context.Context, out []GroupView, idx map[groupKey]int) {
	q, err := c.db.Query(ctx, `
		SELECT t.topic, g.group_name, m.consumer, m.last_seen
		FROM fanout.consumer_group g
		JOIN fanout.topic t ON t.topic_id = g.topic_id
		CROSS JOIN LATERAL (SELECT m.consumer, m.last_seen FROM fanout.member m WHERE m.group_id = g.group_id
		                    ORDER BY m.last_seen DESC LIMIT $1) m
		ORDER BY t.topic, g.group_name, m.last_seen DESC`, consoleMembersPerGroup)
	if err != nil {
		c.log.Debug("console: members not readable", "error", err)
		return
	}
	defer q.Close()
	for q.Next() {
		var topic, consumer string
		var group *string
		var seen time.Time
		if err := q.Scan(&topic, &group, &consumer, &seen); err != nil {
			c.log.Debug("console: members not readable", "error", err)
			return
		}
		if i, ok := idx[groupKey{topic, deref(group)}]; ok {
			out[i].MemberList = append(out[i].MemberList, Member{Consumer: consumer, LastSeen: seen})
		}
	}
	if err := q.Err(); err != nil {
		c.log.Debug("console: members not readable", "error", err)
		return
	}
	// A group no member has read or heartbeated yet has no last heartbeat
	// (fanout.groups shows its subscribe time there).
	for i := range out {
		if len(out[i].MemberList) == 0 {
			out[i].LastHeartbeat = nil
		}
	}
}

func (c *Console) jobs() []JobView {
	js := c.sched.Jobs()
	out := make([]JobView, 0, len(js))
	for _, j := range js {
		v := JobView{Name: j.Name, Schedule: j.Schedule, Runs: j.Runs, Errors: j.Errors,
			LastRun: timePtr(j.LastRun), LastSuccess: timePtr(j.LastSuccess),
			LastError: clipText(j.LastError, MaxConsoleErrorText), Overdue: j.Overdue}
		if j.Runs > 0 {
			d := j.LastDuration.Seconds()
			v.LastDurationSec = &d
		}
		out = append(out, v)
	}
	return out
}

// deadLetters returns the newest dead letters of a group, payloads cut to
// PayloadPreview characters (left out when hide is set), errors to
// MaxConsoleErrorText.
func (c *Console) deadLetters(ctx context.Context, topic, group string, limit int, hide bool) ([]DeadLetterView, error) {
	preview := c.cfg.PayloadPreview
	if hide {
		preview = 0
	}
	q, err := c.db.Query(ctx, `
		SELECT d.message_id, left(d.payload::text, $4), length(d.payload::text), d.attempts, left(d.last_error, $5),
		       d.dead_at, d.published_at, d.message_group
		FROM fanout.dead_letters d
		WHERE d.topic = $1 AND d.group_name IS NOT DISTINCT FROM $2
		ORDER BY d.dead_at DESC, d.message_id DESC LIMIT $3`, topic, nullIfEmpty(group), limit, preview, MaxConsoleErrorText)
	if err != nil {
		return nil, fmt.Errorf("console: fanout.dead_letters: %w", err)
	}
	defer q.Close()
	out := []DeadLetterView{}
	for q.Next() {
		d := DeadLetterView{Topic: topic, Group: group}
		var attempts int32
		if err := q.Scan(&d.MessageID, &d.Payload, &d.PayloadChars, &attempts, &d.LastError,
			&d.DeadAt, &d.PublishedAt, &d.MessageGroup); err != nil {
			return nil, fmt.Errorf("console: fanout.dead_letters: %w", err)
		}
		d.Attempts = int64(attempts)
		d.PayloadTruncated = !hide && d.PayloadChars > int64(preview)
		d.PayloadHidden = hide
		out = append(out, d)
	}
	if err := q.Err(); err != nil {
		return nil, fmt.Errorf("console: fanout.dead_letters: %w", err)
	}
	return out, nil
}

// events returns the newest rows of fanout.event_log.
func (c *Console) events(ctx context.Context, limit int) ([]EventView, error) {
	q, err := c.db.Query(ctx, `SELECT event_id, at, left(topic, $3), left(group_name, $3), kind, count,
		       CASE WHEN octet_length(detail::text) <= $2 THEN detail
		            ELSE jsonb_build_object('truncated', true, 'bytes', octet_length(detail::text),
		                                    'preview', left(detail::text, $2 / 2)) END
		FROM fanout.event_log ORDER BY event_id DESC LIMIT $1`, limit, MaxConsoleEventDetail, maxConsoleName)
	if err != nil {
		return nil, fmt.Errorf("console: fanout.event_log: %w", err)
	}
	defer q.Close()
	out := []EventView{}
	for q.Next() {
		var e EventView
		var detail []byte
		if err := q.Scan(&e.ID, &e.At, &e.Topic, &e.Group, &e.Kind, &e.Count, &detail); err != nil {
			return nil, fmt.Errorf("console: fanout.event_log: %w", err)
		}
		e.Detail = json.RawMessage(detail)
		out = append(out, e)
	}
	if err := q.Err(); err != nil {
		return nil, fmt.Errorf("console: fanout.event_log: %w", err)
	}
	return out, nil
}

// apiError is the body of every error response of the API.
type apiError struct {
	Error string `json:"error"`
	// Code is a short machine-readable reason: admin_disabled, unauthorized,
	// csrf, bad_request, not_found, conflict, database, or a PGQ SQLSTATE.
	Code string `json:"code"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, apiError{Error: msg, Code: code})
}

func isPrivilegeError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}

// dbError answers a failed read: 403 when the sidecar's role may not read
// it, 503 when the schema is missing or the database unreachable.
func (c *Console) dbError(w http.ResponseWriter, r *http.Request, err error) {
	c.log.Warn("console: request failed", "path", r.URL.Path, "error", err)
	if errors.Is(err, ErrNotInstalled) {
		writeError(w, http.StatusServiceUnavailable, "not_installed", err.Error())
		return
	}
	if isPrivilegeError(err) {
		writeError(w, http.StatusForbidden, "42501", oneLine(err.Error()))
		return
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && strings.HasPrefix(pe.Code, "22") {
		// A data exception: a parameter the checks above let through.
		writeError(w, http.StatusBadRequest, "bad_request", "invalid parameter")
		return
	}
	writeError(w, http.StatusServiceUnavailable, "database", oneLine(err.Error()))
}

// limitParam parses ?limit= (def when absent, capped at most).
func limitParam(r *http.Request, def, most int) (int, error) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("limit %q: want a positive integer", s)
	}
	return min(n, most), nil
}

func (c *Console) handleOverview(w http.ResponseWriter, r *http.Request) {
	f, err := filterParams(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	ov, err := c.overview(r.Context(), f)
	if err != nil {
		c.dbError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ov)
}

func (c *Console) handleTopics(w http.ResponseWriter, r *http.Request) {
	rows, err := queryRows(r.Context(), c.db, `SELECT * FROM fanout.topics ORDER BY topic`)
	if err != nil {
		c.dbError(w, r, fmt.Errorf("console: fanout.topics: %w", err))
		return
	}
	out := make([]TopicView, 0, len(rows))
	for _, row := range rows {
		out = append(out, topicView(row))
	}
	c.addTopicDetails(r.Context(), out, nil)
	writeJSON(w, http.StatusOK, out)
}

func (c *Console) handleGroups(w http.ResponseWriter, r *http.Request) {
	topic, err := nameParam(r, "topic")
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	gs, err := c.groups(r.Context(), topic)
	if err != nil {
		c.dbError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, gs)
}

func (c *Console) handleDeadLetters(w http.ResponseWriter, r *http.Request) {
	topic, err := nameParam(r, "topic")
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	group, err := nameParam(r, "group")
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if topic == "" {
		writeError(w, http.StatusBadRequest, "bad_request", "topic is required (and group, except on queue topics)")
		return
	}
	limit, err := limitParam(r, DefaultConsoleDeadLetters, MaxConsoleDeadLetters)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	// Payloads are data of the tenants: beyond loopback only with the token.
	hide := beyondLoopback(c.cfg.ListenAddr) && (c.cfg.Token == "" || !c.tokenOK(r))
	ds, err := c.deadLetters(r.Context(), topic, group, limit, hide)
	if err != nil {
		c.dbError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ds)
}

func (c *Console) handleJobs(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, c.jobs())
}

func (c *Console) handleEvents(w http.ResponseWriter, r *http.Request) {
	limit, err := limitParam(r, DefaultConsoleEvents, MaxConsoleEvents)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	es, err := c.events(r.Context(), limit)
	if err != nil {
		c.dbError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, es)
}
