package subscriber

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/session"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// This file holds fakeNimbus, the in-process NimBus deployment the strict,
// scenario and round-trip tests run the pipeline in: the endpoint topic's
// subscriptions (main, Deferred, DeferredProcessor), the scheduler, the
// inbox and the session-state store, each call of which can be made to fail
// before or after it takes effect.

const strictEndpoint = "BillingEndpoint"

// errInjected is the failure the fault plan injects.
var errInjected = errors.New("injected outage")

// faultMode says whether an injected failure happens before the call takes
// effect (nothing applied) or after it (applied, the answer lost: a crash
// right after the call).
type faultMode int

const (
	faultBefore faultMode = iota
	faultAfter
)

// fakeNimbus is the in-process broker, stores and handler around one pipeline.
type fakeNimbus struct {
	t  testing.TB
	mu sync.Mutex

	inner    *inbox.MemoryStore
	sessions *session.Memory
	p        *Pipeline
	reg      *Registry
	now      time.Time

	// calls counts every fallible store and broker call by operation; the
	// fault plan fails call number failAt (1-based, over all operations).
	calls   map[string]int
	callSeq int
	// order lists every call by operation, in the order they were made.
	order  []string
	failAt int
	mode   faultMode
	// failOp, when set, fails every call of that operation; failNth fails
	// the nth call (from 1) of an operation, before it takes effect.
	failOp  map[string]bool
	failNth map[string]int
	// outageFrom fails, per operation, that call and the ones after it for
	// as many attempts as the pipeline makes in one invocation
	// (RecordAttempts), before they take effect: for the inbox record, the
	// one window in which a handler that succeeded runs again; for a
	// transactional batch, a dispatched mark that fails on every attempt.
	outageFrom map[string]int
	// failNext fails the next call of that operation, in failNextMode.
	failNext     string
	failNextMode faultMode
	// failed names the call that was failed.
	failed string

	// Everything sent to the endpoint topic, in order; scheduled messages
	// separately.
	sent      []*message.Outgoing
	scheduled []scheduledMsg
	// batchSizes are the sizes of the batches sent, in order.
	batchSizes []int
	// The Deferred subscription (by session) and the broker's message ids.
	deferred map[string]*deferredQueue
	nextID   int
	// drained is how far drainAll has read sent for replay requests.
	drained int

	// handle decides the handler's answer; runs is every handler call.
	handle func(ev *Event) (Result, error)
	onRun  func(ev *Event)
	runs   []handlerRun

	// Counters of store requests and broker sends (for the benchmark);
	// txReads are the transactional store's point reads (markers and the
	// handler's), batches its batches.
	checks, records, stateReads, stateWrites, sends, txReads, batches int
	// txn is the transactional store behind fakeTxn; txOps, when set,
	// queues the transactional handler's writes (default: one document per
	// event, "effect-<EventId>"); pkErr fails the partition key function.
	txn   *txn.Memory
	txOps func(ev *Event, u *txn.Unit) error
	pkErr error
	// roundTrips counts the sequential round trips: a call that starts
	// while no other call is in flight starts one, and calls made
	// concurrently with it belong to it. latency is how long every call
	// takes; with a latency, calls the pipeline starts together overlap
	// (under testing/synctest the wait is on the bubble's fake clock, so
	// the count is exact and costs no time).
	roundTrips, inFlight int
	latency              time.Duration

	policy *testPolicy
}

type scheduledMsg struct {
	m  *message.Outgoing
	at time.Time
}

type handlerRun struct {
	eventID string
	attempt Attempt
	msgID   string
	err     error
	handoff bool
}

type fakeNimbusOptions struct {
	// tx registers OrderPlaced as a transactional handler on txTarget.
	tx         bool
	noSessions bool
	noInbox    bool
	policy     *testPolicy
	// maxEventBytes is Options.MaxEventBytes (0: the default).
	maxEventBytes int
}

