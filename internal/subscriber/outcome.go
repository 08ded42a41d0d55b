package subscriber

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/outcome"
)

// Outcome is what happened to a delivery. Its value is a bounded label used
// in logs and counters.
type Outcome string

// Outcomes. Everything that follows from one (the HTTP status the host sees,
// whether the pause before answering applies, the log level and message) is
// declared once, in the outcomes table below.
const (
	OutcomeCompleted      Outcome = "completed"
	OutcomeDuplicate      Outcome = "duplicate"
	OutcomeUnsupported    Outcome = "unsupported"
	OutcomePendingHandoff Outcome = "pending_handoff"
	OutcomeHeartbeat      Outcome = "heartbeat"

	OutcomeTransientFailure       Outcome = "transient_failure"
	OutcomeHandlerFailed          Outcome = "handler_failed"
	OutcomePermanentFailure       Outcome = "permanent_failure"
	OutcomePublishFailed          Outcome = "publish_failed"
	OutcomeInvalidMessage         Outcome = "invalid_message"
	OutcomeUnsupportedMessageType Outcome = "unsupported_message_type"
	OutcomeInvalidCloudEvent      Outcome = "invalid_cloudevent"
	OutcomeCanceled               Outcome = "canceled"
	OutcomeMalformed              Outcome = "malformed_invocation"
	OutcomeOverloaded             Outcome = "overloaded"
)

// OutcomeSpec is everything that follows from an outcome.
type OutcomeSpec = outcome.Spec

// outcomes is the one table of outcomes. TestEveryOutcomeHasARow fails when
// a constant above has no row here.
var outcomes = map[Outcome]OutcomeSpec{
	OutcomeCompleted:      outcome.Row(http.StatusOK, false, zerolog.InfoLevel, "invocation completed"),
	OutcomeDuplicate:      outcome.Row(http.StatusOK, false, zerolog.InfoLevel, "inbox duplicate detected; handler skipped and SkipResponse sent"),
	OutcomeUnsupported:    outcome.Row(http.StatusOK, false, zerolog.InfoLevel, "no handler for the event type; UnsupportedResponse sent"),
	OutcomePendingHandoff: outcome.Row(http.StatusOK, false, zerolog.InfoLevel, "handler handed the event off; PendingHandoffResponse sent, not recorded"),
	OutcomeHeartbeat:      outcome.Row(http.StatusOK, false, zerolog.InfoLevel, "heartbeat answered"),

	OutcomeTransientFailure: outcome.Row(http.StatusServiceUnavailable, true, zerolog.ErrorLevel, "inbox store operation failed; the message will be retried"),
	OutcomeHandlerFailed:    outcome.Row(http.StatusServiceUnavailable, true, zerolog.ErrorLevel, "handler failed; the message will be retried"),
	OutcomePublishFailed:    outcome.Row(http.StatusServiceUnavailable, true, zerolog.ErrorLevel, "Resolver response could not be sent; the message will be retried"),
	OutcomePermanentFailure: outcome.Row(http.StatusUnprocessableEntity, false, zerolog.ErrorLevel, "handler failed permanently; failing at once so the broker dead-letters the message after its last delivery"),
	OutcomeInvalidMessage:   outcome.Row(http.StatusUnprocessableEntity, false, zerolog.ErrorLevel, "message is not a valid NimBus message; failing at once so the broker dead-letters it after its last delivery"),
	OutcomeUnsupportedMessageType: outcome.Row(http.StatusUnprocessableEntity, false, zerolog.ErrorLevel,
		"message type is not handled by this subscriber; failing at once so the broker dead-letters it after its last delivery"),
	OutcomeInvalidCloudEvent: outcome.Row(http.StatusUnprocessableEntity, false, zerolog.ErrorLevel,
		"CloudEvent rejected (a required attribute is missing, the specversion is not 1.0, or its type maps to no handler); failing at once so the broker dead-letters it after its last delivery"),
	OutcomeCanceled:   outcome.Row(http.StatusServiceUnavailable, false, zerolog.WarnLevel, "invocation cancelled; the message will be retried"),
	OutcomeMalformed:  outcome.Row(http.StatusBadRequest, false, zerolog.ErrorLevel, "malformed invocation envelope; failing so the broker redelivers and finally dead-letters it"),
	OutcomeOverloaded: outcome.Row(http.StatusServiceUnavailable, false, zerolog.WarnLevel, "too many invocation bytes in flight; the message will be retried"),
}

