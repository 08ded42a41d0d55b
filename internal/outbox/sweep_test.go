package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/inbox/inboxtest"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/outbox"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
	"github.com/nimbus-go/functions-subscriber/internal/txn/txntest"
)

const (
	endpoint  = "Billing"
	retention = 7 * 24 * time.Hour
)

var base = time.Date(2030, 3, 4, 12, 0, 0, 0, time.UTC)

// world is a store with containers of transactional handlers and a
// publisher that counts its sends.
type world struct {
	store   txn.PendingFinder
	targets []txn.Target
	pub     *countingPublisher
	// session is the session of the messages commit stores ("s-1" when
	// empty).
	session string
}

func newWorld(store txn.PendingFinder, targets ...txn.Target) *world {
	return &world{store: store, targets: targets, pub: &countingPublisher{}}
}

func memWorld(targets ...txn.Target) *world {
	return newWorld(txn.NewMemory(func() time.Time { return base }), targets...)
}

var (
	ledger   = txn.Target{DatabaseID: "Billing", ContainerID: "ledger", PartitionKeyPath: "/customerId"}
	invoices = txn.Target{DatabaseID: "Billing", ContainerID: "invoices", PartitionKeyPath: "/tenant/id"}
)

// countingPublisher is a resolver.Memory that counts its sends and can
// refuse some.
type countingPublisher struct {
	resolver.Memory
	mu      sync.Mutex
	batches int
	// refuse, when set, refuses a batch holding a message of that id.
	refuse func(id string) bool
	// before, when set, runs before each batch is kept.
	before func(ms []*message.Outgoing)
}

func (p *countingPublisher) PublishBatch(ctx context.Context, ms []*message.Outgoing) error {
	p.mu.Lock()
	refuse, before := p.refuse, p.before
	p.mu.Unlock()
	if before != nil {
		before(ms)
	}
	for _, m := range ms {
		if refuse != nil && refuse(m.MessageID) {
			return errors.New("service bus: the send was refused")
		}
	}
	p.mu.Lock()
	p.batches++
	p.mu.Unlock()
	return p.Memory.PublishBatch(ctx, ms)
}

func (p *countingPublisher) sends() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.batches
}

// ids returns the MessageIds sent, in order.
func (p *countingPublisher) ids() []string {
	var out []string
	for _, m := range p.Sent() {
		out = append(out, m.MessageID)
	}
	return out
}

func stored(id string) message.Stored {
	return message.Stored{MessageID: id, SessionID: "s-1", ApplicationProperties: map[string]any{"To": "PaymentRecorded", "RetryCount": int32(0)},
		Body: []byte(`{"EventContent":{"EventTypeId":"PaymentRecorded","EventJson":"{}"},"ErrorContent":null}`)}
}

// commit commits a delivery msg of ep in partition pk of tg at time at,
// publishing events; it returns the marker's outbox (nil without events).
func (w *world) commit(t *testing.T, tg txn.Target, pk, ep, msg string, at time.Time, events ...string) *txn.Pending {
	t.Helper()
	tx := txn.Begin(w.store, tg, pk, func() time.Time { return at })
	doc := map[string]any{"id": "doc-" + msg, "customerId": pk, "tenant": map[string]any{"id": pk}}
	if err := tx.Unit().Create(doc); err != nil {
		t.Fatal(err)
	}
	session := w.session
	if session == "" {
		session = "s-1"
	}
	for _, id := range events {
		e := stored(id)
		e.SessionID = session
		if err := tx.Unit().Publish(e); err != nil {
			t.Fatal(err)
		}
	}
	resp := &message.Stored{MessageID: "resp-" + msg, SessionID: session, ApplicationProperties: map[string]any{"To": "Resolver"}, Body: []byte(`{}`)}
	rc, err := tx.Commit(context.Background(), txn.Marker{EndpointID: ep, MessageID: msg, Retention: time.Hour, Outbox: true, Response: resp})
	if err != nil {
		t.Fatalf("commit %s: %v", msg, err)
	}
	return rc.Pending
}

