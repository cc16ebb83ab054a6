package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metrics (OpenTelemetry) are off unless a MeterProvider is given
// (Config.MeterProvider). Then the consumer records each handler call's
// duration in the histogram "messaging.process.duration" (unit "s"; the
// OpenTelemetry messaging semantic conventions' name), with the attributes
// messaging.system ("pgq"), messaging.destination.name (the topic),
// messaging.consumer.group.name (the group, when set) and, for a call
// that failed, error.type: "handler" (the handler returned an error or
// panicked: the message is nacked) or "commit" (a TxHandler's transaction
// failed at its ack or commit). A TxHandler's call includes its ack and
// COMMIT. Exported to Prometheus (the OpenTelemetry Prometheus exporter)
// it is messaging_process_duration_seconds_bucket{messaging_consumer_group_name=...}:
// the processing time per group that the sidecar cannot see.
const (
	processDurationName = "messaging.process.duration"
	meterName           = tracerName
)

// processBuckets are the histogram's bucket bounds in seconds (advice to
// the SDK; a View may override them): the semantic conventions' bounds,
// up to a minute for slow handlers.
var processBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75,
	1, 2.5, 5, 7.5, 10, 30, 60}

// newProcessHistogram makes the processing-time histogram of mp (nil: no
// metrics).
func newProcessHistogram(mp metric.MeterProvider) (metric.Float64Histogram, error) {
	if mp == nil {
		return nil, nil
	}
	h, err := mp.Meter(meterName).Float64Histogram(processDurationName,
		metric.WithUnit("s"),
		metric.WithDescription("Duration of each handler call of a pgq consumer (a TxHandler's includes its ack and commit)."),
		metric.WithExplicitBucketBoundaries(processBuckets...))
	if err != nil {
		return nil, fmt.Errorf("pgq client: histogram %s: %w", processDurationName, err)
	}
	return h, nil
}

// processAttrs are the attribute sets of the histogram, made once per
// consumer: success, handler error, commit error.
type processAttrs struct {
	ok, handler, commit metric.MeasurementOption
}

func newProcessAttrs(topic, group string) processAttrs {
	base := []attribute.KeyValue{
		attribute.String("messaging.system", "pgq"),
		attribute.String("messaging.destination.name", topic),
	}
	if group != "" {
		base = append(base, attribute.String("messaging.consumer.group.name", group))
	}
	with := func(kv ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(append(append([]attribute.KeyValue{}, base...), kv...)...))
	}
	return processAttrs{
		ok:      with(),
		handler: with(attribute.String("error.type", "handler")),
		commit:  with(attribute.String("error.type", "commit")),
	}
}

// recordProcess records one handler call that started at start and ended
// with err (a TxHandler's: a *handlerError when the handler failed).
func (c *Consumer) recordProcess(ctx context.Context, start time.Time, err error) {
	if c.procHist == nil {
		return
	}
	attrs := c.procAttrs.ok
	if err != nil {
		attrs = c.procAttrs.handler
		var he *handlerError
		if c.txHandler != nil && !errors.As(err, &he) {
			attrs = c.procAttrs.commit
		}
	}
	// The handler's context may be cancelled by now (stop, lost lease):
	// the measurement is still wanted.
	c.procHist.Record(context.WithoutCancel(ctx), time.Since(start).Seconds(), attrs)
}
