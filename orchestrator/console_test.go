package orchestrator

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/testdb"
)

// consoleBundle is a test database with the console's fixture (see seed),
// a scheduler, and the console served by an httptest server in front of
// the scheduler's own handler.
type consoleBundle struct {
	*bundle
	clock   *fakeClock
	sched   *Scheduler
	console *Console
	srv     *httptest.Server
}

const consoleToken = "s3cret-token"

func setupConsole(t *testing.T, cfg ConsoleConfig) *consoleBundle {
	t.Helper()
	b := &consoleBundle{bundle: setup(t)}
	b.seed(t)
	b.serve(t, b.Pool, cfg)
	return b
}

// serve starts the scheduler and the console on db.
func (b *consoleBundle) serve(t *testing.T, db DB, cfg ConsoleConfig) {
	t.Helper()
	b.clock = newFakeClock(b.dbNow(t))
	var err error
	b.sched, err = NewScheduler(db, SchedulerConfig{Logger: b.log, Jitter: -1, LeaderTTL: time.Hour, LeaderID: "console-test"})
	require.NoError(t, err)
	cfg.Logger, cfg.Clock = b.log, b.clock
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = "127.0.0.1:0" // what the tests serve on (httptest)
	}
	b.console, err = NewConsole(db, b.sched, cfg)
	require.NoError(t, err)
	b.srv = httptest.NewServer(b.console.Handler(b.sched.Handler()))
	t.Cleanup(b.srv.Close)
}

// longPayload is the dead letter of the queue topic: longer than the
// preview.
var longPayload = `{"blob": "` + strings.Repeat("x", 300) + `"}`

// seed creates:
//   - queue topic "jobs" (max_attempts 1): 3 messages, the first one
//     (longPayload) nacked into a dead letter with error "boom": lag 2;
//   - pubsub topic "orders.events" with group "email" (read 2 of 4 and
//     acked: lag 2) and group "stale" (never read: lag 4, dead);
//   - reference topic "audit": 25 messages, group "late" subscribed at
//     earliest with backfill batches of 10, one batch done (10 of 25).
func (b *consoleBundle) seed(t *testing.T) {
	t.Helper()
	b.exec(t, `SELECT fanout.create_topic('jobs', max_attempts => 1)`)
	b.exec(t, `SELECT fanout.publish('jobs', $1::jsonb)`, longPayload)
	b.exec(t, `SELECT fanout.publish('jobs', '{"n": 2}')`)
	b.exec(t, `SELECT fanout.publish('jobs', '{"n": 3}')`)
	b.exec(t, `SELECT fanout.nack(lease_id, error => 'boom') FROM fanout.read('jobs', consumer => 'w1', max_messages => 1)`)

	b.exec(t, `SELECT fanout.create_topic('orders.events', semantics => 'pubsub')`)
	b.exec(t, `SELECT * FROM fanout.subscribe('orders.events', 'email')`)
	b.exec(t, `SELECT * FROM fanout.subscribe('orders.events', 'stale', heartbeat_timeout => '1 second', dead_after_misses => 1)`)
	b.exec(t, `SELECT fanout.publish('orders.events', jsonb_build_object('order', i)) FROM generate_series(1, 4) i`)
	b.exec(t, `SELECT fanout.ack(max(lease_id)) FROM fanout.read('orders.events', 'email', 'email-worker-1', max_messages => 2)`)
	b.exec(t, `SELECT fanout._detect_dead_groups(now() + interval '10 seconds')`)

	b.exec(t, `SELECT fanout.create_topic('audit', semantics => 'pubsub', completion => 'reference')`)
	b.exec(t, `SELECT * FROM fanout.subscribe('audit', 'first')`)
	b.exec(t, `SELECT fanout.publish('audit', jsonb_build_object('n', i)) FROM generate_series(1, 25) i`)
	b.exec(t, `SELECT * FROM fanout.subscribe('audit', 'late', start_position => 'earliest', backfill_batch => 10)`)
	require.Equal(t, int64(10), b.int(t, `SELECT fanout._bitmap_step()`))
}

func (b *consoleBundle) getJSON(t *testing.T, path string, v any) int {
	t.Helper()
	code, body := get(t, b.srv.URL+path)
	require.NoError(t, json.Unmarshal([]byte(body), v), body)
	return code
}

