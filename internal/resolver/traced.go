package resolver

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// Traced returns p with the trace context added to everything it sends:
// each Publish runs in a producer span ("send <topic>"), and p is handed a
// copy of the message whose traceparent and tracestate are that span's
// (replacing any carried over; without a valid span context the message
// goes as it is). It is the one place the endpoint's outgoing messages get
// their trace properties, so the Service Bus adapter and Memory carry the
// same ones. When p also schedules (a Memory, the Service Bus adapter),
// the result does too, each Schedule in a "schedule <topic>" span.
func Traced(p Publisher, tracer trace.Tracer, topic string) Publisher {
	t := traced{p: p, tracer: tracer, topic: topic}
	if s, ok := p.(scheduler); ok {
		return &tracedScheduler{traced: t, s: s}
	}
	return &t
}

// scheduler is the Schedule method of a Publisher that schedules.
type scheduler interface {
	Schedule(ctx context.Context, m *message.Outgoing, at time.Time) error
}

type traced struct {
	p      Publisher
	tracer trace.Tracer
	topic  string
}

// Publish implements Publisher.
func (t *traced) Publish(ctx context.Context, m *message.Outgoing) (err error) {
	if m == nil {
		return t.p.Publish(ctx, m)
	}
	ctx, span, m := t.start(ctx, "send", m)
	defer func() { telemetry.EndSend(span, err) }()
	return t.p.Publish(ctx, m)
}

// start starts the span of one send and returns the copy of m that
// carries its trace context.
func (t *traced) start(ctx context.Context, op string, m *message.Outgoing) (context.Context, trace.Span, *message.Outgoing) {
	c := *m
	ctx, span, props := telemetry.StartSend(ctx, t.tracer, op, t.topic, m.ApplicationProperties)
	c.ApplicationProperties = props
	return ctx, span, &c
}

type tracedScheduler struct {
	traced
	s scheduler
}

// Schedule sends m to be enqueued at the time at, as the wrapped
// publisher's Schedule does, with the trace context of its span.
func (t *tracedScheduler) Schedule(ctx context.Context, m *message.Outgoing, at time.Time) (err error) {
	if m == nil {
		return t.s.Schedule(ctx, m, at)
	}
	ctx, span, m := t.start(ctx, "schedule", m)
	defer func() { telemetry.EndSend(span, err) }()
	return t.s.Schedule(ctx, m, at)
}
