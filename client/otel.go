package client

import (
	"context"
	"encoding/json"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing (OpenTelemetry) is off unless a TracerProvider is given
// (Publisher.WithTracerProvider, Config.TracerProvider). Then:
//
//   - Publish and PublishBatch run in a span "pgq.publish <topic>" (kind
//     producer) and carry its W3C trace context in each message's headers
//     ("traceparent", "tracestate", merged into the message's own headers);
//   - a read that returned messages (or failed) is a span
//     "pgq.read <topic>" (kind consumer);
//   - every handler call runs in a span "pgq.process <topic>" (kind
//     consumer) whose parent is the trace context found in the message's
//     headers (so it belongs to the publisher's trace) and that links to the
//     read span; the handler's ctx carries it.
const tracerName = "github.com/pgfanout/pgq/client"

// traceContext is the propagator of the headers: W3C trace context.
var traceContext = propagation.TraceContext{}

func messagingAttrs(topic, op string) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("messaging.system", "pgq"),
		attribute.String("messaging.destination.name", topic),
		attribute.String("messaging.operation.name", op),
	}
}

// WithTracerProvider returns a Publisher that traces its publishes with tp
// and carries their trace context in the messages' headers. nil turns
// tracing off (the default).
func (p *Publisher) WithTracerProvider(tp trace.TracerProvider) *Publisher {
	q := *p
	q.tracer = nil
	if tp != nil {
		q.tracer = tp.Tracer(tracerName)
	}
	return &q
}

// startPublish starts the publish span (when tracing is on) and returns the
// headers to send for each message: the message's own, with the span's
// trace context added.
func (p *Publisher) startPublish(ctx context.Context, topic string, msgs []Message) (context.Context, func(error), []json.RawMessage) {
	headers := make([]json.RawMessage, len(msgs))
	for i, m := range msgs {
		headers[i] = m.Headers
	}
	if p.tracer == nil {
		return ctx, func(error) {}, headers
	}
	attrs := append(messagingAttrs(topic, "publish"), attribute.Int("messaging.batch.message_count", len(msgs)))
	ctx, span := p.tracer.Start(ctx, "pgq.publish "+topic, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attrs...))
	carrier := propagation.MapCarrier{}
	traceContext.Inject(ctx, carrier)
	for i := range headers {
		headers[i] = withTraceHeaders(headers[i], carrier)
	}
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}, headers
}

// withTraceHeaders merges the carrier's fields into a JSON object of
// headers (nil: {}). Headers that are not a JSON object are left as they are
// (the server refuses them: PGQ06).
func withTraceHeaders(h json.RawMessage, carrier propagation.MapCarrier) json.RawMessage {
	if len(carrier) == 0 {
		return h
	}
	obj := map[string]json.RawMessage{}
	if len(h) > 0 {
		if err := json.Unmarshal(h, &obj); err != nil || obj == nil {
			return h
		}
	}
	for k, v := range carrier {
		b, _ := json.Marshal(v)
		obj[k] = b
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return h
	}
	return out
}

// traceHeaders reads the trace context fields out of a message's headers.
func traceHeaders(h json.RawMessage) propagation.MapCarrier {
	carrier := propagation.MapCarrier{}
	if len(h) == 0 {
		return carrier
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(h, &obj) != nil {
		return carrier
	}
	for _, k := range traceContext.Fields() {
		var s string
		if raw, ok := obj[k]; ok && json.Unmarshal(raw, &s) == nil {
			carrier[k] = s
		}
	}
	return carrier
}

// traceRead records a read that returned messages or failed as a span
// (started at start) and returns its context (the process spans link to
// it); an empty read leaves no span, so idle polling makes no noise.
func (c *Consumer) traceRead(ctx context.Context, start time.Time, n int, err error) trace.SpanContext {
	if c.tracer == nil || (n == 0 && err == nil) {
		return trace.SpanContext{}
	}
	attrs := append(messagingAttrs(c.cfg.Topic, "receive"), attribute.Int("messaging.batch.message_count", n))
	if c.cfg.Group != "" {
		attrs = append(attrs, attribute.String("messaging.consumer.group.name", c.cfg.Group))
	}
	_, span := c.tracer.Start(ctx, "pgq.read "+c.cfg.Topic, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	return span.SpanContext()
}

// startProcess starts the span of one handler call: its parent is the trace
// context of the message's headers (the publisher's), and it links to the
// read that delivered it. The returned func ends it and records the call's
// duration (metrics.go).
func (c *Consumer) startProcess(ctx context.Context, read trace.SpanContext, d *Delivery) (context.Context, func(error)) {
	start := time.Now()
	if c.tracer == nil {
		return ctx, func(err error) { c.recordProcess(ctx, start, err) }
	}
	pctx := traceContext.Extract(ctx, traceHeaders(d.Headers))
	attrs := append(messagingAttrs(c.cfg.Topic, "process"),
		attribute.Int64("messaging.message.id", d.ID),
		attribute.Int("messaging.pgq.attempt", d.Attempt),
		attribute.Int64("messaging.pgq.lease_id", d.LeaseID))
	if c.cfg.Group != "" {
		attrs = append(attrs, attribute.String("messaging.consumer.group.name", c.cfg.Group))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}
	if read.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: read}))
	}
	pctx, span := c.tracer.Start(pctx, "pgq.process "+c.cfg.Topic, opts...)
	return pctx, func(err error) {
		c.recordProcess(ctx, start, err)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}
