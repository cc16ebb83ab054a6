package orchestrator

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// knownSeries returns every series name /metrics can expose (histograms
// with their _bucket, _sum and _count).
func knownSeries(t *testing.T) map[string]bool {
	t.Helper()
	ch := make(chan *prometheus.Desc, 256)
	m := newMetrics(prometheus.NewRegistry(), func() bool { return false })
	for _, c := range []prometheus.Collector{m.runs, m.errors, m.duration, m.rows, m.calls, m.limited,
		m.lastSuccess, m.leader, m.bfRate, m.bfStep, m.gapAlerts, newStatsCollector(nil, "", nil)} {
		c.Describe(ch)
	}
	close(ch)
	nameRE := regexp.MustCompile(`fqName: "([^"]+)"`)
	out := map[string]bool{}
	for d := range ch {
		n := nameRE.FindStringSubmatch(d.String())
		require.NotNil(t, n, d.String())
		out[n[1]] = true
		if n[1] == "pgq_scheduler_job_duration_seconds" || n[1] == "pgq_scheduler_backfill_step_duration_seconds" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[n[1]+s] = true
			}
		}
	}
	return out
}

var seriesRE = regexp.MustCompile(`\bpgq_[a-z0-9_]+`)

// Every pgq_* series the Grafana dashboard and the alert rules query is one
// the sidecar exports (promtool and Grafana would accept a misspelt name
// and show nothing).
func TestDeployFilesUseExportedSeries(t *testing.T) {
	t.Parallel()
	known := knownSeries(t)
	require.True(t, known["pgq_group_lag_messages"])

	raw, err := os.ReadFile("../deploy/grafana/pgq.json")
	require.NoError(t, err)
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash), "pgq.json is JSON")
	require.Equal(t, "pgq-fanout", dash.UID)
	titles := map[string]bool{}
	exprs := 0
	for _, p := range dash.Panels {
		titles[p.Title] = true
		for _, tg := range p.Targets {
			exprs++
			for _, s := range seriesRE.FindAllString(tg.Expr, -1) {
				require.True(t, known[s], "panel %q queries %s, which /metrics does not export", p.Title, s)
			}
		}
	}
	require.Positive(t, exprs)
	for _, want := range []string{"Lag (messages)", "Dead groups", "Dead-letter growth (per 5m)", "Job runs and errors",
		"Leader per sidecar", "Publish rate", "Delivery rate"} {
		require.True(t, titles[want], "panel %q", want)
	}

	rules, err := os.ReadFile("../deploy/prometheus/alerts.yml")
	require.NoError(t, err)
	for _, s := range seriesRE.FindAllString(string(rules), -1) {
		require.True(t, known[s], "alerts.yml uses %s, which /metrics does not export", s)
	}
	for _, want := range []string{"PgqGroupDead", "PgqGroupLagGrowing", "PgqDeadLettersGrowing", "PgqMaintenanceJobFailing", "PgqNoLeader"} {
		require.Contains(t, string(rules), "alert: "+want)
	}
}
