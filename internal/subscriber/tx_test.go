package subscriber

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// marked reports whether the marker of msgID is in the fake's partition.
func (w *fakeNimbus) marked(msgID string) bool {
	w.t.Helper()
	ok, err := txn.HasMarker(context.Background(), w.txn, txTarget, txPartition, strictEndpoint, msgID)
	if err != nil {
		w.t.Fatal(err)
	}
	return ok
}

// effects lists the ids of the business documents of the partition.
func (w *fakeNimbus) effects() []string {
	w.t.Helper()
	docs, err := w.txn.Documents(txTarget)
	if err != nil {
		w.t.Fatal(err)
	}
	var out []string
	for _, d := range docs {
		var doc struct{ ID, Type string }
		if err := json.Unmarshal(d, &doc); err != nil {
			w.t.Fatal(err)
		}
		if doc.Type != txn.MarkerType {
			out = append(out, doc.ID)
		}
	}
	return out
}

// commitOther commits the effect of eventID with the marker of msgID, as
// another copy of the message (or another process) would.
func (w *fakeNimbus) commitOther(msgID, eventID string) {
	w.t.Helper()
	t := txn.Begin(w.txn, txTarget, txPartition, w.clock)
	if err := t.Unit().Create(map[string]any{"id": "effect-" + eventID, "customerId": txPartition}); err != nil {
		w.t.Fatal(err)
	}
	if _, err := t.Commit(context.Background(), txn.Marker{EndpointID: strictEndpoint, MessageID: msgID, Retention: w.p.o.MarkerRetention}); err != nil {
		w.t.Fatal(err)
	}
}

// A fresh delivery of a transactional handler commits its effect with the
// marker of its MessageId, writes no inbox document, and resolves; another
// copy of the message is a duplicate found by the marker, the handler not
// run, and a redelivery, which the marker cannot tell from one whose
// earlier delivery stopped before its response, resolves again.
func TestTxFreshThenDuplicateByMarker(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
	r := w.p.Process(context.Background(), w.event("msg-1", "event-1"))
	if r.Outcome != OutcomeCompleted || r.Inbox != InboxNew {
		t.Fatalf("fresh: %s (%s): %v", r.Outcome, r.Inbox, r.Err)
	}
	if !w.marked("msg-1") || !slices.Equal(w.effects(), []string{"effect-event-1"}) {
		t.Fatalf("after the commit: marker %v, effects %v", w.marked("msg-1"), w.effects())
	}
	if w.recorded("msg-1") || w.records != 0 {
		t.Fatalf("the inbox document was written (%d records)", w.records)
	}
	r = w.p.Process(context.Background(), w.event("msg-1", "event-1"))
	if r.Outcome != OutcomeDuplicate || r.HandlerRan {
		t.Fatalf("copy: %s, handler ran %v", r.Outcome, r.HandlerRan)
	}
	r = w.p.Process(context.Background(), redelivery(w.event("msg-1", "event-1")))
	if r.Outcome != OutcomeDuplicateResolved || r.HandlerRan {
		t.Fatalf("redelivery: %s, handler ran %v", r.Outcome, r.HandlerRan)
	}
	if got := w.responses(); !slices.Equal(got, []string{"ResolutionResponse event-1", "SkipResponse event-1", "ResolutionResponse event-1"}) {
		t.Fatalf("responses %v", got)
	}
}

// A message recorded in the plain inbox before its handler became
// transactional stays a duplicate.
func TestTxDuplicateByInboxRecord(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
	w.record("msg-1")
	r := w.p.Process(context.Background(), w.event("msg-1", "event-1"))
	if r.Outcome != OutcomeDuplicate || r.HandlerRan || len(w.effects()) != 0 {
		t.Fatalf("%s, handler ran %v, effects %v", r.Outcome, r.HandlerRan, w.effects())
	}
}