func (w *world) state(t *testing.T, tg txn.Target, pk, msg string) txn.MarkerState {
	t.Helper()
	st, err := txn.ReadMarker(context.Background(), w.store, tg, pk, endpoint, msg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (w *world) sweeper() *outbox.Sweeper {
	return &outbox.Sweeper{Store: w.store, Targets: w.targets, EndpointID: endpoint, Publisher: w.pub, Retention: retention,
		Clock: func() time.Time { return base }}
}

// TestSweepSendsInOrderAndMarks: every marker older than the minimum age,
// in every container, has its events sent in publish order and then its
// response, in one send, and is marked dispatched; young markers, plain
// markers, dispatched ones and another endpoint's are left alone.
func TestSweepSendsInOrderAndMarks(t *testing.T) {
	w := memWorld(ledger, invoices)
	old := base.Add(-10 * time.Minute)
	w.commit(t, ledger, "c1", endpoint, "m1", old, "m1-b", "m1-a", "m1-c")
	w.commit(t, ledger, "c2", endpoint, "m2", old, "m2-a")
	w.commit(t, ledger, "c\U0001F642", endpoint, "m3", old.Add(-time.Hour), "m3-a", "m3-b")
	w.commit(t, invoices, "t1", endpoint, "m4", old, "m4-a")
	w.commit(t, ledger, "c1", endpoint, "young", base.Add(-4*time.Minute), "young-a")
	w.commit(t, ledger, "c1", endpoint, "plain", old)
	w.commit(t, ledger, "c2", "Shipping", "other", old, "other-a")
	done := w.commit(t, ledger, "c2", endpoint, "done", old, "done-a")
	if ok, err := txn.MarkDispatched(context.Background(), w.store, done, time.Hour, old); ok != txn.Marked || err != nil {
		t.Fatal(ok, err)
	}

	rep, err := w.sweeper().Run(context.Background(), base)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := outbox.Report{EndpointID: endpoint, Cutoff: base.Add(-outbox.DefaultMinimumAge), Containers: 2, Found: 4, Dispatched: 4,
		Events: 7, Responses: 4, Drained: true}
	rep.Pages, rep.Elapsed = 0, 0
	if rep != want {
		t.Errorf("report %+v\nwant   %+v", rep, want)
	}
	if n := w.pub.sends(); n != 4 {
		t.Errorf("%d sends for 4 markers, want one each", n)
	}
	sent := strings.Join(w.pub.ids(), " ")
	for _, seq := range []string{"m1-b m1-a m1-c resp-m1", "m2-a resp-m2", "m3-a m3-b resp-m3", "m4-a resp-m4"} {
		if !strings.Contains(sent, seq) {
			t.Errorf("sent %q; want %q together, in order", sent, seq)
		}
	}
	for _, c := range []struct {
		tg      txn.Target
		pk, msg string
	}{{ledger, "c1", "m1"}, {ledger, "c2", "m2"}, {ledger, "c\U0001F642", "m3"}, {invoices, "t1", "m4"}} {
		if st := w.state(t, c.tg, c.pk, c.msg); !st.Dispatched || !st.DispatchedAt.Equal(base) {
			t.Errorf("%s: %+v, want dispatched at %v", c.msg, st, base)
		}
	}
	if st := w.state(t, ledger, "c1", "young"); st.Pending == nil {
		t.Error("a marker younger than the minimum age was swept")
	}

	// A second run finds nothing.
	w.pub.Reset()
	rep, err = w.sweeper().Run(context.Background(), base)
	if err != nil || rep.Found != 0 || len(w.pub.Sent()) != 0 || !rep.Drained {
		t.Fatalf("second run: %+v %v, sent %v", rep, err, w.pub.ids())
	}
	// Once old enough, the young one goes too.
	rep, err = w.sweeper().Run(context.Background(), base.Add(2*time.Minute))
	if err != nil || rep.Dispatched != 1 || strings.Join(w.pub.ids(), " ") != "young-a resp-young" {
		t.Fatalf("later run: %+v %v, sent %v", rep, err, w.pub.ids())
	}
}

// TestSweepMinimumAge: the cutoff is now − MinimumAge, exclusive.
func TestSweepMinimumAge(t *testing.T) {
	w := memWorld(ledger)
	w.commit(t, ledger, "c", endpoint, "at", base.Add(-time.Minute), "at-a")
	w.commit(t, ledger, "c", endpoint, "before", base.Add(-time.Minute-100*time.Nanosecond), "before-a")
	s := w.sweeper()
	s.MinimumAge = time.Minute
	rep, err := s.Run(context.Background(), base)
	if err != nil || rep.Dispatched != 1 || !rep.Cutoff.Equal(base.Add(-time.Minute)) {
		t.Fatalf("Run = %+v, %v", rep, err)
	}
	if w.state(t, ledger, "c", "at").Pending == nil || w.state(t, ledger, "c", "before").Pending != nil {
		t.Error("the cutoff is not exclusive")
	}
}

// TestSweepSendFailureLeavesPending: a marker whose send fails stays
// pending and is reported; the others are sent; the next run sends it.
func TestSweepSendFailureLeavesPending(t *testing.T) {
	w := memWorld(ledger)
	w.commit(t, ledger, "c1", endpoint, "ok1", base.Add(-time.Hour), "ok1-a")
	w.commit(t, ledger, "c2", endpoint, "bad", base.Add(-2*time.Hour), "bad-a", "bad-b")
	w.commit(t, ledger, "c3", endpoint, "ok2", base.Add(-time.Hour), "ok2-a")
	w.pub.refuse = func(id string) bool { return id == "bad-b" }
	rep, err := w.sweeper().Run(context.Background(), base)
	if !errors.Is(err, outbox.ErrIncomplete) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("Run error %v, want ErrIncomplete with the send's cause", err)
	}
	if rep.Found != 3 || rep.Dispatched != 2 || rep.SendFailed != 1 || rep.Left != 1 || rep.Events != 2 || rep.Responses != 2 ||
		!rep.OldestLeft.Equal(base.Add(-2*time.Hour)) || !rep.Drained {
		t.Errorf("report %+v", rep)
	}
	if w.state(t, ledger, "c2", "bad").Pending == nil {
		t.Fatal("the marker whose send failed is not pending")
	}
	if got := strings.Join(w.pub.ids(), " "); strings.Contains(got, "bad") {
		t.Errorf("part of a refused send was kept: %s", got)
	}
	w.pub.refuse = nil
	w.pub.Reset()
	rep, err = w.sweeper().Run(context.Background(), base)
	if err != nil || rep.Dispatched != 1 || strings.Join(w.pub.ids(), " ") != "bad-a bad-b resp-bad" {
		t.Fatalf("next run: %+v %v, sent %v", rep, err, w.pub.ids())
	}
}

// failingMarks is a store whose batches fail (the mark) while reads and
// queries work.
type failingMarks struct {
	txn.PendingFinder
	fail error
}

func (f *failingMarks) Execute(ctx context.Context, t txn.Target, pk string, ops []txn.Op) (txn.Result, error) {
	if f.fail != nil {
		return txn.Result{}, f.fail
	}
	return f.PendingFinder.Execute(ctx, t, pk, ops)
}

// TestSweepMarkFailureLeavesPending: events sent whose mark fails stay
// pending, are reported, and are sent again by the next run with the same
// ids.
func TestSweepMarkFailureLeavesPending(t *testing.T) {
	w := memWorld(ledger)
	w.commit(t, ledger, "c1", endpoint, "m", base.Add(-time.Hour), "m-a")
	fm := &failingMarks{PendingFinder: w.store, fail: &txn.TransientError{Status: 503}}
	s := w.sweeper()
	s.Store = fm
	rep, err := s.Run(context.Background(), base)
	if !errors.Is(err, outbox.ErrIncomplete) || !errors.Is(err, txn.ErrTransient) {
		t.Fatalf("Run error %v", err)
	}
	if rep.MarkFailed != 1 || rep.Left != 1 || rep.Events != 1 || rep.Dispatched != 0 {
		t.Errorf("report %+v", rep)
	}
	fm.fail = nil
	if rep, err := s.Run(context.Background(), base); err != nil || rep.Dispatched != 1 {
		t.Fatalf("next run: %+v %v", rep, err)
	}
	if got := strings.Join(w.pub.ids(), " "); got != "m-a resp-m m-a resp-m" {
		t.Errorf("sent %s, want the same messages twice", got)
	}
}

// TestSweepLateCopyFinishedFirst: a marker a late copy of the delivery
// marked while the sweep sent it is reported as already done.
func TestSweepLateCopyFinishedFirst(t *testing.T) {
	w := memWorld(ledger)
	p := w.commit(t, ledger, "c1", endpoint, "m", base.Add(-time.Hour), "m-a")
	w.pub.before = func([]*message.Outgoing) {
		if _, err := txn.MarkDispatched(context.Background(), w.store, p, time.Hour, base.Add(-time.Minute)); err != nil {
			t.Error(err)
		}
	}
	rep, err := w.sweeper().Run(context.Background(), base)
	if err != nil || rep.AlreadyDone != 1 || rep.Dispatched != 0 || rep.Left != 0 {
		t.Fatalf("Run = %+v, %v", rep, err)
	}
	if st := w.state(t, ledger, "c1", "m"); !st.DispatchedAt.Equal(base.Add(-time.Minute)) {
		t.Errorf("the late copy's mark was overwritten: %+v", st)
	}
}

// TestSweepMarkerGoneAtItsMark: a marker removed between the query and
// the mark (deleted by an operator, or expired) is its own outcome: its
// events were sent, the run counts it Gone (not already done, not
// dispatched), names its document id and fails with ErrMarkerGone; the
// next run finds nothing and sends nothing.
func TestSweepMarkerGoneAtItsMark(t *testing.T) {
	w := memWorld(ledger)
	w.commit(t, ledger, "c1", endpoint, "m", base.Add(-time.Hour), "m-a")
	w.commit(t, ledger, "c2", endpoint, "ok", base.Add(-time.Hour), "ok-a")
	id := txn.MarkerID(endpoint, "m")
	w.pub.before = func(ms []*message.Outgoing) {
		if ms[0].MessageID != "m-a" {
			return
		}
		tx := txn.Begin(w.store, ledger, "c1", nil)
		if err := tx.Unit().Delete(id, ""); err != nil {
			t.Error(err)
		}
		if _, err := tx.Commit(context.Background()); err != nil {
			t.Error(err)
		}
	}
	rep, err := w.sweeper().Run(context.Background(), base)
	if !errors.Is(err, outbox.ErrMarkerGone) || errors.Is(err, outbox.ErrIncomplete) || !strings.Contains(err.Error(), id) {
		t.Fatalf("Run error %v, want ErrMarkerGone naming %s", err, id)
	}
	if rep.Gone != 1 || rep.FirstGone != id || rep.AlreadyDone != 0 || rep.Dispatched != 1 || rep.Events != 2 || rep.Left != 0 {
		t.Errorf("report %+v: want the vanished marker counted gone, the other dispatched", rep)
	}
	w.pub.Reset()
	rep, err = w.sweeper().Run(context.Background(), base)
	if err != nil || rep.Found != 0 || len(w.pub.Sent()) != 0 {
		t.Fatalf("next run: %+v %v, sent %v", rep, err, w.pub.ids())
	}
}

// tickingClock advances by step on every reading.
type tickingClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *tickingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.step)
	return c.now
}

