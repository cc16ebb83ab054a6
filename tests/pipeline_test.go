package tests

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// examples/pipeline end to end: order requests in the inbox topic, the
// worker's business writes and inbox ack in one transaction, the captured
// orders table as the outbox, pgq-relay into a JetStream stream. The worker
// and the relay are each SIGKILLed mid-way and restarted: every order is
// written once, every customer's totals count each order once, and the
// stream holds each order's event exactly once.
func TestPipelineEndToEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := b.Pool
	ctx := b.ctx
	pipeline := buildBinary(t, "../examples/pipeline")
	relayBin := buildBinary(t, "../cmd/pgq-relay")
	env := []string{"DATABASE_URL=" + b.URL}
	run := func(args ...string) {
		var p process
		p.start(t, pipeline, env, args...)
		require.NoError(t, p.cmd.Wait(), "pipeline %v: %s", args, p.Output())
	}
	run("setup")
	run("setup") // idempotent
	const n, customers = 600, 7
	run("submit", "--count", strconv.Itoa(n), "--customers", strconv.Itoa(customers))

	ns := startNATS(t, 1)
	js := ns.jetStream(t)
	relayArgs := []string{"--nats-url", ns.URL(), "--topic", "shop.outbox", "--group", "nats-relay",
		"--subject", "shop.orders", "--stream", "SHOP", "--create-stream", "--lease", "2s", "--max-messages", "50",
		"--poll-interval", "100ms"}
	orders := func() int {
		var c int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM shop_orders`).Scan(&c))
		return c
	}

	var w1, r1 process
	w1.start(t, pipeline, env, "worker", "--lease", "2s")
	r1.start(t, relayBin, env, relayArgs...)
	require.Eventually(t, func() bool { return orders() >= n/4 }, time.Minute, 5*time.Millisecond, "%s", w1.Output())
	w1.kill()
	require.Less(t, orders(), n, "the worker was killed before it finished")
	require.Eventually(t, func() bool { return streamCount(ctx, js, "SHOP") >= n/8 }, time.Minute, 5*time.Millisecond,
		"%s", r1.Output())
	r1.kill()

	var w2, r2 process
	w2.start(t, pipeline, env, "worker", "--lease", "2s")
	r2.start(t, relayBin, env, relayArgs...)
	require.Eventually(t, func() bool { return streamCount(ctx, js, "SHOP") >= n }, 2*time.Minute,
		10*time.Millisecond, "worker:\n%s\nrelay:\n%s", w2.Output(), r2.Output())
	require.Eventually(t, func() bool {
		var lag, inFlight int64
		require.NoError(t, db.QueryRow(ctx, `SELECT lag_messages, in_flight FROM fanout.groups
		    WHERE topic = 'shop.outbox' AND group_name = 'nats-relay'`).Scan(&lag, &inFlight))
		return lag == 0 && inFlight == 0
	}, time.Minute, 10*time.Millisecond)
	w2.stop(t)
	r2.stop(t)

	// Business effects: each order once, each customer's totals once per order.
	require.Equal(t, n, orders())
	want := map[string][2]float64{}
	for i := 0; i < n; i++ {
		c := fmt.Sprintf("c%d", i%customers)
		w := want[c]
		want[c] = [2]float64{w[0] + 1, w[1] + float64(i%10+1) + 0.5}
	}
	rows, err := db.Query(ctx, `SELECT customer, orders, spent::float8 FROM shop_customers`)
	require.NoError(t, err)
	got := map[string][2]float64{}
	for rows.Next() {
		var c string
		var o, s float64
		require.NoError(t, rows.Scan(&c, &o, &s))
		got[c] = [2]float64{o, s}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, want, got, "customer totals count every order exactly once")

	// The stream: one insert event per order, none twice.
	s, err := js.Stream(ctx, "SHOP")
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	seen := map[string]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		var ev struct {
			Op  string            `json:"op"`
			Key map[string]string `json:"key"`
		}
		require.NoError(t, json.Unmarshal(m.Data, &ev))
		require.Equal(t, "insert", ev.Op)
		require.NotEmpty(t, m.Header.Get(jetstream.MsgIDHeader))
		seen[ev.Key["order_id"]]++
	}
	dups := 0
	for _, c := range seen {
		dups += c - 1
	}
	require.Equal(t, 0, dups, "duplicate events in the stream")
	require.Len(t, seen, n, "every order's event is in the stream")
}
