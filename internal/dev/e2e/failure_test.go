package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
)

// TestFailureKindsThroughTheBinary drives the sample handler down the
// failure kinds of the handler API, each in its own session followed by a
// plain event: Discard answers a SkipResponse with NimBus's classifier text
// and leaves the session open (the next event is handled); a panic is a
// failed event (ErrorResponse with the panic's text, ErrorType Panic), the
// process keeps running and the session is blocked (the next event is
// parked).
func TestFailureKindsThroughTheBinary(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackConfig{deferred: true})
	discard := orderWith("OrderPlaced-kind-discard", "kind-discard", 1, `"Fail":"discard"`)
	discardNext := orderWith("OrderPlaced-kind-discard-next", "kind-discard", 2, "")
	panics := orderWith("OrderPlaced-kind-panic", "kind-panic", 3, `"Fail":"panic"`)
	panicNext := orderWith("OrderPlaced-kind-panic-next", "kind-panic", 4, "")
	s.send(discard, discardNext, panics, panicNext)

	rs := s.waitReplies("kind-discard", 60*time.Second, "two answers", func(rs []received) bool { return len(rs) >= 2 })
	waitSettled(t, s)
	if got, want := labels(rs), []string{"SkipResponse:" + discard.MessageID, "ResolutionResponse:" + discardNext.MessageID}; !slices.Equal(got, want) {
		t.Fatalf("discard session: %v, want %v", got, want)
	}
	const discardText = "the order is not billed here (the sample discards it: Fail=discard)"
	checkResponse(t, rs[0], discard, "SkipResponse",
		discard.errorBody("Error: "+discardText+" Classified as Discard by subscriber.Discard.", "Error"), nil, s.firstSent(discard.MessageID))
	checkResponse(t, rs[1], discardNext, "ResolutionResponse", discardNext.body(), nil, s.firstSent(discardNext.MessageID))

	rs = s.waitReplies("kind-panic", 60*time.Second, "two answers", func(rs []received) bool { return len(rs) >= 2 })
	if got, want := labels(rs), []string{"ErrorResponse:" + panics.MessageID, "DeferralResponse:" + panicNext.MessageID}; !slices.Equal(got, want) {
		t.Fatalf("panic session: %v, want %v", got, want)
	}
	checkResponse(t, rs[0], panics, "ErrorResponse",
		panics.errorBody("handler panicked: the sample handler panics (Fail=panic)", "Panic"), nil, s.firstSent(panics.MessageID))
	checkResponse(t, rs[1], panicNext, "DeferralResponse",
		panicNext.errorBody(blockedText("kind-panic", panics.EventID), "SessionBlockedException"), nil, s.firstSent(panicNext.MessageID))
	if st := s.host.Stats(); st.Abandons != 0 || st.Completes != 4 {
		t.Errorf("mini host stats %+v, want 4 completions (every failure kind but transient and permanent completes)", st)
	}
}

// TestReplayedCopyThatFailsBlocksTheSessionAgain: after a resubmission
// lifts the block of event 1, the replay of event 2 fails (it fails on
// every attempt): the Resolver gets its ErrorResponse, the session is
// blocked by event 2, and event 3 stays parked behind it; event 4, sent
// then, is parked too. The Manager resubmits event 2 with changes; 3 and 4
// replay in order.
func TestReplayedCopyThatFailsBlocksTheSessionAgain(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackConfig{deferred: true})
	const sid = "replay-fails"
	e1 := orderWith("OrderPlaced-"+sid+"-1", sid, 1, `"Fail":"failed"`)
	e2 := orderWith("OrderPlaced-"+sid+"-2", sid, 2, `"Fail":"failed","FailOn":"always"`)
	e3 := orderWith("OrderPlaced-"+sid+"-3", sid, 3, "")
	e4 := orderWith("OrderPlaced-"+sid+"-4", sid, 4, "")
	s.send(e1, e2, e3)
	rs := s.waitReplies(sid, 60*time.Second, "the failure and two deferrals", func(rs []received) bool { return len(rs) >= 3 })
	s.sendNimBus(nimbusmsg.Resubmission(errorResponseOf(rs[0]), endpointID, orderPlaced, e1.EventJSON))

	// The resubmission resolves 1; the replay of 2 fails.
	rs = s.waitReplies(sid, 60*time.Second, "the replayed copy's ErrorResponse", func(rs []received) bool { return len(rs) >= 5 })
	waitSettled(t, s)
	want := []string{"ErrorResponse:" + e1.MessageID, "DeferralResponse:" + e2.MessageID, "DeferralResponse:" + e3.MessageID,
		"ResolutionResponse:" + e1.MessageID, "ErrorResponse:" + e2.MessageID}
	if got := labels(s.resolver.replies(sid)); !slices.Equal(got, want) {
		t.Fatalf("responses\n got %v\nwant %v", got, want)
	}
	replayedErr := rs[4]
	in2 := e2
	in2.MessageID = replayedErr.correlationID()
	checkResponse(t, replayedErr, in2, "ErrorResponse", e2.errorBody(sampleFailedText, "Error"),
		map[string]any{"OriginatingMessageId": e2.MessageID}, s.firstSent(e2.MessageID))
	// Event 3 still waits on the Deferred subscription, alone.
	ps := s.peekDeferred(sid)
	if len(ps) != 1 || ps[0].InboxID != e3.MessageID {
		t.Fatalf("parked copies after the failed replay: %+v, want only event 3's", ps)
	}

	// Blocked by 2: event 4 is parked.
	s.send(e4)
	rs = s.waitReplies(sid, 60*time.Second, "event 4's DeferralResponse", func(rs []received) bool { return len(rs) >= 6 })
	checkResponse(t, rs[5], e4, "DeferralResponse", e4.errorBody(blockedText(sid, e2.EventID), "SessionBlockedException"), nil, s.firstSent(e4.MessageID))

	changed := strings.Replace(e2.EventJSON, `,"Fail":"failed","FailOn":"always"`, "", 1)
	s.sendNimBus(nimbusmsg.Resubmission(errorResponseOf(replayedErr), endpointID, orderPlaced, changed))
	s.waitReplies(sid, 60*time.Second, "the resubmission of 2 and the replay of 3 and 4", func(rs []received) bool { return len(rs) >= 9 })
	waitSettled(t, s)
	rs = s.resolver.replies(sid)
	if got, want := labels(rs[6:]), []string{"ResolutionResponse:" + e2.MessageID, "ResolutionResponse:" + e3.MessageID, "ResolutionResponse:" + e4.MessageID}; len(rs) != 9 || !slices.Equal(got, want) {
		t.Fatalf("after the second resubmission: %v, want %v", labels(rs), want)
	}
	checkReplayed(t, s, rs[7:], []event{e3, e4})
	// The resubmission of 2 recorded the id its failed replay stood in for.
	if recs := s.inboxRecords(e1.MessageID, e2.MessageID, e3.MessageID, e4.MessageID); len(recs) != 4 {
		t.Errorf("inbox records %v, want all four events", recs)
	}
}
