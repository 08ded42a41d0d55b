package subscriber

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// markerState reads the marker of msgID in the fake's partition.
func (w *fakeNimbus) markerState(msgID string) txn.MarkerState {
	w.t.Helper()
	st, err := txn.ReadMarker(context.Background(), w.txn, txTarget, txPartition, strictEndpoint, msgID)
	if err != nil {
		w.t.Fatal(err)
	}
	return st
}

// sentSince returns the messages sent since index from.
func (w *fakeNimbus) sentSince(from int) []*message.Outgoing {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*message.Outgoing(nil), w.sent[from:]...)
}

// A transactional handler's events commit with its effect, in its own
// marker; then they go out with the ResolutionResponse in one send, in the
// order published; then the marker is marked dispatched (its ids kept),
// before the delivery completes.
func TestTxPublishCommitsThenSendsThenMarks(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
	w.handle = publishTwo(Completed(), nil)
	r := w.p.Process(context.Background(), w.event("msg-1", "event-1"))
	if r.Outcome != OutcomeCompleted || r.EventsPublished != 2 || !r.Published {
		t.Fatalf("%s, %d published: %v", r.Outcome, r.EventsPublished, r.Err)
	}
	if got := w.callOrder(0); !slices.Equal(got, []string{"txn.batch", "publish batch", "txn.batch"}) {
		t.Fatalf("calls %v, want the batch, one send, the mark", got)
	}
	if !slices.Equal(w.batchSizes, []int{3}) || !slices.Equal(w.sentKinds(0), []string{"EventRequest", "EventRequest", "ResolutionResponse"}) {
		t.Fatalf("batches %v of %v", w.batchSizes, w.sentKinds(0))
	}
	if got := w.events(); !slices.Equal(got, []string{"InvoiceRequested InvoiceRequested-event-1", "OrderAccepted OrderAccepted-event-1"}) {
		t.Fatalf("events %v", got)
	}
	st := w.markerState("msg-1")
	if !st.Dispatched || st.Pending != nil || !slices.Equal(st.OutboxIDs, []string{"InvoiceRequested-event-1", "OrderAccepted-event-1"}) {
		t.Fatalf("marker %+v", st)
	}
	if !slices.Equal(w.effects(), []string{"effect-event-1"}) {
		t.Fatalf("effects %v", w.effects())
	}
	// A redelivery is today's duplicate: nothing is sent again.
	from := len(w.sentSince(0))
	r = w.p.Process(context.Background(), redelivery(w.event("msg-1", "event-1")))
	if r.Outcome != OutcomeDuplicate || r.EventsPublished != 0 || !slices.Equal(w.sentKinds(from), []string{"SkipResponse"}) {
		t.Fatalf("redelivery: %s, sent %v", r.Outcome, w.sentKinds(from))
	}
}

// A transactional handler without events commits and answers as before:
// no outbox in its marker, no mark.
func TestTxWithoutEventsIsUnchanged(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
	w.p.Process(context.Background(), w.event("msg-1", "event-1"))
	if got := w.callOrder(0); !slices.Equal(got, []string{"txn.batch", "publish ResolutionResponse"}) {
		t.Fatalf("calls %v", got)
	}
	if st := w.markerState("msg-1"); !st.Found || st.OutboxIDs != nil {
		t.Fatalf("marker %+v", st)
	}
}

