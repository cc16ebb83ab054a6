package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// wantSummaryKeys is the fixed list: results.json "summary" has
// exactly these keys, in every run.
var wantSummaryKeys = []string{
	"drain_vs_skiplocked_1c",
	"drain_vs_skiplocked_4c",
	"fanout_vs_pagewalk_p100",
	"fanout_vs_pgq_b100",
	"fanout_vs_pgq_b1000",
	"filter_1pct_vs_unfiltered",
	"lt_bloat_bytes_max_pct",
	"lt_cleanup_vs_production_min",
	"lt_fetch_p95_max_ms",
	"maint5000_longest_call_ms",
	"maint5000_round_ms",
	"publish_vs_insert_4c",
}

// summaryOf writes rep as results.json does and returns its "summary".
func summaryOf(t *testing.T, rep *Report) map[string]any {
	t.Helper()
	path := filepath.Join(t.TempDir(), "results.json")
	require.NoError(t, writeJSON(path, rep))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b, &doc))
	require.Contains(t, doc, "summary")
	s, ok := doc["summary"].(map[string]any)
	require.True(t, ok, "summary is an object: %v", doc["summary"])
	return s
}

func keysOf(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func TestSummaryKeysPresentWhenNothingMeasured(t *testing.T) {
	t.Parallel()
	// A run where no scenario got as far as a figure (or -only picked none
	// of them): every key is there, null.
	s := summaryOf(t, &Report{})
	require.Equal(t, wantSummaryKeys, keysOf(s))
	for k, v := range s {
		require.Nil(t, v, k)
	}
}

func TestSummaryKeysPresentWhenMeasured(t *testing.T) {
	t.Parallel()
	var env Env
	for i, k := range wantSummaryKeys {
		env.SetSummary(k, float64(i)+0.5)
	}
	// A ratio without a baseline (NaN) or an empty aggregate (±Inf) is
	// "not measured": null, and results.json is still written.
	env.SetSummary(sumFanoutPgq1000, math.NaN())
	env.SetSummary(sumCleanup, math.Inf(1))
	s := summaryOf(t, &Report{Summary: env.summary, Results: []Result{{Scenario: "x", Ratio: math.NaN()}}})
	require.Equal(t, wantSummaryKeys, keysOf(s))
	for i, k := range wantSummaryKeys {
		switch k {
		case sumFanoutPgq1000, sumCleanup:
			require.Nil(t, s[k], k)
		default:
			require.Equal(t, float64(i)+0.5, s[k], k)
		}
	}
}

func TestSummarySetRejectsUnknownKey(t *testing.T) {
	t.Parallel()
	var s Summary
	require.Error(t, s.Set("fanout_vs_pgq_b10", 1))
	var env Env
	require.Panics(t, func() { env.SetSummary("lt_bloat_pct", 1) })
}

// The printed closing note and the JSON agree: summaryKeys (the table)
// lists exactly the struct's JSON keys, and every one can be set.
func TestSummaryTableCoversEveryKey(t *testing.T) {
	t.Parallel()
	var tags, listed []string
	ty := reflect.TypeOf(Summary{})
	for i := 0; i < ty.NumField(); i++ {
		tags = append(tags, strings.Split(ty.Field(i).Tag.Get("json"), ",")[0])
	}
	for _, k := range summaryKeys {
		listed = append(listed, k.key)
		var s Summary
		require.NoError(t, s.Set(k.key, 1), k.key)
		v, ok := s.Get(k.key)
		require.True(t, ok, k.key)
		require.Equal(t, 1.0, v, k.key)
	}
	sort.Strings(tags)
	sort.Strings(listed)
	require.Equal(t, wantSummaryKeys, tags)
	require.Equal(t, wantSummaryKeys, listed)

	var out strings.Builder
	printSummary(&out, &Summary{})
	for _, k := range wantSummaryKeys {
		require.Contains(t, out.String(), k)
	}
}
