package subscriber

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// publishTwo is a handler that publishes InvoiceRequested and
// OrderAccepted for its event, keyed by the EventId, then answers res/err.
func publishTwo(res Result, err error) func(ev *Event) (Result, error) {
	return func(ev *Event) (Result, error) {
		for _, typ := range []string{"InvoiceRequested", "OrderAccepted"} {
			if perr := ev.Publish(Publication{EventTypeID: typ, MessageID: typ + "-" + ev.EventID, JSON: `{"OrderId":"` + ev.EventID + `"}`}); perr != nil {
				return Result{}, perr
			}
		}
		return res, err
	}
}

// events lists the published events sent, as "EventTypeId MessageId".
func (w *fakeNimbus) events() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, m := range w.sent {
		if m.Type() == message.EventRequest.String() {
			typ, _ := m.ApplicationProperties[message.PropEventTypeID].(string)
			out = append(out, typ+" "+m.MessageID)
		}
	}
	return out
}

// callOrder lists the calls made since index from, without the reads.
func (w *fakeNimbus) callOrder(from int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, op := range w.order[from:] {
		if op != "inbox.check" && op != "state.read" && op != "txn.read" {
			out = append(out, op)
		}
	}
	return out
}

// A plain handler's events go out when it returns Completed: in the order
// published, in one send, after the handler and before the inbox record,
// which comes before the ResolutionResponse.
func TestPlainPublishSendsTheEventsBeforeTheRecord(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{})
	w.handle = publishTwo(Completed(), nil)
	r := w.p.Process(context.Background(), w.event("msg-1", "event-1"))
	if r.Outcome != OutcomeCompleted || r.EventsPublished != 2 || r.EventsDropped != 0 {
		t.Fatalf("%s, published %d, dropped %d: %v", r.Outcome, r.EventsPublished, r.EventsDropped, r.Err)
	}
	if got := w.events(); !slices.Equal(got, []string{"InvoiceRequested InvoiceRequested-event-1", "OrderAccepted OrderAccepted-event-1"}) {
		t.Fatalf("events %v", got)
	}
	if got := w.callOrder(0); !slices.Equal(got, []string{"publish batch", "inbox.record", "publish ResolutionResponse"}) {
		t.Fatalf("calls %v, want the events' send, the record, the response", got)
	}
	if !slices.Equal(w.batchSizes, []int{2}) {
		t.Fatalf("batches %v, want one of 2", w.batchSizes)
	}
	if got := w.sentKinds(0); !slices.Equal(got, []string{"EventRequest", "EventRequest", "ResolutionResponse"}) {
		t.Fatalf("sent %v", got)
	}
}

// A published event is NimBus's PublishFromContext, property for property:
// to the endpoint topic, To = EventTypeId = its type, no From, a null
// EventId, RetryCount 0, OriginatingFrom the endpoint, the delivery's
// MessageId as ParentMessageId and OriginatingMessageId (the inbound one
// is "self"), the delivery's session and correlation, the given MessageId,
// and the body NimBus writes.
func TestPublishedEventIsPublishFromContext(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{})
	w.handle = func(ev *Event) (Result, error) {
		return Completed(), ev.Publish(Publication{EventTypeID: "OrderAccepted", MessageID: "OrderAccepted-O-1", JSON: `{"OrderId":"O-1"}`})
	}
	w.p.Process(context.Background(), w.event("msg-1", "event-1"))
	m := w.sent[0]
	want := map[string]any{
		"To": "OrderAccepted", "EventTypeId": "OrderAccepted", "MessageType": "EventRequest", "EventId": nil,
		"RetryCount": int32(0), "OriginatingFrom": strictEndpoint, "ParentMessageId": "msg-1", "OriginatingMessageId": "msg-1",
	}
	if !mapsEqual(m.ApplicationProperties, want) {
		t.Fatalf("properties %#v\nwant %#v", m.ApplicationProperties, want)
	}
	if m.MessageID != "OrderAccepted-O-1" || m.SessionID != strictSession || deref(m.CorrelationID) != "corr-event-1" {
		t.Fatalf("MessageId %q, SessionId %q, CorrelationId %q", m.MessageID, m.SessionID, deref(m.CorrelationID))
	}
	if body := string(m.Body); body != `{"EventContent":{"EventTypeId":"OrderAccepted","EventJson":"{\"OrderId\":\"O-1\"}"},"ErrorContent":null}` {
		t.Fatalf("body %s", body)
	}
}

