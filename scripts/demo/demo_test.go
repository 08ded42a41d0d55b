package main

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv/handlerproc"
	"github.com/nimbus-go/functions-subscriber/internal/devhost"
)

// TestDemoRuns runs the whole demo against the real handler binary: every
// step must have the outcome it expects (run returns an error otherwise),
// and the transcript must show every outcome a user meets, the failure
// path in order included.
func TestDemoRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("the whole demo (about 15 s): the full suite (go test without -short, scripts/test.sh) runs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, options{Out: &out, Verbose: true}); err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	transcript := out.String()
	for _, want := range []string{
		"outcome=completed", "outcome=duplicate", "outcome=handler_failed", "bypassReason=missing_or_blank",
		"outcome=unsupported", "outcome=malformed_invocation", "outcome=purged", "outcome=permanent_failure",
		"deadLetterReported", "outcome=discarded", "outcome=skipped", "outcome=pending_handoff",
		"outcome=handoff_completed", "cloudEvent=binary", "outcome=written", "outcome=stale",
		"topic ← RetryRequest To=Retry", "scheduled for ",
		"POST /api/orders", `→ HTTP 201 {"messageId":"OrderPlaced-O-500","orderId":"O-500"}`,
		`→ HTTP 200 {"messageId":"OrderPlaced-O-500","orderId":"O-500"}`, "→ HTTP 409", "→ HTTP 400", "outcome=swept",
	} {
		if !strings.Contains(transcript, want) {
			t.Errorf("the transcript does not show %q", want)
		}
	}
	// The failure path, in this order: the failed event blocks the
	// session, two orders are parked, the resubmission unblocks it and asks
	// for the replay, and the parked orders replay in order.
	order := []string{
		"outcome=event_failed inbox=new sessionBlocked",
		"Resolver ← ErrorResponse (SessionId customer-C-8",
		"outcome=deferred inbox=new deferralSequence=0",
		"topic ← EventRequest To=Deferred (SessionId customer-C-8",
		"outcome=deferred inbox=new deferralSequence=1",
		"ResubmissionRequest from Manager",
		"sessionUnblocked replayRequested",
		"topic ← ProcessDeferredRequest To=DeferredProcessor (SessionId customer-C-8",
		"outcome=drained",
		"replayed parked copy of evt-orderplaced-0011 → completed (inbox=new)",
		"replayed parked copy of evt-orderplaced-0012 → completed (inbox=new)",
		"Resolver ← ResolutionResponse (SessionId customer-C-8, CorrelationId OrderPlaced-0013",
	}
	inOrder(t, transcript, "the failure path", order)
	// The transactional handler: a payment, its redelivery, a producer's
	// re-send, 16 concurrent copies and a failure before the commit, each
	// with the balance it leaves.
	inOrder(t, transcript, "the exactly-once section", []string{
		"Resolver ← ResolutionResponse (SessionId customer-C-12, CorrelationId PaymentReceived-0001,",
		"ledger: balance-C-12 = 25.00 (1 payments); partition C-12 holds 1 payment documents and 1 inbox markers",
		"outcome=duplicate inbox=duplicate",
		"ledger: balance-C-12 = 25.00 (1 payments); partition C-12 holds 1 payment documents and 1 inbox markers",
		"Resolver ← ResolutionResponse (SessionId customer-C-12, CorrelationId PaymentReceived-0001-resent,",
		"ledger: balance-C-12 = 25.00 (1 payments); partition C-12 holds 1 payment documents and 2 inbox markers",
		"16 copies",
		"sent: EventRequest→PaymentRecorded:",
		"ledger: balance-C-12 = 35.00 (2 payments); partition C-12 holds 2 payment documents and 3 inbox markers",
		`"FailFirstAttempts":1}`,
		"→ HTTP 503",
		"outcome=handler_failed",
		"ledger: balance-C-12 = 35.00 (2 payments); partition C-12 holds 2 payment documents and 3 inbox markers",
		"ledger: balance-C-12 = 40.00 (3 payments); partition C-12 holds 3 payment documents and 4 inbox markers",
	})
	// Publishing onward: an order's two events, in order, before its
	// response; a failure that drops the events it queued; a commit whose
	// send failed, finished by the redelivery from the marker.
	inOrder(t, transcript, "the first order's events", []string{
		"outcome=completed inbox=new eventsPublished=2",
		"topic ← EventRequest To=InvoiceRequested (MessageId InvoiceRequested-O-1, ParentMessageId OrderPlaced-0001,",
		"topic ← EventRequest To=OrderAccepted (MessageId OrderAccepted-O-1, ParentMessageId OrderPlaced-0001,",
		"Resolver ← ResolutionResponse (SessionId customer-C-7, CorrelationId OrderPlaced-0001,",
	})
	inOrder(t, transcript, "the outbox steps", []string{
		"outcome=handler_failed inbox=new eventsDropped=1",
		"outcome=outbox_send_failed inbox=new",
		"marker of PaymentReceived-0004: outbox [PaymentRecorded-PAY-4], not dispatched",
		"outcome=outbox_dispatched inbox=duplicate eventsPublished=1",
		"topic ← EventRequest To=PaymentRecorded (MessageId PaymentRecorded-PAY-4, ParentMessageId PaymentReceived-0004,",
		"Resolver ← ResolutionResponse (SessionId customer-C-12, CorrelationId PaymentReceived-0004,",
		"marker of PaymentReceived-0004: outbox [PaymentRecorded-PAY-4], dispatched at",
		"outcome=duplicate inbox=duplicate",
	})
	// A failing invocation's stderr line is printed under its own step,
	// before the next one starts.
	stepsWithStderr := []string{
		"3. transient:", "handler stderr: error: Subscriber invocation answered 503", "4. The broker redelivers it",
		"7. A malformed envelope", "handler stderr: error: Subscriber invocation answered 400", "(waiting 5.5s",
		`. permanent: "Fail":"permanent"`, "handler stderr: error: Subscriber invocation answered 422", ". The same message on its last delivery",
	}
	inOrder(t, transcript, "each step's handler output under it", stepsWithStderr)
	// -v shows what the Service Bus adapter would send, the trace context
	// included: every message sent carries a traceparent, and the first
	// response continues the publisher's trace (a new parent span id, its
	// tracestate kept).
	lines := strings.Split(transcript, "\n")
	var props []string
	for _, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "properties: ") {
			props = append(props, l)
			if !strings.Contains(l, "traceparent=00-") {
				t.Errorf("a message sent without traceparent: %s", l)
			}
		}
	}
	trace := strings.TrimSuffix(strings.TrimPrefix(publisherTrace("OrderPlaced-0001"), "00-"), "-00f067aa0ba902b7-01")
	if len(props) == 0 || !regexp.MustCompile(`traceparent=00-`+trace+`-[0-9a-f]{16}-01:string, tracestate=`+publisherTraceState+`:string`).MatchString(props[0]) ||
		strings.Contains(props[0], "00f067aa0ba902b7") {
		t.Errorf("the first response does not continue the publisher's trace %s: %q", trace, props)
	}
	if !strings.Contains(transcript, "Every step had the outcome it expected") {
		t.Errorf("the transcript does not end with the summary")
	}
}

