package subscriber

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// withCloudEvents turns CloudEvents detection on in w's pipeline.
func withCloudEvents(t *testing.T, w *fakeNimbus) {
	t.Helper()
	o := w.p.o
	o.CloudEvents = &message.CloudEventOptions{}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	w.p = p
}

// The CloudEvents ingress function takes EventRequests only: a Manager,
// control or retry request sent there by an external producer is refused
// with NimBus's unsupported-type dead-letter texts and changes nothing.
func TestIngressAcceptsOnlyEventRequests(t *testing.T) {
	ceSkip := func(w *fakeNimbus) *Delivery {
		return binaryCE(message.PrefixCanonical, "ce-1", "com.acme.OrderPlaced", func(props map[string]any, d *Delivery) {
			props["MessageType"], props["From"], props["EventId"] = "SkipRequest", message.ManagerID, "event-1"
			d.Broker.SessionID = str(strictSession)
		})
	}
	refused := []struct {
		name string
		typ  string
		d    func(w *fakeNimbus) *Delivery
	}{
		{"native SkipRequest from the Manager", "SkipRequest", func(w *fakeNimbus) *Delivery { return w.skip("event-1") }},
		{"native ResubmissionRequest from the Manager", "ResubmissionRequest", func(w *fakeNimbus) *Delivery { return w.resubmit("event-1") }},
		{"native HandoffCompletedRequest", "HandoffCompletedRequest", func(w *fakeNimbus) *Delivery { return w.handoffCompleted("event-1") }},
		{"native HandoffFailedRequest", "HandoffFailedRequest", func(w *fakeNimbus) *Delivery { return w.handoffFailed("event-1", "x", "y") }},
		{"native RetryRequest", "RetryRequest", func(w *fakeNimbus) *Delivery { return w.retry("event-1", "msg-1", 1) }},
		{"native UnsupportedResponse", "UnsupportedResponse", func(w *fakeNimbus) *Delivery {
			d := w.event("msg-9", "event-1")
			d.Properties["MessageType"] = "UnsupportedResponse"
			return d
		}},
		{"CloudEvent carrying MessageType=SkipRequest and From=Manager", "SkipRequest", ceSkip},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			w := newFakeNimbus(t, fakeNimbusOptions{})
			withCloudEvents(t, w)
			w.setState(blockedBy("event-1", "msg-1"))
			r := w.p.ProcessIngress(context.Background(), c.d(w))
			if r.Outcome != OutcomeUnsupportedMessageType || r.Outcome.Completes() {
				t.Fatalf("outcome %s (err %v), want %s", r.Outcome, r.Err, OutcomeUnsupportedMessageType)
			}
			if reason, desc := deadLetterTexts(&r); reason != message.DeadLetterReasonUnexpected ||
				!strings.Contains(desc, "Unsupported MessageType: '"+c.typ+"'.") {
				t.Fatalf("dead-letter texts %q / %q", reason, desc)
			}
			if len(w.runs) != 0 || len(w.sent) != 0 || len(w.scheduled) != 0 {
				t.Fatalf("handler runs %d, sent %v, scheduled %d", len(w.runs), w.sentKinds(0), len(w.scheduled))
			}
			if st := w.state(); !st.BlockedBy("event-1") {
				t.Fatalf("the block was lifted: %+v", st)
			}
		})
	}
	t.Run("the same CloudEvent on the Subscriber function still reaches the Manager path", func(t *testing.T) {
		w := newFakeNimbus(t, fakeNimbusOptions{})
		withCloudEvents(t, w)
		w.setState(blockedBy("event-1", "msg-1"))
		if r := w.p.Process(context.Background(), ceSkip(w)); r.Outcome != OutcomeSkipped {
			t.Fatalf("outcome %s, want %s", r.Outcome, OutcomeSkipped)
		}
	})
	accepted := []struct {
		name string
		d    func(w *fakeNimbus) *Delivery
	}{
		{"native EventRequest", func(w *fakeNimbus) *Delivery { return w.event("msg-5", "event-5") }},
		{"CloudEvent", func(w *fakeNimbus) *Delivery {
			return binaryCE(message.PrefixCanonical, "ce-5", "com.acme.OrderPlaced", func(_ map[string]any, d *Delivery) {
				d.Broker.SessionID = str(strictSession)
			})
		}},
	}
	for _, c := range accepted {
		t.Run(c.name, func(t *testing.T) {
			w := newFakeNimbus(t, fakeNimbusOptions{})
			withCloudEvents(t, w)
			if r := w.p.ProcessIngress(context.Background(), c.d(w)); r.Outcome != OutcomeCompleted || len(w.runs) != 1 {
				t.Fatalf("outcome %s (err %v), handler runs %d", r.Outcome, r.Err, len(w.runs))
			}
		})
	}
}

