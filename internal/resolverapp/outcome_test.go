package resolverapp

import (
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/outcome/outcometest"
)

func TestEveryOutcomeHasARow(t *testing.T) {
	outcometest.Check(t, outcomes, "Outcome", 8)
	if Outcome("no such outcome").Completes() {
		t.Error("an outcome without a row completes the message")
	}
}

// The settlement of each outcome, as the documented outcome table states it.
func TestOutcomeSettlement(t *testing.T) {
	cases := map[Outcome]struct {
		Status int
		Pause  bool
	}{
		OutcomeWritten:          {200, false},
		OutcomeStale:            {200, false},
		OutcomeHeartbeat:        {200, false},
		OutcomeRescheduled:      {200, false},
		OutcomeRescheduleFailed: {503, true},
		OutcomeBudgetSpent:      {422, false},
		OutcomeStoreRejected:    {422, false},
		OutcomeInvalidMessage:   {422, false},
		OutcomeNoProjection:     {422, false},
		OutcomeCanceled:         {503, false},
		OutcomeMalformed:        {400, false},
		OutcomeOverloaded:       {503, false},
	}
	outcometest.CheckSettlement(t, outcomes, cases)
}
