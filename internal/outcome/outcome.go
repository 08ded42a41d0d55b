// Package outcome holds what every outcome table declares per outcome: the
// HTTP status the Functions host sees, whether the redelivery pause
// applies, and the invocation log line's level and message. The endpoint's
// pipeline and the Resolver app each keep one Table of their own outcomes.
package outcome

import "github.com/rs/zerolog"

// Spec is everything that follows from an outcome.
type Spec struct {
	// Status is the HTTP status answered to the host: 2xx completes the
	// message; anything else fails the invocation, so the host abandons it
	// and the broker redelivers it (and dead-letters it after
	// MaxDeliveryCount).
	Status int
	// Pause says the answer waits the redelivery pause first (a failure
	// that may succeed later, so a short outage does not spend every
	// delivery at once).
	Pause bool
	// Level and Message are the invocation log line's level and text.
	Level   zerolog.Level
	Message string
}

// Completes reports whether the host completes the message (a 2xx answer).
func (s Spec) Completes() bool { return s.Status >= 200 && s.Status < 300 }

// Row is a Spec, for the tables' one-line rows.
func Row(status int, pause bool, level zerolog.Level, message string) Spec {
	return Spec{Status: status, Pause: pause, Level: level, Message: message}
}

// Table is one package's outcomes and what follows from each. An outcome
// without a row gets Unknown, which must fail the invocation, so a missing
// row can never complete a message.
type Table[O ~string] struct {
	Rows    map[O]Spec
	Unknown Spec
}

// Spec returns what follows from o: its row, or Unknown.
func (t Table[O]) Spec(o O) Spec {
	if s, ok := t.Rows[o]; ok {
		return s
	}
	return t.Unknown
}
