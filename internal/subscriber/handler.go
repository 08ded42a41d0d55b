// Package subscriber runs the NimBus subscriber contract for one delivery:
// read the message, consult the consumer inbox, dispatch to the application
// handler registered for the event type, record the delivery only after the
// handler succeeded, publish the Resolver response, and decide whether the
// invocation completes or fails (so the broker redelivers).
package subscriber

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// Event is what an application handler receives.
type Event struct {
	// EventTypeID selected the handler.
	EventTypeID string
	// JSON is the domain event as the publisher serialized it
	// (MessageContent.EventContent.EventJson).
	JSON string
	// MessageID is the broker MessageId; "" when the message had none.
	MessageID     string
	SessionID     string
	CorrelationID string
	EventID       string
	From          string
	DeliveryCount int
	RetryCount    int
	EnqueuedTime  time.Time
	// CloudEvent holds the attributes of an event that arrived as a
	// CloudEvent; nil for a native NimBus message. JSON is then its data.
	CloudEvent *CloudEventAttributes
	// Attempt says how the event reached the handler: its original
	// delivery (a redelivery of it included), a RetryRequest, an operator's
	// resubmission, or the replay of a copy parked while its session was
	// blocked.
	Attempt Attempt

	// out receives what the handler publishes (Publish); nil for an event
	// the pipeline did not deliver.
	out *outbox
}

// Attempt is how an event reached the handler.
type Attempt string

// Attempts.
const (
	AttemptOriginal     Attempt = "original"
	AttemptRetry        Attempt = "retry"
	AttemptResubmission Attempt = "resubmission"
	AttemptReplay       Attempt = "replay"
)

// CloudEventAttributes are the context attributes of a CloudEvent; "" where
// an optional attribute was absent.
type CloudEventAttributes struct {
	ID, Source, Type, SpecVersion string
	Subject, Time, DataSchema     string
	DataContentType               string
	// Extensions by name, prefix stripped.
	Extensions map[string]string
}

// Decode unmarshals the domain event into v. A failure is Permanent, and
// its text describes where the JSON did not fit (an offset, a field name and
// the Go type) without quoting any value from the payload, so it is safe to
// log; errors.As still reaches the *json.SyntaxError or
// *json.UnmarshalTypeError.
func (e *Event) Decode(v any) error {
	if err := json.Unmarshal([]byte(e.JSON), v); err != nil {
		return Permanent(&DecodeError{EventTypeID: e.EventTypeID, Target: fmt.Sprintf("%T", v), cause: err})
	}
	return nil
}

// DecodeError is a domain event that did not decode. Its text never
// contains payload values.
type DecodeError struct {
	EventTypeID string
	// Target is the Go type decoded into.
	Target string
	cause  error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("decode %s event into %s: %s", e.EventTypeID, e.Target, logsafe.JSONError("the event", e.cause))
}

// Unwrap returns the encoding/json error (which may quote payload values:
// do not log it).
func (e *DecodeError) Unwrap() error { return e.cause }

// Result is what a handler returns on success. The zero value means the
// event is completed.
type Result struct {
	handoff *Handoff
}

// Handoff describes work handed to another system whose outcome the Manager
// settles later.
type Handoff struct {
	Reason        string
	ExternalJobID string
	// ExpectedIn, when positive, is how long until the outcome is expected;
	// the response carries ExpectedBy = now + ExpectedIn.
	ExpectedIn time.Duration
}

// Completed reports that the event was handled.
func Completed() Result { return Result{} }

// PendingHandoff reports that the event was handed off. The delivery is not
// recorded in the inbox: a redelivery runs the handler again so the pending
// state can be re-established.
func PendingHandoff(h Handoff) Result { return Result{handoff: &h} }

// HandlerFunc handles one event.
type HandlerFunc func(ctx context.Context, ev *Event) (Result, error)

// TxHandlerFunc handles one event in a unit of work bound to one partition
// of one container (see txn.Unit): its reads run at once, its writes are
// queued, and the pipeline commits them with the delivery's inbox markers
// in one transactional batch after it succeeds.
type TxHandlerFunc func(ctx context.Context, ev *Event, u *txn.Unit) (Result, error)

// TxBinding is where a transactional handler's unit of work lives: the
// container, and the function that derives the partition key value from
// the event, evaluated before the inbox check so every copy of a message
// reads and writes its markers in the same partition. An error from it (or
// an empty value) is a Permanent failure.
type TxBinding struct {
	Target       txn.Target
	PartitionKey func(ev *Event) (string, error)
}

// registered is one event type's handler: plain (h) or transactional (tx
// and txh).
type registered struct {
	h   HandlerFunc
	tx  *TxBinding
	txh TxHandlerFunc
}

// Registry maps event type ids to handlers. Register everything before the
// first delivery; lookups are then safe for concurrent use.
type Registry struct {
	handlers map[string]registered
	// frontDoors are the containers requests commit to outside any
	// delivery (AddFrontDoor), in registration order.
	frontDoors []txn.Target
}

