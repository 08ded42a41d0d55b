// Package resolver is the endpoint's outgoing port: Publisher, through
// which the subscriber pipeline sends every message it addresses to its
// own topic (the responses the Resolver tracks, parked copies, replay
// requests, and, through Schedule, RetryRequests), BatchPublisher, which
// also sends several messages in one send (the events a handler
// publishes), Memory, an in-process Publisher for tests and local demos,
// and Traced, which adds the trace context to every message before any
// Publisher sees it.
//
// A response goes to the endpoint's own topic with To=Resolver; the
// topology's Resolver fan-out subscription stamps From and forwards it to
// the Resolver topic. The Service Bus implementation of Publisher is an
// adapter in the servicebus package (servicebus.ResolverPublisher), so the
// subscriber pipeline depends on this port only. The Resolver app's own
// handling of those responses is package resolverapp.
package resolver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// Publisher sends responses. Implementations are safe for concurrent use.
// An error means the response may not have been sent; the caller fails the
// invocation so the broker redelivers.
type Publisher interface {
	Publish(ctx context.Context, m *message.Outgoing) error
}

// BatchPublisher is a Publisher that also sends several messages to the
// endpoint topic in one send (a published event's outbox, with the
// delivery's response).
type BatchPublisher interface {
	Publisher
	// PublishBatch sends ms in their order. Messages that fit in one
	// broker batch go in one round trip, accepted or refused together;
	// more than fit are sent as consecutive batches, in order, each after
	// the previous one was accepted. An error means that none, or only
	// the batches before the failing one, were sent: the caller sends
	// them all again (an event keeps its MessageId, so the copies are
	// recognisable). Sending no message does nothing.
	PublishBatch(ctx context.Context, ms []*message.Outgoing) error
}

// PublishAll sends ms through p in their order: in one PublishBatch when p
// is a BatchPublisher, otherwise one Publish per message (one round trip
// each), stopping at the first failure.
func PublishAll(ctx context.Context, p Publisher, ms []*message.Outgoing) error {
	if len(ms) == 0 {
		return nil
	}
	if b, ok := p.(BatchPublisher); ok {
		return b.PublishBatch(ctx, ms)
	}
	for i, m := range ms {
		if err := p.Publish(ctx, m); err != nil {
			return fmt.Errorf("resolver: message %d of %d: %w", i+1, len(ms), err)
		}
	}
	return nil
}

// Memory is an in-process Publisher that keeps what it is given, for tests
// and the local demo. It never fails unless Fail is set.
type Memory struct {
	mu   sync.Mutex
	sent []*message.Outgoing
	at   map[*message.Outgoing]time.Time
	// Fail, when set, is called before each publish; a non-nil result is
	// returned and nothing is kept.
	Fail func(m *message.Outgoing) error
}

var _ BatchPublisher = (*Memory)(nil)

// Publish implements Publisher.
func (p *Memory) Publish(ctx context.Context, m *message.Outgoing) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.Fail != nil {
		if err := p.Fail(m); err != nil {
			return err
		}
	}
	p.mu.Lock()
	p.sent = append(p.sent, m)
	p.mu.Unlock()
	return nil
}

// PublishBatch implements BatchPublisher: it keeps every message of ms, in
// order and together, as Publish keeps one. Fail, when set, is called for
// each message first; if it refuses one, nothing of the batch is kept, as
// the broker accepts or refuses a batch whole.
func (p *Memory) PublishBatch(ctx context.Context, ms []*message.Outgoing) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, m := range ms {
		if m == nil {
			return errors.New("resolver: a batch holds a nil message")
		}
	}
	if p.Fail != nil {
		for _, m := range ms {
			if err := p.Fail(m); err != nil {
				return err
			}
		}
	}
	p.mu.Lock()
	p.sent = append(p.sent, ms...)
	p.mu.Unlock()
	return nil
}

// Sent returns a copy of everything published so far, in order.
func (p *Memory) Sent() []*message.Outgoing {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*message.Outgoing(nil), p.sent...)
}

// Reset forgets everything published so far.
func (p *Memory) Reset() {
	p.mu.Lock()
	p.sent, p.at = nil, nil
	p.mu.Unlock()
}

// Schedule keeps m as Publish does, with the time it is to be enqueued at
// (a scheduled RetryRequest); ScheduledAt tells it.
func (p *Memory) Schedule(ctx context.Context, m *message.Outgoing, at time.Time) error {
	if err := p.Publish(ctx, m); err != nil {
		return err
	}
	p.mu.Lock()
	if p.at == nil {
		p.at = map[*message.Outgoing]time.Time{}
	}
	p.at[m] = at
	p.mu.Unlock()
	return nil
}

// ScheduledAt returns when m, kept by Schedule, is to be enqueued, and
// false for a message that was published at once.
func (p *Memory) ScheduledAt(m *message.Outgoing) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.at[m]
	return at, ok
}
