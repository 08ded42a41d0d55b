package subscriber

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// In-process scenarios: one session of the endpoint, the pipeline's own
// traffic fed back to it as the broker would (parked copies to the Deferred
// subscription, replay requests to DeferredProcessor, RetryRequests through
// the scheduler), failures injected at every store and broker call.

// deliver hands d to the pipeline until a delivery completes, redelivering
// after each failed one as the broker does (the session's next message
// waits meanwhile). It fails the test if d would be dead-lettered.
func (w *fakeNimbus) deliver(d *Delivery) Report {
	w.t.Helper()
	for {
		r := w.p.Process(context.Background(), d)
		if r.Outcome.Completes() {
			return r
		}
		if d.Broker.DeliveryCount >= w.p.o.MaxDeliveryCount {
			w.t.Fatalf("message %s (%s) dead-lettered: %s: %v", deref(d.Broker.MessageID), r.MessageType, r.Outcome, r.Err)
		}
		d = redelivery(d)
	}
}

// drainAll delivers every replay request (ProcessDeferredRequest) sent so
// far, and those sent meanwhile, to the DeferredProcessor function until
// each completes. It returns the replays in order.
func (w *fakeNimbus) drainAll() []Report {
	seen := &w.drained
	w.t.Helper()
	var out []Report
	for {
		w.mu.Lock()
		var next *message.Outgoing
		for ; *seen < len(w.sent); *seen++ {
			if m := w.sent[*seen]; m.Type() == message.ProcessDeferredRequest.String() {
				next = m
				*seen++
				break
			}
		}
		w.mu.Unlock()
		if next == nil {
			return out
		}
		d := w.delivered(next)
		for {
			r := w.p.Drain(context.Background(), d)
			out = append(out, r.Replays...)
			if r.Outcome.Completes() {
				break
			}
			if d.Broker.DeliveryCount >= w.p.o.MaxDeliveryCount {
				w.t.Fatalf("replay request dead-lettered: %s: %v", r.Outcome, r.Err)
			}
			d = redelivery(d)
		}
	}
}

// scheduledRetry returns the i-th scheduled RetryRequest as the endpoint
// subscription delivers it.
func (w *fakeNimbus) scheduledRetry(i int) *Delivery {
	w.t.Helper()
	if i >= len(w.scheduled) {
		w.t.Fatalf("only %d RetryRequests were scheduled", len(w.scheduled))
	}
	return w.delivered(w.scheduled[i].m)
}

// successes lists the EventIds of successful handler runs, in order.
func (w *fakeNimbus) successes() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, r := range w.runs {
		if r.err == nil && !r.handoff {
			out = append(out, r.eventID)
		}
	}
	return out
}

func evs(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("ev-%d", i))
	}
	return out
}

// responsesOf lists the Resolver response types sent for eventID.
func (w *fakeNimbus) responsesOf(eventID string) []string {
	var out []string
	for _, s := range w.responses() {
		if t, ev, _ := strings.Cut(s, " "); ev == eventID {
			out = append(out, t)
		}
	}
	return out
}

// checkResolverFormat checks what NimBus's Resolver reads on every
// response: To=Resolver, no From, the session, CorrelationId = the inbound
// MessageId, and the identity properties.
func checkResolverFormat(t *testing.T, w *fakeNimbus) {
	t.Helper()
	for _, m := range w.sent {
		p := m.ApplicationProperties
		if p["To"] != message.ResolverID {
			continue
		}
		if _, hasFrom := p["From"]; hasFrom {
			t.Fatalf("%s carries From", m.Type())
		}
		if m.SessionID != strictSession || m.CorrelationID == nil || p["EventId"] == nil || p["EventTypeId"] != "OrderPlaced" ||
			p["ParentMessageId"] != *m.CorrelationID || p["OriginatingMessageId"] == nil {
			t.Fatalf("%s does not read as NimBus writes it: session %q correlation %v props %v", m.Type(), m.SessionID, m.CorrelationID, p)
		}
		if _, err := message.ParseContent(m.Body); err != nil {
			t.Fatalf("%s body: %v", m.Type(), err)
		}
	}
}