func findGroup(t *testing.T, gs []GroupView, topic, group string) GroupView {
	t.Helper()
	for _, g := range gs {
		if g.Topic == topic && g.Group == group {
			return g
		}
	}
	require.Failf(t, "group not found", "%s/%s in %+v", topic, group, gs)
	return GroupView{}
}

// The JSON API against the fixture: topics, groups (the dead one, lags,
// dead letters with their newest error, the running backfill, members),
// dead letters (payload truncated), jobs and events.
func TestConsoleAPI(t *testing.T) {
	t.Parallel()
	b := setupConsole(t, ConsoleConfig{})
	// A standby runs discover by hand: the jobs it registers do not run
	// (they would finish the backfill).
	_, err := b.sched.RunJob(b.ctx, discoverJobName)
	require.NoError(t, err)

	var ov ConsoleOverview
	require.Equal(t, http.StatusOK, b.getJSON(t, "/api/overview", &ov))
	require.Equal(t, "console-test", ov.Sidecar.ID)
	require.False(t, ov.Sidecar.Leader)
	require.False(t, ov.Sidecar.Admin)
	require.Nil(t, ov.Leader)

	require.Len(t, ov.Topics, 3)
	topics := map[string]TopicView{}
	for _, tv := range ov.Topics {
		topics[tv.Topic] = tv
	}
	require.Equal(t, "queue", topics["jobs"].Semantics)
	require.Equal(t, int64(3), topics["jobs"].Messages)
	require.Equal(t, "pubsub", topics["orders.events"].Semantics)
	require.Equal(t, "offset", topics["orders.events"].Completion)
	require.Equal(t, int64(4), topics["orders.events"].Messages)
	require.Equal(t, int64(1), topics["orders.events"].ActiveGroups, "the dead group is not active")
	require.Equal(t, "reference", topics["audit"].Completion)
	require.Equal(t, int64(25), topics["audit"].Messages)
	require.Equal(t, int64(1), topics["audit"].Segments)
	require.NotNil(t, topics["audit"].OldestAge)

	require.Len(t, ov.Groups, 5)
	q := findGroup(t, ov.Groups, "jobs", "")
	require.True(t, q.Queue)
	require.Equal(t, "active", q.Status)
	require.Equal(t, int64(2), q.LagMessages)
	require.Equal(t, int64(1), q.DeadLetters)
	require.NotNil(t, q.NewestDeadLetterError)
	require.Equal(t, "boom", *q.NewestDeadLetterError)
	require.Equal(t, []string{"w1"}, memberNames(q))

	email := findGroup(t, ov.Groups, "orders.events", "email")
	require.False(t, email.Queue)
	require.Equal(t, "active", email.Status)
	require.Equal(t, int64(2), email.LagMessages)
	require.Equal(t, int64(0), email.InFlight)
	require.Equal(t, int64(0), email.DeadLetters)
	require.Nil(t, email.NewestDeadLetterError)
	require.Nil(t, email.Backfill, "offset mode needs no backfill")
	require.Equal(t, []string{"email-worker-1"}, memberNames(email))

	stale := findGroup(t, ov.Groups, "orders.events", "stale")
	require.Equal(t, "dead", stale.Status)
	require.Equal(t, int64(4), stale.LagMessages)
	require.Positive(t, stale.LagSeconds)

	late := findGroup(t, ov.Groups, "audit", "late")
	require.NotNil(t, late.Backfill)
	require.Equal(t, "in_progress", late.Backfill.Status)
	require.True(t, late.Backfill.Active)
	require.Equal(t, int64(10), *late.Backfill.Processed)
	require.Equal(t, int64(25), *late.Backfill.Total)
	require.InDelta(t, 40.0, *late.Backfill.Percent, 0.001)
	require.Nil(t, findGroup(t, ov.Groups, "audit", "first").Backfill, "started at latest: no backfill")

	jobs := map[string]JobView{}
	for _, j := range ov.Jobs {
		jobs[j.Name] = j
	}
	require.Len(t, jobs, 6, "discover and the five functions it found (partitions to make ready ahead and the dedupe sweep's first pass among them)")
	require.Contains(t, jobs, "fanout._cleanup_bookkeeping")
	require.Equal(t, int64(1), jobs[discoverJobName].Runs)
	require.NotNil(t, jobs[discoverJobName].LastRun)
	require.NotNil(t, jobs[discoverJobName].LastDurationSec)
	require.Empty(t, jobs[discoverJobName].LastError)
	require.Equal(t, int64(0), jobs["fanout._bitmap_step"].Runs)
	require.Nil(t, jobs["fanout._bitmap_step"].LastRun)
	require.Nil(t, jobs["fanout._bitmap_step"].LastDurationSec)

	kinds := map[string]bool{}
	for _, e := range ov.Events {
		kinds[e.Kind+":"+e.Topic+"/"+deref(e.Group)] = true
	}
	require.True(t, kinds["group_dead:orders.events/stale"], "%v", kinds)

	// The single-resource endpoints agree with the overview.
	var ts []TopicView
	require.Equal(t, http.StatusOK, b.getJSON(t, "/api/topics", &ts))
	require.Len(t, ts, len(ov.Topics))
	for i := range ts {
		ts[i].OldestAge = ov.Topics[i].OldestAge // ages grow between the calls
	}
	require.Equal(t, ov.Topics, ts)
	var gs []GroupView
	require.Equal(t, http.StatusOK, b.getJSON(t, "/api/groups?topic=orders.events", &gs))
	require.Len(t, gs, 2)
	require.Equal(t, "email", gs[0].Group)
	require.Equal(t, "dead", gs[1].Status)
	var js []JobView
	require.Equal(t, http.StatusOK, b.getJSON(t, "/api/jobs", &js))
	require.Equal(t, ov.Jobs, js)
	var es []EventView
	require.Equal(t, http.StatusOK, b.getJSON(t, "/api/events?limit=1", &es))
	require.Len(t, es, 1)
	require.Equal(t, ov.Events[0].ID, es[0].ID)

	// Dead letters: newest first, payload cut to the preview.
	var dls []DeadLetterView
	require.Equal(t, http.StatusOK, b.getJSON(t, "/api/dead_letters?topic=jobs", &dls))
	require.Len(t, dls, 1)
	require.Equal(t, "boom", *dls[0].LastError)
	require.Equal(t, int64(1), dls[0].Attempts)
	require.True(t, dls[0].PayloadTruncated)
	require.Len(t, dls[0].Payload, DefaultConsolePayloadPreview)
	require.Equal(t, int64(len(longPayload)), dls[0].PayloadChars)
	require.True(t, strings.HasPrefix(longPayload, dls[0].Payload))
	require.Equal(t, http.StatusOK, b.getJSON(t, "/api/dead_letters?topic=orders.events&group=email", &dls))
	require.Empty(t, dls)

	var ae apiError
	require.Equal(t, http.StatusBadRequest, b.getJSON(t, "/api/dead_letters", &ae))
	require.Equal(t, "bad_request", ae.Code)
	require.Equal(t, http.StatusBadRequest, b.getJSON(t, "/api/events?limit=zero", &ae))
	require.Equal(t, http.StatusNotFound, b.getJSON(t, "/api/nope", &ae))
	require.Equal(t, "not_found", ae.Code)

	// Elected: the overview names this sidecar as the leader.
	require.NoError(t, b.sched.elector.attempt(b.ctx))
	require.Equal(t, http.StatusOK, b.getJSON(t, "/api/overview", &ov))
	require.True(t, ov.Sidecar.Leader)
	require.NotNil(t, ov.Leader)
	require.Equal(t, "console-test", ov.Leader.ID)
	require.Positive(t, ov.Leader.ExpiresInSeconds)
}

