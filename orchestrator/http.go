package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Health is the body of /healthz.
type Health struct {
	// Status is "ok" (HTTP 200), "degraded" (HTTP 200: the jobs run, but
	// maintenance has been passing a topic by for longer than
	// SchedulerConfig.SkippedDegradedAfter) or "unavailable" (HTTP 503).
	Status string `json:"status"`
	// Reason says why the sidecar is unavailable or degraded.
	Reason   string      `json:"reason,omitempty"`
	Database string      `json:"database"` // "up" or "down"
	Leader   bool        `json:"leader"`
	LeaderID string      `json:"leader_id"`
	Jobs     []JobStatus `json:"jobs"`
	// Skipped lists the topics maintenance is passing by
	// (fanout.maint_skips()), however briefly.
	Skipped []SkippedTopic `json:"skipped_topics,omitempty"`
}

// Health reports whether the database is reachable and, on the leader,
// whether every job succeeded within its window and none keeps failing
// (FailingRunsUnhealthy runs in a row).
func (s *Scheduler) Health(ctx context.Context) Health {
	h := Health{Status: "ok", Database: "up", Leader: s.elector.IsLeader(), LeaderID: s.elector.ID(), Jobs: s.Jobs()}
	pctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	if err := s.db.Ping(pctx); err != nil {
		h.Status, h.Database = "unavailable", "down"
		h.Reason = "database unreachable: " + oneLine(err.Error())
		return h
	}
	var overdue, failing []string
	for _, j := range h.Jobs {
		if j.Failing && !j.Overdue {
			failing = append(failing, fmt.Sprintf("%s (%d runs in a row, last error: %s)", j.Name, j.FailingRuns,
				oneLine(j.LastError)))
		}
		if j.Overdue {
			why := "never succeeded"
			if !j.LastSuccess.IsZero() {
				why = "last succeeded " + j.LastSuccess.UTC().Format("2006-01-02T15:04:05Z")
			}
			if j.LastError != "" {
				why += ", last error: " + oneLine(j.LastError)
			}
			overdue = append(overdue, fmt.Sprintf("%s (%s)", j.Name, why))
		}
	}
	var reasons []string
	if len(overdue) > 0 {
		reasons = append(reasons, "jobs overdue: "+strings.Join(overdue, "; "))
	}
	if len(failing) > 0 {
		reasons = append(reasons, "jobs failing: "+strings.Join(failing, "; "))
	}
	if len(reasons) > 0 {
		h.Status = "unavailable"
		h.Reason = strings.Join(reasons, "; ")
	}
	s.healthSkips(pctx, &h)
	return h
}

// healthSkips adds the topics maintenance passes by to h, and turns an "ok"
// into "degraded" when one has been passed by for longer than
// SkippedDegradedAfter (on the scheduler's clock).
func (s *Scheduler) healthSkips(ctx context.Context, h *Health) {
	skips, err := ReadSkips(ctx, s.db)
	if err != nil {
		s.log.Warn("healthz: reading fanout.maint_skips() failed", "error", err)
		return
	}
	h.Skipped = skips
	var long []string
	limit := s.cfg.Clock.Now().Add(-s.cfg.SkippedDegradedAfter)
	for _, k := range skips {
		if k.SkippedSince.Before(limit) {
			long = append(long, fmt.Sprintf("%s passes topic %q by since %s (%d calls: %s)", k.Func, k.Topic,
				k.SkippedSince.UTC().Format("2006-01-02T15:04:05Z"), k.Skips, oneLine(k.Reason)))
		}
	}
	if len(long) == 0 {
		return
	}
	why := "maintenance skipped topics: " + strings.Join(long, "; ")
	if h.Status == "ok" {
		h.Status = "degraded"
		h.Reason = why
	} else {
		h.Reason += "; " + why
	}
}

// Handler serves /metrics (Prometheus) and /healthz (JSON; 200 when
// healthy or degraded, 503 with a reason when unavailable).
func (s *Scheduler) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		h := s.Health(r.Context())
		w.Header().Set("Content-Type", "application/json")
		if h.Status == "unavailable" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(h)
	})
	return mux
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