// sixEvents delivers events 1..6 of the session; the handler decides.
func (w *fakeNimbus) sixEvents() {
	w.t.Helper()
	for i := 1; i <= 6; i++ {
		w.deliver(w.event(fmt.Sprintf("msg-%d", i), fmt.Sprintf("ev-%d", i)))
	}
}

// duringReplayOf delivers events 7 and 8 while the replay of eventID's
// copy runs (its handler is on the stack: the replay holds the session's
// parked copies).
func (w *fakeNimbus) duringReplayOf(eventID string) *[]Report {
	var got []Report
	done := false
	w.onRun = func(ev *Event) {
		if done || ev.EventID != eventID || ev.Attempt != AttemptReplay {
			return
		}
		done = true
		got = append(got, w.deliver(w.event("msg-7", "ev-7")), w.deliver(w.event("msg-8", "ev-8")))
	}
	return &got
}

func TestScenarioFailedEventResolvedByTheManager(t *testing.T) {
	type resolution struct {
		name string
		// fail2 is how event 2 fails on its original delivery.
		fail2 func(ev *Event) (Result, error)
		// resolve resolves event 2.
		resolve  func(t *testing.T, w *fakeNimbus)
		policy   *testPolicy
		ev2Runs  []string
		ev2Resps []string
	}
	failOriginal := func(ev *Event) (Result, error) {
		if ev.EventID == "ev-2" && ev.Attempt == AttemptOriginal {
			return Result{}, fmt.Errorf("ledger is closed")
		}
		return Completed(), nil
	}
	cases := []resolution{
		{name: "Manager ResubmissionRequest", fail2: failOriginal,
			resolve: func(t *testing.T, w *fakeNimbus) {
				r := w.deliver(w.resubmit("ev-2"))
				if r.Outcome != OutcomeCompleted || !r.Unblocked || !r.DrainRequested || !w.recorded("msg-2") || !w.recorded(r.MessageID) {
					t.Fatalf("resubmission %+v", r)
				}
			},
			ev2Runs:  []string{"ev-2/original!", "ev-2/resubmission"},
			ev2Resps: []string{"ErrorResponse", "ResolutionResponse"}},
		{name: "retry policy: the second RetryRequest succeeds", policy: &testPolicy{max: 3, delay: time.Minute},
			fail2: func(ev *Event) (Result, error) {
				if ev.EventID == "ev-2" && ev.RetryCount < 2 {
					return Result{}, fmt.Errorf("ledger is closed (attempt %d)", ev.RetryCount)
				}
				return Completed(), nil
			},
			resolve: func(t *testing.T, w *fakeNimbus) {
				first := w.scheduledRetry(0)
				if first.Properties["InboxMessageId"] != "msg-2" || first.Properties["RetryCount"] != int32(1) {
					t.Fatalf("first RetryRequest %v", first.Properties)
				}
				if r := w.deliver(first); r.Outcome != OutcomeEventFailed || !r.RetryScheduled {
					t.Fatalf("first retry %+v", r)
				}
				second := w.scheduledRetry(1)
				if second.Properties["InboxMessageId"] != "msg-2" || second.Properties["RetryCount"] != int32(2) {
					t.Fatalf("second RetryRequest %v: InboxMessageId must be carried on", second.Properties)
				}
				r := w.deliver(second)
				if r.Outcome != OutcomeCompleted || !r.Unblocked || !w.recorded("msg-2") || !w.recorded(r.MessageID) || w.recorded(*first.Broker.MessageID) {
					t.Fatalf("second retry %+v", r)
				}
			},
			ev2Runs:  []string{"ev-2/original!", "ev-2/retry!", "ev-2/retry"},
			ev2Resps: []string{"ErrorResponse", "ErrorResponse", "ResolutionResponse"}},
		{name: "Manager SkipRequest", fail2: failOriginal,
			resolve: func(t *testing.T, w *fakeNimbus) {
				if r := w.deliver(w.skip("ev-2")); r.Outcome != OutcomeSkipped || !r.Unblocked || !r.DrainRequested {
					t.Fatalf("skip %+v", r)
				}
			},
			ev2Runs:  []string{"ev-2/original!"},
			ev2Resps: []string{"ErrorResponse", "SkipResponse"}},
		{name: "pending handoff completed by the Manager",
			fail2: func(ev *Event) (Result, error) {
				if ev.EventID == "ev-2" {
					return handoffResult(ev)
				}
				return Completed(), nil
			},
			resolve: func(t *testing.T, w *fakeNimbus) {
				if r := w.deliver(w.handoffCompleted("ev-2")); r.Outcome != OutcomeHandoffCompleted || !r.Unblocked || !r.DrainRequested {
					t.Fatalf("handoff completed %+v", r)
				}
			},
			ev2Runs:  []string{"ev-2/original"},
			ev2Resps: []string{"PendingHandoffResponse", "ResolutionResponse"}},
		{name: "pending handoff failed by the Manager, then resubmitted",
			fail2: func(ev *Event) (Result, error) {
				if ev.EventID == "ev-2" && ev.Attempt == AttemptOriginal {
					return handoffResult(ev)
				}
				return Completed(), nil
			},
			resolve: func(t *testing.T, w *fakeNimbus) {
				r := w.deliver(w.handoffFailed("ev-2", "DMF rejected: invalid postal code", "DmfValidationError"))
				if r.Outcome != OutcomeHandoffFailed || r.Unblocked || !w.state().BlockedBy("ev-2") {
					t.Fatalf("handoff failed %+v", r)
				}
				if text, _ := errorContent(t, w.lastSent("ErrorResponse")); text != "DMF rejected: invalid postal code" {
					t.Fatalf("ErrorText %q", text)
				}
				if r := w.deliver(w.resubmit("ev-2")); r.Outcome != OutcomeCompleted || !r.Unblocked {
					t.Fatalf("resubmission %+v", r)
				}
			},
			ev2Runs:  []string{"ev-2/original", "ev-2/resubmission"},
			ev2Resps: []string{"PendingHandoffResponse", "ErrorResponse", "ResolutionResponse"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newFakeNimbus(t, fakeNimbusOptions{policy: c.policy})
			w.handle = c.fail2
			w.sixEvents()

			st := w.state()
			if !st.BlockedBy("ev-2") || st.BlockedByMessageID != "msg-2" || st.DeferredCount != 4 {
				t.Fatalf("after 6 events: %+v", st)
			}
			if got := w.parked(strictSession); !slices.Equal(got, []int64{0, 1, 2, 3}) {
				t.Fatalf("parked sequences %v", got)
			}
			for _, ev := range evs(3, 6) {
				if got := w.responsesOf(ev); !slices.Equal(got, []string{"DeferralResponse"}) {
					t.Fatalf("%s responses %v", ev, got)
				}
			}

			late := w.duringReplayOf("ev-4")
			c.resolve(t, w)
			replays := w.drainAll()

			if len(*late) != 2 || (*late)[0].Outcome != OutcomeDeferred || (*late)[1].Outcome != OutcomeDeferred {
				t.Fatalf("events 7 and 8 during the replay: %+v", *late)
			}
			want := []string{"ev-1"}
			if strings.HasSuffix(c.ev2Runs[len(c.ev2Runs)-1], "/resubmission") || strings.HasSuffix(c.ev2Runs[len(c.ev2Runs)-1], "/retry") {
				want = append(want, "ev-2")
			}
			if got, want := w.successes(), append(want, evs(3, 8)...); !slices.Equal(got, want) {
				t.Fatalf("handled in the order %v, want %v", got, want)
			}
			var ev2 []string
			for _, h := range w.handled() {
				if strings.HasPrefix(h, "ev-2/") {
					ev2 = append(ev2, h)
				}
			}
			if !slices.Equal(ev2, c.ev2Runs) {
				t.Fatalf("event 2 ran %v, want %v", ev2, c.ev2Runs)
			}
			for _, h := range w.handled() {
				if !strings.HasPrefix(h, "ev-1/") && !strings.HasPrefix(h, "ev-2/") && !strings.HasSuffix(h, "/replay") {
					t.Fatalf("%s: every event after the block must run as a replay", h)
				}
			}
			if got := w.responsesOf("ev-2"); !slices.Equal(got, c.ev2Resps) {
				t.Fatalf("event 2 responses %v, want %v", got, c.ev2Resps)
			}
			for _, ev := range evs(3, 8) {
				if got := w.responsesOf(ev); !slices.Equal(got, []string{"DeferralResponse", "ResolutionResponse"}) {
					t.Fatalf("%s responses %v", ev, got)
				}
			}
			if len(replays) != 6 {
				t.Fatalf("%d replays, want 6", len(replays))
			}
			for i, r := range replays {
				if r.Outcome != OutcomeCompleted || r.DeferralSequence != int64(i) {
					t.Fatalf("replay %d: %+v", i, r)
				}
			}
			st = w.state()
			if st.Blocked() || st.DeferredCount != 0 || st.Draining() || len(w.parked(strictSession)) != 0 {
				t.Fatalf("final state %+v, parked %v", st, w.parked(strictSession))
			}
			// Stand-in ids: each original MessageId is recorded by its replay,
			// so a late redelivery of any original is a duplicate.
			for i := 3; i <= 8; i++ {
				if r := w.deliver(redelivery(w.event(fmt.Sprintf("msg-%d", i), fmt.Sprintf("ev-%d", i)))); r.Outcome != OutcomeDuplicate {
					t.Fatalf("late redelivery of msg-%d: %s", i, r.Outcome)
				}
			}
			checkResolverFormat(t, w)
		})
	}
}

