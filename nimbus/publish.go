package nimbus

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

// Publication is an event a handler publishes onward, as NimBus's
// PublishFromContext publishes one: to the endpoint's own topic, where the
// topology forwards it to the endpoints that consume its type.
//
// The fields are named, so an event type can never be passed where a
// message id is expected.
type Publication struct {
	// EventTypeID is the type of the event (NimBus's EventTypeId, the
	// short name of the event class). Required.
	EventTypeID string
	// MessageID is the event's broker MessageId. Required, unique among
	// the events the delivery publishes, and deterministic: derive it from
	// the business key and the step of the workflow (for example
	// "PaymentRecorded-" + paymentID), never from a GUID, the time or a
	// retry count, so that every later copy of the event (a redelivery
	// that runs the handler again, a re-send) carries the same id and
	// every downstream inbox, and the broker's duplicate detection where
	// the topic has it, recognises it. At most 128 characters.
	MessageID string
	// Payload is the event; it is encoded with encoding/json (HTML
	// characters are not escaped, as NimBus's serializer writes them) and
	// carried as EventContent.EventJson. A json.RawMessage is taken as it
	// is.
	Payload any
	// SessionID, when not empty, is the session the event goes out in;
	// by default it goes out in the delivery's session, so the events of a
	// workflow stay in order behind each other. An event that starts a
	// workflow (App.Publish, Service.Publish, a FrontDoor's Tx) without
	// one goes out in a new session, a random UUID.
	SessionID string
	// CorrelationID is the CorrelationId of an event that starts a
	// workflow: every event of the workflow carries it; empty means a new
	// random UUID, fixed when the event is published (a front door stores
	// it, so every re-send carries the same). A handler's events carry the
	// delivery's CorrelationId: Event.Publish refuses one set here.
	CorrelationID string
}

// Publish queues p, an event to publish onward when the handler has
// handled this event. Nothing is sent while the handler runs: the events
// go out, in the order published, only when the handler returns
// Completed, before the Resolver hears that the event completed; with any
// other result (an error of any kind, a panic, a PendingHandoff) they are
// dropped, and the invocation's log line counts them.
//
// The event carries the delivery's lineage as NimBus's PublishFromContext
// writes it: the delivery's MessageId as ParentMessageId, its
// OriginatingMessageId (or, on a first hop, its MessageId), its
// CorrelationId and, unless p names another, its SessionId; and the trace
// context of the handler's span.
//
// A plain handler's events are sent after it returns and before the
// delivery is recorded in the inbox, so they are sent at least once: when
// a delivery fails after the send, its redelivery runs the handler again,
// which publishes the same ids again. In a transactional handler (see
// HandleTx), Publish queues into the unit of work as Tx.Publish does: the
// events commit with the handler's writes and are sent after the commit.
//
// Publish returns a Permanent error that names the problem, and never a
// value of the payload, for: an empty EventTypeID or MessageID, a
// MessageID this delivery already published, a MessageID, SessionID or
// EventTypeID that is not valid UTF-8, a MessageID or SessionID longer
// than Service Bus accepts, a payload encoding/json cannot encode,
// an event whose message could be larger than Service Bus accepts
// (NimBus__Publish__MaxMessageBytes, 256 KB by default), more than 1,000
// events in one delivery, or, in a plain handler, events whose messages
// add up to more than 2 MiB in one delivery (the size of the marker that
// bounds a transactional handler's), a delivery without a MessageId or SessionId (NimBus's rule: there is
// nothing to parent the event, or no session to send it in), a limit of a
// transactional batch; and after the handler returned. A delivery without
// a CorrelationId (a CloudEvent without the correlation extension) starts
// the workflow: its events take its MessageId as their CorrelationId. A publication refused while the handler runs fails the
// delivery permanently even if the handler ignores the error, so an event
// is never silently lost; a publish after the handler returned is refused
// to the goroutine alone, and the delivery's outcome stays the handler's.
// Publish is safe for concurrent use by the handler's goroutines.
//
// On an Event the pipeline did not deliver (one a test builds), Publish
// checks p as far as it can without a delivery and keeps it; nothing is
// ever sent, and Published returns what was kept.
func (e *Event) Publish(p Publication) error {
	if p.CorrelationID != "" {
		return Permanent(errors.New("nimbus: an event published while handling a delivery carries the delivery's CorrelationId; leave Publication.CorrelationID empty"))
	}
	if e.in != nil {
		return e.state().publish(p, e.in.Publish, e.in.Exhausted)
	}
	st := e.state()
	return st.publish(p, st.detached.Publish, st.detached.Exhausted)
}

