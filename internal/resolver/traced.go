package resolver

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// Traced returns p with the trace context added to everything it sends:
// each Publish runs in a producer span ("send <topic>"), and p is handed a
// copy of the message whose traceparent and tracestate are that span's
// (replacing any carried over; without a valid span context the message
// goes as it is). It is the one place the endpoint's responses and control
// messages get their trace properties, so the Service Bus adapter and
// Memory carry the same ones. When p also schedules (a Memory, the Service Bus adapter),
// the result does too, each Schedule in a "schedule <topic>" span. When p
// is a BatchPublisher, so is the result: each PublishBatch runs in one
// "send <topic>" span, and a message of the batch that carries its own
// traceparent keeps it (a published event carries the trace context of its
// publish, the same on every re-send) while the others get the span's.
func Traced(p Publisher, tracer trace.Tracer, topic string) Publisher {
	t := traced{p: p, tracer: tracer, topic: topic}
	s, schedules := p.(scheduler)
	b, batches := p.(BatchPublisher)
	switch {
	case schedules && batches:
		return &tracedSchedulerBatcher{tracedScheduler: tracedScheduler{traced: t, s: s}, b: b}
	case schedules:
		return &tracedScheduler{traced: t, s: s}
	case batches:
		return &tracedBatcher{traced: t, b: b}
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

type tracedBatcher struct {
	traced
	b BatchPublisher
}

// PublishBatch sends ms through the wrapped publisher's PublishBatch (see
// publishBatch).
func (t *tracedBatcher) PublishBatch(ctx context.Context, ms []*message.Outgoing) error {
	return t.publishBatch(ctx, t.b, ms)
}

type tracedSchedulerBatcher struct {
	tracedScheduler
	b BatchPublisher
}

// PublishBatch sends ms through the wrapped publisher's PublishBatch (see
// publishBatch).
func (t *tracedSchedulerBatcher) PublishBatch(ctx context.Context, ms []*message.Outgoing) error {
	return t.publishBatch(ctx, t.b, ms)
}

// publishBatch sends ms in one producer span ("send <topic>", one round
// trip) through b, each message as a copy. A message that carries its own
// traceparent keeps it and its tracestate: a published event carries the
// trace context of its publish, the same on every re-send. Every other
// message (the delivery's response) gets the span's, as Publish gives it.
// An empty batch sends nothing and starts no span.
func (t *traced) publishBatch(ctx context.Context, b BatchPublisher, ms []*message.Outgoing) (err error) {
	if len(ms) == 0 {
		return nil
	}
	for _, m := range ms {
		if m == nil {
			return errors.New("resolver: a batch holds a nil message")
		}
	}
	ctx, span := t.tracer.Start(ctx, "send "+t.topic, trace.WithSpanKind(trace.SpanKindProducer))
	defer func() { telemetry.EndSend(span, err) }()
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("messaging.system", "servicebus"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", t.topic),
			attribute.Int("messaging.batch.message_count", len(ms)),
		)
	}
	valid := trace.SpanContextFromContext(ctx).IsValid()
	copies := make([]*message.Outgoing, len(ms))
	for i, m := range ms {
		c := *m
		if s, _ := m.ApplicationProperties[telemetry.PropTraceParent].(string); s == "" && valid {
			c.ApplicationProperties = telemetry.Inject(ctx, m.ApplicationProperties)
		}
		copies[i] = &c
	}
	return b.PublishBatch(ctx, copies)
}
