package subscriber

import (
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/outcome/outcometest"
)

func TestEveryOutcomeHasARow(t *testing.T) {
	outcometest.Check(t, outcomes, "Outcome", 10)
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
		OutcomeCompleted:              {200, false},
		OutcomeDuplicate:              {200, false},
		OutcomeUnsupported:            {200, false},
		OutcomePendingHandoff:         {200, false},
		OutcomeHeartbeat:              {200, false},
		OutcomeTransientFailure:       {503, true},
		OutcomeSessionWriteFailed:     {503, true},
		OutcomeHandlerFailed:          {503, true},
		OutcomePublishFailed:          {503, true},
		OutcomeEventsSendFailed:       {503, true},
		OutcomeOutboxSendFailed:       {503, true},
		OutcomeOutboxDispatched:       {200, false},
		OutcomeDuplicateResolved:      {200, false},
		OutcomePermanentFailure:       {422, false},
		OutcomeInvalidMessage:         {422, false},
		OutcomeUnsupportedMessageType: {422, false},
		OutcomeInvalidCloudEvent:      {422, false},
		OutcomeCanceled:               {503, false},
		OutcomeMalformed:              {400, false},
		OutcomeOverloaded:             {503, false},
		OutcomeEventFailed:            {200, false},
		OutcomeDeferred:               {200, false},
		OutcomeDiscarded:              {200, false},
		OutcomeSkipped:                {200, false},
		OutcomeSkippedNotBlocking:     {200, false},
		OutcomeHandoffCompleted:       {200, false},
		OutcomeHandoffFailed:          {200, false},
		OutcomeHandoffUnmatched:       {200, false},
		OutcomeHandoffNotPending:      {200, false},
		OutcomeRetryObsolete:          {200, false},
		OutcomeDrained:                {200, false},
		OutcomeUnauthorized:           {422, false},
		OutcomeDrainBusy:              {503, true},
		OutcomeReplayFailed:           {503, true},
		OutcomeTxnConflict:            {503, true},
		OutcomeTxnAmbiguous:           {503, true},
		OutcomeTxnRejected:            {422, false},
	}
	outcometest.CheckSettlement(t, outcomes, cases)
}