// Published returns the publications Publish (or, in a transactional
// handler, Tx.Publish) accepted for this event so far, in order. It is
// meant for tests of a handler, which call it on an Event they built.
func (e *Event) Published() []Publication {
	st := e.state()
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([]Publication(nil), st.list...)
}

// publications is what an Event's handler published.
type publications struct {
	mu       sync.Mutex
	list     []Publication
	detached subscriber.DetachedOutbox
}

// lazyMu guards the creation of an Event's publications, for an Event a
// test built (the pipeline's events get theirs when they are made).
var lazyMu sync.Mutex

func (e *Event) state() *publications {
	lazyMu.Lock()
	defer lazyMu.Unlock()
	if e.pubs == nil {
		e.pubs = &publications{}
	}
	return e.pubs
}

// publish encodes p's payload and hands it to queue; an accepted
// publication is kept for Published. Once exhausted reports that the
// delivery's publications broke a limit, the payload is not encoded: queue
// refuses the publication whatever it holds.
func (st *publications) publish(p Publication, queue func(subscriber.Publication) error, exhausted func() bool) error {
	var raw string
	var encErr error
	if !exhausted() {
		raw, encErr = encodePayload(p.Payload)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := queue(subscriber.Publication{EventTypeID: p.EventTypeID, MessageID: p.MessageID, JSON: raw, SessionID: p.SessionID, Refused: encErr}); err != nil {
		return err
	}
	st.list = append(st.list, p)
	return nil
}

// Publish queues p in the unit of work, to be published onward as
// Event.Publish describes, with the outbox guarantee of a transactional
// handler: the events are stored in the delivery's inbox marker, in the
// same transactional batch as the handler's writes (no event for an
// effect that was not committed, no committed effect without its events).
// After the commit they are sent, in the order published and in one send
// with the Resolver's response, and the marker is marked dispatched
// before the delivery completes. When the send fails or the process stops
// after the commit, the next copy of the message (the broker's
// redelivery, a concurrent copy) finds the marker and sends the stored
// events again, byte for byte with the same MessageIds, instead of
// running the handler; the OutboxSweep timer sends those of a message
// the broker will not bring back. The events are therefore committed
// exactly once with the effect and sent at least once: downstream inboxes
// recognise a re-send by its MessageId.
//
// The events count toward the batch's 2 MB and the marker document's
// 2 MB, and a delivery publishes at most 1,000 events; a publication that
// would break a limit is refused with a Permanent error naming it. Publish and Event.Publish queue into the same
// unit, in one order.
func (tx *Tx) Publish(p Publication) error {
	switch {
	case tx.err != nil:
		return tx.err
	case tx.req != nil:
		mp, err := startedPublication(p)
		if err != nil {
			return err
		}
		if err := tx.req.Publish(mp); err != nil {
			return Permanent(err)
		}
		return nil
	case tx.ev == nil:
		return Permanent(subscriber.ErrNotDelivered)
	}
	return tx.ev.Publish(p)
}

// encodePayload encodes v as the event's JSON, without escaping HTML
// characters.
func encodePayload(v any) (string, error) {
	if raw, ok := v.(json.RawMessage); ok && raw != nil {
		// Taken as it is, byte for byte (encoding/json would compact it).
		if !json.Valid(raw) {
			return "", &payloadError{Type: "json.RawMessage", cause: errInvalidRaw}
		}
		return string(raw), nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", &payloadError{Type: fmt.Sprintf("%T", v), cause: err}
	}
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}

// errInvalidRaw is the cause of a json.RawMessage payload that is not
// valid JSON.
var errInvalidRaw = errors.New("the json.RawMessage is not valid JSON")

// payloadError is a publication whose payload encoding/json cannot
// encode. Its text names the Go types involved and never a value.
type payloadError struct {
	// Type is the payload's Go type.
	Type  string
	cause error
}

func (e *payloadError) Error() string {
	why := "encoding/json failed"
	var (
		ut *json.UnsupportedTypeError
		uv *json.UnsupportedValueError
		me *json.MarshalerError
	)
	switch {
	case errors.Is(e.cause, errInvalidRaw):
		why = "it is not valid JSON"
	case errors.As(e.cause, &me):
		why = fmt.Sprintf("the MarshalJSON or MarshalText method of %s failed or wrote invalid JSON", me.Type)
	case errors.As(e.cause, &ut):
		why = fmt.Sprintf("it holds a %s, which JSON cannot represent", ut.Type)
	case errors.As(e.cause, &uv):
		why = "it holds a value JSON cannot represent (NaN, an infinity, or a cycle)"
	}
	return fmt.Sprintf("the payload (%s) cannot be encoded as JSON: %s", e.Type, why)
}

// Unwrap returns the encoding/json error (which may quote a value of the
// payload: do not log it).
func (e *payloadError) Unwrap() error { return e.cause }