func newFakeNimbus(t testing.TB, o fakeNimbusOptions) *fakeNimbus {
	w := &fakeNimbus{t: t, now: t0, calls: map[string]int{}, failOp: map[string]bool{}, failNth: map[string]int{}, outageFrom: map[string]int{}, deferred: map[string]*deferredQueue{}, policy: o.policy}
	w.inner, _ = inbox.NewMemoryStore(inbox.MemoryOptions{})
	w.sessions = session.NewMemory(session.MemoryOptions{Now: func() time.Time { return w.clock() }})
	w.reg = NewRegistry()
	w.txn = txn.NewMemory(w.clock)
	if o.tx {
		w.reg.HandleTx("OrderPlaced", TxBinding{Target: txTarget, PartitionKey: w.partition}, w.runTxHandler)
	} else {
		w.reg.Handle("OrderPlaced", w.runHandler)
	}
	opts := Options{
		EndpointID:    strictEndpoint,
		Publisher:     fakePublisher{w},
		Scheduler:     fakeScheduler{w},
		Deferred:      fakeDeferred{w},
		Handlers:      w.reg,
		Now:           w.clock,
		Version:       "test",
		MaxEventBytes: o.maxEventBytes,
		RecordBackoff: time.Microsecond,
		// The re-runs after a batch conflict wait (almost) nothing.
		TxnRerunBackoff: time.Microsecond,
		ReplayWait:      time.Millisecond,
		Rand:            func() float64 { return 0.5 },
	}
	if !o.noInbox {
		opts.Inbox = fakeInbox{w}
	}
	if o.tx {
		opts.Txn = fakeTxn{w}
	}
	if !o.noSessions {
		opts.Sessions = fakeSessions{w}
	}
	if o.policy != nil {
		opts.RetryPolicies = o.policy
	}
	var err error
	if w.p, err = New(opts); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *fakeNimbus) clock() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.now
}

// call runs one fallible operation under the fault plan.
func (w *fakeNimbus) call(op string, do func() error) error {
	w.mu.Lock()
	if w.inFlight == 0 {
		w.roundTrips++
	}
	w.inFlight++
	latency := w.latency
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.inFlight--
		w.mu.Unlock()
	}()
	time.Sleep(latency)
	w.mu.Lock()
	w.calls[op]++
	w.order = append(w.order, op)
	w.callSeq++
	n := w.callSeq
	always := w.failOp[op]
	fail := always || n == w.failAt
	mode := w.mode
	if from := w.outageFrom[op]; from > 0 && w.calls[op] >= from && w.calls[op] < from+w.p.o.RecordAttempts {
		fail, mode = true, faultBefore
		w.failed = fmt.Sprintf("%s outage from call %d", op, from)
	}
	if n, ok := w.failNth[op]; ok && w.calls[op] == n {
		fail, mode = true, faultBefore
	}
	if op == w.failNext {
		fail, mode, w.failNext = true, w.failNextMode, ""
	}
	if op == "deferred.accept" {
		// A session lock whose owner vanished is released by the broker
		// when it expires; the fake has no lock expiry, so an accept
		// fails only before it takes effect.
		mode = faultBefore
	}
	if fail && !always {
		w.failed = fmt.Sprintf("#%d %s", n, op)
	}
	w.mu.Unlock()
	if fail && (mode == faultBefore || always) {
		return fmt.Errorf("%s: %w", op, errInjected)
	}
	if err := do(); err != nil {
		return err
	}
	if fail {
		return fmt.Errorf("%s (after it took effect): %w", op, errInjected)
	}
	return nil
}

func (w *fakeNimbus) runHandler(ctx context.Context, ev *Event) (Result, error) {
	if w.onRun != nil {
		w.onRun(ev)
	}
	res, err := Completed(), error(nil)
	if w.handle != nil {
		res, err = w.handle(ev)
	}
	w.mu.Lock()
	w.runs = append(w.runs, handlerRun{eventID: ev.EventID, attempt: ev.Attempt, msgID: ev.MessageID, err: err, handoff: res.handoff != nil})
	w.mu.Unlock()
	return res, err
}