func TestScenarioReplayedCopyFailsAndBlocksAgain(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{})
	failing := map[string]bool{"ev-2": true, "ev-4": true}
	w.handle = func(ev *Event) (Result, error) {
		if failing[ev.EventID] && ev.Attempt != AttemptResubmission {
			return Result{}, fmt.Errorf("%s failed", ev.EventID)
		}
		return Completed(), nil
	}
	w.sixEvents()
	w.deliver(w.resubmit("ev-2"))
	replays := w.drainAll()
	if len(replays) != 2 || replays[0].Outcome != OutcomeCompleted || replays[1].Outcome != OutcomeEventFailed || !replays[1].Blocked {
		t.Fatalf("replays %+v", replays)
	}
	st := w.state()
	if !st.BlockedBy("ev-4") || st.BlockedByMessageID != "msg-4" || st.DeferredCount != 2 {
		t.Fatalf("state after the failed replay %+v", st)
	}
	if got := w.parked(strictSession); !slices.Equal(got, []int64{2, 3}) {
		t.Fatalf("still parked %v, want events 5 and 6 in order", got)
	}
	// A new event waits behind them.
	if r := w.deliver(w.event("msg-7", "ev-7")); r.Outcome != OutcomeDeferred || r.DeferralSequence != 4 {
		t.Fatalf("event 7 %+v", r)
	}
	// The failed replay's source delivery was not recorded: its late
	// redelivery is the blocker's own and runs again (and fails again).
	if r := w.deliver(redelivery(w.event("msg-4", "ev-4"))); r.Outcome != OutcomeEventFailed {
		t.Fatalf("redelivery of msg-4: %s", r.Outcome)
	}
	if r := w.deliver(w.resubmit("ev-4")); r.Outcome != OutcomeCompleted || !w.recorded("msg-4") {
		t.Fatalf("resubmission of ev-4 %+v", r)
	}
	w.drainAll()
	if got, want := w.successes(), []string{"ev-1", "ev-2", "ev-3", "ev-4", "ev-5", "ev-6", "ev-7"}; !slices.Equal(got, want) {
		t.Fatalf("handled %v, want %v", got, want)
	}
	if st := w.state(); st.Blocked() || st.DeferredCount != 0 || len(w.parked(strictSession)) != 0 {
		t.Fatalf("final %+v", st)
	}
	if r := w.deliver(redelivery(w.event("msg-4", "ev-4"))); r.Outcome != OutcomeDuplicate {
		t.Fatalf("late redelivery of msg-4 after its resubmission: %s", r.Outcome)
	}
}