// A RetryRequest, a resubmission and a replayed parked copy commit a
// marker for every id the plain path records: the id they stand in for and
// their own, in the one batch.
func TestTxStandInsCommitTheirMarkers(t *testing.T) {
	cases := []struct {
		name    string
		deliver func(w *fakeNimbus) (Report, string)
		markers []string
	}{
		{"retry", func(w *fakeNimbus) (Report, string) {
			w.setState(blockedBy("event-1", "msg-1"))
			d := w.retry("event-1", "msg-1", 1)
			return w.p.Process(context.Background(), d), deref(d.Broker.MessageID)
		}, []string{"msg-1"}},
		{"resubmission", func(w *fakeNimbus) (Report, string) {
			w.setState(blockedBy("event-1", "msg-1"))
			d := w.resubmit("event-1")
			return w.p.Process(context.Background(), d), deref(d.Broker.MessageID)
		}, []string{"msg-1"}},
		{"replayed copy", func(w *fakeNimbus) (Report, string) {
			blockedWithParked(w)
			w.deliver(w.event("msg-p0", "ev-p0"))
			w.deliver(w.resubmit("ev-2"))
			req := w.delivered(w.lastSent("ProcessDeferredRequest"))
			r := w.p.Drain(context.Background(), req)
			if len(r.Replays) != 1 {
				t.Fatalf("replayed %d copies", len(r.Replays))
			}
			return r.Replays[0], r.Replays[0].MessageID
		}, []string{"msg-p0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
			r, own := c.deliver(w)
			if r.Outcome != OutcomeCompleted {
				t.Fatalf("%s: %v", r.Outcome, r.Err)
			}
			for _, id := range append(c.markers, own) {
				if !w.marked(id) {
					t.Errorf("no marker for %s", id)
				}
			}
			if w.records != 0 {
				t.Errorf("%d inbox documents written", w.records)
			}
		})
	}
}

// The stand-in's source id is checked by its marker too: a replayed copy
// whose original committed is a duplicate.
func TestTxStandInSourceMarkerIsADuplicate(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
	w.setState(blockedBy("event-1", "msg-1"))
	w.commitOther("msg-1", "event-1")
	r := w.p.Process(context.Background(), w.retry("event-1", "msg-1", 1))
	// The retry's own id is checked first (NimBus's order); its source's
	// marker makes the commit a duplicate: nothing applied twice.
	if r.Outcome != OutcomeDuplicate || len(w.effects()) != 1 {
		t.Fatalf("%s: %v; effects %v", r.Outcome, r.Err, w.effects())
	}
	if w.state().Blocked() {
		t.Fatal("the duplicate retry left the session blocked")
	}
}

// A handler write that conflicts on every run (the re-runs spent) fails
// transiently (503 after the pause) with nothing applied; once another
// copy's marker exists, the redelivery finds it, skips the handler and
// resolves the event.
func TestTxConflictThenDuplicate(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
	seed := txn.Begin(w.txn, txTarget, txPartition, nil)
	if err := seed.Unit().Create(map[string]any{"id": "effect-event-1", "customerId": txPartition}); err != nil {
		t.Fatal(err)
	}
	if _, err := seed.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	d := w.event("msg-1", "event-1")
	r := w.p.Process(context.Background(), d)
	if r.Outcome != OutcomeTxnConflict || !errors.Is(r.Err, txn.ErrConflict) || w.marked("msg-1") {
		t.Fatalf("%s: %v; marker %v", r.Outcome, r.Err, w.marked("msg-1"))
	}
	if s := r.Outcome.Spec(); s.Status != http.StatusServiceUnavailable || !s.Pause {
		t.Fatalf("conflict settles %d pause %v", s.Status, s.Pause)
	}
	w.commitMarkerOnly("msg-1")
	r = w.p.Process(context.Background(), redelivery(d))
	if r.Outcome != OutcomeDuplicateResolved || r.HandlerRan {
		t.Fatalf("redelivery: %s, handler ran %v", r.Outcome, r.HandlerRan)
	}
}

// commitMarkerOnly commits the marker of msgID alone.
func (w *fakeNimbus) commitMarkerOnly(msgID string) {
	w.t.Helper()
	t := txn.Begin(w.txn, txTarget, txPartition, w.clock)
	if _, err := t.Commit(context.Background(), txn.Marker{EndpointID: strictEndpoint, MessageID: msgID, Retention: w.p.o.MarkerRetention}); err != nil {
		w.t.Fatal(err)
	}
}