func memberNames(g GroupView) []string {
	var out []string
	for _, m := range g.MemberList {
		out = append(out, m.Consumer)
	}
	return out
}

// The page is a shell with the CSRF token, served with its embedded
// assets; /metrics and /healthz still reach the scheduler's handler.
func TestConsolePage(t *testing.T) {
	t.Parallel()
	b := setupConsole(t, ConsoleConfig{Admin: true, Token: consoleToken})

	resp, err := http.Get(b.srv.URL + "/") //nolint:noctx // test
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "script-src 'self'")
	page := string(body)
	require.Contains(t, page, `<script src="static/console.js" defer></script>`)
	require.Contains(t, page, `<meta name="pgq-admin" content="true">`)
	require.Contains(t, page, `id="admin-token"`)
	require.NotContains(t, page, "http://", "nothing is fetched from elsewhere")
	require.NotContains(t, page, "https://")
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == CSRFCookie {
			cookie = c
		}
	}
	require.NotNil(t, cookie)
	require.Contains(t, page, `<meta name="pgq-csrf" content="`+cookie.Value+`">`)
	require.True(t, b.console.csrfValid(cookie.Value))

	// A page loaded again with the cookie keeps its token (tabs share it)
	// until half its TTL has passed.
	again := func() (string, *http.Cookie) {
		req, err := http.NewRequest(http.MethodGet, b.srv.URL+"/", nil) //nolint:noctx // test
		require.NoError(t, err)
		req.AddCookie(cookie)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		for _, c := range resp.Cookies() {
			if c.Name == CSRFCookie {
				return string(body), c
			}
		}
		return string(body), nil
	}
	body2, set := again()
	require.Nil(t, set, "no new cookie")
	require.Contains(t, body2, `<meta name="pgq-csrf" content="`+cookie.Value+`">`)
	b.clock.Advance(DefaultConsoleCSRFTTL/2 + time.Minute)
	body2, set = again()
	require.NotNil(t, set, "a fresh token")
	require.NotEqual(t, cookie.Value, set.Value)
	require.Contains(t, body2, `<meta name="pgq-csrf" content="`+set.Value+`">`)

	for path, ctype := range map[string]string{
		"/static/console.js":  "text/javascript; charset=utf-8",
		"/static/console.css": "text/css; charset=utf-8",
	} {
		resp, err := http.Get(b.srv.URL + path) //nolint:noctx // test
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Equal(t, ctype, resp.Header.Get("Content-Type"), path)
	}
	code, _ := get(t, b.srv.URL+"/static/nope.js")
	require.Equal(t, http.StatusNotFound, code)
	code, metrics := get(t, b.srv.URL+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, metrics, `pgq_group_status{group="stale",status="dead",topic="orders.events"} 1`)
	code, _ = get(t, b.srv.URL+"/healthz")
	require.Equal(t, http.StatusOK, code)

	// Read-only console: the page has no admin controls.
	ro := setupConsole(t, ConsoleConfig{})
	_, page = get(t, ro.srv.URL+"/")
	require.Contains(t, page, `<meta name="pgq-admin" content="false">`)
	require.NotContains(t, page, `id="admin-token"`)
}

