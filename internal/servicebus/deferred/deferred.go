// Package deferred adapts the endpoint topic's Deferred subscription, where
// a blocked session's messages are parked, to the pipeline's Deferred port
// (subscriber.Deferred) on the shared Service Bus client.
package deferred

import (
	"context"
	"errors"
	"fmt"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/servicebus"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

// Name is the endpoint topic's session subscription that holds parked
// copies (NimBus's topology).
const Name = "Deferred"

// Subscription is the endpoint topic's Deferred subscription, through
// which the pipeline replays a session's parked copies. It implements
// subscriber.Deferred.
type Subscription struct {
	c     *servicebus.Client
	topic string
}

var _ subscriber.Deferred = (*Subscription)(nil)

// New returns the Deferred subscription of topic (the endpoint id) on c.
// It does no I/O.
func New(c *servicebus.Client, topic string) *Subscription {
	return &Subscription{c: c, topic: topic}
}

// Accept locks the parked copies of sessionID; a session another receiver
// holds is an error wrapping subscriber.ErrSessionLocked.
func (s *Subscription) Accept(ctx context.Context, sessionID string) (subscriber.DeferredSession, error) {
	r, err := s.c.AcceptSession(ctx, s.topic, Name, sessionID)
	if err != nil {
		if servicebus.IsSessionLocked(err) {
			return nil, fmt.Errorf("%w: %w", subscriber.ErrSessionLocked, err)
		}
		return nil, err
	}
	return &session{r: r}, nil
}

// session is one locked session of the Deferred subscription.
type session struct {
	r *servicebus.SessionReceiver
}

// Next receives the session's next parked copy; when ctx ends first, the
// error wraps subscriber.ErrNoParked.
func (s *session) Next(ctx context.Context) (*subscriber.Parked, error) {
	m, err := s.r.Receive(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", subscriber.ErrNoParked, err)
		}
		return nil, err
	}
	b := message.Broker{
		SessionID:     &m.SessionID,
		CorrelationID: m.CorrelationID,
		EnqueuedTime:  m.EnqueuedTime,
		DeliveryCount: int(m.DeliveryCount),
	}
	if m.MessageID != "" {
		id := m.MessageID
		b.MessageID = &id
	}
	return &subscriber.Parked{
		Delivery: subscriber.Delivery{Broker: b, Properties: m.ApplicationProperties, Body: m.Body},
		Handle:   m,
	}, nil
}

func received(p *subscriber.Parked) (*servicebus.Received, error) {
	m, ok := p.Handle.(*servicebus.Received)
	if !ok {
		return nil, errors.New("servicebus: a parked message not received from Service Bus")
	}
	return m, nil
}

func (s *session) Complete(ctx context.Context, p *subscriber.Parked) error {
	m, err := received(p)
	if err != nil {
		return err
	}
	return s.r.Complete(ctx, m)
}

func (s *session) Abandon(ctx context.Context, p *subscriber.Parked) error {
	m, err := received(p)
	if err != nil {
		return err
	}
	return s.r.Abandon(ctx, m)
}

func (s *session) DeadLetter(ctx context.Context, p *subscriber.Parked, reason, description string) error {
	m, err := received(p)
	if err != nil {
		return err
	}
	return s.r.DeadLetter(ctx, m, reason, description)
}

func (s *session) RenewLock(ctx context.Context) error { return s.r.RenewLock(ctx) }
func (s *session) Close(ctx context.Context) error     { return s.r.Close(ctx) }