// A copy whose marker read ran before the other copy committed finds the
// marker at its commit: a duplicate, nothing applied twice.
func TestTxRaceLostAtCommitIsADuplicate(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
	w.onRun = func(ev *Event) {
		w.onRun = nil
		w.commitOther("msg-1", "event-x") // the other copy commits meanwhile
	}
	r := w.p.Process(context.Background(), w.event("msg-1", "event-1"))
	if r.Outcome != OutcomeDuplicate || !r.HandlerRan || slices.Contains(w.effects(), "effect-event-1") {
		t.Fatalf("%s (ran %v), effects %v", r.Outcome, r.HandlerRan, w.effects())
	}
	if got := w.responses(); !slices.Equal(got, []string{"SkipResponse event-1"}) {
		t.Fatalf("responses %v", got)
	}
}

// Failures of the batch and of the handler: each ends with its outcome and
// commits nothing.
func TestTxFailuresCommitNothing(t *testing.T) {
	cases := []struct {
		name    string
		arrange func(w *fakeNimbus)
		want    Outcome
		check   func(t *testing.T, r Report)
	}{
		{"limit: 100 handler writes", func(w *fakeNimbus) {
			w.txOps = func(ev *Event, u *txn.Unit) error {
				for i := range 100 {
					_ = u.Create(map[string]any{"id": fmt.Sprint("d", i), "customerId": txPartition})
				}
				return nil
			}
		}, OutcomeTxnRejected, func(t *testing.T, r Report) {
			if !errors.Is(r.Err, txn.ErrLimit) || !IsPermanent(r.Err) {
				t.Fatalf("error %v is not a permanent limit", r.Err)
			}
		}},
		{"limit: an id with a slash", func(w *fakeNimbus) {
			w.txOps = func(ev *Event, u *txn.Unit) error {
				_ = u.Create(map[string]any{"id": "a/b", "customerId": txPartition})
				return nil
			}
		}, OutcomeTxnRejected, nil},
		{"time to live off", func(w *fakeNimbus) {
			if err := w.txn.SetTTL(txTarget, false); err != nil {
				w.t.Fatal(err)
			}
		}, OutcomeTransientFailure, func(t *testing.T, r Report) {
			if r.StoreOp != opTxnCommit || !strings.Contains(r.Err.Error(), "time to live") {
				t.Fatalf("store op %q, error %v", r.StoreOp, r.Err)
			}
		}},
		{"batch unavailable", func(w *fakeNimbus) { w.failNext, w.failNextMode = "txn.batch", faultBefore }, OutcomeTransientFailure, nil},
		{"marker read unavailable", func(w *fakeNimbus) { w.failNext, w.failNextMode = "txn.read", faultBefore }, OutcomeTransientFailure, func(t *testing.T, r Report) {
			if r.HandlerRan || r.StoreOp != opMarkerCheck {
				t.Fatalf("handler ran %v, store op %q", r.HandlerRan, r.StoreOp)
			}
		}},
		{"handler fails", func(w *fakeNimbus) { w.handle = fail("ledger closed") }, OutcomeEventFailed, nil},
		{"handler fails transiently", func(w *fakeNimbus) {
			w.handle = func(*Event) (Result, error) { return Result{}, Transient(errors.New("busy")) }
		}, OutcomeHandlerFailed, nil},
		{"handler hands off", func(w *fakeNimbus) { w.handle = handoffResult }, OutcomePendingHandoff, nil},
		{"handler panics", func(w *fakeNimbus) {
			w.handle = func(*Event) (Result, error) { panic("boom") }
		}, OutcomeEventFailed, nil},
		{"partition key function fails", func(w *fakeNimbus) { w.pkErr = errors.New("no customer") }, OutcomePermanentFailure, func(t *testing.T, r Report) {
			if r.HandlerRan || !IsPermanent(r.Err) {
				t.Fatalf("handler ran %v, error %v", r.HandlerRan, r.Err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
			c.arrange(w)
			r := w.p.Process(context.Background(), w.event("msg-1", "event-1"))
			if r.Outcome != c.want {
				t.Fatalf("outcome %s (%v), want %s", r.Outcome, r.Err, c.want)
			}
			if c.check != nil {
				c.check(t, r)
			}
			if w.marked("msg-1") || len(w.effects()) != 0 || w.records != 0 {
				t.Fatalf("committed: marker %v, effects %v, %d records", w.marked("msg-1"), w.effects(), w.records)
			}
		})
	}
}

// A batch applied whose answer was lost is ambiguous (503 after the
// pause), and nothing is sent; the redelivery finds the marker, skips the
// handler and sends the ResolutionResponse the first delivery never sent.
func TestTxAmbiguousThenResolvedByRedelivery(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
	w.failNext, w.failNextMode = "txn.batch", faultAfter
	d := w.event("msg-1", "event-1")
	r := w.p.Process(context.Background(), d)
	if r.Outcome != OutcomeTxnAmbiguous || !w.marked("msg-1") || !errors.Is(r.Err, txn.ErrAmbiguous) {
		t.Fatalf("%s: %v; marker %v", r.Outcome, r.Err, w.marked("msg-1"))
	}
	if strings.Contains(r.Err.Error(), errInjected.Error()) || r.StoreOp != opTxnCommit {
		t.Fatalf("the error %q (store op %q) carries the transport's text", r.Err, r.StoreOp)
	}
	r = w.p.Process(context.Background(), redelivery(d))
	if r.Outcome != OutcomeDuplicateResolved || r.HandlerRan || len(w.effects()) != 1 {
		t.Fatalf("redelivery: %s, ran %v, effects %v", r.Outcome, r.HandlerRan, w.effects())
	}
	if got := w.responses(); !slices.Equal(got, []string{"ResolutionResponse event-1"}) {
		t.Fatalf("responses %v", got)
	}
}

// A fresh transactional success costs 3 sequential round trips: the inbox
// check ∥ the marker read ∥ the session-state read, the batch, the
// response; no inbox record.
func TestTxFreshSuccessCostsThreeRoundTrips(t *testing.T) {
	c := measureExact(t, txFreshCase)
	if c.outcome != OutcomeCompleted || c.roundTrips != 3 {
		t.Fatalf("%s in %d sequential round trips, want completed in 3", c.outcome, c.roundTrips)
	}
	if c.checks != 1 || c.txReads != 1 || c.stateReads != 1 || c.batches != 1 || c.records != 0 || c.sends != 1 {
		t.Fatalf("a fresh transactional success made %+v", c)
	}
}

// txFreshCase is a fresh delivery of a transactional handler.
var txFreshCase = roundTripCase{name: "fresh transactional success", tx: true,
	prepare: func(w *fakeNimbus) func() Report {
		d := w.event("msg-1", "event-1")
		return func() Report { return w.p.Process(context.Background(), d) }
	}}

// txResolvedCase is the redelivery of a message whose transactional
// batch committed without events: the marker read, then the
// ResolutionResponse (duplicate_resolved), as a duplicate's 2.
var txResolvedCase = roundTripCase{name: "redelivery of a committed transactional delivery", tx: true,
	prepare: func(w *fakeNimbus) func() Report {
		w.commitMarkerOnly("msg-1")
		d := redelivery(w.event("msg-1", "event-1"))
		return func() Report { return w.p.Process(context.Background(), d) }
	}}

// A redelivery that resolves a committed transactional delivery costs a
// duplicate's 2 round trips and sends one message.
func TestTxResolvedRedeliveryCostsTwoRoundTrips(t *testing.T) {
	c := measureExact(t, txResolvedCase)
	if c.outcome != OutcomeDuplicateResolved || c.roundTrips != 2 || c.sends != 1 || c.batches != 0 {
		t.Fatalf("%s in %d sequential round trips (%+v), want duplicate_resolved in 2 with one send", c.outcome, c.roundTrips, c)
	}
}

// plainTwoWritesCase is the same effect without a transaction: a plain
// handler that writes two documents one after the other, then the inbox
// record and the response.
var plainTwoWritesCase = roundTripCase{name: "fresh plain success writing two documents",
	prepare: func(w *fakeNimbus) func() Report {
		w.handle = func(*Event) (Result, error) {
			for range 2 {
				if err := w.call("doc.write", func() error { return nil }); err != nil {
					return Result{}, err
				}
			}
			return Completed(), nil
		}
		d := w.event("msg-1", "event-1")
		return func() Report { return w.p.Process(context.Background(), d) }
	}}

// The plain handler writing the same two documents with the plain inbox
// takes 5 sequential round trips, the transactional one 3.
func TestPlainTwoWritesCostFiveRoundTrips(t *testing.T) {
	if c := measureExact(t, plainTwoWritesCase); c.outcome != OutcomeCompleted || c.roundTrips != 5 || c.records != 1 {
		t.Fatalf("%s in %d round trips with %d records, want completed in 5 with 1", c.outcome, c.roundTrips, c.records)
	}
}

// A batch that breaks a limit takes the dead-letter path: on the last
// delivery the Resolver gets the dead-letter ErrorResponse naming the
// limit.
func TestTxLimitOnTheLastDeliveryReportsTheDeadLetter(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
	w.txOps = func(ev *Event, u *txn.Unit) error {
		_ = u.Create(map[string]any{"id": "a#b", "customerId": txPartition})
		return nil
	}
	d := w.event("msg-1", "event-1")
	d.Broker.DeliveryCount = w.p.o.MaxDeliveryCount
	r := w.p.Process(context.Background(), d)
	if r.Outcome != OutcomeTxnRejected || !r.DeadLetterNotice {
		t.Fatalf("%s, notice %v (%v)", r.Outcome, r.DeadLetterNotice, r.NoticeErr)
	}
	reason, _ := w.lastSent("ErrorResponse").ApplicationProperties["DeadLetterReason"].(string)
	if !strings.Contains(reason, "Permanent failure") || !strings.Contains(reason, "batch limit id") {
		t.Fatalf("DeadLetterReason %q", reason)
	}
}

// 64 copies of one message processed at once apply its effect once and
// resolve it once; every other copy ends as a duplicate (a redelivered
// conflict included).
func TestTxConcurrentCopiesApplyOnce(t *testing.T) {
	const copies = 64
	for trial := range 5 {
		w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
		// A read-modify-write of one balance, as the sample does.
		w.txOps = func(ev *Event, u *txn.Unit) error {
			var bal struct {
				Count int `json:"count"`
			}
			found, etag, err := u.Read(context.Background(), "balance", &bal)
			if err != nil {
				return err
			}
			doc := map[string]any{"id": "balance", "customerId": txPartition, "count": bal.Count + 1}
			if !found {
				return u.Create(doc)
			}
			return u.Replace(doc, etag)
		}
		var wg sync.WaitGroup
		outcomes := make(chan Outcome, copies)
		for range copies {
			wg.Go(func() {
				d := w.event("msg-1", "event-1")
				for {
					r := w.p.Process(context.Background(), d)
					if r.Outcome.Completes() {
						outcomes <- r.Outcome
						return
					}
					if r.Outcome != OutcomeTxnConflict {
						t.Errorf("outcome %s: %v", r.Outcome, r.Err)
						return
					}
					d = redelivery(d)
				}
			})
		}
		wg.Wait()
		close(outcomes)
		completed := 0
		for o := range outcomes {
			if o == OutcomeCompleted {
				completed++
			}
		}
		var bal struct {
			Count int `json:"count"`
		}
		body, _, _, err := w.txn.Read(context.Background(), txTarget, txPartition, "balance")
		if err == nil {
			err = json.Unmarshal(body, &bal)
		}
		resolutions := 0
		for _, r := range w.responses() {
			if r == "ResolutionResponse event-1" {
				resolutions++
			}
		}
		if err != nil || bal.Count != 1 || completed != 1 || resolutions != 1 {
			t.Fatalf("trial %d: count %d (%v), %d completed, %d ResolutionResponses", trial, bal.Count, err, completed, resolutions)
		}
	}
}