// Lag sparklines: one sample per group per Sample, older than History
// dropped, groups that are gone forgotten.
func TestConsoleLagHistory(t *testing.T) {
	t.Parallel()
	b := setupConsole(t, ConsoleConfig{History: time.Hour})
	history := func(topic, group string) []LagSample {
		var gs []GroupView
		require.Equal(t, http.StatusOK, b.getJSON(t, "/api/groups", &gs))
		return findGroup(t, gs, topic, group).LagHistory
	}
	require.Empty(t, history("orders.events", "email"))

	require.NoError(t, b.console.Sample(b.ctx))
	t0 := b.clock.Now()
	b.clock.Advance(30 * time.Minute)
	b.exec(t, `SELECT fanout.publish('orders.events', '{}') FROM generate_series(1, 3)`)
	require.NoError(t, b.console.Sample(b.ctx))
	h := history("orders.events", "email")
	require.Len(t, h, 2)
	require.Equal(t, int64(2), h[0].Messages)
	require.Equal(t, int64(5), h[1].Messages)
	require.True(t, h[0].At.Equal(t0))
	require.Equal(t, int64(7), history("orders.events", "stale")[1].Messages)
	require.Equal(t, []int64{2, 2}, []int64{history("jobs", "")[0].Messages, history("jobs", "")[1].Messages})

	b.clock.Advance(45 * time.Minute) // the first sample is now 75 minutes old
	b.exec(t, `SELECT fanout.drop_topic('jobs', force => true)`)
	require.NoError(t, b.console.Sample(b.ctx))
	h = history("orders.events", "stale")
	require.Len(t, h, 2, "the sample older than an hour is gone")
	require.Equal(t, []int64{7, 7}, []int64{h[0].Messages, h[1].Messages})
	require.Empty(t, b.console.hist.get(groupKey{"jobs", ""}), "a dropped topic's history is forgotten")
}

// adminClient posts admin actions with a cookie jar (the CSRF cookie).
type adminClient struct {
	t      *testing.T
	b      *consoleBundle
	hc     *http.Client
	token  string // Authorization: Bearer
	csrf   string // X-CSRF-Token
	origin string
}

