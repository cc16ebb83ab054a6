// Command bench is pgq's benchmark suite (`make bench`, `make bench-quick`).
//
// Every figure is a ratio to a baseline measured in the same run on the same
// server: pgq's SQL API against the plain SQL a user would otherwise write
// (INSERT into an equivalent table, a keyset SELECT page walk, a
// LISTEN/NOTIFY + SKIP LOCKED queue) and against Skytools PgQ (pgq.go).
// results.json carries a fixed "summary" (summary.go). It creates its own databases on the
// server of DATABASE_URL (one per scenario, migrated with the embedded
// migrations), drops them at the end, prints one table on stdout, and
// writes bench/results.json and bench/results.svg.
//
// Exit status: 0 when every scenario ran (missed targets are results, not
// failures), 1 when a scenario's harness broke, 2 on bad usage.
//
//	DATABASE_URL=postgres://... go run ./bench [-quick] [-only publish,latency] [-keep]
//
// Adding a scenario: a new file with a type implementing Scenario
// (scenario.go) and an init() that calls register(order, scenario).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

func main() { os.Exit(run()) }

func run() int {
	var (
		quick   = flag.Bool("quick", false, "≈1 minute run: shorter phases, smaller backlogs")
		only    = flag.String("only", "", "comma-separated scenario names to run (default: all but lt, which make bench-lt runs): "+names())
		jsonOut = flag.String("json", "", "results file (default <repo>/bench/results.json)")
		svgOut  = flag.String("svg", "", "chart file (default <repo>/bench/results.svg)")
		keep    = flag.Bool("keep", false, "keep the benchmark databases for inspection")
	)
	flag.Parse()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		fmt.Fprintln(os.Stderr, "bench: DATABASE_URL is not set (`make bench` starts a throwaway server and sets it)")
		return 2
	}
	root := repoRoot()
	if *jsonOut == "" {
		*jsonOut = filepath.Join(root, "bench", "results.json")
	}
	if *svgOut == "" {
		*svgOut = filepath.Join(root, "bench", "results.svg")
	}
	selected, err := selectScenarios(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	info, err := serverInfo(ctx, url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	dropLeftovers(ctx, url)
	env := &Env{AdminURL: url, Quick: *quick, Keep: *keep}
	defer env.Close()

	rep := &Report{Started: time.Now(), Quick: *quick, Git: gitDescribe(root), Server: info,
		Machine: map[string]any{"cpus": runtime.NumCPU(), "goos": runtime.GOOS, "goarch": runtime.GOARCH,
			"go": runtime.Version()}}
	if h, err := os.Hostname(); err == nil {
		rep.Machine["hostname"] = h
	}
	rep.Machine["loadavg_start"] = loadAvg()
	for _, s := range selected {
		fmt.Fprintf(os.Stderr, "\n== %s\n", s.Title())
		t0 := time.Now()
		rows, err := s.Run(ctx, env)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: HARNESS ERROR: %v\n", s.Name(), err)
			rep.Errors = append(rep.Errors, ScenarioError{Scenario: s.Name(), Error: err.Error()})
			if ctx.Err() != nil {
				break
			}
			continue
		}
		fmt.Fprintf(os.Stderr, "  (%.0f s)\n", time.Since(t0).Seconds())
		rep.Results = append(rep.Results, rows...)
	}
	rep.Seconds = time.Since(rep.Started).Seconds()
	rep.Machine["loadavg_end"] = loadAvg()
	rep.Baselines = env.baselines
	rep.Summary = env.summary
	rep.PgQ = env.pgqStatus
	if rep.PgQ == "" {
		rep.PgQ = "not run (scenario pgq not selected)"
	}

	printTable(os.Stdout, rep)
	status := 0
	if err := writeJSON(*jsonOut, rep); err != nil {
		fmt.Fprintln(os.Stderr, "bench: write results:", err)
		status = 1
	}
	if err := writeSVG(*svgOut, rep); err != nil {
		fmt.Fprintln(os.Stderr, "bench: write chart:", err)
		status = 1
	}
	fmt.Printf("\nwrote %s and %s\n", relTo(root, *jsonOut), relTo(root, *svgOut))
	if len(rep.Errors) > 0 {
		status = 1
	}
	return status
}

func names() string {
	var ns []string
	for _, s := range scenarios() {
		ns = append(ns, s.Name())
	}
	return strings.Join(ns, ", ")
}

func selectScenarios(only string) ([]Scenario, error) {
	all := scenarios()
	if only == "" {
		var def []Scenario
		for _, s := range all {
			if o, ok := s.(interface{ Optional() bool }); !ok || !o.Optional() {
				def = append(def, s)
			}
		}
		return def, nil
	}
	want := map[string]bool{}
	for _, n := range strings.Split(only, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	var out []Scenario
	for _, s := range all {
		if want[s.Name()] {
			out = append(out, s)
			delete(want, s.Name())
		}
	}
	for n := range want {
		return nil, fmt.Errorf("unknown scenario %q (have: %s)", n, names())
	}
	return out, nil
}

// repoRoot is the folder holding go.mod above the working directory (or
// the working directory).
func repoRoot() string {
	wd, _ := os.Getwd()
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return wd
		}
		dir = parent
	}
}

func relTo(root, p string) string {
	if r, err := filepath.Rel(root, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}

func gitDescribe(root string) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil &&
		len(strings.TrimSpace(string(st))) > 0 {
		rev += "+dirty"
	}
	return rev
}

// loadAvg is the 1/5/15-minute load average (Linux), to show how busy the
// machine was: other processes on it skew absolute numbers (ratios less so:
// each is measured interleaved with its baseline).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