// faultRun is the scenario of TestScenarioFailedEventResolvedByTheManager
// (resubmission, events 7 and 8 arriving during the replay) driven through
// whatever the fault plan injects, each failed delivery redelivered.
func faultRun(w *fakeNimbus) {
	w.handle = func(ev *Event) (Result, error) {
		if ev.EventID == "ev-2" && ev.Attempt == AttemptOriginal {
			return Result{}, fmt.Errorf("ledger is closed")
		}
		return Completed(), nil
	}
	w.sixEvents()
	w.duringReplayOf("ev-4")
	w.deliver(w.resubmit("ev-2"))
	w.drainAll()
}

// TestScenarioCrashWindows fails each store and broker call of the
// scenario in turn, once before it takes effect (an outage) and once after
// (the process dies right after the call: applied, the answer lost), and
// redelivers what failed. Every run must lose nothing, keep the session's
// order, and re-run no handler that succeeded.
func TestScenarioCrashWindows(t *testing.T) {
	clean := newFakeNimbus(t, fakeNimbusOptions{})
	faultRun(clean)
	total := clean.callSeq
	if total < 50 {
		t.Fatalf("the clean run made only %d store/broker calls", total)
	}
	var runs, reruns, dupSkips, staleLeft int
	byOp, dupByFault := map[string]int{}, map[string]int{}
	for _, mode := range []faultMode{faultBefore, faultAfter} {
		for k := 1; k <= total; k++ {
			t.Run(fmt.Sprintf("mode%d-call%d", mode, k), func(t *testing.T) {
				w := newFakeNimbus(t, fakeNimbusOptions{})
				w.failAt, w.mode = k, mode
				faultRun(w)
				runs++
				name := fmt.Sprintf("mode %d, fault %s", mode, w.failed)
				if w.failed == "" {
					t.Fatalf("%s: call %d was never made", name, k)
				}
				byOp[strings.SplitN(w.failed, " ", 2)[1]]++

				// Order: no handler run of an event before every earlier event
				// of the session succeeded.
				done := map[string]bool{}
				success := map[string]int{}
				for _, r := range w.runs {
					var n int
					fmt.Sscanf(r.eventID, "ev-%d", &n)
					for j := 1; j < n; j++ {
						if !done[fmt.Sprintf("ev-%d", j)] {
							t.Fatalf("%s: %s ran (%s) before ev-%d succeeded; runs %v", name, r.eventID, r.attempt, j, w.handled())
						}
					}
					if r.err == nil {
						done[r.eventID] = true
						success[r.eventID]++
					} else if r.eventID != "ev-2" || r.attempt != AttemptOriginal {
						t.Fatalf("%s: %s failed unexpectedly", name, r.eventID)
					}
				}
				// Nothing lost.
				for _, ev := range evs(1, 8) {
					if success[ev] == 0 {
						t.Fatalf("%s: %s never handled; runs %v", name, ev, w.handled())
					}
					if success[ev] > 1 {
						reruns += success[ev] - 1
						t.Errorf("%s: %s handled %d times", name, ev, success[ev])
					}
					resps := w.responsesOf(ev)
					last := resps[len(resps)-1]
					if last != "ResolutionResponse" && last != "SkipResponse" {
						t.Fatalf("%s: %s ends with %s; responses %v", name, ev, last, resps)
					}
					if slices.Contains(resps, "SkipResponse") {
						dupSkips++
						dupByFault[fmt.Sprintf("%s mode %d", strings.SplitN(w.failed, " ", 2)[1], mode)]++
					}
				}
				st := w.state()
				if st.Blocked() || st.DeferredCount != 0 || st.Draining() {
					t.Fatalf("%s: final state %+v, parked %v", name, st, w.parked(strictSession))
				}
				if left := w.parked(strictSession); len(left) > 0 {
					// A copy handled and passed by the cursor whose removal failed:
					// stale, never replayed again; the session's next replay removes
					// it.
					for _, seq := range left {
						if !st.Stale(seq) {
							t.Fatalf("%s: copy %d left parked and not replayed; state %+v", name, seq, st)
						}
					}
					staleLeft++
					w.failAt = 0
					w.handle = func(ev *Event) (Result, error) {
						if ev.EventID == "ev-9" && ev.Attempt == AttemptOriginal {
							return Result{}, fmt.Errorf("ledger is closed")
						}
						return Completed(), nil
					}
					w.deliver(w.event("msg-9", "ev-9"))
					w.deliver(w.event("msg-10", "ev-10"))
					w.deliver(w.resubmit("ev-9"))
					w.drainAll()
					if got := w.successes(); len(got) != 10 || !slices.Equal(got[8:], []string{"ev-9", "ev-10"}) {
						t.Fatalf("%s: after the next replay the handled events are %v", name, got)
					}
					if left := w.parked(strictSession); len(left) != 0 {
						t.Fatalf("%s: the next replay left %v parked", name, left)
					}
				}
			})
		}
	}
	t.Logf("%d fault runs over %d calls of the clean run (%v): %d handler re-runs, %d events answered SkipResponse DuplicateDetected (a failure after the handler and its record), %d runs left a stale copy for the next replay to remove; the faults that led to a SkipResponse: %v",
		runs, total, byOp, reruns, dupSkips, staleLeft, dupByFault)
}