// The DeferredProcessor function replays only on a ProcessDeferredRequest;
// anything else takes the dead-letter path and replays nothing.
func TestDrainAcceptsOnlyReplayRequests(t *testing.T) {
	cases := []struct {
		name    string
		props   map[string]any
		outcome Outcome
		desc    string
	}{
		{"a SkipRequest", managerProps(message.SkipRequest, "event-1", "error-response-event-1"), OutcomeUnsupportedMessageType, "Unsupported MessageType: 'SkipRequest'."},
		{"an EventRequest", map[string]any{"To": "DeferredProcessor", "MessageType": "EventRequest", "From": "Shop", "EventId": "e"}, OutcomeUnsupportedMessageType, "Unsupported MessageType: 'EventRequest'."},
		{"no properties", nil, OutcomeInvalidMessage, message.PropertyNotDefinedText(message.PropMessageType)},
		{"an unparseable MessageType", map[string]any{"MessageType": "Bogus"}, OutcomeInvalidMessage, "Bogus"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newFakeNimbus(t, fakeNimbusOptions{})
			w.p.Process(context.Background(), w.event("msg-1", "event-1")) // parks nothing: the session is free
			w.setState(withParked(blockedBy("", ""), 1))
			sid := strictSession
			r := w.p.Drain(context.Background(), &Delivery{Broker: message.Broker{SessionID: &sid, DeliveryCount: 1}, Properties: c.props, Body: []byte("{}")})
			if r.Outcome != c.outcome || r.Outcome.Completes() {
				t.Fatalf("outcome %s (err %v), want %s", r.Outcome, r.Err, c.outcome)
			}
			if reason, desc := deadLetterTexts(&r); reason != message.DeadLetterReasonUnexpected || !strings.Contains(desc, c.desc) {
				t.Fatalf("dead-letter texts %q / %q", reason, desc)
			}
			if len(r.Replays) != 0 || w.state().DeferredCount != 1 {
				t.Fatalf("replayed %d, state %+v", len(r.Replays), w.state())
			}
		})
	}
	t.Run("a ProcessDeferredRequest", func(t *testing.T) {
		w := newFakeNimbus(t, fakeNimbusOptions{})
		sid := strictSession
		r := w.p.Drain(context.Background(), &Delivery{Broker: message.Broker{SessionID: &sid, DeliveryCount: 1},
			Properties: map[string]any{"To": "DeferredProcessor", "MessageType": "ProcessDeferredRequest"}, Body: []byte("{}")})
		if r.Outcome != OutcomeDrained {
			t.Fatalf("outcome %s (err %v)", r.Outcome, r.Err)
		}
	})
}

// A Manager settlement names its event with a non-empty string EventId;
// an empty or non-string one is invalid, as a null one is.
func TestManagerSettlementNeedsAStringEventID(t *testing.T) {
	builders := map[string]func(w *fakeNimbus) *Delivery{
		"SkipRequest":             func(w *fakeNimbus) *Delivery { return w.skip("event-1") },
		"HandoffCompletedRequest": func(w *fakeNimbus) *Delivery { return w.handoffCompleted("event-1") },
		"HandoffFailedRequest":    func(w *fakeNimbus) *Delivery { return w.handoffFailed("event-1", "x", "y") },
	}
	for typ, build := range builders {
		for _, v := range []any{"", "  ", int64(42), true, nil} {
			t.Run(typ, func(t *testing.T) {
				w := newFakeNimbus(t, fakeNimbusOptions{})
				w.setState(blockedBy("event-1", "msg-1"))
				d := build(w)
				d.Properties["EventId"] = v
				r := w.p.Process(context.Background(), d)
				if r.Outcome != OutcomeInvalidMessage || r.Outcome.Completes() {
					t.Fatalf("EventId %#v: outcome %s (err %v)", v, r.Outcome, r.Err)
				}
				if _, desc := deadLetterTexts(&r); !strings.Contains(desc, message.PropertyNotDefinedText(message.PropEventID)) {
					t.Fatalf("EventId %#v: dead-letter description %q", v, desc)
				}
				if len(w.sent) != 0 || !w.state().BlockedBy("event-1") {
					t.Fatalf("EventId %#v: sent %v, state %+v", v, w.sentKinds(0), w.state())
				}
			})
		}
	}
}