// TestSweepBounded: pages of PageSize markers, and a run that stops when
// its budget is spent, leaving the rest for the next run.
func TestSweepBounded(t *testing.T) {
	w := memWorld(ledger)
	for i := 0; i < 7; i++ {
		msg := fmt.Sprintf("m%d", i)
		w.commit(t, ledger, fmt.Sprintf("c%d", i), endpoint, msg, base.Add(-time.Hour), msg+"-a")
	}
	s := w.sweeper()
	s.PageSize = 3
	rep, err := s.Run(context.Background(), base)
	if err != nil || rep.Pages != 3 || rep.Dispatched != 7 || !rep.Drained {
		t.Fatalf("paged run: %+v %v; want 7 markers in 3 pages", rep, err)
	}

	w = memWorld(ledger)
	for i := 0; i < 7; i++ {
		msg := fmt.Sprintf("m%d", i)
		w.commit(t, ledger, fmt.Sprintf("c%d", i), endpoint, msg, base.Add(-time.Hour), msg+"-a")
	}
	clock := &tickingClock{now: base, step: time.Second}
	s = w.sweeper()
	s.PageSize, s.Budget, s.Clock = 3, 10*time.Second, clock.Now
	rep, err = s.Run(context.Background(), base)
	if err != nil || !rep.StoppedOnBudget || rep.Drained || rep.Dispatched == 0 || rep.Dispatched >= 7 {
		t.Fatalf("budgeted run: %+v %v; want a run stopped on its budget part way", rep, err)
	}
	first := rep.Dispatched
	clock.now = base
	rep, err = s.Run(context.Background(), base)
	if err != nil || rep.Dispatched == 0 {
		t.Fatalf("second budgeted run: %+v %v", rep, err)
	}
	for total := first + rep.Dispatched; total < 7; total += rep.Dispatched {
		clock.now = base
		if rep, err = s.Run(context.Background(), base); err != nil || rep.Dispatched == 0 {
			t.Fatalf("run: %+v %v", rep, err)
		}
	}
	if n := len(w.pub.Sent()); n != 14 {
		t.Errorf("%d messages sent over the runs, want each marker's event and response once (14)", n)
	}
}