// When the send fails after the commit, the delivery fails transiently
// (outbox_send_failed, after the pause) with the effect and the events
// committed; the redelivery does not run the handler: it sends the stored
// events, byte for byte, with the stored ResolutionResponse (not a
// SkipResponse), and marks them; the next copy is a plain duplicate.
func TestTxSendFailureIsFinishedByTheRedelivery(t *testing.T) {
	for _, c := range []struct {
		name    string
		fail    func(w *fakeNimbus)
		outcome Outcome
		sentOK  bool
	}{
		{"send refused", func(w *fakeNimbus) { w.failNext, w.failNextMode = "publish batch", faultBefore }, OutcomeOutboxSendFailed, false},
		{"send answer lost", func(w *fakeNimbus) { w.failNext, w.failNextMode = "publish batch", faultAfter }, OutcomeOutboxSendFailed, true},
		{"batch answer lost", func(w *fakeNimbus) { w.failNext, w.failNextMode = "txn.batch", faultAfter }, OutcomeTxnAmbiguous, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
			w.handle = publishTwo(Completed(), nil)
			c.fail(w)
			d := w.event("msg-1", "event-1")
			r := w.p.Process(context.Background(), d)
			if r.Outcome != c.outcome || r.Outcome.Completes() || !r.Outcome.Spec().Pause {
				t.Fatalf("%s: %v", r.Outcome, r.Err)
			}
			st := w.markerState("msg-1")
			if st.Pending == nil || len(st.Pending.Events) != 2 || !slices.Equal(w.effects(), []string{"effect-event-1"}) {
				t.Fatalf("after the failure: marker %+v, effects %v", st, w.effects())
			}
			first := w.sentSince(0)
			if got := len(first) == 3; got != c.sentOK {
				t.Fatalf("sent %v", w.sentKinds(0))
			}

			r = w.p.Process(context.Background(), redelivery(d))
			if r.Outcome != OutcomeOutboxDispatched || !r.Outcome.Completes() || r.HandlerRan || r.EventsPublished != 2 || r.Inbox != InboxDuplicate {
				t.Fatalf("redelivery: %s (handler ran %v, %d published): %v", r.Outcome, r.HandlerRan, r.EventsPublished, r.Err)
			}
			again := w.sentSince(len(first))
			if kinds := w.sentKinds(len(first)); !slices.Equal(kinds, []string{"EventRequest", "EventRequest", "ResolutionResponse"}) {
				t.Fatalf("the redelivery sent %v", kinds)
			}
			if len(w.runs) != 1 {
				t.Fatalf("the handler ran %d times", len(w.runs))
			}
			if c.sentOK {
				for i := range 3 {
					if !reflect.DeepEqual(first[i], again[i]) {
						t.Errorf("message %d differs on the re-send:\n%+v\n%+v", i, first[i], again[i])
					}
				}
			}
			if st := w.markerState("msg-1"); !st.Dispatched {
				t.Fatalf("not marked: %+v", st)
			}
			from := len(w.sentSince(0))
			r = w.p.Process(context.Background(), redelivery(redelivery(d)))
			if r.Outcome != OutcomeDuplicate || !slices.Equal(w.sentKinds(from), []string{"SkipResponse"}) {
				t.Fatalf("third copy: %s, sent %v", r.Outcome, w.sentKinds(from))
			}
		})
	}
}

