package main

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is everything a run produced; results.json is this, indented.
type Report struct {
	Started time.Time      `json:"started_at"`
	Seconds float64        `json:"duration_s"`
	Quick   bool           `json:"quick"`
	Git     string         `json:"git,omitempty"`
	Machine map[string]any `json:"machine"`
	Server  ServerInfo     `json:"server"`
	// Summary is the fixed set of figures to compare across runs.
	Summary Summary `json:"summary"`
	// PgQ says whether the Skytools PgQ baseline was measured, and which.
	PgQ       string            `json:"pgq_baseline"`
	Baselines map[string]string `json:"baselines"`
	Results   []Result          `json:"results"`
	Errors    []ScenarioError   `json:"errors,omitempty"`
}

// ScenarioError is a scenario whose harness broke.
type ScenarioError struct {
	Scenario string `json:"scenario"`
	Error    string `json:"error"`
}

// MarshalJSON writes Ratio as null when there is none.
func (r Result) MarshalJSON() ([]byte, error) {
	type alias Result
	var rp *float64
	if !math.IsNaN(r.Ratio) && !math.IsInf(r.Ratio, 0) {
		v := r.Ratio
		rp = &v
	}
	var buf strings.Builder
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // "≥", "=>" stay readable
	err := enc.Encode(struct {
		alias
		Ratio *float64 `json:"ratio"`
	}{alias(r), rp})
	return []byte(buf.String()), err
}

func writeJSON(path string, rep *Report) error {
	var buf strings.Builder
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(buf.String()), 0o644)
}

func (r Result) valueCell() string {
	if r.ValueText != "" {
		return r.ValueText
	}
	if r.Unit == "ms" {
		return fmtMs(r.Value) + " ms"
	}
	return fmtNum(r.Value) + " " + r.Unit
}

func (r Result) baseCell() string {
	if r.BaseText != "" {
		return r.BaseText
	}
	if r.Baseline == 0 {
		return "-"
	}
	if r.Unit == "ms" {
		return fmtMs(r.Baseline) + " ms"
	}
	return fmtNum(r.Baseline) + " " + r.Unit
}

func (r Result) ratioCell() string {
	if math.IsNaN(r.Ratio) || math.IsInf(r.Ratio, 0) {
		return "-"
	}
	return fmt.Sprintf("%.2f", r.Ratio)
}

func (r Result) passCell() string {
	switch {
	case r.Pass == nil:
		return ""
	case *r.Pass:
		return "met"
	default:
		return "MISSED"
	}
}