func mapsEqual(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// The event carries the trace context of the handler's span, which it
// continues.
func TestPublishedEventContinuesTheHandlersTrace(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{})
	rec := tracetest.NewSpanRecorder()
	w.p.o.Tracer = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	w.handle = publishTwo(Completed(), nil)
	w.p.Process(context.Background(), w.event("msg-1", "event-1"))
	var handler sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == spanHandler {
			handler = s
		}
	}
	if handler == nil {
		t.Fatal("no handler span")
	}
	want := fmt.Sprintf("00-%s-%s-01", handler.SpanContext().TraceID(), handler.SpanContext().SpanID())
	for _, m := range w.sent[:2] {
		if got := m.ApplicationProperties[message.PropTraceParent]; got != want {
			t.Fatalf("traceparent %v, want the handler span's %s", got, want)
		}
	}
}

// With any result but Completed the events are dropped, and the report
// counts them; nothing is sent but the delivery's own answer.
func TestEventsAreDroppedUnlessTheHandlerCompletes(t *testing.T) {
	cases := []struct {
		name    string
		handle  func(ev *Event) (Result, error)
		outcome Outcome
	}{
		{"failed", publishTwo(Result{}, errors.New("billing rejected the order")), OutcomeEventFailed},
		{"transient", publishTwo(Result{}, Transient(errors.New("busy"))), OutcomeHandlerFailed},
		{"permanent", publishTwo(Result{}, Permanent(errors.New("bad order"))), OutcomePermanentFailure},
		{"discard", publishTwo(Result{}, Discard(errors.New("not billed here"))), OutcomeDiscarded},
		{"handoff", publishTwo(PendingHandoff(Handoff{Reason: "ManualApproval"}), nil), OutcomePendingHandoff},
		{"panic", func(ev *Event) (Result, error) {
			_, _ = publishTwo(Completed(), nil)(ev)
			panic("boom")
		}, OutcomeEventFailed},
	}
	for _, tx := range []bool{false, true} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/tx=%v", c.name, tx), func(t *testing.T) {
				w := newFakeNimbus(t, fakeNimbusOptions{tx: tx})
				w.handle = c.handle
				r := w.p.Process(context.Background(), w.event("msg-1", "event-1"))
				if r.Outcome != c.outcome || r.EventsDropped != 2 || r.EventsPublished != 0 {
					t.Fatalf("%s (dropped %d, published %d), want %s with 2 dropped", r.Outcome, r.EventsDropped, r.EventsPublished, c.outcome)
				}
				if got := w.events(); len(got) != 0 {
					t.Fatalf("sent %v", got)
				}
			})
		}
	}
}

// A refused publication is a Permanent error from the call that names the
// problem, never a value of the payload; the delivery fails permanently
// even when the handler ignores the error, and nothing is sent.
func TestRefusedPublicationFailsTheDelivery(t *testing.T) {
	long := strings.Repeat("x", message.MaxIDLength+1)
	cases := []struct {
		name string
		pubs []Publication
		want string
	}{
		{"empty message id", []Publication{{EventTypeID: "A", JSON: `{}`}}, "message id is empty"},
		{"blank message id", []Publication{{EventTypeID: "A", MessageID: "  ", JSON: `{}`}}, "message id is empty"},
		{"repeated message id", []Publication{{EventTypeID: "A", MessageID: "id-1", JSON: `{}`}, {EventTypeID: "B", MessageID: "id-1", JSON: `{}`}}, "already published"},
		{"empty event type", []Publication{{MessageID: "id-1", JSON: `{}`}}, "event type is empty"},
		{"payload not JSON", []Publication{{EventTypeID: "A", MessageID: "id-1", JSON: `{"card":"4111-secret"`}}, "not valid JSON"},
		{"message id too long", []Publication{{EventTypeID: "A", MessageID: long, JSON: `{}`}}, "Service Bus accepts at most"},
		{"blank session", []Publication{{EventTypeID: "A", MessageID: "id-1", JSON: `{}`, SessionID: " "}}, "session key is blank"},
	}
	for _, tx := range []bool{false, true} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/tx=%v", c.name, tx), func(t *testing.T) {
				w := newFakeNimbus(t, fakeNimbusOptions{tx: tx})
				var errs []error
				w.handle = func(ev *Event) (Result, error) {
					for _, p := range c.pubs {
						errs = append(errs, ev.Publish(p))
					}
					return Completed(), nil // the error is ignored
				}
				r := w.p.Process(context.Background(), w.event("msg-1", "event-1"))
				last := errs[len(errs)-1]
				if last == nil || !IsPermanent(last) || !errors.Is(last, message.ErrInvalidPublication) || !strings.Contains(last.Error(), c.want) {
					t.Fatalf("publish error %v, want a Permanent one naming %q", last, c.want)
				}
				if strings.Contains(last.Error(), "4111") || strings.Contains(last.Error(), long) {
					t.Fatalf("the error quotes a value: %v", last)
				}
				if r.Outcome != OutcomePermanentFailure || !errors.Is(r.Err, message.ErrInvalidPublication) {
					t.Fatalf("%s: %v, want a permanent failure with the refusal", r.Outcome, r.Err)
				}
				if len(w.events()) != 0 || w.recorded("msg-1") || (tx && w.marked("msg-1")) {
					t.Fatalf("sent %v, recorded %v", w.events(), w.recorded("msg-1"))
				}
			})
		}
	}
}

