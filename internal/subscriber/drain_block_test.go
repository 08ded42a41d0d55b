package subscriber

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/session"
)

// chanDeferred is a Deferred whose one session hands out the copies fed to
// it, waiting for the next one until the caller's wait ends.
type chanDeferred struct {
	copies chan *Parked

	mu        sync.Mutex
	completed []string
	abandoned int
	closed    bool
}

func (d *chanDeferred) Accept(context.Context, string) (DeferredSession, error) { return d, nil }

func (d *chanDeferred) Next(ctx context.Context) (*Parked, error) {
	select {
	case p := <-d.copies:
		return p, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", ErrNoParked, ctx.Err())
	}
}

func (d *chanDeferred) Complete(_ context.Context, p *Parked) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.completed = append(d.completed, deref(p.Broker.MessageID))
	return nil
}

func (d *chanDeferred) Abandon(_ context.Context, p *Parked) error {
	d.mu.Lock()
	d.abandoned++
	d.mu.Unlock()
	p.Broker.DeliveryCount++
	d.copies <- p // back at the head: nothing else is queued in these tests
	return nil
}
func (d *chanDeferred) DeadLetter(context.Context, *Parked, string, string) error {
	return nil
}
func (d *chanDeferred) RenewLock(context.Context) error { return nil }
func (d *chanDeferred) Close(context.Context) error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	return nil
}

// drainFixture is a pipeline with session state and a chanDeferred, and
// a handler that fails the events named in failOnce on their original
// delivery and hands off those named in handoff.
type drainFixture struct {
	t   *testing.T
	p   *Pipeline
	pub *resolver.Memory
	def *chanDeferred

	mu      sync.Mutex
	handled map[string]int
}

const drainSID = "s-1"

func newDrainFixture(t *testing.T, replayWait time.Duration, failOnce, handoff map[string]bool) *drainFixture {
	return newDrainFixtureFailing(t, replayWait, failOnce, handoff, nil)
}

// newDrainFixtureFailing is newDrainFixture whose handler also fails the
// events named in failAlways on every attempt.
func newDrainFixtureFailing(t *testing.T, replayWait time.Duration, failOnce, handoff, failAlways map[string]bool) *drainFixture {
	t.Helper()
	f := &drainFixture{t: t, pub: &resolver.Memory{}, def: &chanDeferred{copies: make(chan *Parked, 4)}, handled: map[string]int{}}
	mem, _ := inbox.NewMemoryStore(inbox.MemoryOptions{})
	reg := NewRegistry()
	reg.Handle("OrderPlaced", func(_ context.Context, ev *Event) (Result, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		id := ev.JSON
		f.handled[id]++
		switch {
		case failAlways[id]:
			return Result{}, fmt.Errorf("event %s fails", id)
		case failOnce[id] && ev.Attempt == AttemptOriginal && f.handled[id] == 1:
			return Result{}, fmt.Errorf("event %s fails once", id)
		case handoff[id]:
			return PendingHandoff(Handoff{Reason: "Approval", ExternalJobID: "job-" + id}), nil
		}
		return Completed(), nil
	})
	var err error
	f.p, err = New(Options{EndpointID: "Billing", Inbox: mem, Publisher: f.pub, Handlers: reg,
		Sessions: session.NewMemory(session.MemoryOptions{}), Deferred: f.def, ReplayWait: replayWait})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *drainFixture) runs(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.handled[name]
}

// deliver delivers event name (EventId ev-<name>, MessageId msg-<name>) as
// a messageType from "from" on the session subscription.
func (f *drainFixture) deliver(name, messageType, from string, dc int) Report {
	id, s, corr := "msg-"+name, drainSID, "corr-"+name
	if messageType != "EventRequest" {
		id = "resubmit-" + name
	}
	props := map[string]any{
		"To": "Billing", "From": from, "MessageType": messageType, "EventId": "ev-" + name, "EventTypeId": "OrderPlaced",
		"OriginatingMessageId": "self", "ParentMessageId": "self", "RetryCount": int32(0), "OriginatingFrom": "Shop",
	}
	body := fmt.Sprintf(`{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":%q},"ErrorContent":null}`, name)
	return f.p.Process(context.Background(), &Delivery{Broker: message.Broker{MessageID: &id, SessionID: &s, CorrelationID: &corr, DeliveryCount: dc},
		Properties: props, Body: []byte(body)})
}

