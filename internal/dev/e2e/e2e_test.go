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
	t.Parallel()
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

// TestRedeliveryOfACompletedMessageIsSkipped publishes a message, waits for
// its ResolutionResponse, then publishes it again with the same MessageId
// (an outbox re-dispatch, which the forwarder stamps with a fresh EventId).
// The handler does not run again and the second delivery is answered with a
// SkipResponse carrying ErrorText DuplicateDetected.
func TestRedeliveryOfACompletedMessageIsSkipped(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackConfig{})
	first := order("OrderPlaced-dup-1", "customer-dup", 120, 0)
	s.send(first)
	s.waitResponses(1, 60*time.Second)
	s.settle(1, 1, 30*time.Second)

	again := first
	again.EventID = guidFor("re-dispatch/" + first.MessageID)
	s.send(again)
	s.waitResponses(2, 60*time.Second)
	s.settle(2, 2, 30*time.Second)

	if st := s.host.Stats(); st.Completes != 2 || st.Abandons != 0 || st.Failures != 0 || st.SettleErrors != 0 {
		t.Errorf("mini host stats %+v, want 2 completions and nothing else", st)
	}
	ls := s.handler.invocations()
	if len(ls) != 2 {
		t.Fatalf("%d invocation lines, want 2: %+v", len(ls), ls)
	}
	checkLine(t, ls[0], first, "completed", "new", 1)
	checkLine(t, ls[1], again, "duplicate", "duplicate", 1)
	ran := 0
	for _, iv := range ls {
		if iv.handlerRan() {
			ran++
		}
	}
	if ran != 1 {
		t.Errorf("the handler ran %d times, want once", ran)
	}

	rs := s.resolver.sessionResponses(first.SessionID)
	if len(rs) != 2 {
		t.Fatalf("%d responses in session %s, want 2", len(rs), first.SessionID)
	}
	checkResponse(t, rs[0], first, "ResolutionResponse", first.body(), nil, s.firstSent(first.MessageID))
	checkResponse(t, rs[1], again, "SkipResponse", again.skipBody(), nil, s.sent(again.MessageID, 1))
	checkRecorded(t, s, []event{first}, map[string]bool{first.MessageID: true})
	if dl := s.deadLettered(); len(dl) != 0 {
		t.Errorf("%d messages dead-lettered", len(dl))
	}
}

// TestFailedDeliveryIsRedeliveredAndCompletesOnce sends an order whose
// handler fails the first two deliveries. The host abandons it twice, the
// broker redelivers it with DeliveryCount 2 and 3, and the third delivery
// completes: one record, one ResolutionResponse, no response for the
// failures.
func TestFailedDeliveryIsRedeliveredAndCompletesOnce(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackConfig{})
	e := order("OrderPlaced-retry-1", "customer-retry", 75, 2)
	s.send(e)
	s.waitResponses(1, 60*time.Second)
	s.settle(1, 1, 30*time.Second)

	if st := s.host.Stats(); st.Invocations != 3 || st.Completes != 1 || st.Abandons != 2 || st.Failures != 2 || st.SettleErrors != 0 {
		t.Errorf("mini host stats %+v, want 3 invocations: 2 abandoned, then 1 completed", st)
	}
	ls := s.handler.invocations()
	if len(ls) != 3 {
		t.Fatalf("%d invocation lines, want 3: %+v", len(ls), ls)
	}
	checkLine(t, ls[0], e, "handler_failed", "new", 1)
	checkLine(t, ls[1], e, "handler_failed", "new", 2)
	checkLine(t, ls[2], e, "completed", "new", 3)

	rs := s.resolver.responses()
	if len(rs) != 1 {
		t.Fatalf("%d responses, want 1", len(rs))
	}
	checkResponse(t, rs[0], e, "ResolutionResponse", e.body(), nil, s.firstSent(e.MessageID))
	checkRecorded(t, s, []event{e}, map[string]bool{e.MessageID: true})
	if dl := s.deadLettered(); len(dl) != 0 {
		t.Errorf("%d messages dead-lettered", len(dl))
	}
}