func (b *consoleBundle) adminClient(t *testing.T) *adminClient {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	a := &adminClient{t: t, b: b, hc: &http.Client{Jar: jar}, token: consoleToken}
	resp, err := a.hc.Get(b.srv.URL + "/api/csrf") //nolint:noctx // test
	require.NoError(t, err)
	var tok map[string]string
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&tok))
	resp.Body.Close()
	a.csrf = tok["csrf_token"]
	require.NotEmpty(t, a.csrf)
	return a
}

func (a *adminClient) post(action string, body any) (int, apiError, AdminResult) {
	a.t.Helper()
	js, err := json.Marshal(body)
	require.NoError(a.t, err)
	req, err := http.NewRequest(http.MethodPost, a.b.srv.URL+"/api/admin/"+action, bytes.NewReader(js)) //nolint:noctx // test
	require.NoError(a.t, err)
	req.Header.Set("Content-Type", "application/json")
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	if a.csrf != "" {
		req.Header.Set(CSRFHeader, a.csrf)
	}
	if a.origin != "" {
		req.Header.Set("Origin", a.origin)
	}
	resp, err := a.hc.Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(a.t, err)
	var ae apiError
	var res AdminResult
	if resp.StatusCode == http.StatusOK {
		require.NoError(a.t, json.Unmarshal(raw, &res), string(raw))
	} else {
		require.NoError(a.t, json.Unmarshal(raw, &ae), string(raw))
	}
	return resp.StatusCode, ae, res
}

var resurrectStale = AdminRequest{Actor: "alice", Topic: "orders.events", Group: "stale"}

func (b *consoleBundle) consoleEvents(t *testing.T) int64 {
	t.Helper()
	return b.int(t, `SELECT count(*) FROM fanout.event_log WHERE kind LIKE 'console_%'`)
}

// Admin actions are refused without --console-admin, without the token and
// without the CSRF token (each alone enough), and a refusal changes
// nothing.
func TestConsoleAdminRefused(t *testing.T) {
	t.Parallel()

	ro := setupConsole(t, ConsoleConfig{})
	code, ae, _ := ro.adminClient(t).post("resurrect_group", resurrectStale)
	require.Equal(t, http.StatusForbidden, code)
	require.Equal(t, "admin_disabled", ae.Code)
	require.Equal(t, "dead", ro.groupStatus(t, "orders.events", "stale"))
	require.Zero(t, ro.consoleEvents(t))

	b := setupConsole(t, ConsoleConfig{Admin: true, Token: consoleToken})
	for name, tc := range map[string]struct {
		change func(a *adminClient)
		code   int
		reason string
	}{
		"no token":          {func(a *adminClient) { a.token = "" }, http.StatusUnauthorized, "unauthorized"},
		"wrong token":       {func(a *adminClient) { a.token = "guess" }, http.StatusUnauthorized, "unauthorized"},
		"no CSRF token":     {func(a *adminClient) { a.csrf = "" }, http.StatusForbidden, "csrf"},
		"no CSRF cookie":    {func(a *adminClient) { a.hc.Jar = nil }, http.StatusForbidden, "csrf"},
		"forged CSRF token": {func(a *adminClient) { a.csrf = a.csrf[:len(a.csrf)-2] + "AA" }, http.StatusForbidden, "csrf"},
		"cross-site Origin": {func(a *adminClient) { a.origin = "http://evil.example" }, http.StatusForbidden, "csrf"},
		"no token, no CSRF": {func(a *adminClient) { a.token, a.csrf = "", "" }, http.StatusUnauthorized, "unauthorized"},
		"token prefix":      {func(a *adminClient) { a.token = consoleToken[:4] }, http.StatusUnauthorized, "unauthorized"},
	} {
		a := b.adminClient(t)
		tc.change(a)
		code, ae, _ := a.post("resurrect_group", resurrectStale)
		require.Equal(t, tc.code, code, name)
		require.Equal(t, tc.reason, ae.Code, name)
	}
	// A token past CSRFTTL (default 12h).
	a := b.adminClient(t)
	b.clock.Advance(DefaultConsoleCSRFTTL + time.Minute)
	code, ae, _ = a.post("resurrect_group", resurrectStale)
	require.Equal(t, http.StatusForbidden, code)
	require.Equal(t, "csrf", ae.Code)
	require.Contains(t, ae.Error, "expired")

	require.Equal(t, "dead", b.groupStatus(t, "orders.events", "stale"))
	require.Zero(t, b.consoleEvents(t))
}

