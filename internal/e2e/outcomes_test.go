package e2e

import (
	"regexp"
	"testing"
	"time"
)

var roundTripTime = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{7}Z$`)

// TestUnknownEventTypeAndHandoffAreAnsweredButNotRecorded sends an event
// type with no handler and an order above the approval limit, twice each.
// The first is answered with an UnsupportedResponse, the second with a
// PendingHandoffResponse (HandoffReason, ExternalJobId, ExpectedBy). Neither
// is recorded in the inbox, so their second deliveries are handled as new
// again, not skipped as duplicates.
//
// (A message without MessageId cannot be sent with azservicebus: the broker
// assigns one. The bypass path is covered by the pipeline tests.)
func TestUnknownEventTypeAndHandoffAreAnsweredButNotRecorded(t *testing.T) {
	s := startStack(t, stackConfig{})
	unknown := event{MessageID: "OrderCancelled-1", SessionID: "customer-misc", EventID: guidFor("OrderCancelled-1"),
		EventTypeID: "OrderCancelled", EventJSON: `{"OrderId":"O-9","Reason":"customer request"}`}
	big := order("OrderPlaced-big-1", "customer-misc", 25000, 0)
	// A pending handoff blocks its session (NimBus), so the unknown type goes
	// first; the handoff's own redelivery is handled again, not parked.
	s.send(unknown, unknown, big, big)
	s.waitResponses(4, 60*time.Second)
	s.settle(4, 4, 30*time.Second)

	if st := s.host.Stats(); st.Completes != 4 || st.Abandons != 0 || st.SettleErrors != 0 {
		t.Errorf("mini host stats %+v, want 4 completions", st)
	}
	ivs := s.handler.invocations()
	if len(ivs) != 4 {
		t.Fatalf("%d invocation lines, want 4: %+v", len(ivs), ivs)
	}
	checkLine(t, ivs[0], unknown, "unsupported", "new", 1)
	checkLine(t, ivs[1], unknown, "unsupported", "new", 1)
	checkLine(t, ivs[2], big, "pending_handoff", "new", 1)
	checkLine(t, ivs[3], big, "pending_handoff", "new", 1)
	for i, iv := range ivs {
		if iv.ran() != (i >= 2) {
			t.Errorf("invocation %d: handler ran = %v", i, iv.ran())
		}
	}

	rs := s.resolver.sessionResponses(unknown.SessionID)
	if len(rs) != 4 {
		t.Fatalf("%d responses, want 4", len(rs))
	}
	for i, copyNo := range []int{0, 1, 0, 1} {
		r := rs[i]
		if i < 2 {
			checkResponse(t, r, unknown, "UnsupportedResponse", unknown.body(), nil, s.sent(unknown.MessageID, copyNo))
			continue
		}
		sent := s.sent(big.MessageID, copyNo)
		expectedBy := propertyCheck(func(v any) string {
			str, ok := v.(string)
			if !ok || !roundTripTime.MatchString(str) {
				return "want a string in .NET's round-trip format, 2026-08-01T10:00:00.0000000Z"
			}
			at, err := time.Parse(time.RFC3339Nano, str)
			if err != nil {
				return err.Error()
			}
			// The handler hands off with ExpectedIn 24h.
			if at.Before(sent.Add(24*time.Hour-time.Millisecond)) || at.After(r.at.Add(24*time.Hour+time.Millisecond)) {
				return "want 24h after the handler ran"
			}
			return ""
		})
		checkResponse(t, r, big, "PendingHandoffResponse", big.body(), map[string]any{
			"HandoffReason": "ManualApproval",
			"ExternalJobId": "approval-O-big-1",
			"ExpectedBy":    expectedBy,
		}, sent)
	}
	checkRecorded(t, s, []event{unknown, big}, nil)
	if dl := s.deadLettered(); len(dl) != 0 {
		t.Errorf("%d messages dead-lettered", len(dl))
	}
}
