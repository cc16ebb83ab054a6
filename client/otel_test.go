package client_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgfanout/pgq/client"
)

// With a TracerProvider, the W3C trace context travels in the message's
// headers from the publish to the process: the consumer's process span is a
// child of the publish span (same trace id), which is a child of the
// application's span, and links to the read span; the message's own headers
// are kept. Also through a TxHandler and PublishBatch. Without one (the
// default) no span is made and the headers stay as published.
func TestTracingCarriesTraceContextFromPublishToProcess(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "traced", "semantics => 'pubsub'")
	for _, g := range []string{"plain", "tx", "peek"} {
		_, err := b.Pool.Exec(ctx, `SELECT fanout.subscribe('traced', $1)`, g)
		require.NoError(t, err)
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	appCtx, app := tp.Tracer("app").Start(ctx, "app request")
	pub := client.NewPublisher(b.Pool).WithTracerProvider(tp)
	id, err := pub.Publish(appCtx, "traced", client.Message{Payload: json.RawMessage(`{"n":1}`),
		Headers: json.RawMessage(`{"tenant":"acme"}`)})
	require.NoError(t, err)
	ids, err := pub.PublishBatch(appCtx, "traced", []client.Message{{Payload: json.RawMessage(`{"n":2}`)}})
	require.NoError(t, err)
	app.End()

	type seen struct {
		sc      trace.SpanContext
		headers json.RawMessage
	}
	got := make(chan seen, 10)
	cfg := func(group string) client.Config {
		return client.Config{Topic: "traced", Group: group, Logger: quiet, TracerProvider: tp}
	}
	c1, err := client.NewConsumer(b.Pool, cfg("plain"), func(ctx context.Context, d *client.Delivery) error {
		got <- seen{trace.SpanContextFromContext(ctx), d.Headers}
		return nil
	})
	require.NoError(t, err)
	c2, err := client.NewTxConsumer(b.Pool, cfg("tx"), func(ctx context.Context, _ pgx.Tx, d *client.Delivery) error {
		got <- seen{trace.SpanContextFromContext(ctx), d.Headers}
		return nil
	})
	require.NoError(t, err)
	run(t, ctx, c1)
	run(t, ctx, c2)
	for range 4 {
		select {
		case s := <-got:
			require.True(t, s.sc.IsValid(), "the handler's context carries the process span")
			require.Equal(t, app.SpanContext().TraceID(), s.sc.TraceID(), "the publisher's trace")
			var h map[string]any
			require.NoError(t, json.Unmarshal(s.headers, &h))
			require.Contains(t, h, "traceparent")
		case <-time.After(time.Minute):
			t.Fatal("not every message was handled")
		}
	}
	eventually(t, func() bool { return c1.Stats().Acked+c2.Stats().Acked == 4 }, 30*time.Second, "all acked")

	spans := exp.GetSpans()
	var publishes []tracetest.SpanStub
	byName := map[string]int{}
	for _, s := range spans {
		byName[s.Name]++
		if s.Name == "pgq.publish traced" {
			publishes = append(publishes, s)
			require.Equal(t, trace.SpanKindProducer, s.SpanKind)
			require.Equal(t, app.SpanContext().SpanID(), s.Parent.SpanID())
		}
	}
	require.Equal(t, 2, byName["pgq.publish traced"], "%v", byName)
	require.Equal(t, 4, byName["pgq.process traced"], "%v", byName)
	require.GreaterOrEqual(t, byName["pgq.read traced"], 2, "%v", byName)
	publishSpans := map[trace.SpanID]bool{publishes[0].SpanContext.SpanID(): true, publishes[1].SpanContext.SpanID(): true}
	for _, s := range spans {
		if s.Name != "pgq.process traced" {
			continue
		}
		require.Equal(t, trace.SpanKindConsumer, s.SpanKind)
		require.Equal(t, app.SpanContext().TraceID(), s.SpanContext.TraceID(), "the process span is in the publisher's trace")
		require.True(t, publishSpans[s.Parent.SpanID()], "the process span's parent is a publish span")
		require.Len(t, s.Links, 1, "a link to the read span")
	}

	// Off by default: no headers added, no publish span.
	exp.Reset()
	plain, err := client.NewPublisher(b.Pool).Publish(appCtx, "traced", client.Message{Payload: json.RawMessage(`{"n":3}`)})
	require.NoError(t, err)
	for _, s := range exp.GetSpans() {
		require.NotEqual(t, "pgq.publish traced", s.Name, "a publisher without a TracerProvider makes no span")
	}
	ds, err := client.Read(ctx, b.Pool, "traced", client.ReadOptions{Group: "peek", MaxMessages: 10})
	require.NoError(t, err)
	headers := map[int64]string{}
	for _, d := range ds {
		headers[d.ID] = string(d.Headers)
	}
	require.Len(t, headers, 3)
	require.Equal(t, "{}", headers[plain], "untraced: the headers stay as published")
	require.Contains(t, headers[id], `"tenant": "acme"`, "the message's own headers are kept")
	require.Contains(t, headers[id], `"traceparent"`)
	require.Contains(t, headers[ids[0]], `"traceparent"`)
}