// txTarget is the transactional handler's container; every event of the
// fake is in partition txPartition.
var txTarget = txn.Target{DatabaseID: "Billing", ContainerID: "ledger", PartitionKeyPath: "/customerId"}

const txPartition = "customer-7"

func (w *fakeNimbus) partition(*Event) (string, error) {
	if w.pkErr != nil {
		return "", w.pkErr
	}
	return txPartition, nil
}

// runTxHandler is the transactional handler: runHandler's answer, and on
// success the writes txOps queues (default: the event's effect document).
func (w *fakeNimbus) runTxHandler(ctx context.Context, ev *Event, u *txn.Unit) (Result, error) {
	res, err := w.runHandler(ctx, ev)
	if err != nil || res.handoff != nil {
		return res, err
	}
	if w.txOps != nil {
		return res, w.txOps(ev, u)
	}
	return res, u.Create(map[string]any{"id": "effect-" + ev.EventID, "customerId": txPartition, "messageId": ev.MessageID})
}

// brokerID is a MessageId the broker assigns to a sent message.
func (w *fakeNimbus) brokerID(prefix string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.nextID++
	return fmt.Sprintf("%s-%03d", prefix, w.nextID)
}

// ---- the stores and the broker, as the pipeline sees them ----

type fakeInbox struct{ w *fakeNimbus }

func (s fakeInbox) HasProcessed(ctx context.Context, k inbox.Key) (seen bool, err error) {
	s.w.mu.Lock()
	s.w.checks++
	s.w.mu.Unlock()
	err = s.w.call("inbox.check", func() (e error) { seen, e = s.w.inner.HasProcessed(ctx, k); return e })
	return seen, err
}

func (s fakeInbox) RecordProcessed(ctx context.Context, k inbox.Key) error {
	s.w.mu.Lock()
	s.w.records++
	s.w.mu.Unlock()
	return s.w.call("inbox.record", func() error { return s.w.inner.RecordProcessed(ctx, k) })
}

func (s fakeInbox) PurgeExpired(ctx context.Context, e string, t time.Time) (int, error) {
	return s.w.inner.PurgeExpired(ctx, e, t)
}

// fakeTxn is the transactional store as the pipeline sees it: txn.Memory
// under the fault plan. A batch failed after it took effect answers
// "ambiguous", as a connection dropped after Cosmos applied it does.
type fakeTxn struct{ w *fakeNimbus }

func (s fakeTxn) Read(ctx context.Context, t txn.Target, pk, id string) (body []byte, etag string, found bool, err error) {
	s.w.mu.Lock()
	s.w.txReads++
	s.w.mu.Unlock()
	err = s.w.call("txn.read", func() (e error) { body, etag, found, e = s.w.txn.Read(ctx, t, pk, id); return e })
	return body, etag, found, err
}

func (s fakeTxn) Execute(ctx context.Context, t txn.Target, pk string, ops []txn.Op) (res txn.Result, err error) {
	s.w.mu.Lock()
	s.w.batches++
	s.w.mu.Unlock()
	err = s.w.call("txn.batch", func() (e error) { res, e = s.w.txn.Execute(ctx, t, pk, ops); return e })
	switch {
	case errors.Is(err, errInjected) && res.Status != 0:
		return txn.Result{}, &txn.AmbiguousError{Err: err}
	case errors.Is(err, errInjected):
		return txn.Result{}, &txn.TransientError{Status: 503, Err: err}
	}
	return res, err
}

type fakeSessions struct{ w *fakeNimbus }

