package orchestrator

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5/pgconn"
)

// Admin actions. Each needs, in this order (the first missing one decides
// the refusal):
//  1. the console started with Admin (403, code admin_disabled);
//  2. "Authorization: Bearer <Token>" (401, code unauthorized);
//  3. a CSRF token: the X-CSRF-Token header must equal the pgq_csrf cookie,
//     carry a valid signature and be younger than CSRFTTL; a cross-site
//     Origin is refused too (403, code csrf);
//  4. a JSON body naming the actor (400).
// The action's SQL call and a fanout.event_log row naming the actor commit
// in one transaction: a refused call leaves no row.

// CSRFCookie is the name of the cookie holding the CSRF token.
const CSRFCookie = "pgq_csrf"

// CSRFHeader is the header that must repeat the CSRF token.
const CSRFHeader = "X-CSRF-Token"

// AdminRequest is the body of POST /api/admin/{action}.
type AdminRequest struct {
	// Actor names who acts (a person or a script); it goes into event_log.
	Actor string `json:"actor"`
	Topic string `json:"topic"`
	// Group is "" for the implicit group of a queue topic.
	Group string `json:"group"`
	// MessageIDs are the dead letters to replay (replay_dead_letters only).
	MessageIDs []int64 `json:"message_ids,omitempty"`
}

// AdminResult is the answer of a successful admin action.
type AdminResult struct {
	Action string `json:"action"`
	Topic  string `json:"topic"`
	Group  string `json:"group"`
	// Count is what the action did: 1 for a resurrected group, the number
	// of replayed dead letters, 1 when a backfill was running and is now
	// cancelled (else 0).
	Count int64 `json:"count"`
	// Status is the group's status after resurrect_group.
	Status string `json:"status,omitempty"`
	// EventID is the fanout.event_log row recording the action.
	EventID int64 `json:"event_id"`
}

// csrfToken returns a new token: the issue time and an HMAC of it.
func (c *Console) csrfToken() string {
	var b [8 + 16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(c.cfg.Clock.Now().Unix()))
	copy(b[8:], c.csrfMAC(b[:8]))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func (c *Console) csrfMAC(ts []byte) []byte {
	m := hmac.New(sha256.New, c.cfg.CSRFKey)
	m.Write([]byte("pgq-console-csrf\x00"))
	m.Write(ts)
	return m.Sum(nil)[:16]
}

// csrfValid checks a token's signature and age.
func (c *Console) csrfValid(tok string) bool {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) != 24 {
		return false
	}
	if !hmac.Equal(b[8:], c.csrfMAC(b[:8])) {
		return false
	}
	age := c.csrfAge(tok)
	return age >= -time.Minute && age <= c.cfg.CSRFTTL
}

// csrfAge is how long ago a well-formed token was issued.
func (c *Console) csrfAge(tok string) time.Duration {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) != 24 {
		return c.cfg.CSRFTTL + time.Hour
	}
	issued := time.Unix(int64(binary.BigEndian.Uint64(b[:8])), 0)
	return c.cfg.Clock.Now().Sub(issued)
}

// setCSRFCookie returns the request's CSRF cookie while it is valid for at
// least half its TTL (so that several tabs share one token); otherwise it
// issues a new token and sets it as the cookie.
func (c *Console) setCSRFCookie(w http.ResponseWriter, r *http.Request) string {
	if ck, err := r.Cookie(CSRFCookie); err == nil && c.csrfValid(ck.Value) && c.csrfAge(ck.Value) < c.cfg.CSRFTTL/2 {
		return ck.Value
	}
	tok := c.csrfToken()
	http.SetCookie(w, &http.Cookie{
		Name: CSRFCookie, Value: tok, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		MaxAge: int(c.cfg.CSRFTTL.Seconds()),
	})
	return tok
}

// handleCSRF: GET /api/csrf issues a token (cookie + body) for scripts.
func (c *Console) handleCSRF(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"csrf_token": c.setCSRFCookie(w, r), "header": CSRFHeader})
}

func (c *Console) tokenOK(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || got == "" {
		return false
	}
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(c.cfg.Token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

func (c *Console) csrfOK(r *http.Request) (bool, string) {
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false, "cross-site request (Origin " + o + ")"
		}
	}
	hdr := r.Header.Get(CSRFHeader)
	ck, err := r.Cookie(CSRFCookie)
	switch {
	case hdr == "":
		return false, "missing " + CSRFHeader + " header (GET /api/csrf issues one)"
	case err != nil:
		return false, "missing " + CSRFCookie + " cookie (GET /api/csrf sets it)"
	case subtle.ConstantTimeCompare([]byte(hdr), []byte(ck.Value)) != 1:
		return false, CSRFHeader + " does not match the " + CSRFCookie + " cookie"
	case !c.csrfValid(hdr):
		return false, "invalid or expired CSRF token (reload the page)"
	}
	return true, ""
}