// A SkipRequest reports the block lifted only when it lifted one.
func TestSkipRequestReportsWhatItDid(t *testing.T) {
	cases := []struct {
		name      string
		blockedBy string
		outcome   Outcome
		unblocked bool
		after     string
	}{
		{"names the blocking event", "event-1", OutcomeSkipped, true, ""},
		{"names another session's event", "event-a", OutcomeSkippedNotBlocking, false, "event-a"},
		{"session not blocked", "", OutcomeSkippedNotBlocking, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newFakeNimbus(t, fakeNimbusOptions{})
			if c.blockedBy != "" {
				w.setState(blockedBy(c.blockedBy, "msg-x"))
			}
			r := w.p.Process(context.Background(), w.skip("event-1"))
			if r.Outcome != c.outcome || r.Unblocked != c.unblocked {
				t.Fatalf("outcome %s unblocked %v, want %s %v", r.Outcome, r.Unblocked, c.outcome, c.unblocked)
			}
			if got := w.state().BlockedByEventID; got != c.after {
				t.Fatalf("blocked by %q, want %q", got, c.after)
			}
			if got := w.responses(); !slices.Equal(got, []string{"SkipResponse event-1"}) {
				t.Fatalf("responses %v", got)
			}
		})
	}
}

// A RetryRequest records its InboxMessageId only when that is the id of
// the delivery that blocked its session; NimBus's own retries (of the
// original, of a retry, of a replayed copy parked again) still record it.
func TestRetryRequestRecordsOnlyTheBlockingSource(t *testing.T) {
	cases := []struct {
		name       string
		blockedMsg string
		inboxMsgID string
		recorded   bool
	}{
		{"the blocking delivery's id", "msg-1", "msg-1", true},
		{"an arbitrary id", "msg-1", "msg-victim", false},
		{"a block stored without its MessageId", "", "msg-victim", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newFakeNimbus(t, fakeNimbusOptions{})
			w.setState(blockedBy("event-1", c.blockedMsg))
			d := w.retry("event-1", c.inboxMsgID, 1)
			r := w.p.Process(context.Background(), d)
			if r.Outcome != OutcomeCompleted || len(w.runs) != 1 {
				t.Fatalf("outcome %s (err %v), runs %d", r.Outcome, r.Err, len(w.runs))
			}
			if got := w.recorded(c.inboxMsgID); got != c.recorded {
				t.Fatalf("%s recorded %v, want %v", c.inboxMsgID, got, c.recorded)
			}
			if r.SourceIgnored == c.recorded {
				t.Fatalf("SourceIgnored %v", r.SourceIgnored)
			}
			if !w.recorded(r.MessageID) || w.state().Blocked() {
				t.Fatalf("own id recorded %v, state %+v", w.recorded(r.MessageID), w.state())
			}
		})
	}
	t.Run("a forged retry that fails keeps the block's id for the next retry", func(t *testing.T) {
		w := newFakeNimbus(t, fakeNimbusOptions{policy: &testPolicy{max: 3}})
		w.setState(blockedBy("event-1", "msg-1"))
		w.handle = fail("boom")
		w.p.Process(context.Background(), w.retry("event-1", "msg-victim", 1))
		if st := w.state(); st.BlockedByMessageID != "msg-1" {
			t.Fatalf("block rewritten to %q", st.BlockedByMessageID)
		}
		if len(w.scheduled) != 1 || w.scheduled[0].m.ApplicationProperties[message.PropInboxMessageID] != "msg-1" {
			t.Fatalf("scheduled %+v", w.scheduled)
		}
	})
	t.Run("retry of a retry, as the endpoint schedules it", func(t *testing.T) {
		w := newFakeNimbus(t, fakeNimbusOptions{policy: &testPolicy{max: 3}})
		w.handle = fail("boom")
		w.p.Process(context.Background(), w.event("msg-1", "event-1"))
		for i := 0; i < 2; i++ {
			if len(w.scheduled) != i+1 {
				t.Fatalf("scheduled %d", len(w.scheduled))
			}
			if i == 1 {
				w.handle = nil
			}
			r := w.p.Process(context.Background(), w.delivered(w.scheduled[i].m))
			if i == 1 && (r.Outcome != OutcomeCompleted || r.SourceIgnored) {
				t.Fatalf("outcome %s, source ignored %v", r.Outcome, r.SourceIgnored)
			}
		}
		if !w.recorded("msg-1") {
			t.Fatal("the original's MessageId was not recorded by the second retry")
		}
	})
}

