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
)

// failure is the one place a failed step's error becomes the delivery's
// outcome: a broker send that failed is a publish failure, a store
// operation that failed is transient, and either is a cancellation when
// the invocation (or the send's own time limit) ended it.
func failure(err error) result {
	var send *sendError
	var store *StoreError
	switch {
	case errors.As(err, &send):
		if send.canceled {
			return result{outcome: OutcomeCanceled, err: err}
		}
		return result{outcome: OutcomePublishFailed, err: err}
	case errors.As(err, &store):
		res := result{outcome: OutcomeTransientFailure, err: err, storeOp: store.operation()}
		if errors.Is(err, context.Canceled) {
			res.outcome = OutcomeCanceled
		}
		return res
	}
	return result{outcome: OutcomeTransientFailure, err: err}
}

// sendError is a broker send that failed.
type sendError struct {
	messageType string
	err         error
	// canceled: the send's context had ended.
	canceled bool
}

func (e *sendError) Error() string { return "send " + e.messageType + ": " + e.err.Error() }

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
