package subscriber

import (
	"context"
	"errors"
	"strings"
	"testing"
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