// A HandoffCompletedRequest settles only a pending handoff: it does not
// lift the block of an event that failed, nor report Completed an event
// that may wait parked; a block stored without its kind is settled as
// NimBus does.
func TestHandoffCompletedSettlesOnlyAPendingHandoff(t *testing.T) {
	cases := []struct {
		name string
		// setup brings the session to its state through the pipeline.
		setup     func(w *fakeNimbus)
		outcome   Outcome
		unblocked bool
		blockedBy string
		deferred  int64
	}{
		{"handed off", func(w *fakeNimbus) {
			w.handle = handoffResult
			w.p.Process(context.Background(), w.event("msg-1", "event-1"))
		}, OutcomeHandoffCompleted, true, "", 0},
		{"failed, never handed off", func(w *fakeNimbus) {
			w.handle = fail("boom")
			w.p.Process(context.Background(), w.event("msg-1", "event-1"))
		}, OutcomeHandoffNotPending, false, "event-1", 0},
		{"parked behind another event's failure", func(w *fakeNimbus) {
			w.handle = fail("boom")
			w.p.Process(context.Background(), w.event("msg-0", "event-0"))
			w.p.Process(context.Background(), w.event("msg-1", "event-1"))
		}, OutcomeHandoffNotPending, false, "event-0", 1},
		{"failed, then handed off by its retry", func(w *fakeNimbus) {
			w.handle = fail("boom")
			w.p.Process(context.Background(), w.event("msg-1", "event-1"))
			w.handle = handoffResult
			w.p.Process(context.Background(), w.retry("event-1", "msg-1", 1))
		}, OutcomeHandoffCompleted, true, "", 0},
		{"a block stored without its kind", func(w *fakeNimbus) { w.setState(blockedBy("event-1", "msg-1")) },
			OutcomeHandoffCompleted, true, "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newFakeNimbus(t, fakeNimbusOptions{})
			c.setup(w)
			before := len(w.responses())
			r := w.p.Process(context.Background(), w.handoffCompleted("event-1"))
			if r.Outcome != c.outcome || r.Unblocked != c.unblocked {
				t.Fatalf("outcome %s unblocked %v (err %v), want %s %v", r.Outcome, r.Unblocked, r.Err, c.outcome, c.unblocked)
			}
			st := w.state()
			if st.BlockedByEventID != c.blockedBy || st.DeferredCount != c.deferred {
				t.Fatalf("state %+v", st)
			}
			sent := w.responses()[before:]
			if want := c.outcome == OutcomeHandoffCompleted; slices.Contains(sent, "ResolutionResponse event-1") != want {
				t.Fatalf("responses %v", sent)
			}
		})
	}
}

// A HandoffCompletedRequest whose delivery fails part-way still settles the
// event on redelivery: a failed ResolutionResponse leaves the block in
// place, so the redelivery answers and lifts it; a failed replay request
// after the block was lifted is asked for again, and the Resolver hears
// of the completion once.
func TestHandoffCompletedRedeliveredAfterAFailedStepStillSettles(t *testing.T) {
	for _, c := range []struct {
		name, failOp string
		again        Outcome
	}{
		{"the ResolutionResponse fails", "publish ResolutionResponse", OutcomeHandoffCompleted},
		{"the replay request fails", "publish ProcessDeferredRequest", OutcomeHandoffNotPending},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newFakeNimbus(t, fakeNimbusOptions{})
			w.handle = handoffResult
			w.p.Process(context.Background(), w.event("msg-1", "event-1"))
			w.handle = nil
			w.p.Process(context.Background(), w.event("msg-2", "event-2"))
			if st := w.state(); !st.BlockedBy("event-1") || st.DeferredCount != 1 {
				t.Fatalf("state before the settlement %+v", st)
			}
			before := len(w.responses())
			w.failNext, w.failNextMode = c.failOp, faultBefore
			d := w.handoffCompleted("event-1")
			if r := w.p.Process(context.Background(), d); r.Outcome.Completes() {
				t.Fatalf("first delivery %s, want a failure (%s fails)", r.Outcome, c.failOp)
			}
			r := w.p.Process(context.Background(), redelivery(d))
			if r.Outcome != c.again || !r.DrainRequested {
				t.Fatalf("redelivery %s (drain requested %v, err %v), want %s and a replay request", r.Outcome, r.DrainRequested, r.Err, c.again)
			}
			if st := w.state(); st.Blocked() || st.DeferredCount != 1 || !st.Draining() {
				t.Fatalf("state after the redelivery %+v", st)
			}
			resolutions := 0
			for _, s := range w.responses()[before:] {
				if s == "ResolutionResponse event-1" {
					resolutions++
				}
			}
			if resolutions != 1 {
				t.Fatalf("%d ResolutionResponses for event-1 (responses %v), want 1", resolutions, w.responses()[before:])
			}
		})
	}
}