// A publish after the handler returned (from a goroutine it left running)
// is refused, and nothing it tried is sent.
func TestPublishAfterTheHandlerReturnedIsRefused(t *testing.T) {
	for _, tx := range []bool{false, true} {
		t.Run(fmt.Sprintf("tx=%v", tx), func(t *testing.T) {
			w := newFakeNimbus(t, fakeNimbusOptions{tx: tx})
			var kept *Event
			w.handle = func(ev *Event) (Result, error) { kept = ev; return Completed(), nil }
			w.p.Process(context.Background(), w.event("msg-1", "event-1"))
			err := kept.Publish(Publication{EventTypeID: "A", MessageID: "late", JSON: `{}`})
			if err == nil || !IsPermanent(err) {
				t.Fatalf("late publish: %v", err)
			}
			if len(w.events()) != 0 {
				t.Fatalf("sent %v", w.events())
			}
		})
	}
}

// An event built outside the pipeline has no delivery to publish from.
func TestPublishOnAnEventNotDelivered(t *testing.T) {
	err := (&Event{EventTypeID: "OrderPlaced"}).Publish(Publication{EventTypeID: "A", MessageID: "a", JSON: `{}`})
	if !errors.Is(err, ErrNotDelivered) || !IsPermanent(err) {
		t.Fatal(err)
	}
}

// The session option sends the event in another session; by default it
// goes in the delivery's.
func TestPublishInAnotherSession(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{})
	w.handle = func(ev *Event) (Result, error) {
		if err := ev.Publish(Publication{EventTypeID: "A", MessageID: "a-1", JSON: `{}`, SessionID: "invoice-9"}); err != nil {
			return Result{}, err
		}
		return Completed(), ev.Publish(Publication{EventTypeID: "B", MessageID: "b-1", JSON: `{}`})
	}
	w.p.Process(context.Background(), w.event("msg-1", "event-1"))
	if w.sent[0].SessionID != "invoice-9" || w.sent[1].SessionID != strictSession {
		t.Fatalf("sessions %q, %q", w.sent[0].SessionID, w.sent[1].SessionID)
	}
}

// A plain handler whose events cannot be sent fails transiently and is not
// recorded; the redelivery runs the handler again and publishes the same
// ids; a failure of the record after the send does the same (at least
// once, with stable ids).
func TestPlainEventsSendFailureRunsTheHandlerAgain(t *testing.T) {
	for _, c := range []struct {
		op      string
		outcome Outcome
	}{{"publish batch", OutcomeEventsSendFailed}, {"inbox.record", OutcomeTransientFailure}} {
		t.Run(c.op, func(t *testing.T) {
			w := newFakeNimbus(t, fakeNimbusOptions{})
			w.handle = publishTwo(Completed(), nil)
			w.failOp[c.op] = true
			d := w.event("msg-1", "event-1")
			r := w.p.Process(context.Background(), d)
			if r.Outcome != c.outcome || r.Outcome.Completes() || !r.Outcome.Spec().Pause || w.recorded("msg-1") {
				t.Fatalf("%s (recorded %v): %v", r.Outcome, w.recorded("msg-1"), r.Err)
			}
			first := w.events()
			w.failOp[c.op] = false
			r = w.p.Process(context.Background(), redelivery(d))
			if r.Outcome != OutcomeCompleted || len(w.runs) != 2 {
				t.Fatalf("redelivery: %s after %d runs", r.Outcome, len(w.runs))
			}
			want := []string{"InvoiceRequested InvoiceRequested-event-1", "OrderAccepted OrderAccepted-event-1"}
			if got := w.events(); !slices.Equal(got, append(first, want...)) {
				t.Fatalf("events %v", got)
			}
		})
	}
}