// printTable writes the one table of the run.
func printTable(w io.Writer, rep *Report) {
	mode := "full"
	if rep.Quick {
		mode = "quick (-quick)"
	}
	fmt.Fprintf(w, "\npgq bench — %s run, %s, %.0f s; %v CPUs; %s\n", mode, rep.Started.Format(time.RFC3339),
		rep.Seconds, rep.Machine["cpus"], shortVersion(rep.Server.Version))
	var keys []string
	for k := range rep.Server.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var kv []string
	for _, k := range keys {
		kv = append(kv, k+"="+rep.Server.Settings[k])
	}
	fmt.Fprintf(w, "server settings: %s\n", strings.Join(kv, " "))
	fmt.Fprintf(w, "server shared memory pages: %s\n", rep.Server.SharedMemoryPages)
	fmt.Fprintf(w, "machine load average (1/5/15 min): %v at start, %v at end (other work on the machine skews absolute numbers)\n",
		rep.Machine["loadavg_start"], rep.Machine["loadavg_end"])
	fmt.Fprintf(w, "PgQ baseline: %s\n", rep.PgQ)
	fmt.Fprintf(w, "Every ratio is pgq / a baseline measured in the same run (latency rows: p99 / baseline p99).\n")
	fmt.Fprintf(w, "Client: pgx v5 pool, every statement prepared once per connection (statement cache); consumers use ./client.\n\n")

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tCASE\tPGQ\tBASELINE\tRATIO\tTARGET\tRESULT")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Scenario, r.Case, r.valueCell(), r.baseCell(),
			r.ratioCell(), r.Target, r.passCell())
	}
	for _, e := range rep.Errors {
		fmt.Fprintf(tw, "%s\tHARNESS ERROR: %s\t\t\t\t\t\n", e.Scenario, oneLine(e.Error))
	}
	tw.Flush()

	met, missed := 0, 0
	for _, r := range rep.Results {
		if r.Pass != nil {
			if *r.Pass {
				met++
			} else {
				missed++
			}
		}
	}
	fmt.Fprintf(w, "\ntargets: %d met, %d missed", met, missed)
	if len(rep.Errors) > 0 {
		fmt.Fprintf(w, "; %d scenario(s) broke", len(rep.Errors))
	}
	fmt.Fprintln(w)
	printSummary(w, &rep.Summary)

	var names []string
	for n := range rep.Baselines {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "\nBaselines:\n")
	for _, n := range names {
		fmt.Fprintf(w, "  [%s]\n", n)
		for _, line := range strings.Split(rep.Baselines[n], "\n") {
			fmt.Fprintf(w, "      %s\n", line)
		}
	}
	notes := map[string]bool{}
	for _, r := range rep.Results {
		if r.Note != "" && !notes[r.Note] {
			notes[r.Note] = true
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "Notes:\n")
		for _, r := range rep.Results {
			if r.Note != "" && notes[r.Note] {
				fmt.Fprintf(w, "  %s / %s: %s\n", r.Scenario, r.Case, r.Note)
				notes[r.Note] = false
			}
		}
	}
}