// inOrder fails t unless transcript shows every one of wants, in order.
func inOrder(t *testing.T, transcript, what string, wants []string) {
	t.Helper()
	rest := transcript
	for _, want := range wants {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Fatalf("%s does not show %q after the steps before it\n%s", what, want, transcript)
		}
		rest = rest[i+len(want):]
	}
}

// TestCheckReportsMisses: a step whose status, outcome, sent messages,
// flags or replays differ from what it expects is recorded as a failure.
func TestCheckReportsMisses(t *testing.T) {
	sent := func(types ...string) []devhost.SentResponse {
		var out []devhost.SentResponse
		for _, mt := range types {
			to := "Resolver"
			if mt == "EventRequest" {
				to = "Deferred"
			}
			out = append(out, devhost.SentResponse{Properties: map[string]devhost.TypedValue{
				"MessageType": {Type: "string", Value: mt}, "To": {Type: "string", Value: to}}})
		}
		return out
	}
	line := func(fields map[string]any) handlerproc.Line { return handlerproc.Line{Fields: fields} }
	exp := expect{status: 200, outcome: "deferred", sends: []string{"DeferralResponse", "EventRequest→Deferred"}, flags: []string{"sessionBlocked"}}
	good := result{status: 200, line: line(map[string]any{"outcome": "deferred", "sessionBlocked": true}), sent: sent("EventRequest", "DeferralResponse")}
	for name, c := range map[string]struct {
		r    result
		exp  expect
		miss int
	}{
		"as expected (sends in any order)": {good, exp, 0},
		"status":                           {result{status: 503, line: good.line, sent: good.sent}, exp, 1},
		"outcome":                          {result{status: 200, line: line(map[string]any{"outcome": "completed", "sessionBlocked": true}), sent: good.sent}, exp, 1},
		"a send missing":                   {result{status: 200, line: good.line, sent: sent("DeferralResponse")}, exp, 1},
		"an extra send":                    {result{status: 200, line: good.line, sent: sent("DeferralResponse", "EventRequest", "ErrorResponse")}, exp, 1},
		"flag":                             {result{status: 200, line: line(map[string]any{"outcome": "deferred"}), sent: good.sent}, exp, 1},
		"no log line":                      {result{status: 200, sent: good.sent}, exp, 2},
		"replays": {result{status: 200, line: line(map[string]any{"outcome": "drained", "demo.replays": []string{"evt-2 completed", "evt-1 completed"}})},
			expect{status: 200, outcome: "drained", replays: []string{"evt-1 completed", "evt-2 completed"}}, 1},
	} {
		t.Run(name, func(t *testing.T) {
			s := &script{out: io.Discard}
			ok := s.check(c.r, c.exp)
			if len(s.failures) != c.miss || ok != (c.miss == 0) {
				t.Errorf("check = %v with failures %q, want %d", ok, s.failures, c.miss)
			}
		})
	}
}