// unknownOutcome is what an outcome without a row gets: fail and log an
// error, so a missing row can never complete a message.
var unknownOutcome = outcome.Row(http.StatusServiceUnavailable, false, zerolog.ErrorLevel, "invocation ended with an unknown outcome")

// Spec returns what follows from o.
func (o Outcome) Spec() OutcomeSpec {
	if s, ok := outcomes[o]; ok {
		return s
	}
	return unknownOutcome
}

// Completes reports whether the host completes the message (a 2xx answer).
func (o Outcome) Completes() bool { return o.Spec().Completes() }

// InboxState says what the inbox did for a delivery.
type InboxState string

// Inbox states.
const (
	InboxNew       InboxState = "new"
	InboxDuplicate InboxState = "duplicate"
	InboxBypassed  InboxState = "bypassed"
	InboxOff       InboxState = "off"
	// InboxNotReached: the delivery failed or ended before the inbox.
	InboxNotReached InboxState = "not_reached"
)

// Report describes one processed delivery for the invocation log line. It
// never holds the payload: every string comes from the broker's or the
// message's application properties, and the caller bounds them.
type Report struct {
	Outcome   Outcome
	Inbox     InboxState
	MessageID string
	SessionID string
	EventID   string
	// EventTypeID is the EventTypeId application property; it is empty
	// when the type came from the body (EventTypeFromBody), which is payload
	// and is not logged.
	EventTypeID       string
	EventTypeFromBody bool
	MessageType       string
	// CloudEvent is the content mode (binary or structured) of a detected
	// CloudEvent; "" for a native message.
	CloudEvent string
	// BypassReason is set when Inbox is InboxBypassed.
	BypassReason string
	// StoreOp names the failed store operation (check or record).
	StoreOp string
	// Checks and Records count store calls made for this delivery.
	Checks, Records int
	// RecordRetries counts record attempts after a failed one.
	RecordRetries int
	// HandlerRan is true when the application handler was invoked.
	HandlerRan bool
	// Published is true when a Resolver response was sent.
	Published bool
	// Err is why the delivery did not complete (nil when it did).
	Err error
	// Stack is the goroutine stack of a handler panic.
	Stack []byte
	// Duration is the time spent in the pipeline.
	Duration time.Duration
}

// StoreError is an inbox store failure as the pipeline reports it: the text
// names the operation and a coarse class, never the provider's details
// (which may carry account names or keys); Unwrap keeps the cause for
// errors.Is.
type StoreError struct {
	Op    string
	Class string
	cause error
}

func (e *StoreError) Error() string {
	return "inbox store operation " + e.Op + " failed (" + e.Class + "); the message will be retried"
}

// Unwrap returns the provider error.
func (e *StoreError) Unwrap() error { return e.cause }

// OperatorError is implemented by store errors whose message is safe to log
// and tells an operator what to fix (for example a Cosmos account that is not
// Strong). The pipeline includes that message in its log line.
type OperatorError interface {
	error
	OperatorMessage() string
}

// NewStoreError wraps a provider error for reporting: the text names op and
// a coarse class (canceled, timeout, unavailable, or an operator message)
// and never the provider's details.
func NewStoreError(op string, err error) *StoreError {
	class := "unavailable"
	var oe OperatorError
	switch {
	case errors.Is(err, context.Canceled):
		class = "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		class = "timeout"
	case errors.As(err, &oe):
		class = "misconfigured: " + oe.OperatorMessage()
	}
	return &StoreError{Op: op, Class: class, cause: err}
}
