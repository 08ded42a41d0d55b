package nimbus

import (
	"context"
	"strconv"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

// HandlerFunc handles one event. It returns Completed or PendingHandoff on
// success; a non-nil error fails the event in the way its kind says (see
// KindOf), and the Result is then ignored. ctx ends when the invocation is
// abandoned; it carries the delivery's trace and the handler's logger
// (see Logger).
type HandlerFunc func(ctx context.Context, ev *Event) (Result, error)

// Event is what a handler receives: the domain event and where it came
// from. Handlers must not change it.
type Event struct {
	// EventTypeID selected the handler.
	EventTypeID string
	// JSON is the domain event as the publisher serialized it; Decode
	// unmarshals it.
	JSON string
	// MessageID is the broker's MessageId; "" when the message had none.
	MessageID string
	// SessionID is the broker's SessionId: events of one session are
	// handled in order.
	SessionID string
	// CorrelationID is the broker's CorrelationId.
	CorrelationID string
	// EventID is NimBus's EventId, the same across retries and
	// resubmissions of one event.
	EventID string
	// From is the endpoint that published the event.
	From string
	// DeliveryCount is the broker's delivery count of this message, from
	// 1; 0 when the invocation did not carry it.
	DeliveryCount int
	// RetryCount is how many RetryRequests preceded this attempt.
	RetryCount int
	// EnqueuedTime is when the broker accepted the message.
	EnqueuedTime time.Time
	// CloudEvent holds the attributes of an event that arrived as a
	// CloudEvent; nil for a native NimBus message. JSON is then its data.
	CloudEvent *CloudEventAttributes
	// Attempt says how the event reached the handler.
	Attempt Attempt

	// in is the pipeline's event, through which Publish queues; nil for an
	// Event the pipeline did not deliver.
	in *subscriber.Event
	// pubs is what was published through the Event (see Published).
	pubs *publications
}

// Attempt is how an event reached the handler.
type Attempt string

// The attempts. A redelivery by the broker keeps the attempt of the
// delivery it repeats.
const (
	// AttemptOriginal is the event's original delivery.
	AttemptOriginal Attempt = "original"
	// AttemptRetry is a RetryRequest that a retry policy scheduled after a
	// failure.
	AttemptRetry Attempt = "retry"
	// AttemptResubmission is an operator's resubmission from the Manager.
	AttemptResubmission Attempt = "resubmission"
	// AttemptReplay is the replay of a copy parked while its session was
	// blocked.
	AttemptReplay Attempt = "replay"
)

// CloudEventAttributes are the context attributes of a CloudEvent; "" where
// an optional attribute was absent.
type CloudEventAttributes struct {
	// ID, Source, Type and SpecVersion are the required attributes.
	ID, Source, Type, SpecVersion string
	// Subject, Time and DataSchema are optional attributes, as sent.
	Subject, Time, DataSchema string
	// DataContentType is the datacontenttype attribute.
	DataContentType string
	// Extensions by name, prefix stripped. Handlers must not change it.
	Extensions map[string]string
}

// Decode unmarshals the domain event (JSON) into v. A failure is
// Permanent, and its text says where the JSON did not fit (an offset, a
// field name and the Go type) without quoting any value from the payload, so
// it is safe to log; errors.As still reaches the *json.SyntaxError or
// *json.UnmarshalTypeError.
func (e *Event) Decode(v any) error {
	in := subscriber.Event{EventTypeID: e.EventTypeID, JSON: e.JSON}
	return in.Decode(v)
}

// Result is what a handler returns on success. The zero value, like
// Completed, means the event is done.
type Result struct {
	handoff Handoff
	pending bool
}

// Handoff describes work handed to another system whose outcome is settled
// later (from the NimBus Manager).
type Handoff struct {
	// Reason says why the event waits, for example "ManualApproval".
	Reason string
	// ExternalJobID identifies the work in the other system.
	ExternalJobID string
	// ExpectedIn, when positive, is how long until the outcome is expected;
	// the Resolver is told ExpectedBy = now + ExpectedIn.
	ExpectedIn time.Duration
}

// Completed reports that the event was handled: the delivery is recorded
// in the inbox and the Resolver gets a ResolutionResponse.
func Completed() Result { return Result{} }

// PendingHandoff reports that the event was handed off: the Resolver gets
// a PendingHandoffResponse and the session waits, as after a failure, until
// the outcome is settled. The delivery is not recorded in the inbox, so a
// redelivery runs the handler again and can re-establish the pending state.
func PendingHandoff(h Handoff) Result { return Result{handoff: h, pending: true} }

// Handoff returns the handoff of a PendingHandoff result; ok is false for
// Completed.
func (r Result) Handoff() (h Handoff, ok bool) { return r.handoff, r.pending }

// FailureKind is how a handler's error is handled.
type FailureKind int

// The failure kinds.
const (
	// KindNone is the kind of a nil error: no failure.
	KindNone FailureKind = iota
	// KindFailed is a plain error's (and a panic's): the event failed. The
	// Resolver gets an ErrorResponse with the error's text and type, the
	// session is blocked by this event (later messages of the session are
	// parked behind it), the delivery completes, and a RetryRequest is
	// scheduled when a retry policy applies; operators resubmit or skip the
	// event from the Manager.
	KindFailed
	// KindTransient (Transient) means "try this delivery again": the
	// invocation fails after the redelivery pause and the broker redelivers
	// the message. Nothing is reported until its last delivery.
	KindTransient
	// KindPermanent (Permanent) means a retry cannot help: the invocation
	// fails at once, the broker dead-letters the message after its last
	// delivery, and that delivery reports an ErrorResponse with the
	// dead-letter reason.
	KindPermanent
	// KindDiscard (Discard) drops the event on purpose: the Resolver gets a
	// SkipResponse with the error's text, the delivery completes and the
	// session is not blocked.
	KindDiscard
)

var kindNames = [...]string{KindNone: "none", KindFailed: "failed", KindTransient: "transient", KindPermanent: "permanent", KindDiscard: "discard"}

// String returns the kind's name: "none", "failed", "transient",
// "permanent" or "discard".
func (k FailureKind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return "FailureKind(" + strconv.Itoa(int(k)) + ")"
	}
	return kindNames[k]
}

