package servicebus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/resolverapp"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// ResolverPublisher implements resolver.Publisher on a [Client]: it sends
// each response to the endpoint's own topic, where the topology's Resolver
// subscription stamps From and forwards it to the Resolver topic. It sends
// the message as it is given, trace properties included: wrapped in
// resolver.Traced, as the app wires it, every message carries the trace
// context of its send span.
type ResolverPublisher struct {
	c     *Client
	topic string
}

var _ resolver.Publisher = (*ResolverPublisher)(nil)

// NewResolverPublisher returns a publisher that sends to topic (the
// endpoint id) through c. It does no I/O. Closing c closes it.
func NewResolverPublisher(c *Client, topic string) (*ResolverPublisher, error) {
	if c == nil {
		return nil, errors.New("servicebus: resolver publisher needs a client")
	}
	if strings.TrimSpace(topic) == "" {
		return nil, errors.New("servicebus: resolver publisher: the endpoint topic is empty (it is the endpoint id)")
	}
	return &ResolverPublisher{c: c, topic: topic}, nil
}

// Publish sends m to the endpoint topic: application properties with their
// exact Go types (string → AMQP string, int32 → int, int64 → long, nil →
// null), SessionID, CorrelationID when set, the body, and MessageID when
// set (else the broker assigns one). A non-nil error means the response
// may not have been sent.
func (p *ResolverPublisher) Publish(ctx context.Context, m *message.Outgoing) error {
	if m == nil {
		return errors.New("servicebus: publish of a nil response")
	}
	if err := p.c.Send(ctx, p.topic, fromOutgoing(m)); err != nil {
		return fmt.Errorf("servicebus: publishing %s to topic %q: %w", m.Type(), p.topic, err)
	}
	return nil
}

// ResolverScheduler implements resolverapp.Scheduler on a [Client]: it
// schedules a Resolver message's copy on the Resolver topic, keeping its
// MessageId (the topic must not require duplicate detection, or the broker
// would drop the copy).
type ResolverScheduler struct {
	c      *Client
	tracer trace.Tracer
}

var _ resolverapp.Scheduler = (*ResolverScheduler)(nil)

// NewResolverScheduler returns a scheduler on c whose re-sends run in
// producer spans of tp (nil means the global provider). It does no I/O.
func NewResolverScheduler(c *Client, tp trace.TracerProvider) (*ResolverScheduler, error) {
	if c == nil {
		return nil, errors.New("servicebus: resolver scheduler needs a client")
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &ResolverScheduler{c: c, tracer: tp.Tracer(telemetry.TracerName)}, nil
}

// ScheduleRedelivery schedules r on the Resolver topic at the time at, in a
// "schedule" producer span whose trace context the copy carries.
func (s *ResolverScheduler) ScheduleRedelivery(ctx context.Context, r *resolverapp.Redelivery, at time.Time) (err error) {
	if r == nil {
		return errors.New("servicebus: schedule of a nil redelivery")
	}
	ctx, span, props := telemetry.StartSend(ctx, s.tracer, "schedule", resolverapp.Topic, r.Properties)
	defer func() { telemetry.EndSend(span, err) }()
	m := Message{
		Body:                  r.Body,
		ApplicationProperties: props,
		SessionID:             r.SessionID,
		CorrelationID:         r.CorrelationID,
		MessageID:             r.MessageID,
		Subject:               r.Subject,
		ContentType:           r.ContentType,
	}
	if _, err := s.c.Schedule(ctx, resolverapp.Topic, &m, at); err != nil {
		return fmt.Errorf("servicebus: scheduling a Resolver re-send: %w", err)
	}
	return nil
}

// Schedule sends m to the endpoint topic to be enqueued at the time at (a
// RetryRequest), with the same property typing as Publish.
func (p *ResolverPublisher) Schedule(ctx context.Context, m *message.Outgoing, at time.Time) error {
	if m == nil {
		return errors.New("servicebus: schedule of a nil message")
	}
	if _, err := p.c.Schedule(ctx, p.topic, fromOutgoing(m), at); err != nil {
		return fmt.Errorf("servicebus: scheduling %s on topic %q: %w", m.Type(), p.topic, err)
	}
	return nil
}

// fromOutgoing is the Service Bus message of m: its properties with their
// exact Go types, SessionID, CorrelationID when set, the body, and
// MessageID when set (a published event's; responses and control messages
// leave it to the broker).
func fromOutgoing(m *message.Outgoing) *Message {
	return &Message{
		Body:                  m.Body,
		ApplicationProperties: m.ApplicationProperties,
		SessionID:             m.SessionID,
		CorrelationID:         m.CorrelationID,
		MessageID:             m.MessageID,
	}
}
