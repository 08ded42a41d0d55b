package subscriber

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/session"
	"github.com/nimbus-go/functions-subscriber/internal/storeerr"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// result is how a delivery ended: its outcome, the error behind it (nil
// when it answered without one), the store operation that failed, and
// NimBus's dead-letter case when the failure names it exactly.
type result struct {
	outcome    Outcome
	err        error
	storeOp    string
	deadLetter *message.DeadLetter
}

// ending is how a delivery whose entry point returned (o, err) ended: the
// outcome o it answered or, when err is not nil, the one err leads to.
// props are the delivery's application properties, whose values NimBus's
// dead-letter texts quote.
func ending(o Outcome, err error, props map[string]any) result {
	if err != nil {
		return outcomeOf(err, props)
	}
	return result{outcome: o}
}

// outcomeOf is the one place a failure becomes the delivery's outcome: the
// failing rows of the outcome table, and the errors that lead to each. A
// step that fails returns its error; where the error's own type would not
// say what failed (a handler's error, a batch's verdict, a replay's step),
// the step wraps it in a type that does, and the report keeps the error
// it wraps.
func outcomeOf(err error, props map[string]any) result {
	var (
		stop    *handlerStop
		batch   *commitError
		copyErr *copyError
		replay  *replayError
		send    *sendError
		events  *eventsError
		store   *StoreError
		ime     *message.InvalidMessageError
		ice     *message.InvalidCloudEventError
		event   *invalidEventError
		ute     *UnsupportedTypeError
		ue      *UnauthorizedError
	)
	switch {
	case errors.As(err, &stop):
		switch {
		case stop.canceled:
			return result{outcome: OutcomeCanceled, err: stop.err}
		case KindOf(stop.err) == KindTransient:
			return result{outcome: OutcomeHandlerFailed, err: stop.err}
		}
		return result{outcome: OutcomePermanentFailure, err: stop.err}
	case errors.As(err, &batch):
		switch batch.verdict {
		case txn.Conflict:
			return result{outcome: OutcomeTxnConflict, err: batch.err}
		case txn.Ambiguous:
			return result{outcome: OutcomeTxnAmbiguous, err: batch.err, storeOp: opTxnCommit}
		case txn.Permanent:
			return result{outcome: OutcomeTxnRejected, err: batch.err}
		}
		return outcomeOf(batch.err, props)
	case errors.As(err, &copyErr):
		// The replay ends as its copy did: cancelled, or failed for now.
		if copyErr.end.outcome == OutcomeCanceled {
			return result{outcome: OutcomeCanceled, err: copyErr.end.err}
		}
		return result{outcome: OutcomeReplayFailed, err: copyErr.end.err}
	case errors.As(err, &replay):
		res := result{outcome: OutcomeReplayFailed, err: replay.reported()}
		if errors.As(replay.err, &store) {
			res.storeOp = store.operation()
		}
		if errors.Is(replay.err, context.Canceled) {
			res.outcome = OutcomeCanceled
		}
		return res
	case errors.As(err, &events):
		switch {
		case events.canceled:
			return result{outcome: OutcomeCanceled, err: err}
		case events.committed:
			return result{outcome: OutcomeOutboxSendFailed, err: err}
		}
		return result{outcome: OutcomeEventsSendFailed, err: err}
	case errors.As(err, &send):
		if send.canceled {
			return result{outcome: OutcomeCanceled, err: err}
		}
		return result{outcome: OutcomePublishFailed, err: err}
	case errors.As(err, &store):
		res := result{outcome: OutcomeTransientFailure, err: err, storeOp: store.operation()}
		switch {
		case errors.Is(err, context.Canceled):
			res.outcome = OutcomeCanceled
		case store.Op == sessionStoreOp(session.OpWrite):
			res.outcome = OutcomeSessionWriteFailed
		}
		return res
	case errors.As(err, &ice):
		return result{outcome: OutcomeInvalidCloudEvent, err: err}
	case errors.As(err, &event):
		return result{outcome: OutcomeInvalidMessage, err: err, deadLetter: &event.deadLetter}
	case errors.As(err, &ime):
		return result{outcome: OutcomeInvalidMessage, err: err, deadLetter: invalidDeadLetter(ime, props)}
	case errors.Is(err, errNoReplaySession), errors.Is(err, session.ErrInvalidKey):
		return result{outcome: OutcomeInvalidMessage, err: err}
	case errors.As(err, &ute):
		return result{outcome: OutcomeUnsupportedMessageType, err: err}
	case errors.As(err, &ue):
		return result{outcome: OutcomeUnauthorized, err: err}
	case errors.Is(err, ErrSessionLocked):
		return result{outcome: OutcomeDrainBusy, err: err}
	case errors.Is(err, errReplayOff):
		return result{outcome: OutcomeReplayFailed, err: err}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return result{outcome: OutcomeCanceled, err: err}
	}
	return result{outcome: OutcomeTransientFailure, err: err}
}

