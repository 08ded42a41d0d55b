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
// again, not skipped as duplicates. Each is in its own session: a pending
// handoff blocks its session, so anything else sent on it would be parked
// (TestPendingHandoffCompletedByTheManager); the handoff's own redelivery is
// not, because the session is blocked by its event and MessageId.
//
// (A message without MessageId cannot be sent with azservicebus: the broker
// assigns one. The bypass path is covered by the pipeline tests.)
func TestUnknownEventTypeAndHandoffAreAnsweredButNotRecorded(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackConfig{})
	unknown := event{MessageID: "OrderCancelled-1", SessionID: "customer-misc", EventID: guidFor("OrderCancelled-1"),
		EventTypeID: "OrderCancelled", EventJSON: `{"OrderId":"O-9","Reason":"customer request"}`}
	big := order("OrderPlaced-big-1", "customer-big", 25000, 0)
	s.send(unknown, big, unknown, big)
	s.waitResponses(4, 60*time.Second)
	s.settle(4, 4, 30*time.Second)

	if st := s.host.Stats(); st.Completes != 4 || st.Abandons != 0 || st.SettleErrors != 0 {
		t.Errorf("mini host stats %+v, want 4 completions", st)
	}
	ivs := s.handler.invocations()
	if len(ivs) != 4 {
		t.Fatalf("%d invocation lines, want 4: %+v", len(ivs), ivs)
	}
	lines := byMessage(ivs)
	for _, c := range []struct {
		e       event
		outcome string
		ran     bool
	}{{unknown, "unsupported", false}, {big, "pending_handoff", true}} {
		if len(lines[c.e.MessageID]) != 2 {
			t.Fatalf("%s: %d invocation lines, want 2", c.e.MessageID, len(lines[c.e.MessageID]))
		}
		for _, iv := range lines[c.e.MessageID] {
			checkLine(t, iv, c.e, c.outcome, "new", 1)
			if iv.handlerRan() != c.ran {
				t.Errorf("%s: handler ran = %v", c.e.MessageID, iv.handlerRan())
			}
		}
	}

	rs := s.resolver.sessionResponses(unknown.SessionID)
	if len(rs) != 2 {
		t.Fatalf("%d responses in %s, want 2", len(rs), unknown.SessionID)
	}
	for i, r := range rs {
		checkResponse(t, r, unknown, "UnsupportedResponse", unknown.body(), nil, s.sent(unknown.MessageID, i))
	}
	rs = s.resolver.sessionResponses(big.SessionID)
	if len(rs) != 2 {
		t.Fatalf("%d responses in %s, want 2", len(rs), big.SessionID)
	}
	for copyNo, r := range rs {
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