// A re-send of a stored event carries the trace context of the original
// publish, which continued the delivery's trace.
func TestTxResendKeepsTheTraceContext(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
	w.p.o.Tracer = telemetry.PropagatingTracerProvider().Tracer("test")
	w.handle = func(ev *Event) (Result, error) {
		return Completed(), ev.Publish(Publication{EventTypeID: "A", MessageID: "a-1", JSON: `{}`})
	}
	w.failNext, w.failNextMode = "publish batch", faultAfter
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	ctx := telemetry.Extract(context.Background(), map[string]any{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"})
	d := w.event("msg-1", "event-1")
	if r := w.p.Process(ctx, d); r.Outcome != OutcomeOutboxSendFailed {
		t.Fatalf("%s: %v", r.Outcome, r.Err)
	}
	if r := w.p.Process(context.Background(), redelivery(d)); r.Outcome != OutcomeOutboxDispatched {
		t.Fatalf("%s: %v", r.Outcome, r.Err)
	}
	sent := w.sentSince(0)
	first, again := sent[0].ApplicationProperties[message.PropTraceParent], sent[2].ApplicationProperties[message.PropTraceParent]
	tp, _ := first.(string)
	if !strings.HasPrefix(tp, "00-"+traceID+"-") || again != first {
		t.Fatalf("traceparent %v, then %v: want the delivery's trace, the same on the re-send", first, again)
	}
}

// A mark that fails on every attempt within the invocation answers
// transiently after the events went out; the redelivery sends them again
// (same ids) and marks them.
func TestTxMarkFailureIsFinishedByTheRedelivery(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
	w.handle = publishTwo(Completed(), nil)
	w.txOps = func(ev *Event, u *txn.Unit) error {
		return u.Create(map[string]any{"id": "effect-" + ev.EventID, "customerId": txPartition})
	}
	d := w.event("msg-1", "event-1")
	// The second batch of the delivery is the mark's first attempt.
	w.outageFrom["txn.batch"] = 2
	r := w.p.Process(context.Background(), d)
	if r.Outcome != OutcomeTransientFailure || r.StoreOp != opOutboxDispatched || r.EventsPublished != 2 {
		t.Fatalf("%s (%s, %d published): %v", r.Outcome, r.StoreOp, r.EventsPublished, r.Err)
	}
	r = w.p.Process(context.Background(), redelivery(d))
	if r.Outcome != OutcomeOutboxDispatched || !w.markerState("msg-1").Dispatched {
		t.Fatalf("redelivery %s: %v", r.Outcome, r.Err)
	}
	if got := w.events(); len(got) != 4 || got[0] != got[2] || got[1] != got[3] {
		t.Fatalf("events %v, want the two sent twice under the same ids", got)
	}
}

// A copy that loses the batch to another copy whose events are not yet
// dispatched sends them, marks them and answers the ResolutionResponse the
// other copy stored.
func TestTxConcurrentCopyFinishesTheOthersOutbox(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
	w.handle = publishTwo(Completed(), nil)
	d := w.event("msg-1", "event-1")
	var other Report
	w.onRun = func(ev *Event) {
		if len(w.runs) == 0 {
			// Another copy of msg-1 runs and commits while this one's handler
			// runs, and its send fails.
			w.onRun = nil
			w.failNext, w.failNextMode = "publish batch", faultBefore
			other = w.p.Process(context.Background(), redelivery(d))
		}
	}
	r := w.p.Process(context.Background(), d)
	if other.Outcome != OutcomeOutboxSendFailed {
		t.Fatalf("the other copy: %s: %v", other.Outcome, other.Err)
	}
	if r.Outcome != OutcomeOutboxDispatched || r.EventsPublished != 2 || !w.markerState("msg-1").Dispatched {
		t.Fatalf("%s (%d published): %v", r.Outcome, r.EventsPublished, r.Err)
	}
	if got := w.responses(); !slices.Equal(got, []string{"ResolutionResponse event-1"}) {
		t.Fatalf("responses %v", got)
	}
	if len(w.effects()) != 1 {
		t.Fatalf("effects %v", w.effects())
	}
}

// A RetryRequest whose send failed after its commit is finished by its
// redelivery before the session's block is lifted: nothing parked behind
// the event is replayed before its events are out.
func TestTxRetryOutboxGoesOutBeforeTheUnblock(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
	w.handle = publishTwo(Completed(), nil)
	w.setState(withParked(blockedBy("event-1", "msg-1"), 1))
	d := w.retry("event-1", "msg-1", 1)
	w.failNext, w.failNextMode = "publish batch", faultBefore
	if r := w.p.Process(context.Background(), d); r.Outcome != OutcomeOutboxSendFailed {
		t.Fatalf("%s: %v", r.Outcome, r.Err)
	}
	if !w.state().BlockedBy("event-1") {
		t.Fatal("the block was lifted before the events went out")
	}
	from := len(w.order)
	r := w.p.Process(context.Background(), redelivery(d))
	if r.Outcome != OutcomeOutboxDispatched || r.Unblocked != true {
		t.Fatalf("redelivery %s (unblocked %v): %v", r.Outcome, r.Unblocked, r.Err)
	}
	got := w.callOrder(from)
	send, unblock := slices.Index(got, "publish batch"), slices.Index(got, "state.write")
	if send < 0 || unblock < 0 || send > unblock {
		t.Fatalf("calls %v: the events must go before the unblock", got)
	}
}

// The events count toward the batch's limits: one that would take the
// marker over Cosmos DB's item size is refused by the call with a
// Permanent error naming the limit, and nothing is committed.
func TestTxPublishOverTheLimit(t *testing.T) {
	// Each event fits in a 1 MB message; the third takes the marker over
	// Cosmos DB's 2 MB.
	w := newFakeNimbus(t, fakeNimbusOptions{tx: true, maxEventBytes: message.MaxMessageBytesLimit})
	var errs []error
	big := `"` + strings.Repeat("x", 800<<10) + `"`
	w.handle = func(ev *Event) (Result, error) {
		for i := range 3 {
			errs = append(errs, ev.Publish(Publication{EventTypeID: "A", MessageID: fmt.Sprintf("a-%d", i), JSON: big}))
		}
		return Completed(), nil
	}
	w.txOps = func(*Event, *txn.Unit) error { return nil }
	r := w.p.Process(context.Background(), w.event("msg-1", "event-1"))
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("publish 1 and 2: %v", errs)
	}
	perr := errs[2]
	if !IsPermanent(perr) || !errors.Is(perr, txn.ErrLimit) || !strings.Contains(perr.Error(), "2097152") || strings.Contains(perr.Error(), "xxx") {
		t.Fatalf("publish 3: %v", perr)
	}
	if r.Outcome.Completes() || w.marked("msg-1") || len(w.effects()) != 0 || len(w.events()) != 0 {
		t.Fatalf("%s, marked %v, effects %v", r.Outcome, w.marked("msg-1"), w.effects())
	}
}

// An event whose message Service Bus would refuse is refused when it is
// published, against Options.MaxEventBytes: for a transactional handler
// before it reaches the outbox (nothing committed), for a plain one before
// anything is sent or recorded.
func TestPublishOverTheMessageLimit(t *testing.T) {
	for _, c := range []struct {
		limit int
		ok    int // the largest payload accepted
	}{{0, 200 << 10}, {message.MaxMessageBytesLimit, 900 << 10}} {
		for _, tx := range []bool{false, true} {
			t.Run(fmt.Sprintf("limit=%d/tx=%v", c.limit, tx), func(t *testing.T) {
				w := newFakeNimbus(t, fakeNimbusOptions{tx: tx, maxEventBytes: c.limit})
				limit := c.limit
				if limit == 0 {
					limit = message.DefaultMaxMessageBytes
				}
				// Three quarters of the limit, but its escaped quotes are
				// escaped again in EventJson (x\" becomes x\\\"): five
				// quarters on the wire.
				over := `"` + strings.Repeat(`x\"`, limit/4) + `"`
				fits := `"` + strings.Repeat("y", c.ok) + `"`
				var errs []error
				w.handle = func(ev *Event) (Result, error) {
					errs = append(errs, ev.Publish(Publication{EventTypeID: "A", MessageID: "a-1", JSON: fits}))
					errs = append(errs, ev.Publish(Publication{EventTypeID: "A", MessageID: "a-2", JSON: over}))
					return Completed(), nil
				}
				w.txOps = func(*Event, *txn.Unit) error { return nil }
				r := w.p.Process(context.Background(), w.event("msg-1", "event-1"))
				if errs[0] != nil {
					t.Fatalf("a %d-byte payload refused: %v", len(fits), errs[0])
				}
				perr := errs[1]
				if !IsPermanent(perr) || !errors.Is(perr, message.ErrInvalidPublication) || !strings.Contains(perr.Error(), fmt.Sprintf("at most %d", limit)) || strings.Contains(perr.Error(), `x\"x`) {
					t.Fatalf("publish 2: %v", perr)
				}
				if r.Outcome != OutcomePermanentFailure || w.recorded("msg-1") || (tx && w.marked("msg-1")) || len(w.effects()) != 0 || len(w.events()) != 0 {
					t.Fatalf("%s, recorded %v, effects %v, events %d", r.Outcome, w.recorded("msg-1"), w.effects(), len(w.events()))
				}
			})
		}
	}
}

// txPublishingCase is a fresh delivery whose transactional handler
// publishes two events.
var txPublishingCase = roundTripCase{name: "fresh transactional success publishing two events", tx: true,
	prepare: func(w *fakeNimbus) func() Report {
		w.handle = publishTwo(Completed(), nil)
		d := w.event("msg-1", "event-1")
		return func() Report { return w.p.Process(context.Background(), d) }
	}}

// A fresh transactional delivery that publishes costs at most 4
// sequential round trips: marker ∥ inbox ∥ state reads, the batch, one
// send of the events and the response, the dispatched mark.
func TestTxPublishingCostsAtMostFourRoundTrips(t *testing.T) {
	c := measureExact(t, txPublishingCase)
	if c.outcome != OutcomeCompleted || c.roundTrips > 4 {
		t.Fatalf("%s in %d sequential round trips, want completed in at most 4", c.outcome, c.roundTrips)
	}
	if c.batches != 2 || c.sends != 1 || c.records != 0 {
		t.Fatalf("made %+v, want 2 batches (commit, mark) and 1 send", c)
	}
}

// A batch that conflicts is run again from an empty unit of work: the
// events the conflicted runs published never leak into the marker or onto
// the wire; only the last run's are committed and sent, once, with the
// value its fresh read saw.
func TestTxRerunPublishesOnlyTheLastRunsEvents(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
	seedBalance(w, 0)
	units := rerunHandler(w, func(run int) {
		if run <= 2 {
			w.writeBalance("bump")
		}
	})
	w.handle = func(ev *Event) (Result, error) {
		run := len(w.runs) + 1
		// The first two runs publish an id of their own, which must never
		// appear; every run publishes the one that must.
		if run <= 2 {
			if err := ev.Publish(Publication{EventTypeID: "Stale", MessageID: fmt.Sprintf("stale-%d", run), JSON: `{}`}); err != nil {
				return Result{}, err
			}
		}
		return Completed(), ev.Publish(Publication{EventTypeID: "Counted", MessageID: "counted-event-1", JSON: fmt.Sprintf(`{"Run":%d}`, run)})
	}
	r := w.p.Process(context.Background(), w.event("msg-1", "event-1"))
	if r.Outcome != OutcomeCompleted || r.TxnReruns != 2 || len(*units) != 3 {
		t.Fatalf("%s after %d re-runs (%d units): %v", r.Outcome, r.TxnReruns, len(*units), r.Err)
	}
	if got := w.events(); !slices.Equal(got, []string{"Counted counted-event-1"}) || r.EventsPublished != 1 {
		t.Fatalf("sent %v (%d reported), want only the last run's event", got, r.EventsPublished)
	}
	if body := string(w.sentSince(0)[0].Body); !strings.Contains(body, `{\"Run\":3}`) {
		t.Fatalf("the event sent is not the last run's: %s", body)
	}
	if st := w.markerState("msg-1"); !slices.Equal(st.OutboxIDs, []string{"counted-event-1"}) || !st.Dispatched {
		t.Fatalf("marker %+v", st)
	}
}

// A goroutine of the handler that publishes while the handler returns
// changes nothing for the delivery, plain or transactional: its publish is
// either accepted (before the handler returned) or refused to the
// goroutine as published too late, and the delivery completes.
func TestLatePublishDoesNotFailTheDelivery(t *testing.T) {
	for _, tx := range []bool{false, true} {
		t.Run(fmt.Sprintf("transactional=%v", tx), func(t *testing.T) {
			w := newFakeNimbus(t, fakeNimbusOptions{tx: tx})
			late := make(chan error, 1)
			w.handle = func(ev *Event) (Result, error) {
				returning := make(chan struct{})
				go func() {
					<-returning
					late <- ev.Publish(Publication{EventTypeID: "Late", MessageID: "late-" + ev.EventID, JSON: `{}`})
				}()
				close(returning)
				return Completed(), nil
			}
			const n = 300
			for i := range n {
				r := w.p.Process(context.Background(), w.event(fmt.Sprintf("msg-%d", i), fmt.Sprintf("event-%d", i)))
				err := <-late
				if r.Outcome != OutcomeCompleted {
					t.Fatalf("delivery %d of %d: %s: %v (the late publish: %v)", i+1, n, r.Outcome, r.Err, err)
				}
				if err != nil && !errors.Is(err, errPublishSealed) {
					t.Fatalf("delivery %d: the late publish was refused with %v, want the handler-returned refusal", i+1, err)
				}
			}
		})
	}
}

// A message id, session key or event type that is not valid UTF-8 cannot
// travel as a Service Bus id or property: Publish refuses it as Permanent,
// naming the field and not the bytes, and the delivery fails before
// anything is committed or sent.
func TestPublishRefusesIdsThatAreNotUTF8(t *testing.T) {
	const bad = "order-\xff\xfe-7"
	for _, c := range []struct {
		field string
		pub   Publication
	}{
		{"message id", Publication{EventTypeID: "A", MessageID: bad, JSON: `{}`}},
		{"session key", Publication{EventTypeID: "A", MessageID: "a-1", SessionID: bad, JSON: `{}`}},
		{"event type", Publication{EventTypeID: bad, MessageID: "a-1", JSON: `{}`}},
	} {
		for _, tx := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/tx=%v", c.field, tx), func(t *testing.T) {
				w := newFakeNimbus(t, fakeNimbusOptions{tx: tx})
				var perr error
				w.handle = func(ev *Event) (Result, error) {
					perr = ev.Publish(c.pub)
					return Completed(), nil
				}
				r := w.p.Process(context.Background(), w.event("msg-1", "event-1"))
				if !IsPermanent(perr) || !errors.Is(perr, message.ErrInvalidPublication) ||
					!strings.Contains(perr.Error(), "the "+c.field+" is not valid UTF-8") || strings.Contains(perr.Error(), "order-") {
					t.Fatalf("publish: %v", perr)
				}
				if r.Outcome != OutcomePermanentFailure || w.recorded("msg-1") || (tx && w.marked("msg-1")) || len(w.effects()) != 0 || len(w.events()) != 0 {
					t.Fatalf("%s, recorded %v, effects %v, events %v", r.Outcome, w.recorded("msg-1"), w.effects(), w.events())
				}
			})
		}
	}
}
