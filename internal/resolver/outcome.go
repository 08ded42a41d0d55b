package resolver

import (
	"net/http"

	"github.com/rs/zerolog"
)

// Outcome is what happened to one Resolver message. Its value is a bounded
// label used in logs and counters.
type Outcome string

// Outcomes. Everything that follows from one (the HTTP status the host sees,
// whether the redelivery pause applies, the log level and message) is
// declared once, in the outcomes table below.
const (
	OutcomeWritten     Outcome = "written"
	OutcomeStale       Outcome = "stale"
	OutcomeHeartbeat   Outcome = "heartbeat"
	OutcomeRescheduled Outcome = "rescheduled"

	OutcomeRescheduleFailed Outcome = "reschedule_failed"
	OutcomeBudgetSpent      Outcome = "store_budget_spent"
	OutcomeStoreRejected    Outcome = "store_rejected"
	OutcomeInvalidMessage   Outcome = "invalid_message"
	OutcomeNoProjection     Outcome = "no_projection"
	OutcomeCanceled         Outcome = "canceled"
	OutcomeMalformed        Outcome = "malformed_invocation"
	OutcomeOverloaded       Outcome = "overloaded"
)

// OutcomeSpec is everything that follows from an outcome.
type OutcomeSpec struct {
	// Status is the HTTP status answered to the host: 2xx completes the
	// message; anything else fails the invocation, so the host abandons it
	// and the broker redelivers it (and dead-letters it after
	// MaxDeliveryCount, 10 on the Resolver subscription).
	Status int
	// Pause says the answer waits the redelivery pause first.
	Pause bool
	// Level and Message are the invocation log line's level and text.
	Level   zerolog.Level
	Message string
}

// outcomes is the Resolver's one table of outcomes.
// TestEveryOutcomeHasARow fails when a constant above has no row here.
var outcomes = map[Outcome]OutcomeSpec{
	OutcomeWritten:     {http.StatusOK, false, zerolog.InfoLevel, "tracking row written"},
	OutcomeStale:       {http.StatusOK, false, zerolog.WarnLevel, "ignored stale copy: the tracking row already reflects a later state; history kept, message completed"},
	OutcomeHeartbeat:   {http.StatusOK, false, zerolog.InfoLevel, "heartbeat completed; nothing recorded"},
	OutcomeRescheduled: {http.StatusOK, false, zerolog.WarnLevel, "tracking store unavailable or throttled; a copy is scheduled on the Resolver topic and this message completed"},

	OutcomeRescheduleFailed: {http.StatusServiceUnavailable, true, zerolog.ErrorLevel, "tracking store unavailable and the re-send could not be scheduled; the message will be redelivered"},
	OutcomeBudgetSpent: {http.StatusUnprocessableEntity, false, zerolog.ErrorLevel,
		"tracking store unavailable and the retry budget is spent; failing at once so the broker dead-letters the message after its last delivery"},
	OutcomeStoreRejected: {http.StatusUnprocessableEntity, false, zerolog.ErrorLevel,
		"the tracking store refused the write permanently; failing at once so the broker dead-letters the message after its last delivery"},
	OutcomeInvalidMessage: {http.StatusUnprocessableEntity, false, zerolog.ErrorLevel,
		"message is not a valid NimBus message; failing at once so the broker dead-letters it after its last delivery"},
	OutcomeNoProjection: {http.StatusUnprocessableEntity, false, zerolog.ErrorLevel,
		"message type has no tracking status; failing at once so the broker dead-letters it after its last delivery"},
	OutcomeCanceled:   {http.StatusServiceUnavailable, false, zerolog.WarnLevel, "invocation cancelled; the message will be redelivered"},
	OutcomeMalformed:  {http.StatusBadRequest, false, zerolog.ErrorLevel, "malformed invocation envelope; failing so the broker redelivers and finally dead-letters it"},
	OutcomeOverloaded: {http.StatusServiceUnavailable, false, zerolog.WarnLevel, "too many invocation bytes in flight; the message will be redelivered"},
}

// unknownOutcome is what an outcome without a row gets: fail and log an
// error, so a missing row can never complete a message.
var unknownOutcome = OutcomeSpec{http.StatusServiceUnavailable, false, zerolog.ErrorLevel, "Resolver invocation ended with an unknown outcome"}

// Spec returns what follows from o.
func (o Outcome) Spec() OutcomeSpec {
	if s, ok := outcomes[o]; ok {
		return s
	}
	return unknownOutcome
}

// Completes reports whether the host completes the message (a 2xx answer).
func (o Outcome) Completes() bool {
	s := o.Spec().Status
	return s >= 200 && s < 300
}
