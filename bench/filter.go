package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfanout/pgq/client"
)

func init() { register(65, filterScenario{}) }

// filterScenario: the cost of a subscription filter (docs/filters.md). A
// pubsub topic (offset mode) with four groups over the same backlog: "all1"
// and "all2" without a filter, "f1" and "f2" with filter {"sel": "y"}, which
// a given share of the messages' headers contain (1 %, 50 %, 100 %, spread
// evenly). Each group is drained alone, one member, pages of 100, read +
// ack, in the order all1, f1, f2, all2 (so that a warmer cache or a change
// of the machine's load during the run favours neither); the figure is how
// many messages of the stream the filtered group's position passes per
// second (delivered or passed over) against the unfiltered group's drain of
// the same messages, measured in the same run.
type filterScenario struct{}

func (filterScenario) Name() string { return "filter" }
func (filterScenario) Title() string {
	return "6b. subscription filter: a filtered group vs an unfiltered one over the same backlog (1 %, 50 %, 100 % match)"
}

func (filterScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	db, err := env.NewDB(ctx, "filter", 0)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	n := env.N(50_000, 10_000)
	env.Baseline("unfiltered group drain",
		"a group without a filter draining the same messages of the same topic (pages of 100, read + ack, one member)")
	var out []Result
	for _, pct := range []int{1, 50, 100} {
		topic := fmt.Sprintf("filter.p%d", pct)
		if _, err := db.Pool.Exec(ctx, `SELECT fanout.create_topic($1, semantics => 'pubsub')`, topic); err != nil {
			return nil, fmt.Errorf("create %s: %w", topic, err)
		}
		for _, g := range []string{"all1", "all2", "f1", "f2"} {
			var filter any
			if g[0] == 'f' {
				filter = `{"sel": "y"}`
			}
			if _, err := db.Pool.Exec(ctx, `SELECT * FROM fanout.subscribe($1, $2, filter => $3::jsonb)`,
				topic, g, filter); err != nil {
				return nil, fmt.Errorf("subscribe %s: %w", topic, err)
			}
		}
		match, err := fillFiltered(ctx, db, topic, n, pct)
		if err != nil {
			return nil, err
		}
		// Warm the cache for both drains alike.
		var table string
		if err := db.Pool.QueryRow(ctx, `SELECT data_table FROM fanout.topic WHERE topic = $1`, topic).Scan(&table); err != nil {
			return nil, err
		}
		if _, err := db.Pool.Exec(ctx, `SELECT count(*) FROM fanout_data.`+pgx.Identifier{table}.Sanitize()); err != nil {
			return nil, err
		}
		var baseT, fT time.Duration
		for _, g := range []string{"all1", "f1", "f2", "all2"} {
			want := n
			if g[0] == 'f' {
				want = match
			}
			d, got, err := drainOne(ctx, db, topic, g, want)
			if err != nil {
				return nil, err
			}
			if got != want {
				return nil, fmt.Errorf("%s/%s: got %d of %d messages", topic, g, got, want)
			}
			if g[0] == 'f' {
				fT += d
			} else {
				baseT += d
			}
		}
		var filtered int64
		if err := db.Pool.QueryRow(ctx, `SELECT sum(filtered_total)::bigint FROM fanout.groups WHERE topic = $1`,
			topic).Scan(&filtered); err != nil {
			return nil, err
		}
		if filtered != 2*int64(n-match) {
			return nil, fmt.Errorf("%s: filtered_total %d, want %d", topic, filtered, 2*(n-match))
		}
		fN := match
		got, base := float64(2*n)/fT.Seconds(), float64(2*n)/baseT.Seconds()
		env.Logf("filter %d %%: filtered group passes %.0f msgs/s (%d delivered), unfiltered %.0f msgs/s", pct, got, fN, base)
		r := throughputRow("filter", fmt.Sprintf("filtered group, %d %% match, %s msgs, page 100", pct, fmtNum(float64(n))),
			"msgs/s", got, base, "unfiltered group drain", 0)
		r.Details = map[string]any{"messages": n, "matching": match, "filtered_total_per_group": filtered / 2,
			"filtered_seconds": fT.Seconds(), "unfiltered_seconds": baseT.Seconds()}
		if pct == 1 {
			env.SetSummary(sumFilter1pct, r.Ratio)
		}
		out = append(out, r)
	}
	return out, nil
}

// fillFiltered publishes n messages to topic in batches of 1,000, pct of
// every 100 with headers {"sel": "y"} (the others {"sel": "n"}); returns how
// many match.
func fillFiltered(ctx context.Context, db *DB, topic string, n, pct int) (int, error) {
	pub := client.NewPublisher(db.Pool)
	yes, no := json.RawMessage(`{"sel": "y"}`), json.RawMessage(`{"sel": "n"}`)
	match := 0
	for done := 0; done < n; {
		k := min(1000, n-done)
		msgs := make([]client.Message, k)
		for i := range msgs {
			msgs[i] = client.Message{Payload: benchPayload, Headers: no}
			if (done+i)%100 < pct {
				msgs[i].Headers = yes
				match++
			}
		}
		if _, err := pub.PublishBatch(ctx, topic, msgs); err != nil {
			return 0, fmt.Errorf("publish %s: %w", topic, err)
		}
		done += k
	}
	return match, nil
}

// drainOne reads and acks group until it has received want messages (a
// filtered read may return an empty page before the end: its scan is
// bounded) and returns the time it took and what it received.
func drainOne(ctx context.Context, db *DB, topic, group string, want int) (time.Duration, int, error) {
	got, empties := 0, 0
	start := time.Now()
	for got < want {
		r, err := readAck(ctx, db.Pool, topic, group, "c1", 100, nil)
		if err != nil {
			return 0, 0, err
		}
		got += r.N
		if r.N == 0 {
			if empties++; empties > 1000 {
				return 0, 0, fmt.Errorf("%s/%s: %d of %d messages, then 1000 empty reads", topic, group, got, want)
			}
		}
	}
	// One more read: nothing left (what follows the last match is passed).
	if _, err := readAck(ctx, db.Pool, topic, group, "c1", 100, nil); err != nil {
		return 0, 0, err
	}
	return time.Since(start), got, nil
}
