package main

import (
	"context"
	"fmt"
	"math"
	"sort"
)

// Scenario is one benchmark: it gets the environment (server, databases,
// durations) and returns rows of results, each pgq figure measured in the
// same run as its baseline. An error means the harness broke (not that a
// target was missed: that is a row with Pass = false).
//
// A new scenario is a new file with a type implementing Scenario and an
// init() that calls register.
type Scenario interface {
	// Name is the short id used by -only and in results.json.
	Name() string
	// Title is the human description printed before it runs.
	Title() string
	Run(ctx context.Context, env *Env) ([]Result, error)
}

type registered struct {
	order int
	s     Scenario
}

var registry []registered

// register adds a scenario; order fixes its place in the run and the table.
func register(order int, s Scenario) {
	registry = append(registry, registered{order, s})
}

func scenarios() []Scenario {
	sort.SliceStable(registry, func(i, j int) bool { return registry[i].order < registry[j].order })
	out := make([]Scenario, len(registry))
	for i, r := range registry {
		out[i] = r.s
	}
	return out
}

// Result is one row of the table.
type Result struct {
	Scenario string  `json:"scenario"`
	Case     string  `json:"case"`
	Unit     string  `json:"unit"`          // of Value and Baseline: "msg/s", "ms", ...
	Value    float64 `json:"value"`         // the pgq figure
	Baseline float64 `json:"baseline"`      // the same-run baseline figure (0: none)
	BaseName string  `json:"baseline_name"` // which baseline (see results.json "baselines")
	Ratio    float64 `json:"-"`             // Value / Baseline (NaN when no baseline; "ratio" in JSON, null then)
	// HigherIsBetter says how to read Value and Ratio (throughput: true;
	// latency: false).
	HigherIsBetter bool `json:"higher_is_better"`
	// Target in words ("ratio ≥ 0.80", "p50 ≤ 5 ms, p99 ≤ 25 ms"); "" = report only.
	Target string `json:"target,omitempty"`
	// MinRatio, when > 0, is the ratio target (for the chart).
	MinRatio float64 `json:"min_ratio,omitempty"`
	Pass     *bool   `json:"pass,omitempty"`
	// ValueText/BaseText replace the formatted numbers in the table
	// (e.g. latency percentiles).
	ValueText string         `json:"value_text,omitempty"`
	BaseText  string         `json:"baseline_text,omitempty"`
	Note      string         `json:"note,omitempty"`
	Details   map[string]any `json:"details,omitempty"`
}

// throughputRow is a pgq-vs-baseline throughput row; minRatio 0 = no target.
func throughputRow(scn, name, unit string, value, base float64, baseName string, minRatio float64) Result {
	r := Result{Scenario: scn, Case: name, Unit: unit, Value: value, Baseline: base, BaseName: baseName,
		Ratio: ratio(value, base), HigherIsBetter: true}
	if minRatio > 0 {
		r.Target = fmt.Sprintf("ratio ≥ %.2f", minRatio)
		r.MinRatio = minRatio
		r.Pass = boolp(r.Ratio >= minRatio)
	}
	return r
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

func boolp(b bool) *bool { return &b }
