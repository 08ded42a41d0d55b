package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
)

// handoffSession sends event 1 (handed off: PendingHandoffResponse, the
// session blocked) and 2–3 (parked), and checks those answers.
func handoffSession(t *testing.T, s *stack, sid string) []event {
	t.Helper()
	evs := []event{
		orderWith("OrderPlaced-"+sid+"-1", sid, 101, `"Handoff":true`),
		orderWith("OrderPlaced-"+sid+"-2", sid, 102, ""),
		orderWith("OrderPlaced-"+sid+"-3", sid, 103, ""),
	}
	s.send(evs...)
	want := []string{"PendingHandoffResponse:" + evs[0].MessageID, "DeferralResponse:" + evs[1].MessageID, "DeferralResponse:" + evs[2].MessageID}
	rs := s.waitReplies(sid, 60*time.Second, "the handoff and two deferrals", func(rs []received) bool { return len(rs) >= 3 })
	if got := labels(rs); !slices.Equal(got, want) {
		t.Fatalf("responses\n got %v\nwant %v", got, want)
	}
	str := propertyCheck(func(v any) string {
		if s, ok := v.(string); !ok || s == "" {
			return "want a non-empty string"
		}
		return ""
	})
	checkResponse(t, rs[0], evs[0], "PendingHandoffResponse", evs[0].body(),
		map[string]any{"HandoffReason": "ManualApproval", "ExternalJobId": str, "ExpectedBy": str}, s.firstSent(evs[0].MessageID))
	for _, e := range evs[1:] {
		r := rs[slices.Index(want, "DeferralResponse:"+e.MessageID)]
		checkResponse(t, r, e, "DeferralResponse", e.errorBody(blockedText(sid, evs[0].EventID), "SessionBlockedException"), nil, s.firstSent(e.MessageID))
	}
	return evs
}

// settlementFor addresses a Manager settlement to the pending event e, as
// the handoff client fills the coordinates from the Resolver's row.
func settlementFor(e event) nimbusmsg.Settlement {
	return nimbusmsg.Settlement{To: endpointID, EventID: e.EventID, SessionID: e.SessionID,
		CorrelationID: guidFor("correlation/" + e.MessageID), ParentMessageID: e.MessageID,
		OriginatingMessageID: e.MessageID, EventTypeID: e.EventTypeID}
}

// checkReplayed checks that the responses after index from resolve the
// events in order, each from its parked copy.
func checkReplayed(t *testing.T, s *stack, rs []received, evs []event) {
	t.Helper()
	var got, want []string
	for _, r := range rs {
		got = append(got, r.label())
	}
	for _, e := range evs {
		want = append(want, "ResolutionResponse:"+e.MessageID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("replayed responses\n got %v\nwant %v", got, want)
	}
	for i, e := range evs {
		in := e
		in.MessageID = rs[i].correlationID()
		if in.MessageID == e.MessageID {
			t.Errorf("%s was answered from the original delivery, not from its parked copy", e.MessageID)
		}
		checkResponse(t, rs[i], in, "ResolutionResponse", e.body(), map[string]any{"OriginatingMessageId": e.MessageID}, s.firstSent(e.MessageID))
	}
}

// TestPendingHandoffCompletedByTheManager: a handed-off event blocks its
// session; the Manager's HandoffCompletedRequest answers a
// ResolutionResponse without running the handler, lifts the block, and the
// parked events replay in order.
func TestPendingHandoffCompletedByTheManager(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackConfig{deferred: true})
	const sid = "handoff-done"
	evs := handoffSession(t, s, sid)

	m := nimbusmsg.HandoffCompleted(settlementFor(evs[0]), "")
	s.sendNimBus(m)
	s.waitReplies(sid, 60*time.Second, "the settlement and the replay", func(rs []received) bool { return len(rs) >= 6 })
	waitSettled(t, s)
	rs := s.resolver.replies(sid)
	if len(rs) != 6 {
		t.Fatalf("%d responses, want 6: %v", len(rs), labels(rs))
	}
	settle := evs[0]
	settle.MessageID = m.MessageID
	checkResponse(t, rs[3], settle, "ResolutionResponse", `{"EventContent":null,"ErrorContent":null}`,
		map[string]any{"OriginatingMessageId": evs[0].MessageID, "OriginatingFrom": "Manager"}, time.Time{})
	checkReplayed(t, s, rs[4:], evs[1:])

	runs := 0
	for _, l := range s.handler.lines("") {
		if l.Str("eventId") == evs[0].EventID && l.Fields["handlerRan"] == true {
			runs++
		}
	}
	if runs != 1 {
		t.Errorf("the handed-off event's handler ran %d times, want 1 (the settlement runs none)", runs)
	}
	if recs := s.inboxRecords(evs[0].MessageID); len(recs) != 0 {
		t.Errorf("the handed-off event was recorded in the inbox; NimBus records neither the handoff nor its settlement")
	}
}