func shortVersion(v string) string {
	if i := strings.Index(v, " on "); i > 0 {
		return v[:i]
	}
	return v
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// writeSVG draws two panels: throughput ratios (bars, with the target as a
// tick) and latency percentiles (p50 and p99 bars, log scale, with targets).
func writeSVG(path string, rep *Report) error {
	var ratios, lats []Result
	for _, r := range rep.Results {
		switch {
		case r.HigherIsBetter && !math.IsNaN(r.Ratio):
			ratios = append(ratios, r)
		case r.Scenario == "latency" || (r.Unit == "ms" && r.Details != nil):
			if _, ok := r.Details["pgq"].(LatencySummary); ok {
				lats = append(lats, r)
			} else if _, ok := r.Details["held"].(LatencySummary); ok {
				lats = append(lats, r)
			}
		}
	}
	const (
		width  = 1000
		labelW = 400
		barW   = 480
		rowH   = 22
		top    = 90
	)
	var b strings.Builder
	y := top
	body := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	// Panel 1: ratios.
	maxR := 1.2
	for _, r := range ratios {
		maxR = math.Max(maxR, math.Min(r.Ratio*1.05, 3))
	}
	x := func(v float64) float64 { return labelW + barW*math.Min(v, maxR)/maxR }
	body(`<text x="10" y="%d" class="h">Throughput: pgq / baseline (same run)</text>`+"\n", y-10)
	panelTop := y
	for _, r := range ratios {
		color := "#9aa5b1"
		if r.Pass != nil {
			color = map[bool]string{true: "#2f9e44", false: "#e03131"}[*r.Pass]
		}
		body(`<text x="%d" y="%d" class="l">%s</text>`+"\n", labelW-8, y+15, html.EscapeString(r.Case))
		body(`<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", labelW, y+3, x(r.Ratio)-labelW, rowH-6, color)
		body(`<text x="%.1f" y="%d" class="v">%.2f  (%s vs %s)</text>`+"\n", x(r.Ratio)+6, y+15, r.Ratio,
			html.EscapeString(r.valueCell()), html.EscapeString(r.baseCell()))
		if r.MinRatio > 0 {
			body(`<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" class="t"/>`+"\n", x(r.MinRatio), x(r.MinRatio), y, y+rowH)
		}
		y += rowH
	}
	body(`<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" class="one"/>`+"\n", x(1), x(1), panelTop-4, y+4)
	body(`<text x="%.1f" y="%d" class="a">1.0 = baseline</text>`+"\n", x(1)-30, y+18)
	y += 60

	// Panel 2: latency, log scale 0.1 ms .. 1000 ms.
	if len(lats) > 0 {
		lx := func(v float64) float64 {
			v = math.Max(0.1, math.Min(v, 1000))
			return labelW + barW*(math.Log10(v)+1)/4
		}
		body(`<text x="10" y="%d" class="h">Latency publish→handler, ms (log scale): p50 dark, p99 light; red ticks = targets</text>`+"\n", y-10)
		panelTop = y
		var lastBase LatencySummary
		for _, r := range lats {
			var pgq, base LatencySummary
			if v, ok := r.Details["pgq"].(LatencySummary); ok {
				pgq = v
				base, _ = r.Details["baseline"].(LatencySummary)
			} else {
				pgq, _ = r.Details["held"].(LatencySummary)
				base, _ = r.Details["clean"].(LatencySummary)
			}
			for _, row := range []struct {
				label string
				s     LatencySummary
				dark  string
				light string
			}{{"pgq: " + r.Case, pgq, "#1864ab", "#74c0fc"}, {"  baseline (" + r.BaseName + ")", base, "#495057", "#ced4da"}} {
				if row.s.N == 0 || (!strings.HasPrefix(row.label, "pgq") && row.s == lastBase) {
					continue // no samples, or the same baseline as the row above
				}
				if !strings.HasPrefix(row.label, "pgq") {
					lastBase = row.s
				}
				body(`<text x="%d" y="%d" class="l">%s</text>`+"\n", labelW-8, y+15, html.EscapeString(row.label))
				body(`<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", labelW, y+3, lx(row.s.P99)-labelW, rowH-6, row.light)
				body(`<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", labelW, y+3, lx(row.s.P50)-labelW, rowH-6, row.dark)
				body(`<text x="%.1f" y="%d" class="v">p50 %s / p99 %s</text>`+"\n", lx(row.s.P99)+6, y+15, fmtMs(row.s.P50), fmtMs(row.s.P99))
				if r.Target != "" && strings.HasPrefix(row.label, "pgq") {
					body(`<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" class="t"/>`+"\n", lx(5), lx(5), y, y+rowH)
					body(`<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" class="t"/>`+"\n", lx(25), lx(25), y, y+rowH)
				}
				y += rowH
			}
			y += 4
		}
		for _, t := range []float64{0.1, 1, 10, 100, 1000} {
			body(`<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" class="grid"/>`+"\n", lx(t), lx(t), panelTop-4, y)
			body(`<text x="%.1f" y="%d" class="a">%g</text>`+"\n", lx(t)-6, y+14, t)
		}
		y += 40
	}
	mode := "full"
	if rep.Quick {
		mode = "quick"
	}
	var svg strings.Builder
	fmt.Fprintf(&svg, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">`+"\n",
		width+200, y, width+200, y)
	svg.WriteString(`<style>.h{font-size:15px;font-weight:bold}.l{font-size:12px;text-anchor:end}.v{font-size:11px}` +
		`.a{font-size:11px;fill:#666}.t{stroke:#c92a2a;stroke-width:2}.one{stroke:#333;stroke-dasharray:4 3}` +
		`.grid{stroke:#ddd}</style>` + "\n")
	fmt.Fprintf(&svg, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&svg, `<text x="10" y="22" font-size="18" font-weight="bold">pgq bench (%s run, %s, %v CPUs, %s)</text>`+"\n",
		mode, rep.Started.Format("2006-01-02 15:04"), rep.Machine["cpus"], html.EscapeString(shortVersion(rep.Server.Version)))
	fmt.Fprintf(&svg, `<text x="10" y="40" class="a">green = target met, red = missed, grey = no target; red tick = target</text>`+"\n")
	svg.WriteString(b.String())
	svg.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(svg.String()), 0o644)
}
