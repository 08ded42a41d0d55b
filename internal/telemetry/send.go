package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
)

var producerSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}

// StartSend starts the producer span of one send of a Service Bus message
// to destination (op is "send" or "schedule"; the span is named
// "<op> <destination>", as the OpenTelemetry messaging conventions name
// it) and returns ctx carrying it, with the application properties the
// message is to carry: when the span context is valid, a copy of props with
// its traceparent and tracestate (Inject), otherwise props unchanged. The
// caller ends the span with EndSend.
func StartSend(ctx context.Context, tracer trace.Tracer, op, destination string, props map[string]any) (context.Context, trace.Span, map[string]any) {
	ctx, span := tracer.Start(ctx, op+" "+destination, producerSpan...)
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("messaging.system", "servicebus"),
			attribute.String("messaging.operation.type", op),
			attribute.String("messaging.destination.name", destination),
		)
	}
	if trace.SpanContextFromContext(ctx).IsValid() {
		props = Inject(ctx, props)
	}
	return ctx, span, props
}

// EndSend ends a span StartSend started, marked failed with err's text
// (bounded) when the send failed.
func EndSend(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, logsafe.Bound(err.Error()))
	}
	span.End()
}
