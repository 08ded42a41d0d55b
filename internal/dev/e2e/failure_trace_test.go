package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// traceOf returns the trace id and parent span id of a traceparent
// property value ("" when it is not one).
func traceOf(v any) (trace, span string) {
	s, _ := v.(string)
	if !traceparentForm.MatchString(s) {
		return "", ""
	}
	parts := strings.Split(s, "-")
	return parts[1], parts[2]
}

// TestTraceContinuesThroughBlockParkRetryAndReplay follows two traces
// through the failure paths. Event 1 carries trace T1 and fails: its
// ErrorResponse, the scheduled RetryRequest (seen through the retry's own
// response) and the ProcessDeferredRequest the successful retry sends all
// continue T1. Event 2 carries T2 and is parked: its DeferralResponse and
// parked copy continue T2, and so does the response of its replayed copy
// (the event's trace, not the replay request's). Each hop has a new parent
// span id. The counters at /_nimbus/metrics count one park and one replay.
func TestTraceContinuesThroughBlockParkRetryAndReplay(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackConfig{settings: map[string]string{
		"NimBus__RetryPolicies__Default__MaxRetries": "1",
		"NimBus__RetryPolicies__Default__BaseDelay":  "00:00:01",
	}})
	const (
		sid = "trace-failure"
		t1  = "11111111111111111111111111111111"
		t2  = "22222222222222222222222222222222"
		p1  = "1111111111111111"
		p2  = "2222222222222222"
	)
	e1 := orderWith("OrderPlaced-trace-fail-1", sid, 1, `"Fail":"failed"`)
	e2 := orderWith("OrderPlaced-trace-fail-2", sid, 2, "")
	m1, m2 := e1.message(), e2.message()
	m1.ApplicationProperties["traceparent"] = "00-" + t1 + "-" + p1 + "-01"
	m2.ApplicationProperties["traceparent"] = "00-" + t2 + "-" + p2 + "-01"
	s.sendRaw(e1.MessageID, m1)
	s.sendRaw(e2.MessageID, m2)

	// ErrorResponse(1), DeferralResponse(2), then the retry's
	// ResolutionResponse(1).
	rs := s.waitReplies(sid, 60*time.Second, "the failure, the park and the retry", func(rs []received) bool { return len(rs) >= 3 })
	want := []string{"ErrorResponse:" + e1.MessageID, "DeferralResponse:" + e2.MessageID, "ResolutionResponse:" + e1.MessageID}
	for i, w := range want {
		if rs[i].label() != w {
			t.Fatalf("responses %v, want %v first", labels(rs), want)
		}
	}
	checkTrace := func(what string, v any, trace, notSpan string) {
		t.Helper()
		tr, sp := traceOf(v)
		if tr != trace || sp == notSpan {
			t.Errorf("%s: traceparent %v, want trace %s with a new parent span id", what, v, trace)
		}
	}
	checkTrace("ErrorResponse of event 1", rs[0].msg.ApplicationProperties["traceparent"], t1, p1)
	checkTrace("DeferralResponse of event 2", rs[1].msg.ApplicationProperties["traceparent"], t2, p2)
	// The retry's response continues the RetryRequest's traceparent, so
	// the scheduled RetryRequest carried T1.
	checkTrace("the RetryRequest's response", rs[2].msg.ApplicationProperties["traceparent"], t1, p1)
	_, errSpan := traceOf(rs[0].msg.ApplicationProperties["traceparent"])
	if _, sp := traceOf(rs[2].msg.ApplicationProperties["traceparent"]); sp == errSpan {
		t.Errorf("the retry's response has the failed delivery's span id %s: the RetryRequest's delivery did not start its own span", sp)
	}

	ps := s.peekDeferred(sid)
	if len(ps) != 1 {
		t.Fatalf("%d parked copies, want 1", len(ps))
	}
	checkTrace("parked copy of event 2", ps[0].Properties["traceparent"], t2, p2)

	// The successful retry asked for the replay: its ProcessDeferredRequest
	// waits on the DeferredProcessor subscription (no DeferredProcessor host
	// runs yet).
	pdr := peekSubscription(t, s, testenv.DeferredProcessorSub)
	if len(pdr) != 1 {
		t.Fatalf("%d messages on the DeferredProcessor subscription, want 1 ProcessDeferredRequest", len(pdr))
	}
	if pdr[0].ApplicationProperties["MessageType"] != "ProcessDeferredRequest" || pdr[0].SessionID == nil || *pdr[0].SessionID != sid {
		t.Errorf("DeferredProcessor subscription holds %v (session %v)", pdr[0].ApplicationProperties["MessageType"], strp(pdr[0].SessionID))
	}
	checkTrace("ProcessDeferredRequest", pdr[0].ApplicationProperties["traceparent"], t1, p1)

	// Now replay.
	s.deferredHost = startDeferredHost(t, s.sb.Client(t), s.handler.base)
	rs = s.waitReplies(sid, 60*time.Second, "the replayed event 2", func(rs []received) bool { return len(rs) >= 4 })
	waitSettled(t, s)
	if rs[3].label() != "ResolutionResponse:"+e2.MessageID || rs[3].correlationID() != ps[0].MessageID {
		t.Fatalf("4th response %s answering %s, want event 2's parked copy %s", rs[3].label(), rs[3].correlationID(), ps[0].MessageID)
	}
	_, parkSpan := traceOf(ps[0].Properties["traceparent"])
	checkTrace("the replayed copy's response", rs[3].msg.ApplicationProperties["traceparent"], t2, parkSpan)

	m := s.handler.metrics(t)
	if m["nimbus.deferred.parked"] != 1 || m["nimbus.deferred.replayed"] != 1 {
		t.Errorf("nimbus.deferred.parked = %v, nimbus.deferred.replayed = %v, want 1 and 1", m["nimbus.deferred.parked"], m["nimbus.deferred.replayed"])
	}
}

// peekSubscription peeks a subscription without sessions of the endpoint
// topic.
func peekSubscription(t *testing.T, s *stack, sub string) []*azservicebus.ReceivedMessage {
	t.Helper()
	r, err := s.client.NewReceiverForSubscription(endpointID, sub, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer r.Close(ctx)
	ms, err := r.PeekMessages(ctx, 100, nil)
	if err != nil {
		t.Fatalf("peeking %s: %v", sub, err)
	}
	return ms
}
