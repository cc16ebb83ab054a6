package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/testdb"
)

// consoleArtifacts is where the browser test leaves its screenshot and the
// DOM it checked (git-ignored).
const consoleArtifacts = "artifacts"

// chromium returns a headless-capable Chromium; tests/console_chromium.sh
// installs Debian's package when run as root.
func chromium(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("./console_chromium.sh").Output()
	require.NoError(t, err, "tests/console_chromium.sh found no Chromium (see its message above)")
	return strings.TrimSpace(string(out))
}

// buildScheduler builds bin/pgq-scheduler's source into a temporary file.
func buildScheduler(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pgq-scheduler")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/pgq-scheduler").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// headless runs Chromium on url with extra flags and returns its stdout.
// The page's script must log no error to the console.
func headless(t *testing.T, ctx context.Context, browser, url string, flags ...string) []byte {
	t.Helper()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--hide-scrollbars", "--user-data-dir=" + t.TempDir(),
		"--enable-logging=stderr", "--v=0",
		"--window-size=1680,1050", "--virtual-time-budget=8000"}, flags...)
	cmd := exec.CommandContext(ctx, browser, append(args, url)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	t.Logf("chromium %s %v: %s", url, flags, time.Since(start).Round(time.Millisecond))
	require.NoError(t, err, "chromium: %s", stderr.String())
	for _, line := range strings.Split(stderr.String(), "\n") {
		require.NotRegexp(t, `CONSOLE.*(Uncaught|Error)|Refused to`, line, "the page logged an error")
	}
	return out
}

