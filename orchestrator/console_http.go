package orchestrator

import (
	"bytes"
	"net/http"
)

// Handler serves the console, and passes every other path (/metrics,
// /healthz) to next:
//
//	GET  /                          the status page (a thin client of the API)
//	GET  /static/...                its script and style sheet (embedded)
//	GET  /api/overview              everything the page shows, in one response
//	GET  /api/topics                fanout.topics
//	GET  /api/groups[?topic=]       fanout.groups + newest dead letter error, members, lag history
//	GET  /api/dead_letters?topic=&group=&limit=
//	                                the newest dead letters of a group (payload truncated)
//	GET  /api/jobs                  this sidecar's maintenance jobs
//	GET  /api/events[?limit=]       the newest fanout.event_log rows
//	GET  /api/message?topic=&id=    one message: status per group (fanout.message_status), attempts;
//	                                payload and headers only with the token
//	GET  /api/csrf                  a CSRF token (cookie + body) for admin actions
//	POST /api/admin/{action}        resurrect_group, replay_dead_letters, cancel_backfill
func (c *Console) Handler(next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.handlePage)
	mux.Handle("GET /static/", c.static)
	mux.HandleFunc("GET /api/overview", c.handleOverview)
	mux.HandleFunc("GET /api/topics", c.handleTopics)
	mux.HandleFunc("GET /api/groups", c.handleGroups)
	mux.HandleFunc("GET /api/dead_letters", c.handleDeadLetters)
	mux.HandleFunc("GET /api/jobs", c.handleJobs)
	mux.HandleFunc("GET /api/events", c.handleEvents)
	mux.HandleFunc("GET /api/message", c.handleMessage)
	mux.HandleFunc("GET /api/csrf", c.handleCSRF)
	mux.HandleFunc("POST /api/admin/{action}", c.handleAdmin)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", r.Method+" "+r.URL.Path+": no such endpoint")
	})
	if next != nil {
		mux.Handle("/", next)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Everything is served from here: no inline script, no third party.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; "+
			"style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		mux.ServeHTTP(w, r)
	})
}

// pageData is what console/index.html needs; the page loads the rest from
// /api/overview.
type pageData struct {
	CSRFToken  string
	Admin      bool
	RefreshMS  int64
	SidecarID  string
	CSRFHeader string
	Database   string // when the sidecar serves several databases
}

func (c *Console) handlePage(w http.ResponseWriter, r *http.Request) {
	d := pageData{
		CSRFToken: c.setCSRFCookie(w, r), Admin: c.cfg.Admin, RefreshMS: c.cfg.RefreshInterval.Milliseconds(),
		SidecarID: c.sched.elector.ID(), CSRFHeader: CSRFHeader, Database: c.cfg.Database,
	}
	var buf bytes.Buffer
	if err := c.page.Execute(&buf, d); err != nil {
		c.log.Error("console: page template", "error", err)
		http.Error(w, "console: page template failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}