// handlerStop is a handler's failure that ends the delivery whatever its
// entry point: the invocation was cancelled under it (canceled), or it was
// marked Transient or Permanent (a handler that cannot run for want of its
// partition is a Permanent one).
type handlerStop struct {
	err      error
	canceled bool
}

func (e *handlerStop) Error() string { return e.err.Error() }
func (e *handlerStop) Unwrap() error { return e.err }

// commitError is a transactional handler's batch that was not committed:
// the verdict, and the error it is reported with (see commit).
type commitError struct {
	verdict txn.Outcome
	err     error
}

func (e *commitError) Error() string { return e.err.Error() }
func (e *commitError) Unwrap() error { return e.err }

// invalidEventError is an event that cannot reach its handler: a body that
// is not a MessageContent, or one that names another event type. Its text
// never quotes the body; deadLetter is NimBus's report of the case.
type invalidEventError struct {
	text       string
	deadLetter message.DeadLetter
}

func (e *invalidEventError) Error() string { return e.text }

// sendError is a broker send (or schedule) that failed.
type sendError struct {
	// verb is "send" or "schedule".
	verb        string
	messageType string
	err         error
	// canceled: the send's context had ended.
	canceled bool
}

func (e *sendError) Error() string { return e.verb + " " + e.messageType + ": " + e.err.Error() }

func (e *sendError) Unwrap() error { return e.err }

// StoreError is an inbox or session-state store failure as the pipeline
// reports it: the text names the operation and a coarse class, never the
// provider's details (which may carry account names or keys); Unwrap keeps
// the cause for errors.Is.
type StoreError struct {
	Op    string
	Class string
	cause error
}

func (e *StoreError) Error() string {
	if strings.HasPrefix(e.Op, sessionOpPrefix) {
		return e.Op + " failed (" + e.Class + "); the message will be retried"
	}
	return "inbox store operation " + e.Op + " failed (" + e.Class + "); the message will be retried"
}

// Unwrap returns the provider error.
func (e *StoreError) Unwrap() error { return e.cause }

// operation is the failed operation as Report.StoreOp and the counter tag
// name it: "check", "record", "session_read", "session_write".
func (e *StoreError) operation() string {
	if op, ok := strings.CutPrefix(e.Op, sessionOpPrefix); ok {
		return "session_" + op
	}
	return e.Op
}

// sessionOpPrefix starts the Op of a session-state store failure.
const sessionOpPrefix = "session state "

// sessionStoreOp is the StoreError Op of session-state operation op.
func sessionStoreOp(op string) string { return sessionOpPrefix + op }

// OperatorError is implemented by store errors whose message is safe to log
// and tells an operator what to fix; the pipeline includes that message in
// its log line.
type OperatorError = storeerr.OperatorError

// NewStoreError wraps a provider error for reporting: the text names op and
// a coarse class (canceled, timeout, an operator message, lost every race
// for the session state, or unavailable) and never the provider's details.
func NewStoreError(op string, err error) *StoreError {
	return &StoreError{Op: op, Class: storeerr.Class(err, pipelineClass), cause: err}
}

// pipelineClass is the class of an inbox or session-state failure that is
// not a cancellation or misconfiguration.
func pipelineClass(err error) string {
	if session.IsConflict(err) {
		return "lost every race for the session state"
	}
	return "unavailable"
}

// errorText is the ErrorText NimBus reports for a failure: the message of
// the handler's own error (without the kind marker).
func errorText(err error) string {
	var he *HandlerError
	if errors.As(err, &he) {
		err = he.Err
	}
	return err.Error()
}