// With the flag, the token and the CSRF token, the actions work and each
// leaves an event_log row naming the actor; a failed call leaves none.
func TestConsoleAdminActions(t *testing.T) {
	t.Parallel()
	b := setupConsole(t, ConsoleConfig{Admin: true, Token: consoleToken})
	a := b.adminClient(t)

	// Resurrect the dead group.
	code, ae, res := a.post("resurrect_group", resurrectStale)
	require.Equal(t, http.StatusOK, code, ae.Error)
	require.Equal(t, "active", res.Status)
	require.Equal(t, int64(1), res.Count)
	require.Equal(t, "active", b.groupStatus(t, "orders.events", "stale"))
	b.requireEvent(t, res.EventID, "console_resurrect_group", "orders.events", "stale", 1, "alice")

	// Again: the group is no longer dead (PGQ15), nothing recorded.
	code, ae, _ = a.post("resurrect_group", resurrectStale)
	require.Equal(t, http.StatusConflict, code)
	require.Equal(t, "PGQ15", ae.Code)
	require.Equal(t, int64(1), b.consoleEvents(t))

	// Replay the queue topic's dead letter (group "" = the implicit group).
	id := b.int(t, `SELECT message_id FROM fanout.dead_letters WHERE topic = 'jobs'`)
	code, ae, res = a.post("replay_dead_letters", AdminRequest{Actor: "bob", Topic: "jobs", MessageIDs: []int64{id}})
	require.Equal(t, http.StatusOK, code, ae.Error)
	require.Equal(t, int64(1), res.Count)
	require.Zero(t, b.int(t, `SELECT count(*) FROM fanout.dead_letters WHERE topic = 'jobs'`))
	require.Equal(t, int64(1), b.int(t, `SELECT retry_pending FROM fanout.groups WHERE topic = 'jobs'`))
	b.requireEvent(t, res.EventID, "console_replay_dead_letters", "jobs", "", 1, "bob")
	require.Equal(t, id, b.int(t, `SELECT (detail->'message_ids'->>0)::bigint FROM fanout.event_log WHERE event_id = $1`, res.EventID))
	code, ae, _ = a.post("replay_dead_letters", AdminRequest{Actor: "bob", Topic: "jobs", MessageIDs: []int64{id}})
	require.Equal(t, http.StatusConflict, code)
	require.Equal(t, "PGQ20", ae.Code, "already replayed")

	// Cancel the running backfill.
	code, ae, res = a.post("cancel_backfill", AdminRequest{Actor: "carol", Topic: "audit", Group: "late"})
	require.Equal(t, http.StatusOK, code, ae.Error)
	require.Equal(t, int64(1), res.Count)
	var gs []GroupView
	require.Equal(t, http.StatusOK, b.getJSON(t, "/api/groups?topic=audit", &gs))
	require.Equal(t, "cancelled", findGroup(t, gs, "audit", "late").Backfill.Status)
	b.requireEvent(t, res.EventID, "console_cancel_backfill", "audit", "late", 1, "carol")

	// Bad requests.
	for name, tc := range map[string]struct {
		action string
		req    any
		code   int
		reason string
	}{
		"no actor":        {"resurrect_group", AdminRequest{Topic: "orders.events", Group: "stale"}, http.StatusBadRequest, "bad_request"},
		"no ids":          {"replay_dead_letters", AdminRequest{Actor: "x", Topic: "jobs"}, http.StatusBadRequest, "bad_request"},
		"unknown field":   {"cancel_backfill", map[string]any{"actor": "x", "topic": "audit", "group": "late", "force": true}, http.StatusBadRequest, "bad_request"},
		"unknown action":  {"drop_topic", resurrectStale, http.StatusNotFound, "not_found"},
		"unknown topic":   {"cancel_backfill", AdminRequest{Actor: "x", Topic: "nope", Group: "g"}, http.StatusNotFound, "PGQ01"},
		"unknown group":   {"cancel_backfill", AdminRequest{Actor: "x", Topic: "audit", Group: "nope"}, http.StatusNotFound, "PGQ14"},
		"queue resurrect": {"resurrect_group", AdminRequest{Actor: "x", Topic: "jobs"}, http.StatusConflict, "PGQ19"},
	} {
		code, ae, _ := a.post(tc.action, tc.req)
		require.Equal(t, tc.code, code, name)
		require.Equal(t, tc.reason, ae.Code, name)
	}
	require.Equal(t, int64(3), b.consoleEvents(t), "refused and failed actions leave no row")
}

