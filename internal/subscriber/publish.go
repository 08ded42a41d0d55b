package subscriber

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// A handler publishes onward events through the event it handles
// (Event.Publish). A publish only queues: nothing is sent while the
// handler runs. The events go out only when the handler returns Completed
// (without a handoff), in the order published, before the delivery's
// ResolutionResponse:
//
//   - a plain handler's events are sent after the handler, in one send,
//     before the inbox record: a failure between the send and the record
//     runs the handler again on redelivery, which publishes the same
//     message ids again (at-least-once, with stable ids);
//   - a transactional handler's events are queued in its unit of work and
//     committed in the delivery's inbox marker, in the same batch as its
//     writes; they are then sent together with the ResolutionResponse in
//     one send, and the marker is marked dispatched before the delivery
//     completes. A copy of the delivery that finds the marker with events
//     not yet dispatched sends them (the stored messages, byte for byte)
//     and answers as the original would have.
//
// With any other result (a failure of any kind, a panic, a pending
// handoff, a discard) the events are dropped, and the report counts them.

// Publication is an event a handler publishes onward while handling a
// delivery.
type Publication struct {
	// EventTypeID is the event type (NimBus's EventTypeId). Required.
	EventTypeID string
	// MessageID is the broker MessageId of the event: required, unique
	// within the delivery, and deterministic (derived from the business
	// key), so every later copy of the event is recognised downstream.
	MessageID string
	// JSON is the event as JSON (EventContent.EventJson).
	JSON string
	// SessionID, when not "", is the session the event goes out in
	// instead of the delivery's.
	SessionID string
	// Refused, when not nil, is why the caller could not make the
	// publication (its payload could not be encoded as JSON): Publish
	// refuses it with this problem, and the delivery fails as it does for
	// any other refusal.
	Refused error
}

// Limits of what one delivery publishes. A plain handler's events are held
// in memory until the handler returns, outside the in-flight byte budget of
// the invocation bodies, so they are bounded as the inbox marker bounds a
// transactional handler's: the same ceiling for both kinds of handler, so a
// handler moved from one to the other keeps what it may publish.
const (
	// MaxPublications is the most events one delivery may publish, plain or
	// transactional.
	MaxPublications = 1000
	// MaxPublishedBytes bounds the messages a plain handler's delivery
	// publishes, summed as each is bounded for Service Bus
	// (message.Outgoing.SizeBound): 2 MiB, the size of the inbox marker
	// that holds a transactional handler's events (whose own limits, the
	// batch's and the marker's 2 MB, apply to it instead).
	MaxPublishedBytes = 2 << 20
)

// ErrNotDelivered is the error of Event.Publish on an event the pipeline
// did not deliver: there is no delivery to publish from.
var ErrNotDelivered = errors.New("the event was not delivered by the pipeline: there is no delivery to publish from")

// errPublishSealed is the error of a publish after the handler returned.
var errPublishSealed = errors.New("the handler has returned: an event published now would never be sent")

// PublishError is a publication that was refused: its position in the
// delivery's publications (from 1) and the problem. Its text names the
// problem or the limit, never a value of the payload.
type PublishError struct {
	// N is the publication's position among the handler's publish calls.
	N     int
	cause error
}

func (e *PublishError) Error() string { return fmt.Sprintf("publish %d: %v", e.N, e.cause) }

// Unwrap returns the problem (message.ErrInvalidPublication, or the unit
// of work's limit error for a transactional handler).
func (e *PublishError) Unwrap() error { return e.cause }

// Publish queues p to be sent when the handler returns Completed (see
// above). It returns a Permanent *PublishError for a publication that is
// refused: an empty event type or message id, a message id already
// published by this delivery, a payload that is not JSON, an id or event
// type that is not valid UTF-8, an id longer than Service Bus accepts, an event whose message could exceed
// Options.MaxEventBytes, more than MaxPublications events in one delivery
// or, for a plain handler, more than MaxPublishedBytes of their messages,
// a delivery without a MessageId or SessionId,
// or a limit of the transactional batch; and a Permanent
// error after the handler returned. A publication refused while the
// handler runs fails the delivery permanently even when the handler
// ignores the error, as a refused write of a unit of work does: an event
// is never silently lost. A publish after the handler returned is refused
// to the caller alone: the delivery's outcome stays the handler's.
// It is safe for concurrent use by the handler's goroutines.
func (e *Event) Publish(p Publication) error {
	if e.out == nil {
		return Permanent(ErrNotDelivered)
	}
	return e.out.publish(p)
}