// blockedWithParked builds a session blocked by ev-2 with ev-3 parked.
func blockedWithParked(w *fakeNimbus) {
	w.handle = func(ev *Event) (Result, error) {
		if ev.EventID == "ev-2" && ev.Attempt == AttemptOriginal {
			return Result{}, fmt.Errorf("ledger is closed")
		}
		return Completed(), nil
	}
	w.deliver(w.event("msg-2", "ev-2"))
}

// A replay whose cursor write is lost, or whose copy removal is lost, must
// not leave the session gated with nothing parked: the next event is
// handled at once, not parked behind a count that never drains.
func TestDrainLostCursorWriteOrCopyRemovalLeavesNothingWaiting(t *testing.T) {
	for _, c := range []struct {
		op   string
		mode faultMode
	}{{"state.write", faultBefore}, {"state.write", faultAfter}, {"deferred.complete", faultBefore}, {"deferred.complete", faultAfter}} {
		t.Run(fmt.Sprintf("%s-mode%d", c.op, c.mode), func(t *testing.T) {
			w := newFakeNimbus(t, fakeNimbusOptions{})
			blockedWithParked(w)
			w.deliver(w.event("msg-3", "ev-3"))
			w.deliver(w.resubmit("ev-2"))
			w.failNext, w.failNextMode = c.op, c.mode
			w.drainAll()
			if st := w.state(); st.Gated() || st.Draining() {
				t.Fatalf("state %+v", st)
			}
			if r := w.deliver(w.event("msg-4", "ev-4")); r.Outcome != OutcomeCompleted {
				t.Fatalf("event 4: %s", r.Outcome)
			}
			if got := w.successes(); !slices.Equal(got, []string{"ev-2", "ev-3", "ev-4"}) {
				t.Fatalf("handled %v", got)
			}
		})
	}
}

