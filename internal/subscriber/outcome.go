package subscriber

import (
	"context"
	"errors"
	"time"
)

// Outcome is what happened to a delivery. Its value is a bounded label used
// in logs and counters.
type Outcome string

// Outcomes. The first group completes the invocation; the second fails it so
// the broker redelivers (and, after MaxDeliveryCount, dead-letters) it.
const (
	OutcomeCompleted      Outcome = "completed"
	OutcomeDuplicate      Outcome = "duplicate"
	OutcomeUnsupported    Outcome = "unsupported"
	OutcomePendingHandoff Outcome = "pending_handoff"
	OutcomeHeartbeat      Outcome = "heartbeat"

	OutcomeTransientFailure       Outcome = "transient_failure"
	OutcomeHandlerFailed          Outcome = "handler_failed"
	OutcomePublishFailed          Outcome = "publish_failed"
	OutcomeInvalidMessage         Outcome = "invalid_message"
	OutcomeUnsupportedMessageType Outcome = "unsupported_message_type"
	OutcomeCanceled               Outcome = "canceled"
	OutcomeMalformed              Outcome = "malformed_invocation"
)

// Completes is the one place that decides settlement: true means answer 2xx
// (the host completes the message), false means fail the invocation (the
// host abandons it and the broker redelivers).
func (o Outcome) Completes() bool {
	switch o {
	case OutcomeCompleted, OutcomeDuplicate, OutcomeUnsupported, OutcomePendingHandoff, OutcomeHeartbeat:
		return true
	}
	return false
}

// Transient reports whether a failed delivery may succeed when retried (a
// store, broker or handler failure, or a cancelled invocation), as opposed to
// a message that can never be processed.
func (o Outcome) Transient() bool {
	switch o {
	case OutcomeTransientFailure, OutcomeHandlerFailed, OutcomePublishFailed, OutcomeCanceled:
		return true
	}
	return false
}

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
// never holds the payload.
type Report struct {
	Outcome     Outcome
	Inbox       InboxState
	MessageID   string
	SessionID   string
	EventID     string
	EventTypeID string
	MessageType string
	// BypassReason is set when Inbox is InboxBypassed.
	BypassReason string
	// StoreOp names the failed store operation (check or record).
	StoreOp string
	// Checks and Records count store calls made for this delivery.
	Checks, Records int
	// HandlerRan is true when the application handler was invoked.
	HandlerRan bool
	// Published is true when a Resolver response was sent.
	Published bool
	// Err is why the delivery did not complete (nil when it did).
	Err error
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