// The README walkthrough's topics and groups, a dead group, a dead letter
// and a slow backfill, served by a real `pgq-scheduler run` (with admin
// actions on) and loaded in headless Chromium: the DOM shows the dead group
// highlighted with its resurrect button, and every group's lag as
// fanout.groups counts it. Leaves artifacts/console.png and
// artifacts/console.html (and dead_letters.png and .html: the dead-letter
// view).
func TestConsoleBrowser(t *testing.T) {
	t.Parallel()
	browser := chromium(t)
	bin := buildScheduler(t)
	b := setup(t)
	for _, sql := range []string{
		`SELECT fanout.create_topic('orders.events', semantics => 'pubsub')`,
		`SELECT * FROM fanout.subscribe('orders.events', 'email')`,
		`SELECT * FROM fanout.subscribe('orders.events', 'analytics', start_position => 'earliest')`,
		`SELECT * FROM fanout.subscribe('orders.events', 'legacy', heartbeat_timeout => '1 second', dead_after_misses => 1)`,
		`SELECT fanout.publish('orders.events', '{"order": 1, "total": 42.50}')`,
		`SELECT * FROM fanout.publish_batch('orders.events', ARRAY['{"order": 2}', '{"order": 3}']::jsonb[])`,
		`SELECT fanout.ack(max(lease_id)) FROM fanout.read('orders.events', 'email', 'email-worker-1', max_messages => 10)`,
		`SELECT count(*) FROM fanout.read('orders.events', 'analytics', 'etl-1', max_messages => 2)`,
		`SELECT fanout.ack(fanout._lease_code(l.lease_id, true), ARRAY[l.msg_ids[2]]) + fanout.nack(fanout._lease_code(l.lease_id, true), ARRAY[l.msg_ids[1]], retry_in => '5 minutes', error => 'warehouse down')
		 FROM fanout.lease l JOIN fanout.consumer_group g USING (group_id) WHERE g.group_name = 'analytics'`,
		`SELECT fanout._detect_dead_groups(now() + interval '10 seconds')`,
		`SELECT fanout.create_topic('emails.send')`,
		`SELECT fanout.publish('emails.send', '{"to": "a@example.com"}')`,
		`SELECT fanout.ack(max(lease_id)) FROM fanout.read('emails.send', consumer => 'sender-1')`,
		`SELECT fanout.create_topic('orders.retry', max_attempts => 1)`,
		`SELECT fanout.publish('orders.retry', jsonb_build_object('order', 2, 'sku', 'X-1', 'lines', (SELECT jsonb_agg(i) FROM generate_series(1, 100) i)))`,
		`SELECT fanout.nack(lease_id, error => 'HTTP 503 from warehouse') FROM fanout.read('orders.retry', consumer => 'w1')`,
		`SELECT fanout.create_topic('audit.log', semantics => 'pubsub', completion => 'reference')`,
		`SELECT * FROM fanout.subscribe('audit.log', 'archive')`,
		`SELECT fanout.publish('audit.log', jsonb_build_object('n', i)) FROM generate_series(1, 20000) i`,
		`SELECT * FROM fanout.subscribe('audit.log', 'search', start_position => 'earliest', backfill_batch => 200)`,
		// A topic with 8 key partitions, one member owning them.
		`SELECT fanout.create_topic('orders.keyed', semantics => 'pubsub', partitions => 8)`,
		`SELECT * FROM fanout.subscribe('orders.keyed', 'billing')`,
		`SELECT count(fanout.publish('orders.keyed', jsonb_build_object('n', i), message_group => 'order-' || i)) FROM generate_series(1, 20) i`,
		`SELECT count(*) FROM fanout.read('orders.keyed', 'billing', 'kw-1', max_messages => 5)`,
		// More topics than a page holds (50), sorted after the others.
		`SELECT count(fanout.create_topic('zz.bulk.' || i)) FROM generate_series(1, 60) i`,
	} {
		_, err := b.Pool.Exec(b.ctx, sql)
		require.NoError(t, err, sql)
	}

	listen := os.Getenv("PGQ_TEST_CONSOLE_LISTEN") // make test: LISTEN
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	cmd := exec.Command(bin, "run", "--listen", listen, "--jitter", "0", "--backfill-max-rate", "1", "--console-admin",
		"--console-sample-interval", "1s")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + b.URL, "PGQ_LEADER_ID=browser-test",
		"PGQ_CONSOLE_TOKEN=browser-test-token"}
	var stderr testdb.SyncBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("pgq-scheduler stderr:\n%s", stderr.String())
		}
	})
	urlRE := regexp.MustCompile(`"msg":"serving the console","url":"(http://[^"]+)"`)
	var url string
	require.Eventually(t, func() bool {
		m := urlRE.FindStringSubmatch(stderr.String())
		if m != nil {
			url = m[1]
		}
		return url != ""
	}, 30*time.Second, 50*time.Millisecond, "pgq-scheduler logs the console URL")
	require.Eventually(t, func() bool {
		resp, err := http.Get(url + "healthz") //nolint:noctx // test
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"leader": true`)
	}, 30*time.Second, 100*time.Millisecond, "a healthy leader")

	// Throughput: once the console has sampled the keyed topic, publish
	// to it; a later sample has a publish rate above 0, and the group a
	// settle rate.
	overview := func() consoleOverview {
		var ov consoleOverview
		resp, err := http.Get(url + "api/overview?q=orders.keyed") //nolint:noctx // test
		require.NoError(t, err)
		defer resp.Body.Close()
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&ov))
		return ov
	}
	require.Eventually(t, func() bool {
		ov := overview()
		return len(ov.Topics) == 1 && len(ov.Topics[0].PublishHistory) > 0
	}, time.Minute, 100*time.Millisecond, "the console sampled orders.keyed")
	_, err := b.Pool.Exec(b.ctx, `SELECT count(fanout.publish('orders.keyed', jsonb_build_object('n', i), message_group => 'order-' || i))
		FROM generate_series(21, 60) i`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ov := overview()
		published := false
		for _, s := range ov.Topics[0].PublishHistory {
			published = published || (s.PublishRate != nil && *s.PublishRate > 0)
		}
		settled := false
		for _, g := range ov.Groups {
			settled = len(g.LagHistory) > 1 && g.LagHistory[len(g.LagHistory)-1].SettleRate != nil
		}
		return published && settled
	}, time.Minute, 100*time.Millisecond, "a publish rate above 0 and a settle rate")

	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Minute)
	defer cancel()
	dom := string(headless(t, ctx, browser, url, "--dump-dom"))
	require.NoError(t, os.MkdirAll(consoleArtifacts, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(consoleArtifacts, "console.html"), []byte(dom), 0o644))
	shot, err := filepath.Abs(filepath.Join(consoleArtifacts, "console.png"))
	require.NoError(t, err)
	_ = os.Remove(shot)
	headless(t, ctx, browser, url, "--screenshot="+shot)
	png, err := os.ReadFile(shot)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")), "the screenshot is a PNG")
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))

	require.Contains(t, dom, `data-loaded="true"`, "the page loaded /api/overview")
	require.NotContains(t, dom, `id="error" class="banner error">`, "no error banner")
	rows := groupRows(t, dom)
	for key := range rows {
		if strings.HasPrefix(key, "zz.bulk.") {
			delete(rows, key)
		}
	}
	require.Len(t, rows, 8, "every group of the page's topics has a row")

	dead := rows["orders.events/legacy"]
	require.Equal(t, "dead", dead.status)
	require.Contains(t, dead.class, "status-dead", "the dead group's row is highlighted")
	require.Contains(t, dead.html, `<span class="badge status-dead">dead</span>`)
	require.Contains(t, dead.html, `>Resurrect</button>`, "admin on: a dead group offers resurrection")
	for key, r := range rows {
		if key != "orders.events/legacy" {
			require.NotContains(t, r.class, "status-dead", key)
		}
	}

	// Lag as the page shows it, as fanout.groups counts it, and as the
	// walkthrough leaves it.
	want := map[string]int64{"orders.events/email": 0, "orders.events/analytics": 1, "orders.events/legacy": 3,
		"emails.send/": 0, "orders.retry/": 0, "audit.log/archive": 20000}
	for key, lag := range want {
		topic, group, _ := strings.Cut(key, "/")
		var db int64
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT lag_messages FROM fanout.groups
			WHERE topic = $1 AND group_name IS NOT DISTINCT FROM nullif($2, '')`, topic, group).Scan(&db))
		require.Equal(t, lag, db, key)
		require.Equal(t, lag, rows[key].lag, key)
	}
	require.Contains(t, rows["orders.events/analytics"].html, `data-value="1">1</td>`, "retry pending")
	require.Contains(t, rows["orders.retry/"].html, `HTTP 503 from warehouse`, "the newest dead letter's error")
	require.Contains(t, rows["audit.log/search"].html, `<td class="backfill" data-status=`)
	require.Contains(t, rows["orders.retry/"].html, `class="view-dl"`)

	// Topics: a queue topic's implicit group counts as an active group;
	// key partitions apart from (storage) segments; the publish
	// sparkline's scale.
	topicRow := func(dom, topic string) string {
		m := regexp.MustCompile(`(?s)<tr class="topic" data-topic="` + regexp.QuoteMeta(topic) + `">(.*?)</tr>`).FindStringSubmatch(dom)
		require.NotNil(t, m, "topic row %s", topic)
		return m[1]
	}
	require.Contains(t, topicRow(dom, "emails.send"), `<td class="num active-groups" data-value="1">1</td>`)
	keyed := topicRow(dom, "orders.keyed")
	require.Contains(t, keyed, `<td class="num key-partitions" data-value="8">8</td>`)
	require.Regexp(t, `<td class="num segments" data-value="\d+">`, keyed)
	require.Regexp(t, `<th class="num"[^>]*>Segments</th>`, dom, "storage segments are labelled apart from key partitions")
	require.Regexp(t, `<span class="scale" data-max="[0-9.]*[1-9][0-9.]*">max [0-9.,]+/s</span>`, keyed,
		"the publish sparkline has a scale above 0")
	// Groups: rates, the lag sparkline's scale, key partitions with
	// owners, and no heartbeat for a group no member has used.
	billing := rows["orders.keyed/billing"]
	require.Regexp(t, `<td class="num deliver-rate" data-value="[0-9.]*">[0-9.,]+/s</td>`, billing.html)
	require.Regexp(t, `<td class="num settle-rate" data-value="[0-9.]*">[0-9.,]+/s</td>`, billing.html)
	require.Regexp(t, `<td class="num nack-rate" data-value="0" data-total="0" title="since the group was created: [0-9][0-9,]* acked, 0 nacked, 0 dead-lettered">0.0/s</td>`,
		billing.html, "the nack rate, with the group's totals")
	require.Regexp(t, `<span class="scale" data-max="[0-9.]+">max [0-9,]+</span>`, billing.html)
	require.Contains(t, billing.html, `<summary>8 (1 owner, `)
	kp := regexp.MustCompile(`<tr class="key-partition" data-partition="(\d+)" data-owner="([^"]*)">`).FindAllStringSubmatch(dom, -1)
	require.Len(t, kp, 8, "a row per key partition")
	owned := 0
	for _, k := range kp {
		if k[2] == "kw-1" {
			owned++
		}
	}
	require.Positive(t, owned, "kw-1 owns the partitions it read")
	require.Contains(t, rows["audit.log/archive"].html, `<td class="last-heartbeat">no member yet</td>`)
	require.Regexp(t, `<td class="last-heartbeat">[^<]* ago</td>`, rows["orders.events/email"].html)

	// Paging: 65 topics, 50 a page; search.
	require.Regexp(t, `data-total="65" data-page="1" data-pages="2"`, dom)
	page2 := string(headless(t, ctx, browser, url+"?page=2", "--dump-dom"))
	require.Regexp(t, `data-total="65" data-page="2" data-pages="2"`, page2)
	require.Len(t, regexp.MustCompile(`<tr class="topic" `).FindAllString(page2, -1), 15)
	found := string(headless(t, ctx, browser, url+"?q=keyed", "--dump-dom"))
	require.Regexp(t, `data-total="1" data-page="1" data-pages="1"`, found)
	require.Len(t, regexp.MustCompile(`<tr class="topic" `).FindAllString(found, -1), 1)
	require.Contains(t, found, `<tr class="topic" data-topic="orders.keyed">`)
	require.Equal(t, "filter", regexp.MustCompile(`<input type="search" id="(filter)"`).FindStringSubmatch(found)[1])
	deadOnly := string(headless(t, ctx, browser, url+"?status=dead", "--dump-dom"))
	require.Regexp(t, `data-total="1" data-page="1" data-pages="1"`, deadOnly)
	require.Len(t, groupRows(t, deadOnly), 1, "only the dead group")

	// One message by id: its status with every group, as message_status
	// gives it; payload and headers only with the token.
	msgURL := url + "?message=orders.events&id=1"
	msgDOM := string(headless(t, ctx, browser, msgURL, "--dump-dom"))
	require.NoError(t, os.WriteFile(filepath.Join(consoleArtifacts, "message.html"), []byte(msgDOM), 0o644))
	msgShot, err := filepath.Abs(filepath.Join(consoleArtifacts, "message.png"))
	require.NoError(t, err)
	headless(t, ctx, browser, msgURL, "--screenshot="+msgShot)
	require.Contains(t, msgDOM, `<tr class="message-group" data-group="email" data-status="acked">`)
	require.Contains(t, msgDOM, `<tr class="message-group" data-group="analytics" data-status="retry">`)
	require.Contains(t, msgDOM, `id="msg-hidden"`)
	require.NotContains(t, msgDOM, `42.50`, "no payload without the token")
	getMsg := func(token string) map[string]any {
		req, err := http.NewRequest(http.MethodGet, url+"api/message?topic=orders.events&id=1", nil) //nolint:noctx // test
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var m map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
		return m
	}
	m := getMsg("browser-test-token")
	require.Equal(t, `{"order": 1, "total": 42.50}`, m["payload"])
	require.Equal(t, `{}`, m["headers"])
	require.Equal(t, false, m["payload_hidden"])
	for _, g := range m["groups"].([]any) {
		g := g.(map[string]any)
		if g["group"] == "analytics" {
			require.Equal(t, float64(1), g["attempts"], "a nacked message's attempts")
			require.Equal(t, "warehouse down", g["last_error"])
		}
	}
	m = getMsg("wrong")
	require.Nil(t, m["payload"])
	require.Equal(t, true, m["payload_hidden"])

	// The link to a group's dead letters opens them, payload truncated.
	dlURL := url + "?dead_letters=orders.retry&group="
	dom = string(headless(t, ctx, browser, dlURL, "--dump-dom"))
	require.NoError(t, os.WriteFile(filepath.Join(consoleArtifacts, "dead_letters.html"), []byte(dom), 0o644))
	dlShot, err := filepath.Abs(filepath.Join(consoleArtifacts, "dead_letters.png"))
	require.NoError(t, err)
	headless(t, ctx, browser, dlURL, "--screenshot="+dlShot)
	dlRE := regexp.MustCompile(`(?s)<tr class="dead-letter" data-id="(\d+)">(.*?)</tr>`)
	dls := dlRE.FindAllStringSubmatch(dom, -1)
	require.Len(t, dls, 1, "one dead letter")
	require.Contains(t, dls[0][2], `<input type="checkbox" class="dl-pick" value="`+dls[0][1]+`">`)
	require.Contains(t, dls[0][2], `HTTP 503 from warehouse`)
	require.Regexp(t, `<td class="payload">\{"sku": "X-1", [^<]* … \([\d,]+ chars\)</td>`, dls[0][2])
	require.NotContains(t, dom, `<section id="dead-letters" hidden="">`)

	// The admin call of docs/console.md, verbatim (curl, CSRF cookie and
	// token) resurrects the dead group it names: the action's event_log row
	// names its actor.
	out := runShell(t, t.TempDir(), nil, []string{"PGQ_CONSOLE_URL=" + strings.TrimSuffix(url, "/"),
		"PGQ_CONSOLE_TOKEN=browser-test-token"},
		docBlock(t, "docs/console.md", "tests/console_browser_test.go", "sh", "/api/admin/resurrect_group"))
	t.Logf("docs/console.md's admin call: %s", out)
	// (The row commits with the action; the group itself may be marked
	// dead again by the sidecar's next detection: its heartbeat timeout is
	// one second.)
	var actor string
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT detail->>'actor' FROM fanout.event_log
		WHERE kind = 'console_resurrect_group' AND topic = 'orders.events' AND group_name = 'legacy'
		ORDER BY event_id DESC LIMIT 1`).Scan(&actor))
	require.Equal(t, "alice", actor)
}

// consoleOverview is the part of /api/overview the test reads.
type consoleOverview struct {
	Topics []struct {
		PublishHistory []struct {
			PublishRate *float64 `json:"publish_rate"`
		} `json:"publish_history"`
	} `json:"topics"`
	Groups []struct {
		LagHistory []struct {
			SettleRate *float64 `json:"settle_rate"`
		} `json:"lag_history"`
	} `json:"groups"`
}

type domRow struct {
	class, status, html string
	lag                 int64
}

var (
	groupRowRE = regexp.MustCompile(`(?s)<tr class="([^"]*)" data-topic="([^"]*)" data-group="([^"]*)" data-status="([^"]*)">(.*?)</tr>`)
	lagCellRE  = regexp.MustCompile(`<td class="num lag-messages" data-value="(\d+)">`)
)

// groupRows parses the groups table of the dumped DOM, by "topic/group".
func groupRows(t *testing.T, dom string) map[string]domRow {
	t.Helper()
	out := map[string]domRow{}
	for _, m := range groupRowRE.FindAllStringSubmatch(dom, -1) {
		if !strings.Contains(" "+m[1]+" ", " group ") {
			continue
		}
		lm := lagCellRE.FindStringSubmatch(m[5])
		require.NotNil(t, lm, "lag cell of %s/%s", m[2], m[3])
		lag, err := strconv.ParseInt(lm[1], 10, 64)
		require.NoError(t, err)
		key := fmt.Sprintf("%s/%s", m[2], m[3])
		out[key] = domRow{class: m[1], status: m[4], html: m[5], lag: lag}
	}
	return out
}