// A park whose copy was sent but whose answer was lost is redelivered and
// sends the copy again under the same DeferralSequence. The replay passes
// the second copy over as stale: with the inbox off it would otherwise run
// the handler twice, and with it on answer a second, SkipResponse.
func TestDrainSkipsACopyParkedTwice(t *testing.T) {
	for _, noInbox := range []bool{true, false} {
		t.Run(fmt.Sprintf("inbox off %v", noInbox), func(t *testing.T) {
			w := newFakeNimbus(t, fakeNimbusOptions{noInbox: noInbox})
			blockedWithParked(w)
			w.failNext, w.failNextMode = "publish Deferred", faultAfter
			if r := w.deliver(w.event("msg-3", "ev-3")); r.DeliveryCount != 2 || r.DeferralSequence != 0 {
				t.Fatalf("park %+v", r)
			}
			if got := w.parked(strictSession); !slices.Equal(got, []int64{0, 0}) {
				t.Fatalf("parked %v, want the same copy twice", got)
			}
			w.deliver(w.resubmit("ev-2"))
			w.drainAll()
			if got := w.successes(); !slices.Equal(got, []string{"ev-2", "ev-3"}) {
				t.Fatalf("handled %v", got)
			}
			if got := w.responsesOf("ev-3"); got[len(got)-1] != "ResolutionResponse" || slices.Contains(got, "SkipResponse") {
				t.Fatalf("ev-3 responses %v", got)
			}
			if left := w.parked(strictSession); len(left) != 0 {
				t.Fatalf("left parked %v", left)
			}
		})
	}
}