// TestSweepCancellation: a cancelled context stops the run with its error.
func TestSweepCancellation(t *testing.T) {
	w := memWorld(ledger)
	w.commit(t, ledger, "c1", endpoint, "m1", base.Add(-time.Hour), "m1-a")
	w.commit(t, ledger, "c2", endpoint, "m2", base.Add(-time.Hour), "m2-a")
	ctx, cancel := context.WithCancel(context.Background())
	w.pub.before = func([]*message.Outgoing) { cancel() }
	rep, err := w.sweeper().Run(ctx, base)
	if !errors.Is(err, context.Canceled) || rep.Dispatched != 0 || rep.SendFailed != 0 {
		t.Fatalf("Run = %+v, %v; want the cancellation and no failure counted", rep, err)
	}
	if w.state(t, ledger, "c1", "m1").Pending == nil || w.state(t, ledger, "c2", "m2").Pending == nil {
		t.Error("a marker was marked after the cancellation")
	}
}

// TestSweepUnreadableMarker: a marker whose outbox does not decode is
// counted and left; the others are sent.
func TestSweepUnreadableMarker(t *testing.T) {
	w := memWorld(ledger)
	w.commit(t, ledger, "c1", endpoint, "ok", base.Add(-time.Hour), "ok-a")
	tx := txn.Begin(w.store, ledger, "c2", nil)
	bad := map[string]any{"id": txn.MarkerID(endpoint, "bad"), "customerId": "c2", "type": txn.MarkerType, "endpointId": endpoint,
		"messageId": "bad", "createdAtUtc": "2000-01-01T00:00:00.0000000Z", "outbox": []any{map[string]any{"messageId": "x"}}, "dispatchedAtUtc": nil}
	if err := tx.Unit().Create(bad); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	rep, err := w.sweeper().Run(context.Background(), base)
	if !errors.Is(err, outbox.ErrIncomplete) || !errors.Is(err, txn.ErrUnreadableOutbox) {
		t.Fatalf("Run error %v", err)
	}
	if rep.Unreadable != 1 || rep.Left != 1 || rep.Dispatched != 1 {
		t.Errorf("report %+v", rep)
	}
}

