package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLTConfigFromEnv(t *testing.T) {
	t.Setenv("LT_ROWS", "LT-1, LT-7")
	t.Setenv("LT_STEP", "40s")
	t.Setenv("LT_BATCH", "10")
	t.Setenv("LT_ONE_CORE", "")
	c, err := ltConfigFromEnv(false)
	require.NoError(t, err)
	require.Len(t, c.Rows, 2)
	require.Equal(t, "LT-7", c.Rows[1].id)
	require.Equal(t, 40*time.Second, c.Step)
	require.Equal(t, 10, c.Batch)
	require.Equal(t, "", c.OneCore, "an empty LT_ONE_CORE turns the one-CPU search off")

	t.Setenv("LT_ROWS", "LT-9")
	t.Setenv("LT_STEP", "-1s")
	t.Setenv("LT_START", "NaN")
	_, err = ltConfigFromEnv(false)
	require.Error(t, err)
	for _, want := range []string{"LT_ROWS", "LT_STEP", "LT_START"} {
		require.True(t, strings.Contains(err.Error(), want), "error names %s: %v", want, err)
	}
}

func TestLTWindowJSONWritesUnmeasuredAsNull(t *testing.T) {
	w := ltWindow{Rate: 100, PgssMeanMs: optFloat(math.NaN()), BloatBytesPct: 12.5, CleanupRatio: optFloat(math.NaN()),
		BloatMsgPct: 1, BloatCatPct: 2, DeadTupPct: 3, PgssP95EstMs: 4}
	b, err := json.Marshal(w)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	require.Nil(t, m["fetch_pgss_mean_ms"])
	require.Nil(t, m["cleanup_vs_production"])
	require.Equal(t, 12.5, m["bloat_bytes_pct"])
}

func TestLTSeedRates(t *testing.T) {
	for _, r := range matrixRows {
		want := 10000.0
		if r.id == "LT-7" {
			want = 30000
		}
		require.Equal(t, want, ltSeedRate(r), r.id)
	}
}

func TestLTIsNotInTheDefaultRun(t *testing.T) {
	def, err := selectScenarios("")
	require.NoError(t, err)
	for _, s := range def {
		require.NotEqual(t, "lt", s.Name())
	}
	only, err := selectScenarios("lt")
	require.NoError(t, err)
	require.Len(t, only, 1)
}

// TestLTProjectionUsesTheBusiestWindows: the per-core projection compares
// each run at its capacity. The windows at the sustained (or lowest) rate
// are not saturated: in the first full run both pinned and unpinned runs
// ended at 31 msg/s × 100 groups, and the "projection" read 97 deliveries/s
// per added core while the busiest windows were 3,228 and 10,902.
func TestLTProjectionUsesTheBusiestWindows(t *testing.T) {
	row := matrixRows[len(matrixRows)-1]
	low := ltWindow{Rate: 31, Deliveries: 3100}
	one := ltRowResult{Row: row, Cores: "0", Steps: []ltWindow{{Rate: 250, Deliveries: 3228}, low}, Best: low}
	all := ltRowResult{Row: row, Steps: []ltWindow{{Rate: 250, Deliveries: 10902}, low}, Best: low}
	p := ltProjection(one, all)
	d := p.Details
	require.Equal(t, 3228.0, d["one_core"])
	require.Equal(t, 10902.0, d["all_cores"])
	require.Greater(t, d["per_core"].(float64), 1000.0)
	require.Equal(t, 10902.0, all.capacity().Deliveries)
	require.Contains(t, all.result(ltConfig{}, diskRate{}).ValueText, "capacity: 10902 deliveries/s")
}