func validActor(s string) bool {
	if strings.TrimSpace(s) == "" || len(s) > 200 {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// handleAdmin: POST /api/admin/{action}.
func (c *Console) handleAdmin(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	if !c.cfg.Admin {
		writeError(w, http.StatusForbidden, "admin_disabled",
			"admin actions are disabled: start pgq-scheduler run with --console-admin and --console-token")
		return
	}
	if !c.tokenOK(r) {
		c.log.Warn("console: admin action refused: bad token", "action", action, "remote_addr", r.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="pgq-console"`)
		writeError(w, http.StatusUnauthorized, "unauthorized", "missing or wrong admin token (Authorization: Bearer <token>)")
		return
	}
	if ok, why := c.csrfOK(r); !ok {
		c.log.Warn("console: admin action refused: CSRF", "action", action, "remote_addr", r.RemoteAddr, "reason", why)
		writeError(w, http.StatusForbidden, "csrf", why)
		return
	}
	switch action {
	case "resurrect_group", "replay_dead_letters", "cancel_backfill":
	default:
		writeError(w, http.StatusNotFound, "not_found",
			fmt.Sprintf("unknown action %q: want resurrect_group, replay_dead_letters or cancel_backfill", action))
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "bad_request", "send a JSON body (Content-Type: application/json)")
		return
	}
	var req AdminRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "invalid JSON body: "+err.Error())
		return
	}
	switch {
	case !validActor(req.Actor):
		writeError(w, http.StatusBadRequest, "bad_request", "actor is required: who is acting (1-200 printable characters)")
		return
	case req.Topic == "":
		writeError(w, http.StatusBadRequest, "bad_request", "topic is required")
		return
	case action == "replay_dead_letters" && len(req.MessageIDs) == 0:
		writeError(w, http.StatusBadRequest, "bad_request", "message_ids is required: the dead letters to replay")
		return
	case action != "replay_dead_letters" && len(req.MessageIDs) > 0:
		writeError(w, http.StatusBadRequest, "bad_request", "message_ids applies to replay_dead_letters only")
		return
	}
	res, err := c.runAdmin(r.Context(), action, req, r)
	if err != nil {
		c.adminError(w, action, req, err)
		return
	}
	c.log.Info("console: admin action", "action", action, "actor", req.Actor, "topic", req.Topic,
		"group", req.Group, "count", res.Count, "event_id", res.EventID, "remote_addr", r.RemoteAddr)
	writeJSON(w, http.StatusOK, res)
}

// runAdmin calls the action's SQL function and records it in
// fanout.event_log in one transaction.
func (c *Console) runAdmin(ctx context.Context, action string, req AdminRequest, r *http.Request) (*AdminResult, error) {
	tx, err := c.db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	res := &AdminResult{Action: action, Topic: req.Topic, Group: req.Group}
	group := nullIfEmpty(req.Group)
	detail := map[string]any{
		"actor": req.Actor, "via": "pgq-console", "sidecar": c.sched.elector.ID(),
		"remote_addr": clipRunes(r.RemoteAddr, 100), "user_agent": clipRunes(r.UserAgent(), 256),
	}
	switch action {
	case "resurrect_group":
		err = tx.QueryRow(ctx, `SELECT fanout.resurrect_group($1, $2)`, req.Topic, group).Scan(&res.Status)
		res.Count = 1
		detail["status"] = res.Status
	case "replay_dead_letters":
		err = tx.QueryRow(ctx, `SELECT fanout.replay_dead_letters($1, $2, $3)`, req.Topic, group, req.MessageIDs).Scan(&res.Count)
		detail["message_ids"] = req.MessageIDs
	case "cancel_backfill":
		var running bool
		err = tx.QueryRow(ctx, `SELECT fanout.cancel_backfill($1, $2)`, req.Topic, group).Scan(&running)
		if running {
			res.Count = 1
		}
		detail["was_running"] = running
	}
	if err != nil {
		return nil, err
	}
	d, err := json.Marshal(detail)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	// Recorded in the action's transaction: without the row the action does
	// not happen. fanout.log_action adds the sidecar's database role.
	if err := tx.QueryRow(ctx, `SELECT fanout.log_action($1, $2, $3, $4, $5)`,
		req.Topic, group, "console_"+action, res.Count, d).Scan(&res.EventID); err != nil {
		return nil, fmt.Errorf("console: event_log: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return res, nil
}

// adminError maps a failed action to a status: pgq's SQLSTATEs to 4xx
// (code = the SQLSTATE), anything else to 500.
func (c *Console) adminError(w http.ResponseWriter, action string, req AdminRequest, err error) {
	c.log.Warn("console: admin action failed", "action", action, "actor", req.Actor, "topic", req.Topic,
		"group", req.Group, "error", err)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		writeError(w, http.StatusInternalServerError, "database", oneLine(err.Error()))
		return
	}
	status := http.StatusInternalServerError
	switch pe.Code {
	case "PGQ01", "PGQ14":
		status = http.StatusNotFound
	case "PGQ03", "PGQ13":
		status = http.StatusBadRequest
	case "PGQ15", "PGQ18", "PGQ19", "PGQ20":
		status = http.StatusConflict
	case "42501":
		status = http.StatusForbidden
	}
	writeError(w, status, pe.Code, pe.Message)
}

// clipRunes cuts s to at most n runes (fanout.log_action bounds detail at
// 8,192 bytes; a request's headers are the client's to choose).
func clipRunes(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n])
	}
	return s
}
