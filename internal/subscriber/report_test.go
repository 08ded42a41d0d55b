package subscriber

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/session"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// replayOf parks ev-3 behind ev-2's block, lifts the block with a
// resubmission of ev-2 and returns the replay request that follows, with
// ev-3's handler answering handle.
func replayOf(w *fakeNimbus, handle func(ev *Event) (Result, error)) *Delivery {
	w.t.Helper()
	blockedWithParked(w)
	w.deliver(w.event("msg-3", "ev-3"))
	w.handle = func(ev *Event) (Result, error) {
		if ev.EventID == "ev-3" {
			return handle(ev)
		}
		return Completed(), nil
	}
	w.deliver(w.resubmit("ev-2"))
	return w.delivered(w.lastSent("ProcessDeferredRequest"))
}

// A parked copy that fails permanently on its replay is reported to the
// Resolver before it is dead-lettered, and the copy's own report (its line
// in the invocation's log) says the notice went out.
func TestReplayedCopyReportsItsDeadLetterNotice(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{})
	req := replayOf(w, func(*Event) (Result, error) { return Result{}, Permanent(errors.New("the ledger refuses the order")) })
	r := w.p.Drain(context.Background(), req)
	if r.Outcome != OutcomeDrained || len(r.Replays) != 1 {
		t.Fatalf("drain %s (%v), %d replays", r.Outcome, r.Err, len(r.Replays))
	}
	c := r.Replays[0]
	if c.Outcome != OutcomePermanentFailure || !c.DeadLetterNotice || c.NoticeErr != nil {
		t.Fatalf("copy report: outcome %s, notice %v (%v)", c.Outcome, c.DeadLetterNotice, c.NoticeErr)
	}
	notice := w.lastSent("ErrorResponse").ApplicationProperties
	if desc, _ := notice["DeadLetterErrorDescription"].(string); !strings.Contains(desc, "the ledger refuses the order") {
		t.Fatalf("notice %v", notice)
	}
	if left := w.parked(strictSession); len(left) != 0 {
		t.Fatalf("left parked %v", left)
	}
}

// A parked copy that cannot be read is dead-lettered with the text NimBus's
// MessageContext gives for the missing property, as a delivery on the main
// subscription is, not with this program's own error text.
func TestUnreadableParkedCopyIsDeadLetteredWithNimBusText(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{})
	req := replayOf(w, func(*Event) (Result, error) { return Completed(), nil })
	w.mu.Lock()
	delete(w.deferred[strictSession].items[0].p.Properties, "From")
	w.mu.Unlock()
	r := w.p.Drain(context.Background(), req)
	if len(r.Replays) != 1 || r.Replays[0].Outcome != OutcomeInvalidMessage {
		t.Fatalf("drain %s, replays %+v", r.Outcome, r.Replays)
	}
	if reason, desc := deadLetterTexts(&r.Replays[0]); reason != "Failed to handle message." ||
		!strings.Contains(desc, "Message.UserProperties[From] is not defined.") {
		t.Fatalf("dead-letter texts %q / %q", reason, desc)
	}
	notice := w.lastSent("ErrorResponse").ApplicationProperties
	if desc, _ := notice["DeadLetterErrorDescription"].(string); !strings.Contains(desc, "Message.UserProperties[From] is not defined.") {
		t.Fatalf("notice %v", notice)
	}
}

// A session-state write that fails is its own outcome, not an inbox store
// failure: answered 503 after the pause like one, with nothing sent, the
// session left as it was and the failed operation counted as
// session_write.
func TestSessionStateWriteFailureIsItsOwnOutcome(t *testing.T) {
	for name, c := range map[string]struct {
		handle func(*Event) (Result, error)
		state  session.State
	}{
		"blocking after a failed event": {handle: fail("ledger closed")},
		"parking behind a block":        {state: blockedBy("other-event", "msg-x")},
	} {
		t.Run(name, func(t *testing.T) {
			metrics := &telemetry.Metrics{}
			sessions := session.NewMemory(session.MemoryOptions{})
			pub := &resolver.Memory{}
			reg := NewRegistry()
			reg.Handle("OrderPlaced", func(ctx context.Context, ev *Event) (Result, error) {
				if c.handle != nil {
					return c.handle(ev)
				}
				return Completed(), nil
			})
			p, err := New(Options{EndpointID: "billing", Publisher: pub, Handlers: reg, Sessions: sessions, Metrics: metrics})
			if err != nil {
				t.Fatal(err)
			}
			key := session.NewKey("billing", "customer-1")
			if c.state != (session.State{}) {
				if _, err := sessions.Write(context.Background(), key, c.state); err != nil {
					t.Fatal(err)
				}
			}
			sessions.FailWith(func(op string) error {
				if op == session.OpWrite {
					return errors.New("503 from acct.documents.azure.com")
				}
				return nil
			})
			r := p.Process(context.Background(), delivery(str("m-1")))
			spec := r.Outcome.Spec()
			if r.Outcome != OutcomeSessionWriteFailed || r.StoreOp != "session_write" || spec.Status != 503 || !spec.Pause ||
				!strings.Contains(spec.Message, "session state write failed") {
				t.Fatalf("outcome %s (%+v), store op %q", r.Outcome, spec, r.StoreOp)
			}
			if !strings.Contains(r.Err.Error(), "session state write failed (unavailable)") || strings.Contains(r.Err.Error(), "acct.documents") {
				t.Fatalf("error %q", r.Err)
			}
			if n := metrics.Get(telemetry.InboxOperationFailed, "nimbus.store.operation=session_write"); n != 1 {
				t.Fatalf("failed session writes counted %v", n)
			}
			if len(pub.Sent()) != 0 || r.Published || r.Blocked || r.Parked {
				t.Fatalf("sent %d messages; report %+v", len(pub.Sent()), r)
			}
			sessions.FailWith(nil)
			if st, err := sessions.Read(context.Background(), key); err != nil || st.BlockedByEventID != c.state.BlockedByEventID || st.DeferredCount != 0 {
				t.Fatalf("state %+v, %v", st, err)
			}
		})
	}
}
