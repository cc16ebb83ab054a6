package main

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"
)

// Summary is the fixed set of figures results.json carries under "summary",
// so that runs can be compared with each other. Every key is
// always present: a figure that was not measured (scenario not selected,
// PgQ not installed, harness error) is null. Ratios are pgq / baseline of
// the same run.
type Summary struct {
	// Offset fan-out, 8 groups, pages of 100, 1 member per group, vs 8
	// plain SELECT page walks of the same rows (scenario fanout-offset).
	FanoutVsPagewalkP100 *float64 `json:"fanout_vs_pagewalk_p100"`
	// The same fan-out vs Skytools PgQ with 8 consumers, PgQ ticked so that
	// each batch holds as many events as our page: 100 and 1,000 (scenario pgq).
	FanoutVsPgqB100  *float64 `json:"fanout_vs_pgq_b100"`
	FanoutVsPgqB1000 *float64 `json:"fanout_vs_pgq_b1000"`
	// Queue drain, read+ack in pages of 100, vs a SKIP LOCKED queue, 1 and
	// 4 consumers (scenario drain).
	DrainVsSkiplocked1c *float64 `json:"drain_vs_skiplocked_1c"`
	DrainVsSkiplocked4c *float64 `json:"drain_vs_skiplocked_4c"`
	// fanout.publish, 1 message per transaction, 4 clients, vs plain INSERT
	// (scenario publish).
	PublishVsInsert4c *float64 `json:"publish_vs_insert_4c"`
	// Matrix LT-1..7: the highest bloat in bytes of any row, in percent
	// (pgstattuple: (dead + free) / total, mean over the samples under load).
	LtBloatBytesMaxPct *float64 `json:"lt_bloat_bytes_max_pct"`
	// Matrix LT-1..3 and LT-5: the highest fetch p95, ms.
	LtFetchP95MaxMs *float64 `json:"lt_fetch_p95_max_ms"`
	// Matrix LT-1..7: the lowest cleanup rate / production rate.
	LtCleanupVsProductionMin *float64 `json:"lt_cleanup_vs_production_min"`
	// MAINT_TOPICS topics (5,000 in the issue; the default is smaller) × 3
	// groups: the longest single maintenance call of the rounds measured,
	// ms, and the whole round with every partition due for rotation, ms
	// (scenario maint5000).
	Maint5000LongestCallMs *float64 `json:"maint5000_longest_call_ms"`
	Maint5000RoundMs       *float64 `json:"maint5000_round_ms"`
	// A group with a subscription filter that 1 % of the messages match:
	// messages of the stream its position passes per second / an
	// unfiltered group's drain of the same messages (scenario filter).
	Filter1pctVsUnfiltered *float64 `json:"filter_1pct_vs_unfiltered"`
}

// Summary keys (the JSON names of Summary's fields).
const (
	sumFanoutPagewalk = "fanout_vs_pagewalk_p100"
	sumFanoutPgq100   = "fanout_vs_pgq_b100"
	sumFanoutPgq1000  = "fanout_vs_pgq_b1000"
	sumDrain1c        = "drain_vs_skiplocked_1c"
	sumDrain4c        = "drain_vs_skiplocked_4c"
	sumPublish4c      = "publish_vs_insert_4c"
	sumBloat          = "lt_bloat_bytes_max_pct"
	sumFetchP95       = "lt_fetch_p95_max_ms"
	sumCleanup        = "lt_cleanup_vs_production_min"
	sumMaintLongest   = "maint5000_longest_call_ms"
	sumMaintRound     = "maint5000_round_ms"
	sumFilter1pct     = "filter_1pct_vs_unfiltered"
)

// summaryKeys lists the keys in their fixed order, with the figure measured
// before the consume-path work ("seed") and the target.
var summaryKeys = []struct {
	key, seed, target string
	higherIsBetter    bool
	goal              float64
}{
	{sumFanoutPagewalk, "0.30–0.35", "≥ 0.6", true, 0.6},
	{sumFanoutPgq100, "0.44", "≥ 1.0", true, 1},
	{sumFanoutPgq1000, "0.48", "≥ 1.0", true, 1},
	{sumDrain1c, "0.20–0.29", "≥ 0.5", true, 0.5},
	{sumDrain4c, "0.20–0.29", "≥ 0.5", true, 0.5},
	{sumPublish4c, "-", "≥ 0.8", true, 0.8},
	{sumBloat, "44–90 % (tuples)", "< 20 %", false, 20},
	{sumFetchP95, "10–30 ms", "< 10 ms", false, 10},
	{sumCleanup, "0.67–1.19", "≥ 1.0", true, 1},
	{sumMaintLongest, "-", "≤ 1000 ms", false, 1000.001},
	{sumMaintRound, "-", "-", false, math.Inf(1)},
	{sumFilter1pct, "-", "-", true, math.Inf(-1)},
}

func (s *Summary) field(key string) (**float64, error) {
	switch key {
	case sumFanoutPagewalk:
		return &s.FanoutVsPagewalkP100, nil
	case sumFanoutPgq100:
		return &s.FanoutVsPgqB100, nil
	case sumFanoutPgq1000:
		return &s.FanoutVsPgqB1000, nil
	case sumDrain1c:
		return &s.DrainVsSkiplocked1c, nil
	case sumDrain4c:
		return &s.DrainVsSkiplocked4c, nil
	case sumPublish4c:
		return &s.PublishVsInsert4c, nil
	case sumBloat:
		return &s.LtBloatBytesMaxPct, nil
	case sumFetchP95:
		return &s.LtFetchP95MaxMs, nil
	case sumCleanup:
		return &s.LtCleanupVsProductionMin, nil
	case sumMaintLongest:
		return &s.Maint5000LongestCallMs, nil
	case sumMaintRound:
		return &s.Maint5000RoundMs, nil
	case sumFilter1pct:
		return &s.Filter1pctVsUnfiltered, nil
	}
	return nil, fmt.Errorf("unknown summary key %q", key)
}

// Set records a figure; NaN and ±Inf (no baseline, nothing measured) leave
// it null.
func (s *Summary) Set(key string, v float64) error {
	f, err := s.field(key)
	if err != nil {
		return err
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		*f = nil
		return nil
	}
	*f = &v
	return nil
}

// Get returns a figure and whether it was measured.
func (s *Summary) Get(key string) (float64, bool) {
	f, err := s.field(key)
	if err != nil || *f == nil {
		return 0, false
	}
	return **f, true
}

// printSummary writes the closing note: each summary figure beside what
// before the consume-path work ("seed") and its target.
func printSummary(w io.Writer, s *Summary) {
	fmt.Fprintf(w, "\nSummary (results.json \"summary\"; seed = the figures before the consume-path work):\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  KEY\tSEED\tTHIS RUN\tTARGET\tRESULT")
	for _, k := range summaryKeys {
		v, ok := s.Get(k.key)
		val, res := "not measured", ""
		if ok {
			switch k.key {
			case sumBloat:
				val = fmt.Sprintf("%.1f %%", v)
			case sumFetchP95, sumMaintLongest, sumMaintRound:
				val = fmtMs(v) + " ms"
			default:
				val = fmt.Sprintf("%.2f", v)
			}
			met := v >= k.goal
			if !k.higherIsBetter {
				met = v < k.goal
			}
			res = map[bool]string{true: "met", false: "MISSED"}[met]
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", k.key, k.seed, val, k.target, res)
	}
	tw.Flush()
}