// ErrorType is the ErrorType reported for a failure: the error's own
// ErrorType() string when it has one, "Panic" for a handler panic, "Error"
// for the standard library's plain and wrapping errors, and otherwise the
// name of its Go type (without package or pointer), like NimBus's
// exception type name.
func ErrorType(err error) string {
	var named interface{ ErrorType() string }
	if errors.As(err, &named) {
		if s := named.ErrorType(); s != "" {
			return s
		}
	}
	var he *HandlerError
	if errors.As(err, &he) {
		err = he.Err
	}
	var pe *PanicError
	if errors.As(err, &pe) {
		return "Panic"
	}
	name := reflect.TypeOf(err).String()
	switch name {
	case "*errors.errorString", "*fmt.wrapError", "*fmt.wrapErrors", "*errors.joinError":
		return "Error"
	}
	name = strings.TrimLeft(name, "*")
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	return name
}

// PanicError is a handler panic, reported as a failed event.
type PanicError struct {
	Value any
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// UnsupportedTypeError is a message type this subscriber does not handle on
// its subscription (a response, ProcessDeferredRequest, a legacy
// ContinuationRequest): it is dead-lettered, as NimBus's HandleDefault does.
type UnsupportedTypeError struct{ Type string }

func (e *UnsupportedTypeError) Error() string {
	return fmt.Sprintf("Unsupported MessageType: '%s'.", e.Type)
}

// UnauthorizedError is a Manager request (resubmission, skip, handoff
// settlement) whose From is not the Manager: dead-lettered, as NimBus does.
type UnauthorizedError struct{ Type string }

func (e *UnauthorizedError) Error() string {
	return fmt.Sprintf("Only %s is authorized to send %s messages.", message.ManagerID, e.Type)
}

// Why a replay request fails before it replays anything.
var (
	errNoReplaySession = errors.New("the replay request has no SessionId")
	errReplayOff       = errors.New("replay is not configured (no session store or Deferred subscription)")
)

// replayError is a replay that failed in one of its own steps (step names
// it; "" for the write of the replay cursor, whose error names itself).
type replayError struct {
	step string
	err  error
}

func (e *replayError) Error() string {
	if e.step == "" {
		return e.err.Error()
	}
	return e.step + ": " + e.err.Error()
}

func (e *replayError) Unwrap() error { return e.err }

// reported is the error the report gives for e.
func (e *replayError) reported() error {
	if e.step == "" {
		return e.err
	}
	return e
}

// copyError is a replay that ended at a parked copy whose replay failed
// and may succeed later (end is how the copy's replay ended): the copy is
// given back for the next replay.
type copyError struct{ end result }

func (e *copyError) Error() string { return e.end.err.Error() }
func (e *copyError) Unwrap() error { return e.end.err }

// Store operations of a transactional handler, as StoreError names them.
const (
	opMarkerCheck      = "marker_check"
	opTxnCommit        = "txn_commit"
	opOutboxDispatched = "outbox_dispatched"
)

// invalidDeadLetter is NimBus's dead-letter report for a message its
// MessageContext cannot read for the reason ime gives; props are the
// message's application properties.
func invalidDeadLetter(ime *message.InvalidMessageError, props map[string]any) *message.DeadLetter {
	text := message.PropertyNotDefinedText(ime.Property)
	if ime.Property == message.PropMessageType {
		if raw, ok := message.PropertyString(props, message.PropMessageType); ok {
			text = message.UnparseableMessageTypeText(raw)
		}
	}
	dl := message.NewInvalidMessageDeadLetter(text)
	return &dl
}

// eventsError is a send of published events that failed: n events (a
// transactional handler's with its ResolutionResponse) after the handler
// succeeded, and, for a transactional handler, after its batch committed
// them with the delivery's marker (committed).
type eventsError struct {
	n         int
	committed bool
	canceled  bool
	err       error
}

func (e *eventsError) Error() string {
	if e.committed {
		return fmt.Sprintf("send of %d committed published event(s) and the ResolutionResponse: %v", e.n, e.err)
	}
	return fmt.Sprintf("send of %d published event(s): %v", e.n, e.err)
}

func (e *eventsError) Unwrap() error { return e.err }