// failingQueries is a store whose queries fail for one container.
type failingQueries struct {
	txn.PendingFinder
	broken txn.Target
}

func (f *failingQueries) FindPending(ctx context.Context, t txn.Target, q txn.PendingQuery) (txn.PendingPage, error) {
	if t == f.broken {
		return txn.PendingPage{}, &txn.TransientError{Status: 503}
	}
	return f.PendingFinder.FindPending(ctx, t, q)
}

// TestSweepQueryFailure: a container whose query fails is reported, and
// the other containers are swept.
func TestSweepQueryFailure(t *testing.T) {
	w := memWorld(invoices, ledger)
	w.commit(t, ledger, "c1", endpoint, "m", base.Add(-time.Hour), "m-a")
	s := w.sweeper()
	s.Store = &failingQueries{PendingFinder: w.store, broken: invoices}
	rep, err := s.Run(context.Background(), base)
	if !errors.Is(err, outbox.ErrIncomplete) || !errors.Is(err, txn.ErrTransient) {
		t.Fatalf("Run error %v", err)
	}
	if rep.QueryFailed != 1 || rep.Dispatched != 1 || rep.Drained || rep.Containers != 2 {
		t.Errorf("report %+v", rep)
	}
}

// TestSweepNoTargets: without transactional handlers a run does nothing.
func TestSweepNoTargets(t *testing.T) {
	w := memWorld()
	rep, err := w.sweeper().Run(context.Background(), base)
	if err != nil || rep.Containers != 0 || rep.Found != 0 || !rep.Drained {
		t.Fatalf("Run = %+v, %v", rep, err)
	}
}