// TestScenarioRecordOutageIsTheOnlyRerunWindow: an inbox outage that
// outlasts every record attempt of one invocation, at each record of the
// scenario in turn. The spec's window: the handler succeeded, its record
// failed, so the redelivery runs it again — at most once per outage, never
// out of order, nothing lost.
func TestScenarioRecordOutageIsTheOnlyRerunWindow(t *testing.T) {
	clean := newFakeNimbus(t, fakeNimbusOptions{})
	faultRun(clean)
	records := clean.calls["inbox.record"]
	var reruns, runs int
	for i := 1; i <= records; i++ {
		w := newFakeNimbus(t, fakeNimbusOptions{})
		w.outageFrom["inbox.record"] = i
		faultRun(w)
		runs++
		success := map[string]int{}
		for _, r := range w.runs {
			if r.err == nil {
				success[r.eventID]++
			}
		}
		n := 0
		for _, ev := range evs(1, 8) {
			if success[ev] == 0 {
				t.Fatalf("outage at record %d: %s lost", i, ev)
			}
			n += success[ev] - 1
		}
		if n > 1 {
			t.Fatalf("outage at record %d: %d re-runs, want at most 1: %v", i, n, w.handled())
		}
		got := w.successes()
		if first := slices.Compact(slices.Clone(got)); !slices.Equal(first, evs(1, 8)) {
			t.Fatalf("outage at record %d: handled in the order %v", i, got)
		}
		if st := w.state(); st.Gated() {
			t.Fatalf("outage at record %d: final state %+v", i, st)
		}
		reruns += n
	}
	if reruns == 0 {
		t.Fatal("no outage re-ran a handler: the window was not reached")
	}
	t.Logf("%d record outages: %d handler re-runs in all (at most one each)", runs, reruns)
}

// Events 7 and 8 delivered by another invocation, concurrently with the
// replay of 3..6 (not from inside a replayed handler): whichever way the
// race between the replay's cursor writes and the parks goes, they run
// after 6, in order, once each.
func TestScenarioEventsDuringReplayConcurrently(t *testing.T) {
	outcomes := map[Outcome]int{}
	for i := range 40 {
		w := newFakeNimbus(t, fakeNimbusOptions{})
		w.handle = func(ev *Event) (Result, error) {
			if ev.EventID == "ev-2" && ev.Attempt == AttemptOriginal {
				return Result{}, fmt.Errorf("ledger is closed")
			}
			return Completed(), nil
		}
		w.sixEvents()
		started := make(chan struct{})
		var once bool
		w.onRun = func(ev *Event) {
			if !once && ev.Attempt == AttemptReplay && ev.EventID == fmt.Sprintf("ev-%d", 3+i%4) {
				once = true
				close(started)
			}
		}
		w.deliver(w.resubmit("ev-2"))
		done := make(chan []Outcome)
		go func() {
			<-started
			var outs []Outcome
			for _, n := range []int{7, 8} {
				d := w.event(fmt.Sprintf("msg-%d", n), fmt.Sprintf("ev-%d", n))
				for {
					r := w.p.Process(context.Background(), d)
					if r.Outcome.Completes() {
						outs = append(outs, r.Outcome)
						break
					}
					d = redelivery(d)
				}
			}
			done <- outs
		}()
		w.drainAll()
		outs := <-done
		for _, o := range outs {
			outcomes[o]++
		}
		w.drainAll()
		if got := w.successes(); !slices.Equal(got, evs(1, 8)) {
			t.Fatalf("run %d: handled %v (events 7 and 8: %v)", i, got, outs)
		}
		if st := w.state(); st.Gated() || st.Draining() || len(w.parked(strictSession)) != 0 {
			t.Fatalf("run %d: final %+v parked %v", i, st, w.parked(strictSession))
		}
	}
	t.Logf("events 7 and 8 over 40 runs: %v", outcomes)
}