// An event published while handling a RetryRequest, a resubmission or a
// replayed copy takes that delivery's MessageId as ParentMessageId and its
// CorrelationId, and keeps the original OriginatingMessageId.
func TestPublishedEventLineageOfStandIns(t *testing.T) {
	cases := []struct {
		name    string
		deliver func(t *testing.T, w *fakeNimbus) *Delivery
	}{
		{"retry", func(t *testing.T, w *fakeNimbus) *Delivery {
			w.setState(blockedBy("event-1", "msg-1"))
			d := w.retry("event-1", "msg-1", 1)
			d.Broker.CorrelationID = str("corr-retry")
			w.deliver(d)
			return d
		}},
		{"resubmission", func(t *testing.T, w *fakeNimbus) *Delivery {
			w.setState(blockedBy("event-1", "msg-1"))
			d := w.resubmit("event-1")
			w.deliver(d)
			return d
		}},
		{"replayed copy", func(t *testing.T, w *fakeNimbus) *Delivery {
			blockedWithParked(w)
			w.handle = failEv2Original
			w.deliver(w.event("msg-p0", "event-1"))
			w.deliver(w.resubmit("ev-2"))
			req := w.delivered(w.lastSent("ProcessDeferredRequest"))
			w.mu.Lock()
			w.sent = nil
			w.mu.Unlock()
			r := w.p.Drain(context.Background(), req)
			if len(r.Replays) != 1 || r.Replays[0].EventsPublished != 2 {
				t.Fatalf("replays %+v", r.Replays)
			}
			return &Delivery{Broker: message.Broker{MessageID: str(r.Replays[0].MessageID), CorrelationID: str("corr-event-1")}}
		}},
	}
	for _, tx := range []bool{false, true} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/tx=%v", c.name, tx), func(t *testing.T) {
				w := newFakeNimbus(t, fakeNimbusOptions{tx: tx})
				w.handle = failEv2Original
				d := c.deliver(t, w)
				var got []*message.Outgoing
				w.mu.Lock()
				for _, m := range w.sent {
					if m.Type() == message.EventRequest.String() && strings.HasSuffix(m.MessageID, "-event-1") {
						got = append(got, m)
					}
				}
				w.mu.Unlock()
				if len(got) != 2 {
					t.Fatalf("sent %d events of event-1", len(got))
				}
				for _, m := range got {
					if p := m.ApplicationProperties[message.PropParentMessageID]; p != deref(d.Broker.MessageID) {
						t.Errorf("ParentMessageId %v, want the delivery's %s", p, deref(d.Broker.MessageID))
					}
					if deref(m.CorrelationID) != deref(d.Broker.CorrelationID) {
						t.Errorf("CorrelationId %s, want the delivery's %s", deref(m.CorrelationID), deref(d.Broker.CorrelationID))
					}
				}
			})
		}
	}
}

// failEv2Original fails the original delivery of ev-2 and publishes two
// events for every other event.
func failEv2Original(ev *Event) (Result, error) {
	if ev.EventID == "ev-2" && ev.Attempt == AttemptOriginal {
		return Result{}, errors.New("ledger is closed")
	}
	return publishTwo(Completed(), nil)(ev)
}

// publishingCase is a fresh delivery whose plain handler publishes two
// events.
var publishingCase = roundTripCase{name: "fresh success publishing two events",
	prepare: func(w *fakeNimbus) func() Report {
		w.handle = publishTwo(Completed(), nil)
		d := w.event("msg-1", "event-1")
		return func() Report { return w.p.Process(context.Background(), d) }
	}}

// A plain handler that publishes costs at most 4 sequential round trips:
// inbox check ∥ session-state read, the events' send (one, whatever their
// number), the record, the response.
func TestPlainPublishingCostsAtMostFourRoundTrips(t *testing.T) {
	c := measureExact(t, publishingCase)
	if c.outcome != OutcomeCompleted || c.roundTrips > 4 {
		t.Fatalf("%s in %d sequential round trips, want completed in at most 4", c.outcome, c.roundTrips)
	}
	if c.sends != 2 || c.records != 1 {
		t.Fatalf("a publishing success made %+v, want 2 sends (events, response) and 1 record", c)
	}
}