func TestSweepRejectsInvalidConfiguration(t *testing.T) {
	w := memWorld(ledger)
	for name, edit := range map[string]func(s *outbox.Sweeper){
		"no store":          func(s *outbox.Sweeper) { s.Store = nil },
		"no publisher":      func(s *outbox.Sweeper) { s.Publisher = nil },
		"blank endpoint":    func(s *outbox.Sweeper) { s.EndpointID = " " },
		"no retention":      func(s *outbox.Sweeper) { s.Retention = 0 },
		"negative age":      func(s *outbox.Sweeper) { s.MinimumAge = -time.Second },
		"page too large":    func(s *outbox.Sweeper) { s.PageSize = txn.MaxPendingPageSize + 1 },
		"negative page":     func(s *outbox.Sweeper) { s.PageSize = -1 },
		"negative duration": func(s *outbox.Sweeper) { s.Budget = -time.Second },
	} {
		s := w.sweeper()
		edit(s)
		if _, err := s.Run(context.Background(), base); !errors.Is(err, outbox.ErrInvalidSweeper) {
			t.Errorf("%s: %v, want ErrInvalidSweeper", name, err)
		}
	}
}

// silentPublisher accepts a send and never answers it: a Service Bus
// connection that is open and stalled.
type silentPublisher struct {
	resolver.Memory
	mu    sync.Mutex
	calls int
}

func (p *silentPublisher) PublishBatch(ctx context.Context, _ []*message.Outgoing) error {
	p.mu.Lock()
	p.calls++
	p.mu.Unlock()
	<-ctx.Done()
	return ctx.Err()
}

// TestSweepBoundsEachSend: against a publisher that never answers, and
// under a context without a deadline (as the timer's is), each send of a
// run fails at the call timeout and the run ends on its budget with every
// marker left pending.
func TestSweepBoundsEachSend(t *testing.T) {
	w := memWorld(ledger)
	for i := range 5 {
		w.commit(t, ledger, fmt.Sprintf("c%d", i), endpoint, fmt.Sprintf("m%d", i), base.Add(-time.Hour), fmt.Sprintf("m%d-a", i))
	}
	pub := &silentPublisher{}
	s := w.sweeper()
	s.Publisher = pub
	s.CallTimeout = 20 * time.Millisecond
	s.Budget = 50 * time.Millisecond
	s.Clock = nil
	type result struct {
		rep outbox.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := s.Run(context.Background(), base)
		done <- result{rep, err}
	}()
	var got result
	select {
	case got = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not end: a send that is never answered holds it")
	}
	if !errors.Is(got.err, outbox.ErrIncomplete) || !errors.Is(got.err, context.DeadlineExceeded) {
		t.Fatalf("Run error %v, want ErrIncomplete wrapping the send's deadline", got.err)
	}
	rep := got.rep
	if rep.SendFailed < 1 || rep.Dispatched != 0 || rep.Left != rep.SendFailed || !rep.StoppedOnBudget || rep.Found >= 5 {
		t.Errorf("report %+v: want sends failed at the call timeout and the run stopped on its budget before the fifth marker", rep)
	}
	pub.mu.Lock()
	calls := pub.calls
	pub.mu.Unlock()
	if calls != rep.SendFailed {
		t.Errorf("%d sends started, %d counted as failed", calls, rep.SendFailed)
	}
	for i := range 5 {
		if w.state(t, ledger, fmt.Sprintf("c%d", i), fmt.Sprintf("m%d", i)).Pending == nil {
			t.Errorf("marker m%d is not pending", i)
		}
	}
}

