package main

import (
	"context"
	"fmt"
)

func init() { register(60, fanoutOffsetScenario{}) }

// fanoutOffsetScenario: a pubsub topic in offset mode with 8 groups, each
// draining the same backlog (pages of 100), with 1 and with 4 members per
// group; deliveries/s vs 8 plain page walks of the same rows (consume-path target:
// ≥ 0.6; docs/design.md §6 asked ≥ 0.5). Needs fanout.subscribe; reports "skipped" without it.
type fanoutOffsetScenario struct{}

func (fanoutOffsetScenario) Name() string { return "fanout-offset" }
func (fanoutOffsetScenario) Title() string {
	return "6. offset-mode fan-out: 8 groups draining the same backlog vs a plain SELECT of the same rows"
}

const fanoutGroups = 8

func (fanoutOffsetScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	db, err := env.NewDB(ctx, "fanout", 0)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var has bool
	if err := db.Pool.QueryRow(ctx, `SELECT to_regproc('fanout.subscribe') IS NOT NULL`).Scan(&has); err != nil {
		return nil, err
	}
	if !has {
		env.Logf("fanout.subscribe is not installed: skipped")
		return []Result{{Scenario: "fanout-offset", Case: "offset fan-out, 8 groups (skipped)", Ratio: ratio(0, 0),
			ValueText: "skipped", Note: "fanout.subscribe is not installed in this schema yet"}}, nil
	}
	n := env.N(100_000, 20_000)
	env.Baseline("plain SELECT page walk x8",
		"the \"plain SELECT page walk\" over a copy of the topic's rows, 8 times concurrently (one per group); "+
			"with k members per group each walk is split into k disjoint id ranges")
	var out []Result
	for _, members := range []int{1, 4} {
		topic := fmt.Sprintf("fan.m%d", members)
		if _, err := db.Pool.Exec(ctx, `SELECT fanout.create_topic($1, semantics => 'pubsub')`, topic); err != nil {
			return nil, fmt.Errorf("create %s: %w", topic, err)
		}
		groups := make([]string, fanoutGroups)
		for g := range groups {
			groups[g] = fmt.Sprintf("g%d", g+1)
			if _, err := db.Pool.Exec(ctx, `SELECT * FROM fanout.subscribe($1, $2, start_position => 'earliest')`,
				topic, groups[g]); err != nil {
				return nil, fmt.Errorf("subscribe %s/%s: %w", topic, groups[g], err)
			}
		}
		if _, err := fillTopic(ctx, db, topic, "-", n); err != nil {
			return nil, err
		}
		cp, lo, hi, err := copyToPlain(ctx, db, topic)
		if err != nil {
			return nil, err
		}
		base, err := pageWalk(ctx, db, cp, lo, hi, members, fanoutGroups, 100)
		if err != nil {
			return nil, fmt.Errorf("baseline walk: %w", err)
		}
		got, st, err := drainGroups(ctx, db, topic, groups, lo, hi, members, 100)
		if err != nil {
			return nil, err
		}
		env.Logf("fan-out %d groups x %d member(s): pgq %.0f deliveries/s, plain %.0f rows/s (%d reads, %d empty)",
			fanoutGroups, members, got, base, st.Reads, st.EmptyReads)
		r := throughputRow("fanout-offset",
			fmt.Sprintf("offset fan-out %d groups x %s msgs, page 100, %d member(s)/group", fanoutGroups, fmtNum(float64(n)), members),
			"deliv/s", got, base, "plain SELECT page walk x8", 0.6)
		r.Details = map[string]any{"messages": n, "groups": fanoutGroups, "members_per_group": members, "page": 100,
			"reads": st.Reads, "empty_reads": st.EmptyReads}
		if members == 1 {
			env.SetSummary(sumFanoutPagewalk, r.Ratio)
			r.Note = "target ≥ 0.6, the consume-path target (docs/design.md §6 asked ≥ 0.5)"
		}
		out = append(out, r)
	}
	return out, nil
}