// Exhausted reports whether the delivery's publications broke one of
// their limits (MaxPublications, MaxPublishedBytes): every later Publish is
// then refused whatever it publishes, so a caller need not build the
// publication (encode its payload) first.
func (e *Event) Exhausted() bool { return e.out != nil && e.out.exhausted() }

// DetachedOutbox keeps the publications of an event the pipeline did not
// deliver (one a test of a handler builds): it checks each as Publish
// does (the message size against message.DefaultMaxMessageBytes, and the
// limits of one delivery's publications as a plain handler's), apart
// from what depends on a delivery (its MessageId and SessionId, and a
// transactional batch's limits), and sends
// nothing. The zero value is ready; it is safe for concurrent use.
type DetachedOutbox struct {
	mu  sync.Mutex
	n   int
	ids map[string]bool
	b   budget
}

// detachedInbound stands for a delivery in DetachedOutbox's checks.
var detachedInbound = &message.Inbound{Broker: message.Broker{MessageID: message.Ptr("detached"), SessionID: message.Ptr("detached"), CorrelationID: message.Ptr("detached")}}

// Publish checks p and keeps its message id; it returns the errors
// Event.Publish returns for p.
func (d *DetachedOutbox) Publish(p Publication) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	if err := d.check(p); err != nil {
		return Permanent(&PublishError{N: d.n, cause: err})
	}
	if d.ids == nil {
		d.ids = map[string]bool{}
	}
	d.ids[p.MessageID] = true
	return nil
}

// Exhausted reports, as Event.Exhausted does, whether every later Publish
// is refused by a broken limit.
func (d *DetachedOutbox) Exhausted() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.b.exhausted()
}

// check is Publish's verdict on p.
func (d *DetachedOutbox) check(p Publication) error {
	if p.Refused != nil {
		return p.Refused
	}
	if err := d.b.admit(); err != nil {
		return err
	}
	m, err := message.NewPublishedEvent(detachedInbound, message.Publication{EventTypeID: p.EventTypeID, EventJSON: p.JSON, MessageID: p.MessageID, SessionID: p.SessionID})
	switch {
	case err != nil:
		return err
	case d.ids[p.MessageID]:
		return errRepeatedID
	}
	return d.b.take(m, true)
}

// errRepeatedID refuses a message id a delivery already published.
var errRepeatedID = fmt.Errorf("%w: the message id was already published by this delivery; each event needs its own", message.ErrInvalidPublication)

// budget counts what one delivery publishes against MaxPublications and,
// for a plain handler, MaxPublishedBytes. Once a limit is broken, every
// later publication of the delivery is refused before its message is
// built: the delivery fails anyway, and a handler that publishes on in a
// loop allocates nothing more.
type budget struct {
	events, bytes int
	// full is the limit that was broken (nil: none).
	full error
}

// admit refuses the next publication when a limit is broken or the
// count is reached, before its message is built.
func (b *budget) admit() error {
	if b.full == nil && b.events >= MaxPublications {
		b.full = fmt.Errorf("%w: a delivery publishes at most %d events (the limit of events per delivery)", message.ErrInvalidPublication, MaxPublications)
	}
	return b.full
}

// exhausted reports whether admit refuses every later publication.
func (b *budget) exhausted() bool { return b.admit() != nil }

// take counts m, or refuses it when bytes (a plain handler's) and its
// size would take the total over MaxPublishedBytes.
func (b *budget) take(m *message.Outgoing, bytes bool) error {
	n := 0
	if bytes {
		n = m.SizeBound()
		if b.bytes+n > MaxPublishedBytes {
			b.full = fmt.Errorf("%w: the delivery's published messages reached the limit of %d bytes per delivery", message.ErrInvalidPublication, MaxPublishedBytes)
			return fmt.Errorf("%w: the event's message (up to %d bytes) would take the delivery's published messages to %d bytes, over the limit of %d bytes per delivery",
				message.ErrInvalidPublication, n, b.bytes+n, MaxPublishedBytes)
		}
	}
	b.events++
	b.bytes += n
	return nil
}

