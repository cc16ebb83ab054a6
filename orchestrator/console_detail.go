package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// addTopicDetails completes the topics of an overview: the publish rate
// and its history, the number of key partitions, and a queue topic's
// active groups (fanout.topics counts named groups only, so a queue topic,
// whose one group is implicit, showed 0).
func (c *Console) addTopicDetails(ctx context.Context, topics []TopicView, groups []GroupView) {
	activeQueue := map[string]int64{}
	if rows, err := queryRows(ctx, c.db, `SELECT t.topic, count(*) FILTER (WHERE g.status = 'active') AS active
		FROM fanout.topic t JOIN fanout.consumer_group g ON g.topic_id = t.topic_id AND g.group_name IS NULL
		GROUP BY t.topic`); err == nil {
		for _, r := range rows {
			activeQueue[r.Text("topic")] = intOf(r, "active")
		}
	} else {
		for _, g := range groups { // the groups at hand (the page's)
			if g.Queue && g.Status == "active" {
				activeQueue[g.Topic]++
			}
		}
	}
	keyParts := map[string]int64{}
	// fanout.topic is the catalog table (no view shows P): without the
	// privilege, key partitions are counted from fanout.partitions' rows.
	if rows, err := queryRows(ctx, c.db, `SELECT topic, coalesce(partitions, 0) AS partitions FROM fanout.topic`); err == nil {
		for _, r := range rows {
			keyParts[r.Text("topic")] = intOf(r, "partitions")
		}
	} else {
		c.log.Debug("console: fanout.topic not readable", "error", err)
		for _, g := range groups {
			keyParts[g.Topic] = max(keyParts[g.Topic], int64(len(g.KeyPartitions)))
		}
	}
	for i := range topics {
		t := &topics[i]
		if t.Semantics == "queue" {
			t.ActiveGroups = activeQueue[t.Topic]
		}
		t.KeyPartitions = keyParts[t.Topic]
		t.PublishHistory = c.hist.getTopic(t.Topic)
		if n := len(t.PublishHistory); n > 0 {
			t.PublishRate = t.PublishHistory[n-1].PublishRate
		}
	}
}

// addKeyPartitions lists each partitioned group's key partitions, their
// owner and lag (fanout.partitions).
func (c *Console) addKeyPartitions(ctx context.Context, out []GroupView, idx map[groupKey]int) {
	q, err := c.db.Query(ctx, `SELECT topic, group_name, partition, owner, lag_messages, lag_seconds, in_flight
		FROM fanout.partitions ORDER BY topic, group_name, partition`)
	if err != nil {
		c.log.Debug("console: fanout.partitions not readable", "error", err)
		return
	}
	defer q.Close()
	for q.Next() {
		var topic string
		var group, owner *string
		var k KeyPartitionView
		if err := q.Scan(&topic, &group, &k.Partition, &owner, &k.LagMessages, &k.LagSeconds, &k.InFlight); err != nil {
			c.log.Debug("console: fanout.partitions not readable", "error", err)
			return
		}
		k.Owner = owner
		k.LagSeconds = finite(k.LagSeconds)
		if i, ok := idx[groupKey{topic, deref(group)}]; ok {
			out[i].KeyPartitions = append(out[i].KeyPartitions, k)
		}
	}
	if err := q.Err(); err != nil {
		c.log.Debug("console: fanout.partitions not readable", "error", err)
	}
}

// MessageView is one message and where it stands with every group of its
// topic (GET /api/message?topic=T&id=N): fanout.message_status, plus the
// attempts and last error of a message being retried or dead-lettered.
// Payload and headers are the tenants' data: served only to a request that
// presents the console's token (Authorization: Bearer), else hidden.
type MessageView struct {
	Topic         string          `json:"topic"`
	MessageID     int64           `json:"message_id"`
	PublishedAt   *time.Time      `json:"published_at"`
	MessageGroup  *string         `json:"message_group"`
	Payload       *string         `json:"payload"`
	Headers       *string         `json:"headers"`
	PayloadHidden bool            `json:"payload_hidden"`
	MessageStatus *string         `json:"message_status"` // reference mode: completed, pending, unclaimed
	Groups        []MessageStatus `json:"groups"`
}

// MessageStatus is one row of fanout.message_status.
type MessageStatus struct {
	Group     string  `json:"group"`
	Queue     bool    `json:"queue"`
	Status    string  `json:"status"`
	Passed    *bool   `json:"passed"`
	Required  *bool   `json:"required"`
	Completed *bool   `json:"completed"`
	Attempts  *int64  `json:"attempts"`
	LastError *string `json:"last_error"`
}

// MaxConsolePayload is the most characters of a payload or of headers the
// message view returns.
const MaxConsolePayload = 65536