// TestSweepRefusesAMarkerItCannotMark: a pending marker stored under an id
// other than the one its endpoint and message id give (copied, restored,
// or a business document shaped like one) is never sent, since no mark
// could ever find it: it is counted unreadable, named by its document id,
// and a second run sends nothing either. The original is swept as usual.
func TestSweepRefusesAMarkerItCannotMark(t *testing.T) {
	mem := txn.NewMemory(func() time.Time { return base })
	w := newWorld(mem, ledger)
	w.commit(t, ledger, "c1", endpoint, "m1", base.Add(-time.Hour), "m1-a")
	doc := txntest.Document(t, mem, ledger, "c1", txn.MarkerID(endpoint, "m1"))
	doc["id"] = "restored-copy"
	txntest.Write(t, mem, ledger, "c1", txn.OpCreate, doc)
	rep, err := w.sweeper().Run(context.Background(), base)
	if !errors.Is(err, outbox.ErrIncomplete) || !errors.Is(err, txn.ErrUnreadableOutbox) || !strings.Contains(err.Error(), "restored-copy") {
		t.Fatalf("Run error %v, want ErrIncomplete naming the unmarkable marker", err)
	}
	if rep.Dispatched != 1 || rep.Unreadable != 1 || rep.Events != 1 {
		t.Errorf("report %+v: want the original dispatched and the copy unreadable", rep)
	}
	w.pub.Reset()
	rep, _ = w.sweeper().Run(context.Background(), base)
	if n := len(w.pub.ids()); n != 0 || rep.Unreadable != 1 {
		t.Errorf("second run sent %d messages (%v), unreadable %d: want nothing sent and the copy still counted", n, w.pub.ids(), rep.Unreadable)
	}
}

// TestSweepResumesPastFailingMarkers: five markers whose send always
// fails, each holding the run for the 30 s call timeout (a stalled
// link), come first in the query's order, ahead of 1,000 healthy markers
// whose send takes 1 s. A run of the default 4-minute budget spends 150 s
// on the five; the Sweeper remembers them, and the next runs send the
// healthy markers first and try the failing ones again only after them.
// Every healthy marker is sent, once, within 5 runs (a sweeper that tries
// the failing ones first on every run needs 12), and the failing ones are
// tried again once the healthy ones are done.
func TestSweepResumesPastFailingMarkers(t *testing.T) {
	const healthy, failing, maxRuns = 1000, 5, 5
	clk := inboxtest.NewClock(base)
	w := newWorld(txn.NewMemory(clk.Now), ledger)
	for i := range failing {
		w.commit(t, ledger, fmt.Sprintf("a-%d", i), endpoint, fmt.Sprintf("bad%d", i), base.Add(-time.Hour), fmt.Sprintf("bad%d-a", i))
	}
	for i := range healthy {
		w.commit(t, ledger, fmt.Sprintf("c-%04d", i), endpoint, fmt.Sprintf("ok%d", i), base.Add(-time.Hour), fmt.Sprintf("ok%d-a", i))
	}
	failingSends := 0
	w.pub.before = func(ms []*message.Outgoing) {
		if strings.HasPrefix(ms[0].MessageID, "bad") {
			failingSends++
			clk.Advance(outbox.DefaultCallTimeout)
			return
		}
		clk.Advance(time.Second)
	}
	w.pub.refuse = func(id string) bool { return strings.HasPrefix(id, "bad") }
	s := w.sweeper()
	s.Clock = clk.Now
	sentHealthy := func() int {
		n := 0
		for _, id := range w.pub.ids() {
			if strings.HasPrefix(id, "ok") && strings.HasSuffix(id, "-a") {
				n++
			}
		}
		return n
	}
	runs, perRun := 0, []int{}
	for sentHealthy() < healthy && runs < 20 {
		before := sentHealthy()
		rep, err := s.Run(context.Background(), clk.Now())
		runs++
		perRun = append(perRun, sentHealthy()-before)
		if !errors.Is(err, outbox.ErrIncomplete) || rep.Left < failing {
			t.Fatalf("run %d: %+v %v; want the failing markers left and reported", runs, rep, err)
		}
		if rep.Left != rep.SendFailed+rep.Deferred || rep.SendFailed+rep.Deferred != failing {
			t.Errorf("run %d: report %+v; want the %d failing markers failed again or deferred", runs, rep, failing)
		}
	}
	t.Logf("%d healthy markers sent in %d runs (per run %v), %d failing sends", sentHealthy(), runs, perRun, failingSends)
	if runs > maxRuns || sentHealthy() != healthy {
		t.Fatalf("%d of %d healthy markers sent after %d runs (per run %v); want all within %d", sentHealthy(), healthy, runs, perRun, maxRuns)
	}
	if n := len(w.pub.Sent()); n != 2*healthy {
		t.Errorf("%d messages sent, want each healthy marker's event and response once (%d)", n, 2*healthy)
	}
	// With the healthy ones done, the failing ones get their turn.
	failingSends = 0
	rep, _ := s.Run(context.Background(), clk.Now())
	if failingSends != failing || rep.SendFailed != failing || rep.Deferred != 0 {
		t.Errorf("after the healthy ones: %d failing sends, report %+v; want all %d tried again", failingSends, rep, failing)
	}
}