func (s fakeSessions) Read(ctx context.Context, k session.Key) (st session.State, err error) {
	s.w.mu.Lock()
	s.w.stateReads++
	s.w.mu.Unlock()
	err = s.w.call("state.read", func() (e error) { st, e = s.w.sessions.Read(ctx, k); return e })
	return st, err
}

func (s fakeSessions) Write(ctx context.Context, k session.Key, next session.State) (st session.State, err error) {
	s.w.mu.Lock()
	s.w.stateWrites++
	s.w.mu.Unlock()
	err = s.w.call("state.write", func() (e error) { st, e = s.w.sessions.Write(ctx, k, next); return e })
	if err != nil && errors.Is(err, errInjected) {
		// A write whose answer was lost is a store failure, never a
		// conflict: the caller treats it as transient.
		return session.State{}, &session.StoreError{Op: session.OpWrite, Err: err}
	}
	return st, err
}

type fakePublisher struct{ w *fakeNimbus }

func (pb fakePublisher) Publish(ctx context.Context, m *message.Outgoing) error {
	w := pb.w
	w.mu.Lock()
	w.sends++
	w.mu.Unlock()
	return w.call("publish "+kindOf(m), func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.sent = append(w.sent, m)
		if to, _ := m.ApplicationProperties[message.PropTo].(string); to == message.DeferredAddress {
			q := w.deferred[m.SessionID]
			if q == nil {
				q = &deferredQueue{}
				w.deferred[m.SessionID] = q
			}
			w.nextID++
			q.items = append(q.items, &deferredItem{p: &Parked{Delivery: Delivery{
				Broker: message.Broker{
					MessageID: str(fmt.Sprintf("copy-%03d", w.nextID)), SessionID: str(m.SessionID),
					CorrelationID: m.CorrelationID, EnqueuedTime: w.now, DeliveryCount: 1,
				},
				Properties: maps.Clone(m.ApplicationProperties),
				Body:       m.Body,
			}}})
		}
		return nil
	})
}

// PublishBatch sends ms in one call ("publish batch"): kept together, in
// order, or refused whole.
func (pb fakePublisher) PublishBatch(ctx context.Context, ms []*message.Outgoing) error {
	w := pb.w
	w.mu.Lock()
	w.sends++
	w.mu.Unlock()
	return w.call("publish batch", func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.sent = append(w.sent, ms...)
		w.batchSizes = append(w.batchSizes, len(ms))
		return nil
	})
}

type fakeScheduler struct{ w *fakeNimbus }

func (sc fakeScheduler) Schedule(ctx context.Context, m *message.Outgoing, at time.Time) error {
	w := sc.w
	w.mu.Lock()
	w.sends++
	w.mu.Unlock()
	return w.call("schedule "+kindOf(m), func() error {
		w.mu.Lock()
		w.scheduled = append(w.scheduled, scheduledMsg{m: m, at: at})
		w.mu.Unlock()
		return nil
	})
}

// kindOf names a sent message: its MessageType, or the subscription it is
// routed to for the endpoint's own traffic.
func kindOf(m *message.Outgoing) string {
	switch to, _ := m.ApplicationProperties[message.PropTo].(string); to {
	case message.DeferredAddress:
		return "Deferred"
	case message.RetryAddress:
		return "RetryRequest"
	}
	return m.Type()
}

// ---- the Deferred session subscription ----

type deferredItem struct {
	p      *Parked
	locked bool
}

type deferredQueue struct {
	items  []*deferredItem
	locked bool
}

type fakeDeferred struct{ w *fakeNimbus }

func (d fakeDeferred) Accept(ctx context.Context, sid string) (DeferredSession, error) {
	w := d.w
	var out DeferredSession
	err := w.call("deferred.accept", func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		q := w.deferred[sid]
		if q == nil {
			q = &deferredQueue{}
			w.deferred[sid] = q
		}
		if q.locked {
			return fmt.Errorf("session %s: %w", sid, ErrSessionLocked)
		}
		q.locked = true
		out = &deferredSession{w: w, q: q}
		return nil
	})
	return out, err
}