// TestPendingHandoffFailedThenResubmitted: the Manager's
// HandoffFailedRequest answers an ErrorResponse with the operator's text
// (HandoffFailedException) and the session stays blocked: a later event is
// still parked. A resubmission of the event with changes (no handoff)
// resolves it, and the parked events replay in order.
func TestPendingHandoffFailedThenResubmitted(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackConfig{deferred: true})
	const sid = "handoff-failed"
	evs := handoffSession(t, s, sid)

	const opText = "the approver rejected the order"
	m := nimbusmsg.HandoffFailed(settlementFor(evs[0]), opText, "ApprovalRejected")
	s.sendNimBus(m)
	rs := s.waitReplies(sid, 60*time.Second, "the ErrorResponse of the failed handoff", func(rs []received) bool { return len(rs) >= 4 })
	failedIn := evs[0]
	failedIn.MessageID = m.MessageID
	checkResponse(t, rs[3], failedIn, "ErrorResponse",
		`{"EventContent":null,"ErrorContent":{"ErrorText":`+jsonString(opText)+`,"ErrorType":"HandoffFailedException","ExceptionStackTrace":null,"ExceptionSource":null}}`,
		map[string]any{"OriginatingMessageId": evs[0].MessageID, "OriginatingFrom": "Manager"}, time.Time{})

	// Still blocked: event 4 is parked too.
	e4 := orderWith("OrderPlaced-"+sid+"-4", sid, 104, "")
	s.send(e4)
	rs = s.waitReplies(sid, 60*time.Second, "event 4's DeferralResponse", func(rs []received) bool { return len(rs) >= 5 })
	checkResponse(t, rs[4], e4, "DeferralResponse", e4.errorBody(blockedText(sid, evs[0].EventID), "SessionBlockedException"), nil, s.firstSent(e4.MessageID))

	// The operator resubmits the event without the handoff switch.
	changed := strings.Replace(evs[0].EventJSON, `,"Handoff":true`, "", 1)
	if changed == evs[0].EventJSON {
		t.Fatal("the event's JSON has no Handoff switch to remove")
	}
	s.sendNimBus(nimbusmsg.Resubmission(errorResponseOf(rs[3]), endpointID, orderPlaced, changed))
	s.waitReplies(sid, 60*time.Second, "the resubmission and the replay", func(rs []received) bool { return len(rs) >= 9 })
	waitSettled(t, s)
	rs = s.resolver.replies(sid)
	if len(rs) != 9 || rs[5].label() != "ResolutionResponse:"+evs[0].MessageID {
		t.Fatalf("responses after the resubmission: %v", labels(rs))
	}
	checkReplayed(t, s, rs[6:], []event{evs[1], evs[2], e4})
	// The resubmission recorded the event's original MessageId (it blocked
	// the session) and its own.
	if recs := s.inboxRecords(evs[0].MessageID, rs[5].correlationID()); len(recs) != 2 {
		t.Errorf("inbox records after the resubmission: %v, want the original's and the resubmission's", recs)
	}
	if dl := s.deadLettered(); len(dl) != 0 {
		t.Errorf("%d messages dead-lettered", len(dl))
	}
}
