package orchestrator

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// getAs GETs path with an optional bearer token; it returns the status and
// the raw body.
func (b *consoleBundle) getAs(t *testing.T, path, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(b.ctx, http.MethodGet, b.srv.URL+path, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, body
}

// A NUL, invalid UTF-8, a control character or an
// over-long name in a query parameter is the client's mistake: 400 with the
// console's own message, never a 503 carrying PostgreSQL's text.
func TestConsoleBadNameParams(t *testing.T) {
	t.Parallel()
	b := setupConsole(t, ConsoleConfig{})
	for _, path := range []string{
		"/api/groups?topic=%00", "/api/groups?topic=%ff", "/api/groups?topic=a%ffb", "/api/groups?topic=a%01",
		"/api/groups?topic=" + strings.Repeat("x", 513),
		"/api/groups?topic=" + strings.Repeat("%F0%9D%85%A0", 512), // U+1D160: 3 characters each in NFC
		"/api/dead_letters?topic=%00", "/api/dead_letters?topic=jobs&group=%00",
		"/api/dead_letters?topic=jobs&group=%c3%28",
	} {
		code, body := b.getAs(t, path, "")
		require.Equal(t, http.StatusBadRequest, code, "%s: %s", path, body)
		var ae apiError
		require.NoError(t, json.Unmarshal(body, &ae), path)
		require.Equal(t, "bad_request", ae.Code, path)
		require.NotContains(t, ae.Error, "ERROR", "%s: our message, not PostgreSQL's", path)
		require.NotContains(t, ae.Error, "SQLSTATE", path)
	}
	// A decomposed spelling of a name is that name.
	b.exec(t, `SELECT fanout.create_topic('caf'||U&'\00E9', semantics => 'pubsub')`)
	b.exec(t, `SELECT fanout.subscribe('caf'||U&'\00E9', 'g')`)
	var gs []GroupView
	require.Equal(t, http.StatusOK, b.getJSON(t, "/api/groups?topic=cafe%CC%81", &gs))
	require.Len(t, gs, 1)
}

// Every response is bounded. A 4 MB event_log detail
// (written before log_action had a bound, or by anything with the table's
// privileges) made every /api/overview 4 MB; it is served cut to
// MaxConsoleEventDetail, marked truncated.
func TestConsoleResponsesBounded(t *testing.T) {
	t.Parallel()
	b := setupConsole(t, ConsoleConfig{})
	b.exec(t, `INSERT INTO fanout.event_log (topic, group_name, kind, detail)
	           VALUES (repeat('t', 100000), repeat('g', 100000), 'huge',
	                   jsonb_build_object('blob', repeat('x', 4 * 1024 * 1024)))`)
	b.exec(t, `UPDATE fanout.dead_letter SET last_error = repeat('e', 100000)`)
	for _, path := range []string{"/api/overview", "/api/events", "/api/events?limit=1000",
		"/api/dead_letters?topic=jobs", "/api/groups?topic=jobs"} {
		code, body := b.getAs(t, path, "")
		require.Equal(t, http.StatusOK, code, "%s: %s", path, body)
		require.Less(t, len(body), 64*1024, "%s is bounded", path)
	}
	var es []EventView
	require.Equal(t, http.StatusOK, b.getJSON(t, "/api/events?limit=1", &es))
	require.Equal(t, "huge", es[0].Kind)
	require.Len(t, es[0].Topic, maxConsoleName)
	var detail struct {
		Truncated bool   `json:"truncated"`
		Bytes     int    `json:"bytes"`
		Preview   string `json:"preview"`
	}
	require.NoError(t, json.Unmarshal(es[0].Detail, &detail))
	require.True(t, detail.Truncated)
	require.Greater(t, detail.Bytes, 4*1024*1024)
	require.True(t, strings.HasPrefix(detail.Preview, `{"blob": "xxx`))
	var dls []DeadLetterView
	require.Equal(t, http.StatusOK, b.getJSON(t, "/api/dead_letters?topic=jobs", &dls))
	require.Len(t, *dls[0].LastError, MaxConsoleErrorText)
}

// A console listening beyond loopback never serves a
// dead letter's payload without the admin token; with it, or on loopback,
// it does.
func TestConsolePayloadsNeedTokenBeyondLoopback(t *testing.T) {
	t.Parallel()
	payload := func(b *consoleBundle, token string) DeadLetterView {
		code, body := b.getAs(t, "/api/dead_letters?topic=jobs", token)
		require.Equal(t, http.StatusOK, code, string(body))
		var dls []DeadLetterView
		require.NoError(t, json.Unmarshal(body, &dls))
		require.Len(t, dls, 1)
		require.NotContains(t, string(body), "xxxxxxxx", "no part of the payload")
		return dls[0]
	}
	for _, listen := range []string{":9187", "0.0.0.0:9187", "[::]:9187", "192.0.2.7:9187", "pgq.example:9187"} {
		b := setupConsole(t, ConsoleConfig{ListenAddr: listen, Admin: true, Token: consoleToken})
		for _, tok := range []string{"", "wrong"} {
			d := payload(b, tok)
			require.True(t, d.PayloadHidden, listen)
			require.Empty(t, d.Payload, listen)
			require.False(t, d.PayloadTruncated)
			require.Equal(t, "boom", *d.LastError, "the rest is served")
		}
		code, body := b.getAs(t, "/api/dead_letters?topic=jobs", consoleToken)
		require.Equal(t, http.StatusOK, code)
		var dls []DeadLetterView
		require.NoError(t, json.Unmarshal(body, &dls))
		require.False(t, dls[0].PayloadHidden)
		require.True(t, strings.HasPrefix(longPayload, dls[0].Payload), listen)
		require.NotEmpty(t, dls[0].Payload)
	}
	// Beyond loopback without a token configured: never.
	ro := setupConsole(t, ConsoleConfig{ListenAddr: ":9187"})
	d := payload(ro, "")
	require.True(t, d.PayloadHidden)
	// Loopback: the preview, as before.
	for _, listen := range []string{"127.0.0.1:9187", "[::1]:9187", "localhost:9187"} {
		lo := setupConsole(t, ConsoleConfig{ListenAddr: listen})
		var dls []DeadLetterView
		require.Equal(t, http.StatusOK, lo.getJSON(t, "/api/dead_letters?topic=jobs", &dls))
		require.False(t, dls[0].PayloadHidden, listen)
		require.Len(t, dls[0].Payload, DefaultConsolePayloadPreview, listen)
	}
}