type deferredSession struct {
	w *fakeNimbus
	q *deferredQueue
}

func (s *deferredSession) Next(ctx context.Context) (*Parked, error) {
	var out *Parked
	err := s.w.call("deferred.next", func() error {
		s.w.mu.Lock()
		defer s.w.mu.Unlock()
		for _, it := range s.q.items {
			if !it.locked {
				it.locked = true
				c := *it.p
				out = &c
				out.Handle = it
				return nil
			}
		}
		return ErrNoParked
	})
	return out, err
}

func (s *deferredSession) settle(op string, p *Parked, remove bool) error {
	return s.w.call(op, func() error {
		s.w.mu.Lock()
		defer s.w.mu.Unlock()
		it := p.Handle.(*deferredItem)
		i := slices.Index(s.q.items, it)
		if i < 0 || !it.locked {
			return errors.New("the message lock was lost")
		}
		if remove {
			s.q.items = slices.Delete(s.q.items, i, i+1)
			return nil
		}
		it.locked = false
		it.p.Broker.DeliveryCount++
		return nil
	})
}

func (s *deferredSession) Complete(ctx context.Context, p *Parked) error {
	return s.settle("deferred.complete", p, true)
}
func (s *deferredSession) Abandon(ctx context.Context, p *Parked) error {
	return s.settle("deferred.abandon", p, false)
}
func (s *deferredSession) DeadLetter(ctx context.Context, p *Parked, reason, desc string) error {
	return s.settle("deferred.deadletter", p, true)
}
func (s *deferredSession) RenewLock(ctx context.Context) error { return nil }
func (s *deferredSession) Close(ctx context.Context) error {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	for _, it := range s.q.items {
		it.locked = false
	}
	s.q.locked = false
	return nil
}

// parked returns the DeferralSequences of the copies waiting for sid.
func (w *fakeNimbus) parked(sid string) []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int64
	if q := w.deferred[sid]; q != nil {
		for _, it := range q.items {
			seq, _ := message.DeferralSequenceOf(it.p.Properties)
			out = append(out, seq)
		}
	}
	return out
}

// ---- retry policy ----

// testPolicy retries every event up to max times after delay; it records
// what it was asked.
type testPolicy struct {
	max   int
	delay time.Duration
	mu    sync.Mutex
	asked []string
}

func (p *testPolicy) RetryDelay(eventTypeID, errText, endpoint string, retryCount int, rnd float64) (time.Duration, bool) {
	p.mu.Lock()
	p.asked = append(p.asked, eventTypeID)
	p.mu.Unlock()
	if retryCount >= p.max {
		return 0, false
	}
	return p.delay, true
}

// ---- messages as NimBus builds them ----

const strictSession = "customer-7"

func bodyOf(eventTypeID, json string) []byte {
	c := message.Content{EventContent: &message.EventContent{EventTypeID: message.Ptr(eventTypeID), EventJSON: message.Ptr(json)}}
	return c.AppendJSON(nil)
}

// event is an EventRequest as a NimBus publisher's forwarder delivers it to
// the endpoint.
func (w *fakeNimbus) event(msgID, eventID string) *Delivery {
	return &Delivery{
		Broker: message.Broker{MessageID: str(msgID), SessionID: str(strictSession), CorrelationID: str("corr-" + eventID), EnqueuedTime: w.clock(), DeliveryCount: 1},
		Properties: map[string]any{
			"To": strictEndpoint, "From": "Shop", "MessageType": "EventRequest", "EventId": eventID,
			"EventTypeId": "OrderPlaced", "OriginatingMessageId": "self", "ParentMessageId": "self",
			"RetryCount": int32(0), "OriginatingFrom": "Shop",
		},
		Body: bodyOf("OrderPlaced", fmt.Sprintf(`{"OrderId":"%s"}`, eventID)),
	}
}