// outbox collects what one run of a handler publishes.
type outbox struct {
	j *job
	// traceparent and tracestate are the handler span's, written on every
	// event (a re-send of a stored event carries the same).
	traceparent, tracestate string
	// queue, for a transactional handler, hands each built event to the
	// unit of work, which stores it with the batch; nil keeps it here.
	queue func(*message.Outgoing) error

	mu     sync.Mutex
	n      int
	sealed bool
	ids    map[string]bool
	// msgs are the events kept here (a plain handler's), in order.
	msgs []*message.Outgoing
	// queued counts the events accepted (kept or queued in the unit).
	queued int
	// b counts them against the delivery's limits.
	b budget
	// err is the first refused publication: it fails the delivery.
	err error
}

// newOutbox starts the outbox of a run of j's handler under the handler's
// span context ctx; queue is the run's (nil for a plain handler).
func (j *job) newOutbox(ctx context.Context, queue func(*message.Outgoing) error) *outbox {
	o := &outbox{j: j, ids: map[string]bool{}, queue: queue}
	props := telemetry.Inject(ctx, nil)
	o.traceparent, _ = props[telemetry.PropTraceParent].(string)
	o.tracestate, _ = props[telemetry.PropTraceState].(string)
	return o
}

func (o *outbox) publish(p Publication) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sealed {
		return Permanent(errPublishSealed)
	}
	o.n++
	err := o.add(p)
	if err == nil {
		o.queued++
		return nil
	}
	err = Permanent(&PublishError{N: o.n, cause: err})
	if o.err == nil {
		o.err = err
	}
	return err
}

// add builds p's message and keeps or queues it.
func (o *outbox) add(p Publication) error {
	if p.Refused != nil {
		return p.Refused
	}
	if err := o.b.admit(); err != nil {
		return err
	}
	m, err := message.NewPublishedEvent(o.j.in, message.Publication{
		Endpoint: o.j.p.o.EndpointID, EventTypeID: p.EventTypeID, EventJSON: p.JSON, MessageID: p.MessageID,
		SessionID: p.SessionID, TraceParent: o.traceparent, TraceState: o.tracestate, MaxBytes: o.j.p.o.MaxEventBytes,
	})
	if err != nil {
		return err
	}
	if o.ids[p.MessageID] {
		return errRepeatedID
	}
	// The batch and the marker bound a transactional handler's bytes.
	if err := o.b.take(m, o.queue == nil); err != nil {
		return err
	}
	if o.queue != nil {
		if err := o.queue(m); err != nil {
			return err
		}
	} else {
		o.msgs = append(o.msgs, m)
	}
	o.ids[p.MessageID] = true
	return nil
}

// exhausted reports whether a limit of the delivery's publications is
// broken.
func (o *outbox) exhausted() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.exhausted()
}

// seal ends the handler's use of the outbox: every later publish fails.
// It returns how many events were accepted and the first refusal; sealing
// again returns the same.
func (o *outbox) seal() (queued int, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sealed = true
	return o.queued, o.err
}

// drop forgets the events kept, which the delivery does not send (the
// handler did not return Completed).
func (o *outbox) drop() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.msgs = nil
}

// sendEvents sends a plain handler's events in one send (consecutive
// batches, in order, when they do not fit in one), before the delivery is
// recorded.
func (j *job) sendEvents(ctx context.Context) error {
	if j.out == nil || len(j.out.msgs) == 0 {
		return nil
	}
	ms := j.out.msgs
	if err := j.p.publishAll(ctx, ms); err != nil {
		return &eventsError{n: len(ms), err: err, canceled: errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)}
	}
	j.did.eventsPublished += len(ms)
	return nil
}

// publishAll sends ms through the publisher in their order, in one send
// when it sends batches, within SettleTimeout.
func (p *Pipeline) publishAll(ctx context.Context, ms []*message.Outgoing) error {
	sctx, cancel := context.WithTimeout(ctx, p.o.SettleTimeout)
	defer cancel()
	if err := resolver.PublishAll(sctx, p.o.Publisher, ms); err != nil {
		if sctx.Err() != nil {
			return fmt.Errorf("%w (%w)", err, sctx.Err())
		}
		return err
	}
	return nil
}