// A plain handler's publications are bounded per delivery: the event
// beyond MaxPublications, and the one whose message would take their
// total over MaxPublishedBytes, are refused as Permanent naming the
// limit, as is every publication after it; and the delivery fails
// (nothing sent) even though the handler ignored the refusals and
// returned Completed.
func TestPlainPublicationsAreBoundedPerDelivery(t *testing.T) {
	big := `"` + strings.Repeat("x", 200_000) + `"`
	cases := []struct {
		name  string
		json  string
		limit string
		// refused is the publication refused (from 1).
		refused int
	}{
		{"count", `{}`, "limit of events per delivery", MaxPublications + 1},
		// Each message is a little over 200,000 bytes: ten fit in 2 MiB.
		{"bytes", big, "limit of 2097152 bytes per delivery", 11},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newFakeNimbus(t, fakeNimbusOptions{})
			var errs []error
			w.handle = func(ev *Event) (Result, error) {
				for i := range c.refused + 1 {
					if err := ev.Publish(Publication{EventTypeID: "OrderAccepted", MessageID: fmt.Sprintf("OrderAccepted-%d", i), JSON: c.json}); err != nil {
						errs = append(errs, err)
					}
				}
				return Completed(), nil
			}
			r := w.p.Process(context.Background(), w.event("msg-1", "event-1"))
			if len(errs) != 2 {
				t.Fatalf("%d publications refused, want the last two: %v", len(errs), errs)
			}
			var pe *PublishError
			if !errors.As(errs[0], &pe) || pe.N != c.refused || KindOf(errs[0]) != KindPermanent ||
				!strings.Contains(errs[0].Error(), c.limit) || !errors.Is(errs[0], message.ErrInvalidPublication) {
				t.Fatalf("publication %d refused with %v (kind %v), want publication %d refused as Permanent naming %q", pe.N, errs[0], KindOf(errs[0]), c.refused, c.limit)
			}
			if !errors.As(errs[1], &pe) || pe.N != c.refused+1 || !strings.Contains(errs[1].Error(), "per delivery") {
				t.Fatalf("the publication after the limit: %v", errs[1])
			}
			if r.Outcome != OutcomePermanentFailure || !errors.Is(r.Err, message.ErrInvalidPublication) {
				t.Fatalf("the delivery: %s: %v", r.Outcome, r.Err)
			}
			if got := w.events(); len(got) != 0 {
				t.Fatalf("%d events sent", len(got))
			}
		})
	}
}

// The limit on the number of events applies to a transactional handler
// too; its bytes are bounded by the batch and the marker.
func TestTxPublicationsAreBoundedInCount(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
	var refused error
	w.handle = func(ev *Event) (Result, error) {
		for i := range MaxPublications + 1 {
			if err := ev.Publish(Publication{EventTypeID: "E", MessageID: fmt.Sprintf("E-%d", i), JSON: `1`}); err != nil && refused == nil {
				refused = err
			}
		}
		return Completed(), nil
	}
	r := w.p.Process(context.Background(), w.event("msg-1", "event-1"))
	var pe *PublishError
	if !errors.As(refused, &pe) || pe.N != MaxPublications+1 || !strings.Contains(refused.Error(), "limit of events per delivery") {
		t.Fatalf("refused %v", refused)
	}
	if r.Outcome != OutcomePermanentFailure || w.marked("msg-1") || len(w.events()) != 0 {
		t.Fatalf("the delivery: %s (marker %v, %d events sent): %v", r.Outcome, w.marked("msg-1"), len(w.events()), r.Err)
	}
}

// A DetachedOutbox applies the same per-delivery limits.
func TestDetachedOutboxBoundsPublications(t *testing.T) {
	var d DetachedOutbox
	for i := range MaxPublications {
		if err := d.Publish(Publication{EventTypeID: "E", MessageID: fmt.Sprintf("E-%d", i), JSON: `{}`}); err != nil {
			t.Fatalf("publication %d: %v", i+1, err)
		}
	}
	if err := d.Publish(Publication{EventTypeID: "E", MessageID: "E-last", JSON: `{}`}); KindOf(err) != KindPermanent || !strings.Contains(err.Error(), "limit of events per delivery") {
		t.Fatalf("publication %d: %v", MaxPublications+1, err)
	}
}
