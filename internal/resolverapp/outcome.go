package resolverapp

import (
	"net/http"

	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/outcome"
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
type OutcomeSpec = outcome.Spec

// outcomes is the Resolver's one table of outcomes.
// TestEveryOutcomeHasARow fails when a constant above has no row here.
var outcomes = outcome.Table[Outcome]{Rows: map[Outcome]OutcomeSpec{
	OutcomeWritten:     outcome.Row(http.StatusOK, false, zerolog.InfoLevel, "tracking row written"),
	OutcomeStale:       outcome.Row(http.StatusOK, false, zerolog.WarnLevel, "ignored stale copy: the tracking row already reflects a later state; history kept, message completed"),
	OutcomeHeartbeat:   outcome.Row(http.StatusOK, false, zerolog.InfoLevel, "heartbeat completed; nothing recorded"),
	OutcomeRescheduled: outcome.Row(http.StatusOK, false, zerolog.WarnLevel, "tracking store unavailable or throttled; a copy is scheduled on the Resolver topic and this message completed"),

	OutcomeRescheduleFailed: outcome.Row(http.StatusServiceUnavailable, true, zerolog.ErrorLevel, "tracking store unavailable and the re-send could not be scheduled; the message will be redelivered"),
	OutcomeBudgetSpent: outcome.Row(http.StatusUnprocessableEntity, false, zerolog.ErrorLevel,
		"tracking store unavailable and the retry budget is spent; failing at once so the broker dead-letters the message after its last delivery"),
	OutcomeStoreRejected: outcome.Row(http.StatusUnprocessableEntity, false, zerolog.ErrorLevel,
		"the tracking store refused the write permanently; failing at once so the broker dead-letters the message after its last delivery"),
	OutcomeInvalidMessage: outcome.Row(http.StatusUnprocessableEntity, false, zerolog.ErrorLevel,
		"message is not a valid NimBus message; failing at once so the broker dead-letters it after its last delivery"),
	OutcomeNoProjection: outcome.Row(http.StatusUnprocessableEntity, false, zerolog.ErrorLevel,
		"message type has no tracking status; failing at once so the broker dead-letters it after its last delivery"),
	OutcomeCanceled:   outcome.Row(http.StatusServiceUnavailable, false, zerolog.WarnLevel, "invocation cancelled; the message will be redelivered"),
	OutcomeMalformed:  outcome.Row(http.StatusBadRequest, false, zerolog.ErrorLevel, "malformed invocation envelope; failing so the broker redelivers and finally dead-letters it"),
	OutcomeOverloaded: outcome.Row(http.StatusServiceUnavailable, false, zerolog.WarnLevel, "too many invocation bytes in flight; the message will be redelivered"),
}, Unknown: outcome.Row(http.StatusServiceUnavailable, false, zerolog.ErrorLevel, "Resolver invocation ended with an unknown outcome")}

// Spec returns what follows from o.
func (o Outcome) Spec() OutcomeSpec { return outcomes.Spec(o) }

// Completes reports whether the host completes the message (a 2xx answer).
func (o Outcome) Completes() bool { return o.Spec().Completes() }
