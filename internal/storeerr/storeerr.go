// Package storeerr names a failed store call for a log line, a span or a
// report by a coarse class, never by the provider's text, which may name the
// account or carry a key. The endpoint's pipeline and the Resolver app name
// their store failures through it.
package storeerr

import (
	"context"
	"errors"
)

// OperatorError is implemented by store errors whose message is safe to log
// and tells an operator what to fix (for example a Cosmos DB account that is
// not Strong). Class includes that message.
type OperatorError interface {
	error
	OperatorMessage() string
}

// Class is the class of err, a failed store call: "canceled" or "timeout"
// when the call's context ended, "misconfigured: " and the operator's message
// when the store says what to fix, and otherwise kind(err), the class the
// store's own errors give (a failure kind, or the caller's default).
func Class(err error, kind func(error) string) string {
	var oe OperatorError
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(err, &oe):
		return "misconfigured: " + oe.OperatorMessage()
	}
	return kind(err)
}