// AddFrontDoor adds t, a container the endpoint's front doors commit
// requests to, so that Targets (the containers the transactional store
// and the OutboxSweep cover) includes it. It panics on an unusable target.
func (r *Registry) AddFrontDoor(t txn.Target) {
	if err := t.Validate(); err != nil {
		panic("subscriber: front door: " + err.Error())
	}
	r.frontDoors = append(r.frontDoors, t)
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{handlers: map[string]registered{}} }

// Handle registers h for eventTypeID (matched exactly, case-sensitively).
// It panics on an empty id, a nil handler or a second registration: those
// are programming errors found at start-up.
func (r *Registry) Handle(eventTypeID string, h HandlerFunc) {
	if h == nil {
		panic("subscriber: nil handler for " + eventTypeID)
	}
	r.add(eventTypeID, registered{h: h})
}

// HandleTx registers the transactional handler h for eventTypeID on b. It
// panics as Handle does, and on a binding without a partition key function
// or with an unusable target.
func (r *Registry) HandleTx(eventTypeID string, b TxBinding, h TxHandlerFunc) {
	switch {
	case h == nil:
		panic("subscriber: nil handler for " + eventTypeID)
	case b.PartitionKey == nil:
		panic("subscriber: no partition key function for " + eventTypeID)
	}
	if err := b.Target.Validate(); err != nil {
		panic("subscriber: " + eventTypeID + ": " + err.Error())
	}
	r.add(eventTypeID, registered{tx: &b, txh: h})
}

func (r *Registry) add(eventTypeID string, e registered) {
	if eventTypeID == "" {
		panic("subscriber: empty event type id")
	}
	if _, dup := r.handlers[eventTypeID]; dup {
		panic("subscriber: a handler for " + eventTypeID + " is already registered")
	}
	r.handlers[eventTypeID] = e
}

// Targets returns the containers of the transactional handlers and of
// the front doors, once each.
func (r *Registry) Targets() []txn.Target {
	seen := map[txn.Target]bool{}
	var out []txn.Target
	for _, e := range r.handlers {
		if e.tx != nil && !seen[e.tx.Target] {
			seen[e.tx.Target] = true
			out = append(out, e.tx.Target)
		}
	}
	for _, t := range r.frontDoors {
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

// EventTypes returns the registered event type ids.
func (r *Registry) EventTypes() []string {
	out := make([]string, 0, len(r.handlers))
	for k := range r.handlers {
		out = append(out, k)
	}
	return out
}

func (r *Registry) lookup(id string) (registered, bool) {
	h, ok := r.handlers[id]
	return h, ok
}

// A handler's error decides what happens to the event, as NimBus's
// failure kinds do:
//
//   - a plain error (or a panic) means the event failed: an ErrorResponse
//     goes to the Resolver with the error's text and type, the session is
//     blocked by this EventId (later messages of the session are parked
//     behind it), the delivery completes, and a RetryRequest is scheduled
//     when a retry policy applies; operators resubmit or skip the event
//     from the Manager;
//   - Transient(err) means "try this delivery again": the invocation fails
//     after the redelivery pause and the broker redelivers it (NimBus's
//     TransientException); nothing is reported until the last delivery;
//   - Permanent(err) means a retry cannot help: the invocation fails at
//     once, the broker dead-letters the message after its last delivery,
//     and that last delivery reports an ErrorResponse with the dead-letter
//     reason;
//   - Discard(err) means the event is dropped on purpose: a SkipResponse
//     with the error's text, the delivery completes, the session is not
//     blocked.
type HandlerError struct {
	Err  error
	Kind FailureKind
}

// FailureKind classifies a handler error. Its values are nimbus.FailureKind's,
// which converts them as they are.
type FailureKind int

// Failure kinds.
const (
	// KindNone is the kind of a nil error: no failure.
	KindNone FailureKind = iota
	// KindFailed is a plain error's (and a panic's).
	KindFailed
	KindTransient
	KindPermanent
	KindDiscard
)

func (e *HandlerError) Error() string { return e.Err.Error() }
func (e *HandlerError) Unwrap() error { return e.Err }

// Transient marks err as worth trying again on the same delivery: the
// broker redelivers the message after the redelivery pause.
func Transient(err error) error { return mark(err, KindTransient) }

// Permanent marks err as one a retry cannot fix (bad data, a broken
// invariant): the delivery fails without the redelivery pause, so the
// message reaches the dead-letter queue within about a second, and the
// Resolver is told on its last delivery.
func Permanent(err error) error { return mark(err, KindPermanent) }

// Discard marks err as a reason to drop the event: a SkipResponse is sent
// and the session is not blocked.
func Discard(err error) error { return mark(err, KindDiscard) }

func mark(err error, k FailureKind) error {
	if err == nil {
		return nil
	}
	return &HandlerError{Err: err, Kind: k}
}

// KindOf returns the failure kind of err: the kind of the outermost
// HandlerError in its chain, KindFailed for any other error and KindNone
// for nil.
func KindOf(err error) FailureKind {
	if err == nil {
		return KindNone
	}
	var he *HandlerError
	if errors.As(err, &he) {
		return he.Kind
	}
	return KindFailed
}

// IsPermanent reports whether err was marked Permanent.
func IsPermanent(err error) bool { return KindOf(err) == KindPermanent }