func (b *consoleBundle) groupStatus(t *testing.T, topic, group string) string {
	t.Helper()
	var s string
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT status FROM fanout.groups WHERE topic = $1 AND group_name = $2`,
		topic, group).Scan(&s))
	return s
}

func (b *consoleBundle) requireEvent(t *testing.T, id int64, kind, topic, group string, count int64, actor string) {
	t.Helper()
	var gotKind, gotTopic, gotActor, via string
	var gotGroup *string
	var gotCount int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT kind, topic, group_name, count, detail->>'actor', detail->>'via'
		FROM fanout.event_log WHERE event_id = $1`, id).Scan(&gotKind, &gotTopic, &gotGroup, &gotCount, &gotActor, &via))
	require.Equal(t, kind, gotKind)
	require.Equal(t, topic, gotTopic)
	require.Equal(t, group, deref(gotGroup))
	require.Equal(t, count, gotCount)
	require.Equal(t, actor, gotActor)
	require.Equal(t, "pgq-console", via)
}

// Without the database the API answers 503 with a reason; the page shell
// still loads (it shows the error itself).
func TestConsoleDatabaseDown(t *testing.T) {
	t.Parallel()
	b := setupConsole(t, ConsoleConfig{})
	b.Pool.Close()
	var ae apiError
	require.Equal(t, http.StatusServiceUnavailable, b.getJSON(t, "/api/overview", &ae))
	require.Equal(t, "database", ae.Code)
	require.Equal(t, http.StatusServiceUnavailable, b.getJSON(t, "/api/groups", &ae))
	code, _ := get(t, b.srv.URL+"/")
	require.Equal(t, http.StatusOK, code)
	require.Error(t, b.console.Sample(b.ctx))
}

// A sidecar running as a fanout_admin member (not the schema owner) reads
// the views, but neither the members, nor event_log: its overview says so.
// Its admin actions work and are recorded with its role (fanout.log_action).
func TestConsoleAsFanoutAdmin(t *testing.T) {
	t.Parallel()
	b := &consoleBundle{bundle: setup(t)}
	b.seed(t)
	var r [5]byte
	_, _ = rand.Read(r[:])
	role := "pgq_console_" + hex.EncodeToString(r[:])
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
	b.serve(t, pool, ConsoleConfig{Admin: true, Token: consoleToken})

	var ov ConsoleOverview
	require.Equal(t, http.StatusOK, b.getJSON(t, "/api/overview", &ov))
	stale := findGroup(t, ov.Groups, "orders.events", "stale")
	require.Equal(t, "dead", stale.Status)
	require.Equal(t, int64(4), stale.LagMessages)
	require.Empty(t, findGroup(t, ov.Groups, "jobs", "").MemberList)
	require.Equal(t, "boom", *findGroup(t, ov.Groups, "jobs", "").NewestDeadLetterError)
	require.Empty(t, ov.Events)
	require.Contains(t, ov.EventsError, "permission denied")
	var ae apiError
	require.Equal(t, http.StatusForbidden, b.getJSON(t, "/api/events", &ae))
	require.Equal(t, "42501", ae.Code)

	code, _, _ := b.adminClient(t).post("resurrect_group", resurrectStale)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "active", b.groupStatus(t, "orders.events", "stale"))
	var recorded bool
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT EXISTS (SELECT 1 FROM fanout.event_log
		WHERE kind = 'console_resurrect_group' AND detail->>'role' = $1)`, role).Scan(&recorded))
	require.True(t, recorded, "the action is recorded with the sidecar's role")
}

// Admin without a token is a configuration error.
func TestConsoleConfigValidate(t *testing.T) {
	t.Parallel()
	require.ErrorContains(t, ConsoleConfig{Admin: true}.Validate(), "admin actions need a token")
	require.NoError(t, ConsoleConfig{Admin: true, Token: "t"}.Validate())
	require.NoError(t, ConsoleConfig{}.Validate())
}