// managerProps are the properties NimBus's MessageHelper writes for a
// Manager control message (ManagerClient / HandoffControlMessageFactory).
func managerProps(t message.Type, eventID, errorMsgID string) map[string]any {
	return map[string]any{
		"To": strictEndpoint, "From": message.ManagerID, "MessageType": t.String(), "EventId": eventID,
		"OriginatingMessageId": errorMsgID, "ParentMessageId": errorMsgID, "RetryCount": int32(0),
		"OriginatingFrom": "self", "EventTypeId": "OrderPlaced",
	}
}

// resubmit is ManagerClient.Resubmit's ResubmissionRequest: no MessageId of
// its own (the broker assigns one), CorrelationId of the ErrorResponse,
// EventContent with the (possibly edited) event JSON.
func (w *fakeNimbus) resubmit(eventID string) *Delivery {
	return &Delivery{
		Broker:     message.Broker{MessageID: str(w.brokerID("resubmit")), SessionID: str(strictSession), CorrelationID: str("corr-" + eventID), EnqueuedTime: w.clock(), DeliveryCount: 1},
		Properties: managerProps(message.ResubmissionRequest, eventID, "error-response-"+eventID),
		Body:       bodyOf("OrderPlaced", fmt.Sprintf(`{"OrderId":"%s"}`, eventID)),
	}
}

// skip is ManagerClient.Skip's SkipRequest: an empty MessageContent,
// CorrelationId = the ErrorResponse's MessageId.
func (w *fakeNimbus) skip(eventID string) *Delivery {
	return &Delivery{
		Broker:     message.Broker{MessageID: str(w.brokerID("skip")), SessionID: str(strictSession), CorrelationID: str("error-response-" + eventID), EnqueuedTime: w.clock(), DeliveryCount: 1},
		Properties: managerProps(message.SkipRequest, eventID, "error-response-"+eventID),
		Body:       []byte(`{"EventContent":null,"ErrorContent":null}`),
	}
}

// handoffCompleted and handoffFailed are HandoffControlMessageFactory's
// settlements: a fresh GUID-like MessageId, From=Manager.
func (w *fakeNimbus) handoffCompleted(eventID string) *Delivery {
	return &Delivery{
		Broker:     message.Broker{MessageID: str(w.brokerID("handoff-completed")), SessionID: str(strictSession), CorrelationID: str("corr-" + eventID), EnqueuedTime: w.clock(), DeliveryCount: 1},
		Properties: managerProps(message.HandoffCompletedRequest, eventID, "pending-"+eventID),
		Body:       []byte(`{"EventContent":null,"ErrorContent":null}`),
	}
}

func (w *fakeNimbus) handoffFailed(eventID, text, typ string) *Delivery {
	c := message.Content{ErrorContent: &message.ErrorContent{ErrorText: message.Ptr(text), ErrorType: message.Ptr(typ)}}
	return &Delivery{
		Broker:     message.Broker{MessageID: str(w.brokerID("handoff-failed")), SessionID: str(strictSession), CorrelationID: str("corr-" + eventID), EnqueuedTime: w.clock(), DeliveryCount: 1},
		Properties: managerProps(message.HandoffFailedRequest, eventID, "pending-"+eventID),
		Body:       c.AppendJSON(nil),
	}
}

// delivered turns a message the pipeline sent to its own topic into the
// delivery the broker makes of it: a fresh broker MessageId, the same
// session, properties and body.
func (w *fakeNimbus) delivered(m *message.Outgoing) *Delivery {
	props := maps.Clone(m.ApplicationProperties)
	if props[message.PropTo] == message.RetryAddress {
		// The endpoint subscription's "retry" rule.
		props[message.PropTo], props[message.PropFrom] = strictEndpoint, message.RetryAddress
	}
	return &Delivery{
		Broker: message.Broker{
			MessageID: str(w.brokerID("sent")), SessionID: str(m.SessionID), CorrelationID: m.CorrelationID,
			EnqueuedTime: w.clock(), DeliveryCount: 1,
		},
		Properties: props,
		Body:       m.Body,
	}
}

