package orchestrator

import (
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"time"
)

// Defaults of the console settings (ConsoleConfig.withDefaults fills them).
const (
	DefaultConsoleSampleInterval  = 30 * time.Second
	DefaultConsoleHistory         = time.Hour
	DefaultConsoleRefreshInterval = 5 * time.Second
	DefaultConsolePayloadPreview  = 200  // characters of a dead letter's payload
	DefaultConsoleDeadLetters     = 20   // rows /api/dead_letters returns without ?limit
	MaxConsoleDeadLetters         = 500  // most rows /api/dead_letters returns
	DefaultConsoleEvents          = 30   // rows /api/events returns without ?limit
	MaxConsoleEvents              = 1000 // most rows /api/events returns
	DefaultConsoleCSRFTTL         = 12 * time.Hour
	consoleMembersPerGroup        = 20 // members listed per group
)

//go:embed console
var consoleFiles embed.FS

// ConsoleConfig configures the operator console. Zero values take the
// defaults above.
type ConsoleConfig struct {
	// Logger receives the console's logs (admin actions at info). Default:
	// JSON to stderr.
	Logger *slog.Logger
	// Clock stamps lag samples and CSRF tokens. Default RealClock.
	Clock Clock
	// Admin enables the admin actions (resurrect a dead group, replay dead
	// letters, cancel a backfill). Off by default: the console is read-only.
	Admin bool
	// Token is the secret admin actions must present as
	// "Authorization: Bearer <token>". Required when Admin is set.
	Token string
	// SampleInterval is how often Run samples every group's lag for the
	// sparklines. Default 30s.
	SampleInterval time.Duration
	// History is how much lag history is kept in memory per group.
	// Default 1h.
	History time.Duration
	// RefreshInterval is how often the page reloads its data. Default 5s.
	RefreshInterval time.Duration
	// PayloadPreview is how many characters of a dead letter's payload the
	// API returns. Default 200.
	PayloadPreview int
	// CSRFKey signs the CSRF tokens of admin actions. Default: random per
	// process (tokens then do not survive a restart).
	CSRFKey []byte
	// CSRFTTL is how long a CSRF token stays valid. Default 12h.
	CSRFTTL time.Duration
	// ListenAddr is the address the console is served on. Unless it is a
	// loopback address (127.0.0.1, ::1, localhost), dead-letter payloads are
	// served only to requests that present Token ("Authorization: Bearer
	// <token>"), and never without a Token; the rest of the console stays
	// read-only and open. Empty counts as beyond loopback.
	ListenAddr string
	// Database names the database when the sidecar serves several: the
	// page shows it and links back to the index of all of them (/).
	Database string
}

func (c ConsoleConfig) withDefaults() ConsoleConfig {
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if c.Clock == nil {
		c.Clock = RealClock{}
	}
	if c.SampleInterval <= 0 {
		c.SampleInterval = DefaultConsoleSampleInterval
	}
	if c.History <= 0 {
		c.History = DefaultConsoleHistory
	}
	if c.RefreshInterval <= 0 {
		c.RefreshInterval = DefaultConsoleRefreshInterval
	}
	if c.PayloadPreview <= 0 {
		c.PayloadPreview = DefaultConsolePayloadPreview
	}
	if len(c.CSRFKey) == 0 {
		c.CSRFKey = make([]byte, 32)
		_, _ = rand.Read(c.CSRFKey)
	}
	if c.CSRFTTL <= 0 {
		c.CSRFTTL = DefaultConsoleCSRFTTL
	}
	return c
}

// Validate checks the settings: admin actions need a token.
func (c ConsoleConfig) Validate() error {
	if c.Admin && c.Token == "" {
		return errors.New("console: admin actions need a token (--console-token or PGQ_CONSOLE_TOKEN)")
	}
	return nil
}

// Console is the operator console: a status page at /, the JSON API behind
// it under /api/, and (with Admin) a few administrative actions. It reads
// the fanout views, the scheduler's job states and its own in-memory lag
// samples. Everything it serves is embedded in the binary.
type Console struct {
	cfg    ConsoleConfig
	db     DB
	sched  *Scheduler
	log    *slog.Logger
	hist   *lagHistory
	page   *template.Template
	static http.Handler
}

// NewConsole returns the console of scheduler s on db. Call Run to collect
// lag samples and mount Handler on the sidecar's listener.
func NewConsole(db DB, s *Scheduler, cfg ConsoleConfig) (*Console, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if s == nil {
		return nil, errors.New("console: a scheduler is required")
	}
	cfg = cfg.withDefaults()
	page, err := template.ParseFS(consoleFiles, "console/index.html")
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	static, err := fs.Sub(consoleFiles, "console/static")
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	return &Console{
		cfg:    cfg,
		db:     db,
		sched:  s,
		log:    cfg.Logger.With("component", "console"),
		hist:   newLagHistory(cfg.History),
		page:   page,
		static: http.StripPrefix("/static/", http.FileServerFS(static)),
	}, nil
}

// Run samples every group's lag now and then every SampleInterval until
// ctx ends (the sparklines' data).
func (c *Console) Run(ctx context.Context) {
	for {
		if err := c.Sample(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("console: lag sample failed", "error", err)
		}
		if c.cfg.Clock.Sleep(ctx, c.cfg.SampleInterval) != nil {
			return
		}
	}
}

// Sample records the current lag of every group (and forgets groups that
// are gone and samples older than History).
func (c *Console) Sample(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	const cols = `topic, group_name, lag_messages, lag_seconds, delivered, acked_total, nacked_total, dead_lettered_total`
	// GroupsChunk topics per statement (readGroups); without the privilege
	// on the catalog table that names them, every topic in one.
	var rows []Row
	names, err := queryStrings(ctx, c.db, `SELECT t.topic FROM fanout.topic t ORDER BY t.topic`)
	switch {
	case err == nil:
		rows, err = readGroups(ctx, c.db, cols, names, GroupsChunk)
	case isPrivilegeError(err):
		rows, err = queryRows(ctx, c.db, `SELECT `+cols+` FROM fanout.groups`)
	}
	if err != nil {
		return fmt.Errorf("console: sample: %w", err)
	}
	// The publish counters (the topics' id sequences); without the
	// privilege to read them, no publish or settle rates.
	counts, err := readPublished(ctx, c.db)
	if err != nil {
		c.log.Debug("console: publish counters not readable", "error", err)
	}
	published := make(map[string]int64, len(counts))
	for t, p := range counts {
		published[t] = p.n
	}
	now := c.cfg.Clock.Now()
	seen := make(map[groupKey]LagSample, len(rows))
	for _, r := range rows {
		m, _ := r.Float("lag_messages")
		s, _ := r.Float("lag_seconds")
		seen[groupKey{r.Text("topic"), r.Text("group_name")}] = LagSample{At: now, Messages: int64(m), Seconds: finite(s),
			Delivered: intOf(r, "delivered"), Acked: intOf(r, "acked_total"), Nacked: intOf(r, "nacked_total"),
			DeadLettered: intOf(r, "dead_lettered_total")}
	}
	c.hist.add(now, seen, published)
	return nil
}
