package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/pgfanout/pgq/client"
)

// With a MeterProvider, every handler call is one observation of the
// histogram messaging.process.duration (seconds), per topic and group: a
// Handler's successes and failures (error.type "handler") and a
// TxHandler's calls, its ack and commit included, each under its own
// group. The bucket bounds are the client's (up to 60 s).
func TestProcessDurationHistogramPerGroup(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "timed", "semantics => 'pubsub'")
	for _, g := range []string{"billing", "ledger"} {
		_, err := b.Pool.Exec(ctx, `SELECT fanout.subscribe('timed', $1)`, g)
		require.NoError(t, err)
	}
	pub := client.NewPublisher(b.Pool)
	for _, p := range []string{`{"n":1}`, `{"n":2,"fail":true}`, `{"n":3}`} {
		_, err := pub.Publish(ctx, "timed", client.Message{Payload: json.RawMessage(p)})
		require.NoError(t, err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

	billing, err := client.NewConsumer(b.Pool, client.Config{Topic: "timed", Group: "billing", Logger: quiet,
		MeterProvider: mp, PollInterval: 20 * time.Millisecond},
		func(_ context.Context, d *client.Delivery) error {
			var m struct{ Fail bool }
			require.NoError(t, json.Unmarshal(d.Payload, &m))
			if m.Fail && d.Attempt == 1 {
				return client.RetryAfter(0, errors.New("first attempt fails"))
			}
			return nil
		})
	require.NoError(t, err)
	ledger, err := client.NewTxConsumer(b.Pool, client.Config{Topic: "timed", Group: "ledger", Logger: quiet,
		MeterProvider: mp},
		func(ctx context.Context, tx pgx.Tx, _ *client.Delivery) error {
			_, err := tx.Exec(ctx, `SELECT 1`)
			return err
		})
	require.NoError(t, err)
	run(t, ctx, billing)
	run(t, ctx, ledger)
	eventually(t, func() bool { return billing.Stats().Acked == 3 && ledger.Stats().Acked == 3 }, 30*time.Second,
		"every message acked by both groups")

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	var hist *metricdata.Histogram[float64]
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "messaging.process.duration" {
				require.Equal(t, "s", m.Unit)
				h, ok := m.Data.(metricdata.Histogram[float64])
				require.True(t, ok, "a float64 histogram, got %T", m.Data)
				hist = &h
			}
		}
	}
	require.NotNil(t, hist, "no messaging.process.duration histogram recorded")
	counts := map[string]uint64{}
	for _, dp := range hist.DataPoints {
		get := func(k string) string {
			v, _ := dp.Attributes.Value(attribute.Key(k))
			return v.AsString()
		}
		require.Equal(t, "pgq", get("messaging.system"))
		require.Equal(t, "timed", get("messaging.destination.name"))
		require.Equal(t, []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75,
			1, 2.5, 5, 7.5, 10, 30, 60}, dp.Bounds)
		require.GreaterOrEqual(t, dp.Sum, 0.0)
		counts[get("messaging.consumer.group.name")+"/"+get("error.type")] += dp.Count
	}
	require.Equal(t, map[string]uint64{"billing/": 3, "billing/handler": 1, "ledger/": 3}, counts,
		"one observation per handler call, per group and outcome")
}