func (f *drainFixture) want(r Report, name string, o Outcome) {
	f.t.Helper()
	if r.Outcome != o {
		f.t.Fatalf("%s: outcome %s (%v), want %s", name, r.Outcome, r.Err, o)
	}
}

// lastParked returns the last parked copy published, as the Deferred
// subscription delivers it.
func (f *drainFixture) lastParked() *Parked {
	f.t.Helper()
	sent := f.pub.Sent()
	for i := len(sent) - 1; i >= 0; i-- {
		o := sent[i]
		if to, _ := o.ApplicationProperties[message.PropTo].(string); to == message.DeferredAddress {
			id, s := fmt.Sprintf("copy-%d", i), drainSID
			return &Parked{Delivery: Delivery{Broker: message.Broker{MessageID: &id, SessionID: &s, CorrelationID: o.CorrelationID, DeliveryCount: 1},
				Properties: o.ApplicationProperties, Body: o.Body}}
		}
	}
	f.t.Fatal("no parked copy published")
	return nil
}

// drain starts a replay of the session and returns its report's channel.
func (f *drainFixture) drain() <-chan Report { return f.drainAt(1) }

// drainAt is drain with the replay request's delivery count.
func (f *drainFixture) drainAt(deliveryCount int) <-chan Report {
	out := make(chan Report, 1)
	sid := drainSID
	go func() {
		out <- f.p.Drain(context.Background(), &Delivery{Broker: message.Broker{SessionID: &sid, DeliveryCount: deliveryCount},
			Properties: map[string]any{"To": "DeferredProcessor", "MessageType": "ProcessDeferredRequest"}, Body: []byte("{}")})
	}()
	return out
}

func (f *drainFixture) completed() []string {
	f.def.mu.Lock()
	defer f.def.mu.Unlock()
	return append([]string(nil), f.def.completed...)
}

// TestDrainDoesNotReplayACopyParkedBehindANewBlock: a replay waits for a
// parked copy that is still on its way, and meanwhile the session is
// blocked again (here by a Manager resubmission of another event whose
// handler hands off). When the copy arrives, the replay must leave it
// parked instead of handling it ahead of the blocking event.
func TestDrainDoesNotReplayACopyParkedBehindANewBlock(t *testing.T) {
	f := newDrainFixture(t, time.Hour, map[string]bool{"A": true}, map[string]bool{"X": true})
	f.want(f.deliver("A", "EventRequest", "Shop", 1), "A", OutcomeEventFailed)
	f.want(f.deliver("B", "EventRequest", "Shop", 1), "B", OutcomeDeferred)
	copyB := f.lastParked()
	r := f.deliver("A", "EventRequest", "Shop", 2)
	f.want(r, "A again", OutcomeCompleted)
	if !r.DrainRequested {
		t.Fatal("A's success did not request the replay")
	}
	drained := f.drain()
	// The replay waits for B's copy; the Manager's resubmission of X hands
	// off and blocks the session.
	r = f.deliver("X", "ResubmissionRequest", "Manager", 1)
	f.want(r, "X", OutcomePendingHandoff)
	if !r.Blocked {
		t.Fatal("X's handoff did not block the session")
	}
	f.def.copies <- copyB
	select {
	case r = <-drained:
	case <-time.After(30 * time.Second):
		t.Fatal("the replay did not end")
	}
	if n := f.runs("B"); n != 0 {
		t.Errorf("the replay handled B %d times while the session was blocked by X", n)
	}
	if r.DrainStop != DrainBlocked || len(r.Replays) != 0 {
		t.Errorf("replay stopped with %q after %d replays, want %q after none", r.DrainStop, len(r.Replays), DrainBlocked)
	}
	if c := f.completed(); len(c) != 0 {
		t.Errorf("completed copies %v, want none: B's stays parked", c)
	}
}