// goneMarks is a store whose marks answer 404 while the marker stays: a
// mark that can never find the marker the query returns.
type goneMarks struct {
	txn.PendingFinder
}

func (g *goneMarks) Execute(ctx context.Context, t txn.Target, pk string, ops []txn.Op) (txn.Result, error) {
	if len(ops) == 1 && ops[0].Kind == txn.OpPatch {
		return txn.Result{Status: txn.StatusMultiStatus, Ops: []txn.OpResult{{Status: 404}}}, nil
	}
	return g.PendingFinder.Execute(ctx, t, pk, ops)
}

// TestSweepDoesNotResendWhatItCannotMark: a marker the query keeps
// returning, unchanged, whose mark finds nothing is sent once: the next
// runs of the Sweeper count it unreadable, naming it, and send nothing.
func TestSweepDoesNotResendWhatItCannotMark(t *testing.T) {
	w := memWorld(ledger)
	w.commit(t, ledger, "c1", endpoint, "m", base.Add(-time.Hour), "m-a")
	s := w.sweeper()
	s.Store = &goneMarks{PendingFinder: w.store}
	rep, err := s.Run(context.Background(), base)
	if !errors.Is(err, outbox.ErrMarkerGone) || rep.Gone != 1 || len(w.pub.Sent()) != 2 {
		t.Fatalf("first run: %+v %v, sent %v", rep, err, w.pub.ids())
	}
	id := txn.MarkerID(endpoint, "m")
	for run := 2; run <= 3; run++ {
		rep, err = s.Run(context.Background(), base)
		if !errors.Is(err, outbox.ErrIncomplete) || !errors.Is(err, txn.ErrUnreadableOutbox) || rep.Unreadable != 1 || rep.Left != 1 ||
			!strings.Contains(rep.FirstUnreadable, id) {
			t.Errorf("run %d: %+v %v; want the marker counted unreadable by its id", run, rep, err)
		}
	}
	if n := len(w.pub.Sent()); n != 2 {
		t.Errorf("%d messages sent over three runs, want the marker's two once: %v", n, w.pub.ids())
	}
}

// TestSweepSendsAMarkerWithoutDispatchedAt: a marker with an outbox and
// no dispatchedAtUtc at all, which a redelivery's read takes as pending,
// is found, sent and marked; one whose createdAtUtc is no timestamp is
// counted unreadable with its document id, unsent.
func TestSweepSendsAMarkerWithoutDispatchedAt(t *testing.T) {
	mem := txn.NewMemory(func() time.Time { return base })
	w := newWorld(mem, ledger)
	w.commit(t, ledger, "c1", endpoint, "m1", base.Add(-time.Hour), "m1-a")
	w.commit(t, ledger, "c2", endpoint, "m2", base.Add(-time.Hour), "m2-a")
	doc := txntest.Document(t, mem, ledger, "c1", txn.MarkerID(endpoint, "m1"))
	delete(doc, "dispatchedAtUtc")
	txntest.Write(t, mem, ledger, "c1", txn.OpReplace, doc)
	odd := txn.MarkerID(endpoint, "m2")
	doc = txntest.Document(t, mem, ledger, "c2", odd)
	doc["createdAtUtc"] = "last Tuesday"
	txntest.Write(t, mem, ledger, "c2", txn.OpReplace, doc)

	rep, err := w.sweeper().Run(context.Background(), base)
	if !errors.Is(err, txn.ErrUnreadableOutbox) || rep.Dispatched != 1 || rep.Unreadable != 1 || !strings.Contains(rep.FirstUnreadable, odd) {
		t.Fatalf("Run = %+v, %v; want m1 dispatched and m2 unreadable by its id", rep, err)
	}
	if got := strings.Join(w.pub.ids(), " "); got != "m1-a resp-m1" {
		t.Errorf("sent %q", got)
	}
	if st := w.state(t, ledger, "c1", "m1"); !st.Dispatched {
		t.Errorf("m1 %+v, want dispatched", st)
	}
}