// Transient marks err as worth trying again on the same delivery (see
// KindTransient). errors.Is and errors.As reach err through the result;
// Transient(nil) is nil.
func Transient(err error) error { return subscriber.Transient(err) }

// Permanent marks err as one a retry cannot fix, such as bad data or a
// broken invariant (see KindPermanent). errors.Is and errors.As reach err
// through the result; Permanent(nil) is nil.
func Permanent(err error) error { return subscriber.Permanent(err) }

// Discard marks err as the reason to drop the event (see KindDiscard).
// errors.Is and errors.As reach err through the result; Discard(nil) is nil.
func Discard(err error) error { return subscriber.Discard(err) }

// KindOf returns how err is handled when a handler returns it: the kind of
// the outermost Transient, Permanent or Discard mark in its chain (so an
// error wrapped with %w keeps its kind), KindFailed for any other error and
// KindNone for nil.
func KindOf(err error) FailureKind {
	// The pipeline numbers its kinds as FailureKind does.
	return FailureKind(subscriber.KindOf(err))
}

// adapt turns h into the pipeline's handler: the pipeline's event becomes
// an Event, the Result becomes the pipeline's. Errors pass through
// unchanged, so their marks keep their meaning.
func adapt(h HandlerFunc) subscriber.HandlerFunc {
	return func(ctx context.Context, in *subscriber.Event) (subscriber.Result, error) {
		return toResult(h(eventLogContext(ctx, in), newEvent(in)))
	}
}

// toResult turns a handler's answer into the pipeline's.
func toResult(res Result, err error) (subscriber.Result, error) {
	if err != nil {
		return subscriber.Result{}, err
	}
	if !res.pending {
		return subscriber.Completed(), nil
	}
	// A conversion, not a copy field by field: it compiles only while
	// Handoff and the pipeline's have the same fields.
	return subscriber.PendingHandoff(subscriber.Handoff(res.handoff)), nil
}

// newEvent is the handler's view of the pipeline's event. A test fills
// every field of the pipeline's event and finds each here, so a field
// added there and not carried over fails it.
func newEvent(in *subscriber.Event) *Event {
	ev := &Event{
		EventTypeID:   in.EventTypeID,
		JSON:          in.JSON,
		MessageID:     in.MessageID,
		SessionID:     in.SessionID,
		CorrelationID: in.CorrelationID,
		EventID:       in.EventID,
		From:          in.From,
		DeliveryCount: in.DeliveryCount,
		RetryCount:    in.RetryCount,
		EnqueuedTime:  in.EnqueuedTime,
		Attempt:       Attempt(in.Attempt),
		in:            in,
		pubs:          &publications{},
	}
	if in.CloudEvent != nil {
		// A conversion: it compiles only while the two types have the
		// same fields.
		ce := CloudEventAttributes(*in.CloudEvent)
		ev.CloudEvent = &ce
	}
	return ev
}