// TestDrainEndsWhenCaughtUp: once the last parked copy is replayed, the
// replay ends at once (a message arriving from then on is handled
// directly, so there is nothing to wait for), instead of waiting and
// receiving a copy parked behind a block that comes later: a replay that
// kept waiting would see a later event fail and block the session, and
// then handle the copy parked behind that block, out of order.
func TestDrainEndsWhenCaughtUp(t *testing.T) {
	f := newDrainFixture(t, time.Hour, map[string]bool{"A": true, "C": true}, nil)
	f.want(f.deliver("A", "EventRequest", "Shop", 1), "A", OutcomeEventFailed)
	f.want(f.deliver("B", "EventRequest", "Shop", 1), "B", OutcomeDeferred)
	f.def.copies <- f.lastParked()
	f.want(f.deliver("A", "EventRequest", "Shop", 2), "A again", OutcomeCompleted)
	var r Report
	select {
	case r = <-f.drain():
	case <-time.After(30 * time.Second):
		t.Fatal("the replay did not end after replaying the only parked copy (ReplayWait is an hour)")
	}
	if r.DrainStop != DrainCaughtUp || len(r.Replays) != 1 || f.runs("B") != 1 {
		t.Errorf("replay stopped with %q after %d replays (B ran %d times), want %q after 1", r.DrainStop, len(r.Replays), f.runs("B"), DrainCaughtUp)
	}
	// Later: C fails and blocks, D parks behind it and waits for C.
	f.want(f.deliver("C", "EventRequest", "Shop", 1), "C", OutcomeEventFailed)
	f.want(f.deliver("D", "EventRequest", "Shop", 1), "D", OutcomeDeferred)
	if n := f.runs("D"); n != 0 {
		t.Errorf("D ran %d times while the session is blocked by C", n)
	}
}

// TestDrainAnswersACopyThatBlockedTheSessionWithoutAnAnswer: a replayed
// copy fails and blocks its session, but its ErrorResponse cannot be sent,
// so the copy goes back and the replay request is retried. The retried
// replay finds the session blocked, by that very copy: it must handle the
// copy again (as a redelivery of the event that blocked the session is
// handled again), so the Resolver hears of the failure, instead of
// leaving the session blocked with nobody told.
func TestDrainAnswersACopyThatBlockedTheSessionWithoutAnAnswer(t *testing.T) {
	f := newDrainFixtureFailing(t, time.Hour, map[string]bool{"A": true}, nil, map[string]bool{"B": true})
	f.want(f.deliver("A", "EventRequest", "Shop", 1), "A", OutcomeEventFailed)
	f.want(f.deliver("B", "EventRequest", "Shop", 1), "B", OutcomeDeferred)
	f.def.copies <- f.lastParked()
	f.want(f.deliver("A", "EventRequest", "Shop", 2), "A again", OutcomeCompleted)
	errorResponses := func() int {
		n := 0
		for _, o := range f.pub.Sent() {
			if o.Type() == "ErrorResponse" && o.ApplicationProperties["EventId"] == "ev-B" {
				n++
			}
		}
		return n
	}
	failNext := true
	f.pub.Fail = func(o *message.Outgoing) error {
		if o.Type() == "ErrorResponse" && failNext {
			failNext = false
			return fmt.Errorf("broker unavailable")
		}
		return nil
	}
	r := <-f.drain()
	if r.Outcome != OutcomeReplayFailed || f.runs("B") != 1 || errorResponses() != 0 {
		t.Fatalf("first replay: %s (%v), B ran %d times, %d ErrorResponses; want replay_failed after one failing run and no ErrorResponse",
			r.Outcome, r.Err, f.runs("B"), errorResponses())
	}
	// The replay request comes back (its second delivery): the session is
	// blocked by B's copy.
	var again Report
	select {
	case again = <-f.drainAt(2):
	case <-time.After(30 * time.Second):
		t.Fatal("the retried replay did not end")
	}
	if n := errorResponses(); n != 1 {
		t.Errorf("the retried replay ended %s (%s) with %d ErrorResponses for B, want 1: the Resolver must hear of the failure",
			again.Outcome, again.DrainStop, n)
	}
	if c := f.completed(); len(c) != 1 {
		t.Errorf("completed copies %v, want B's once it was answered", c)
	}
}