func (c *Console) message(ctx context.Context, topic string, id int64, show bool) (*MessageView, error) {
	m := &MessageView{Topic: topic, MessageID: id, PayloadHidden: !show, Groups: []MessageStatus{}}
	rows, err := c.db.Query(ctx, `SELECT s.group_name, s.status, s.passed, s.required, s.completed, s.message_status,
		       coalesce(dl.attempts, r.attempt), left(coalesce(dl.last_error, r.last_error), $3)
		FROM fanout.message_status($1, $2) s
		LEFT JOIN fanout.dead_letters dl ON dl.topic = s.topic AND dl.group_name IS NOT DISTINCT FROM s.group_name
		                                 AND dl.message_id = s.message_id
		LEFT JOIN LATERAL (SELECT r.attempt, r.last_error FROM fanout.retry r
		                   JOIN fanout.consumer_group g ON g.group_id = r.group_id
		                   JOIN fanout.topic t ON t.topic_id = g.topic_id
		                   WHERE t.topic = s.topic AND g.group_name IS NOT DISTINCT FROM s.group_name
		                     AND r.message_id = s.message_id) r ON true
		ORDER BY s.group_name NULLS FIRST`, topic, id, MaxConsoleErrorText)
	if err != nil {
		return nil, fmt.Errorf("console: fanout.message_status: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var g MessageStatus
		var group *string
		var attempts *int32
		if err := rows.Scan(&group, &g.Status, &g.Passed, &g.Required, &g.Completed, &m.MessageStatus,
			&attempts, &g.LastError); err != nil {
			return nil, fmt.Errorf("console: fanout.message_status: %w", err)
		}
		g.Group, g.Queue = deref(group), group == nil
		if attempts != nil {
			a := int64(*attempts)
			g.Attempts = &a
		}
		m.Groups = append(m.Groups, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("console: fanout.message_status: %w", err)
	}
	var table string
	if err := c.db.QueryRow(ctx, `SELECT data_table FROM fanout.topic WHERE topic = $1`, topic).Scan(&table); err != nil {
		return nil, fmt.Errorf("console: the topic's message table: %w", err)
	}
	payload := `left(NULL::text, $2), left(NULL::text, $2)`
	if show {
		payload = `left(m.payload::text, $2), left(m.headers::text, $2)`
	}
	err = c.db.QueryRow(ctx, `SELECT m.published_at, m.message_group, `+payload+`
		FROM fanout_data.`+pgx.Identifier{table}.Sanitize()+` m WHERE m.id = $1`, id, MaxConsolePayload).
		Scan(&m.PublishedAt, &m.MessageGroup, &m.Payload, &m.Headers)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("console: the message: %w", err)
	}
	return m, nil
}

// handleMessage: GET /api/message?topic=T&id=N.
func (c *Console) handleMessage(w http.ResponseWriter, r *http.Request) {
	topic, err := nameParam(r, "topic")
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	idText := strings.TrimSpace(r.URL.Query().Get("id"))
	id, err := strconv.ParseInt(idText, 10, 64)
	if topic == "" || err != nil || id < 1 {
		writeError(w, http.StatusBadRequest, "bad_request", "topic and id (a message id, a positive integer) are required")
		return
	}
	show := c.cfg.Token != "" && c.tokenOK(r)
	m, err := c.message(r.Context(), topic, id, show)
	if err != nil {
		if code := sqlState(err); code == "PGQ01" || code == "PGQ18" {
			writeError(w, http.StatusNotFound, code, oneLine(err.Error()))
			return
		}
		c.dbError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}

// sqlState is err's SQLSTATE, "" when it has none.
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// Paging of the overview: topics by name, DefaultConsolePageSize a page.
const (
	DefaultConsolePageSize = 50
	MaxConsolePageSize     = 500
)

// consoleFilter selects the overview's topics: q, a substring of the
// topic's name or of one of its groups' (case-insensitive); status, a
// status one of its groups has; one page of the matching topics by name.
type consoleFilter struct {
	Q, Status      string
	Page, PageSize int
}

// PageView is the overview's page: which filter, which page of how many.
type PageView struct {
	Q        string `json:"q"`
	Status   string `json:"status"`
	Page     int    `json:"page"`
	PageSize int    `json:"page_size"`
	Pages    int    `json:"pages"`
	// Topics is how many topics match (on every page).
	Topics int `json:"topics"`
}

// filterParams reads ?q=&status=&page=&page_size= of /api/overview.
func filterParams(r *http.Request) (consoleFilter, error) {
	f := consoleFilter{Page: 1, PageSize: DefaultConsolePageSize}
	var err error
	if f.Q, err = nameParam(r, "q"); err != nil {
		return f, err
	}
	f.Status = r.URL.Query().Get("status")
	switch f.Status {
	case "", "active", "paused", "dead", "cancelled":
	default:
		return f, fmt.Errorf("status %q: want active, paused, dead or cancelled", f.Status)
	}
	for key, dst := range map[string]*int{"page": &f.Page, "page_size": &f.PageSize} {
		if v := r.URL.Query().Get(key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return f, fmt.Errorf("%s %q: want a positive integer", key, v)
			}
			*dst = n
		}
	}
	f.PageSize = min(f.PageSize, MaxConsolePageSize)
	return f, nil
}

// leader is the sidecar holding this scheduler's role, nil when none (or
// not readable).
func (c *Console) leader(ctx context.Context) *LeaderView {
	var id string
	var secs float64
	err := c.db.QueryRow(ctx, `SELECT leader_id, extract(epoch FROM expires_at - clock_timestamp())::float8
		FROM fanout.leader WHERE name = $1 AND expires_at > clock_timestamp()`, c.sched.cfg.LeaderName).Scan(&id, &secs)
	if err != nil {
		return nil
	}
	return &LeaderView{ID: id, ExpiresInSeconds: secs}
}

// pageRows reads the rows of fanout.topics and fanout.groups of one page
// of the topics f selects. The views compute every topic's statistics, so
// the page's names come first, from the catalog tables, and only their
// rows are read from the views (a thousand topics cost one page, not a
// thousand). Without the privilege on the catalog tables, every row is
// read and the page is cut here.
func (c *Console) pageRows(ctx context.Context, f consoleFilter) (topics, groups []Row, page PageView, err error) {
	page = PageView{Q: f.Q, Status: f.Status, Page: f.Page, PageSize: f.PageSize}
	var names []string
	rows, qerr := c.db.Query(ctx, `SELECT t.topic FROM fanout.topic t
		WHERE ($1 = '' OR strpos(lower(t.topic), lower($1)) > 0
		       OR EXISTS (SELECT 1 FROM fanout.consumer_group g WHERE g.topic_id = t.topic_id
		                  AND strpos(lower(g.group_name), lower($1)) > 0))
		  AND ($2 = '' OR EXISTS (SELECT 1 FROM fanout.consumer_group g WHERE g.topic_id = t.topic_id AND g.status = $2))
		ORDER BY t.topic`, f.Q, f.Status)
	if qerr == nil {
		names, qerr = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if qerr != nil {
		if !isPrivilegeError(qerr) {
			return nil, nil, page, fmt.Errorf("console: topics: %w", qerr)
		}
		c.log.Debug("console: fanout.topic not readable: reading every topic", "error", qerr)
		return c.pageRowsAll(ctx, f, page)
	}
	page.Topics = len(names)
	page.Pages = max(1, (len(names)+f.PageSize-1)/f.PageSize)
	page.Page = min(f.Page, page.Pages)
	from := min(len(names), (page.Page-1)*f.PageSize)
	names = names[from:min(len(names), from+f.PageSize)]
	if topics, err = queryRowsArgs(ctx, c.db, `SELECT * FROM fanout.topics WHERE topic = ANY($1) ORDER BY topic`, names); err != nil {
		return nil, nil, page, fmt.Errorf("console: fanout.topics: %w", err)
	}
	if groups, err = queryRowsArgs(ctx, c.db, `SELECT * FROM fanout.groups WHERE topic = ANY($1)
		ORDER BY topic, group_name NULLS FIRST`, names); err != nil {
		return nil, nil, page, fmt.Errorf("console: fanout.groups: %w", err)
	}
	return topics, groups, page, nil
}

// pageRowsAll is pageRows from the views alone.
func (c *Console) pageRowsAll(ctx context.Context, f consoleFilter, page PageView) (topics, groups []Row, _ PageView, err error) {
	all, err := queryRows(ctx, c.db, `SELECT * FROM fanout.topics ORDER BY topic`)
	if err != nil {
		return nil, nil, page, fmt.Errorf("console: fanout.topics: %w", err)
	}
	allGroups, err := queryRows(ctx, c.db, `SELECT * FROM fanout.groups ORDER BY topic, group_name NULLS FIRST`)
	if err != nil {
		return nil, nil, page, fmt.Errorf("console: fanout.groups: %w", err)
	}
	q := strings.ToLower(f.Q)
	keep := map[string]bool{}
	for _, g := range allGroups {
		t := g.Text("topic")
		if (q == "" || strings.Contains(strings.ToLower(t), q) || strings.Contains(strings.ToLower(g.Text("group_name")), q)) &&
			(f.Status == "" || g.Text("status") == f.Status) {
			keep[t] = true
		}
	}
	var match []Row
	for _, t := range all {
		name := t.Text("topic")
		if keep[name] || (f.Status == "" && (q == "" || strings.Contains(strings.ToLower(name), q))) {
			match = append(match, t)
		}
	}
	page.Topics = len(match)
	page.Pages = max(1, (len(match)+f.PageSize-1)/f.PageSize)
	page.Page = min(f.Page, page.Pages)
	from := min(len(match), (page.Page-1)*f.PageSize)
	topics = match[from:min(len(match), from+f.PageSize)]
	on := map[string]bool{}
	for _, t := range topics {
		on[t.Text("topic")] = true
	}
	for _, g := range allGroups {
		if on[g.Text("topic")] {
			groups = append(groups, g)
		}
	}
	return topics, groups, page, nil
}
