package e2e

import (
	"fmt"
	"testing"
	"time"
)

// allowed fails tb for any invocation whose outcome is not in outcomes.
func allowed(tb testing.TB, ivs []invocation, outcomes ...string) {
	tb.Helper()
	ok := map[string]bool{}
	for _, o := range outcomes {
		ok[o] = true
	}
	for _, iv := range ivs {
		if !ok[iv.Outcome] {
			tb.Errorf("unexpected invocation outcome %+v", iv)
		}
	}
}

// checkLine asserts the identity fields of an invocation line for e.
func checkLine(tb testing.TB, iv invocation, e event, outcome, inbox string, deliveryCount int) {
	tb.Helper()
	if iv.Function != "Subscriber" || iv.Endpoint != endpointID || iv.MessageID != e.MessageID || iv.SessionID != e.SessionID ||
		iv.EventID != e.EventID || iv.EventTypeID != e.EventTypeID || iv.MessageType != "EventRequest" || iv.InvocationID == "" {
		tb.Errorf("invocation line of %s: %+v", e.MessageID, iv)
	}
	if iv.Outcome != outcome || iv.Inbox != inbox || iv.DeliveryCount != deliveryCount {
		tb.Errorf("%s delivery %d: outcome %q inbox %q (delivery %d), want %q %q (delivery %d)",
			e.MessageID, iv.DeliveryCount, iv.Outcome, iv.Inbox, iv.DeliveryCount, outcome, inbox, deliveryCount)
	}
}

// checkRecorded asserts the inbox holds exactly the records of want among
// all (read straight from Cosmos).
func checkRecorded(tb testing.TB, s *stack, all []event, want map[string]bool) {
	tb.Helper()
	ids := make([]string, len(all))
	for i, e := range all {
		ids[i] = e.MessageID
	}
	recs := s.inboxRecords(ids...)
	for _, e := range all {
		rec, ok := recs[e.MessageID]
		if ok != want[e.MessageID] {
			tb.Errorf("%s: recorded in the inbox = %v, want %v", e.MessageID, ok, want[e.MessageID])
			continue
		}
		if !ok {
			continue
		}
		if rec.ID != inboxID(endpointID, e.MessageID) || rec.EndpointID != endpointID || rec.MessageID != e.MessageID {
			tb.Errorf("%s: inbox record %+v", e.MessageID, rec)
		}
		if _, err := time.Parse(time.RFC3339Nano, rec.CreatedAtUTC); err != nil {
			tb.Errorf("%s: createdAtUtc %q: %v", e.MessageID, rec.CreatedAtUTC, err)
		}
	}
}

// TestEveryMessageCompletesOnceWithItsExactResolverResponse sends 48
// OrderPlaced events over 6 sessions. Each is handled once, recorded once in
// the Cosmos inbox, completed, and answered with a ResolutionResponse that
// reaches the Resolver topic in NimBus's exact wire format.
func TestEveryMessageCompletesOnceWithItsExactResolverResponse(t *testing.T) {
	const sessions, perSession = 6, 8
	s := startStack(t, stackConfig{})
	var evs []event
	for i := range sessions * perSession {
		evs = append(evs, order(fmt.Sprintf("OrderPlaced-%03d", i), fmt.Sprintf("customer-%d", i%sessions), 10+i*7, 0))
	}
	s.send(evs...)
	s.waitResponses(len(evs), 90*time.Second)
	s.settle(len(evs), len(evs), 30*time.Second)
	t.Logf("collector: %s", s.resolver.problems())

	if st := s.host.Stats(); st.Completes != int64(len(evs)) || st.Abandons != 0 || st.Failures != 0 || st.SettleErrors != 0 {
		t.Errorf("mini host stats %+v, want %d completions and nothing else", st, len(evs))
	}

	ivs := s.handler.invocations()
	lines := byMessage(ivs)
	invocationIDs := map[string]bool{}
	for _, iv := range ivs {
		if invocationIDs[iv.InvocationID] {
			t.Errorf("invocation id %s logged twice", iv.InvocationID)
		}
		invocationIDs[iv.InvocationID] = true
	}
	if len(ivs) != len(evs) {
		t.Errorf("%d invocation lines, want %d (one per message)", len(ivs), len(evs))
	}

	responses := s.resolver.responsesByRequest()
	if n := len(s.resolver.responses()); n != len(evs) {
		t.Errorf("%d responses reached the Resolver, want %d", n, len(evs))
	}
	seenBrokerIDs := map[string]bool{}
	for _, e := range evs {
		ls := lines[e.MessageID]
		if len(ls) != 1 {
			t.Errorf("%s: %d invocation lines, want 1: %+v", e.MessageID, len(ls), ls)
			continue
		}
		checkLine(t, ls[0], e, "completed", "new", 1)
		rs := responses[e.MessageID]
		if len(rs) != 1 {
			t.Errorf("%s: %d responses, want 1", e.MessageID, len(rs))
			continue
		}
		checkResponse(t, rs[0], e, "ResolutionResponse", e.body(), nil, s.firstSent(e.MessageID))
		if seenBrokerIDs[rs[0].msg.MessageID] {
			t.Errorf("broker MessageId %s assigned twice", rs[0].msg.MessageID)
		}
		seenBrokerIDs[rs[0].msg.MessageID] = true
	}

	recorded := map[string]bool{}
	for _, e := range evs {
		recorded[e.MessageID] = true
	}
	checkRecorded(t, s, evs, recorded)
	if n := s.resolver.audits(); n != len(evs) {
		t.Errorf("%d audit copies of the requests reached the Resolver, want %d", n, len(evs))
	}
	if dl := s.deadLettered(); len(dl) != 0 {
		t.Errorf("%d messages dead-lettered", len(dl))
	}
}