// retry is a RetryRequest as the endpoint subscription delivers the one the
// pipeline scheduled after a failure of msgID (To=Retry rewritten to the
// endpoint, From=Retry).
func (w *fakeNimbus) retry(eventID, sourceMsgID string, retryCount int32) *Delivery {
	d := w.event(w.brokerID("retry"), eventID)
	d.Properties["MessageType"] = message.RetryRequest.String()
	d.Properties["From"] = message.RetryAddress
	d.Properties["RetryCount"] = retryCount
	d.Properties["ParentMessageId"] = sourceMsgID
	d.Properties["OriginatingMessageId"] = sourceMsgID
	if sourceMsgID != "" {
		d.Properties[message.PropInboxMessageID] = sourceMsgID
	}
	return d
}

func redelivery(d *Delivery) *Delivery {
	c := *d
	c.Broker.DeliveryCount++
	return &c
}

// ---- inspection ----

// sentKinds lists what was sent since index from, each as kindOf.
func (w *fakeNimbus) sentKinds(from int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, m := range w.sent[from:] {
		out = append(out, kindOf(m))
	}
	return out
}

// responses lists the Resolver responses as "Type EventId".
func (w *fakeNimbus) responses() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, m := range w.sent {
		if to, _ := m.ApplicationProperties[message.PropTo].(string); to == message.ResolverID {
			ev, _ := m.ApplicationProperties[message.PropEventID].(string)
			out = append(out, m.Type()+" "+ev)
		}
	}
	return out
}

func (w *fakeNimbus) state() session.State {
	w.t.Helper()
	st, err := w.sessions.Read(context.Background(), session.NewKey(strictEndpoint, strictSession))
	if err != nil {
		w.t.Fatal(err)
	}
	return st
}

// setState stores st as the session's state.
func (w *fakeNimbus) setState(st session.State) {
	w.t.Helper()
	k := session.NewKey(strictEndpoint, strictSession)
	cur, err := w.sessions.Read(context.Background(), k)
	if err != nil {
		w.t.Fatal(err)
	}
	st.Version = cur.Version
	if _, err := w.sessions.Write(context.Background(), k, st); err != nil {
		w.t.Fatal(err)
	}
}

func (w *fakeNimbus) recorded(msgID string) bool {
	w.t.Helper()
	ok, err := w.inner.HasProcessed(context.Background(), inbox.NewKey(strictEndpoint, msgID))
	if err != nil {
		w.t.Fatal(err)
	}
	return ok
}

func (w *fakeNimbus) record(msgID string) {
	w.t.Helper()
	if err := w.inner.RecordProcessed(context.Background(), inbox.NewKey(strictEndpoint, msgID)); err != nil {
		w.t.Fatal(err)
	}
}

// handled lists the handler runs as "EventId/attempt" (a failed run is
// suffixed "!").
func (w *fakeNimbus) handled() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, r := range w.runs {
		s := r.eventID + "/" + string(r.attempt)
		if r.err != nil {
			s += "!"
		}
		out = append(out, s)
	}
	return out
}

func (w *fakeNimbus) lastSent(kind string) *message.Outgoing {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.sent) - 1; i >= 0; i-- {
		if kindOf(w.sent[i]) == kind {
			return w.sent[i]
		}
	}
	return nil
}

func errorContent(t testing.TB, m *message.Outgoing) (text, typ string) {
	t.Helper()
	c, err := message.ParseContent(m.Body)
	if err != nil || c.ErrorContent == nil {
		t.Fatalf("%s has no ErrorContent: %s", m.Type(), m.Body)
	}
	return deref(c.ErrorContent.ErrorText), deref(c.ErrorContent.ErrorType)
}
