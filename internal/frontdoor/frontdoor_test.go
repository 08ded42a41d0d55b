package frontdoor_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/frontdoor"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/outbox"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

var orders = txn.Target{DatabaseID: "Sales", ContainerID: "orders", PartitionKeyPath: "/customerId"}

// counting counts the store's requests: reads and batches.
type counting struct {
	txn.PendingFinder
	reads, batches atomic.Int64
}

func (c *counting) Read(ctx context.Context, t txn.Target, pk, id string) ([]byte, string, bool, error) {
	c.reads.Add(1)
	return c.PendingFinder.Read(ctx, t, pk, id)
}

func (c *counting) Execute(ctx context.Context, t txn.Target, pk string, ops []txn.Op) (txn.Result, error) {
	c.batches.Add(1)
	return c.PendingFinder.Execute(ctx, t, pk, ops)
}

// countingSink counts sends (a batch is one).
type countingSink struct {
	*resolver.Memory
	sends atomic.Int64
}

func (s *countingSink) Publish(ctx context.Context, m *message.Outgoing) error {
	s.sends.Add(1)
	return s.Memory.Publish(ctx, m)
}

func (s *countingSink) PublishBatch(ctx context.Context, ms []*message.Outgoing) error {
	s.sends.Add(1)
	return s.Memory.PublishBatch(ctx, ms)
}

type fixture struct {
	store *counting
	sink  *countingSink
	door  *frontdoor.Door
}

func newFixture() *fixture {
	f := &fixture{store: &counting{PendingFinder: txn.NewMemory(nil)}, sink: &countingSink{Memory: &resolver.Memory{}}}
	f.door = &frontdoor.Door{EndpointID: "SalesEndpoint", Store: f.store, Publisher: f.sink, Retention: time.Hour}
	return f
}

type order struct {
	ID         string  `json:"id"`
	CustomerID string  `json:"customerId"`
	Amount     float64 `json:"amount"`
}

// place runs one request: create the order, publish OrderPlaced, commit.
func (f *fixture) place(t testing.TB, key, fingerprint, orderID string) (frontdoor.Result, error) {
	t.Helper()
	r := f.door.Begin(context.Background(), orders, "C-1", key, fingerprint)
	if err := r.Unit().Create(order{ID: "order-" + orderID, CustomerID: "C-1", Amount: 12.5}); err != nil {
		t.Fatal(err)
	}
	if err := r.Publish(message.Publication{EventTypeID: "OrderPlaced", MessageID: "OrderPlaced-" + orderID,
		EventJSON: `{"OrderId":"` + orderID + `"}`, SessionID: orderID, CorrelationID: "corr-" + orderID}); err != nil {
		t.Fatal(err)
	}
	return r.Commit(context.Background(), json.RawMessage(`{"orderId":"`+orderID+`"}`))
}

func TestCommitWritesPublishesAndMarksInThreeRoundTrips(t *testing.T) {
	f := newFixture()
	res, err := f.place(t, "O-1", "fp", "O-1")
	if err != nil || res.Replayed || !res.Dispatched || res.Events != 1 {
		t.Fatalf("commit = %+v, %v", res, err)
	}
	if r, b, s := f.store.reads.Load(), f.store.batches.Load(), f.sink.sends.Load(); r != 0 || b != 2 || s != 1 {
		t.Fatalf("round trips: %d reads, %d batches, %d sends; want 0, 2 (commit, mark), 1", r, b, s)
	}
	sent := f.sink.Sent()
	if len(sent) != 1 {
		t.Fatalf("sent %d messages", len(sent))
	}
	m := sent[0]
	p := m.ApplicationProperties
	if m.MessageID != "OrderPlaced-O-1" || m.SessionID != "O-1" || *m.CorrelationID != "corr-O-1" ||
		p[message.PropParentMessageID] != "self" || p[message.PropOriginatingMessageID] != "self" ||
		p[message.PropOriginatingFrom] != "SalesEndpoint" || p[message.PropTo] != "OrderPlaced" {
		t.Fatalf("sent %+v", m)
	}
	st, err := txn.ReadRequest(context.Background(), f.store, orders, "C-1", "SalesEndpoint", "O-1")
	if err != nil || !st.Found || !st.Dispatched || st.Pending != nil || string(st.Request.Answer) != `{"orderId":"O-1"}` {
		t.Fatalf("record = %+v, %v", st, err)
	}
}

func TestRetryWritesNothingAndAnswersTheFirstAnswer(t *testing.T) {
	f := newFixture()
	if _, err := f.place(t, "O-1", "fp", "O-1"); err != nil {
		t.Fatal(err)
	}
	f.sink.Reset()
	f.store.reads.Store(0)
	f.store.batches.Store(0)
	// The retry carries another order document id: were it written, the
	// container would have two orders.
	r := f.door.Begin(context.Background(), orders, "C-1", "O-1", "fp")
	_ = r.Unit().Create(order{ID: "order-other", CustomerID: "C-1"})
	res, err := r.Commit(context.Background(), json.RawMessage(`{"orderId":"changed"}`))
	if err != nil || !res.Replayed || string(res.Answer) != `{"orderId":"O-1"}` || res.Events != 0 {
		t.Fatalf("retry = %+v, %v", res, err)
	}
	if n := len(f.sink.Sent()); n != 0 {
		t.Fatalf("the retry sent %d messages", n)
	}
	if r, b := f.store.reads.Load(), f.store.batches.Load(); r != 1 || b != 1 {
		t.Fatalf("the retry took %d reads and %d batches; want 1 and 1", r, b)
	}
	if found, _, err := f.door.Begin(context.Background(), orders, "C-1", "x", "x").Unit().Read(context.Background(), "order-other", nil); found || err != nil {
		t.Fatalf("the retry's write was applied (%v, %v)", found, err)
	}
}

func TestSameKeyOtherRequestIsKeyReused(t *testing.T) {
	f := newFixture()
	if _, err := f.place(t, "K", "fp-1", "O-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.place(t, "K", "fp-2", "O-2"); !errors.Is(err, frontdoor.ErrKeyReused) {
		t.Fatalf("err = %v, want ErrKeyReused", err)
	}
	// The same key in another partition is another request.
	r := f.door.Begin(context.Background(), orders, "C-2", "K", "fp-2")
	_ = r.Unit().Create(order{ID: "order-O-2", CustomerID: "C-2"})
	if res, err := r.Commit(context.Background(), nil); err != nil || res.Replayed {
		t.Fatalf("other partition = %+v, %v", res, err)
	}
}

func TestFailedSendIsSentByTheRetryOrTheSweep(t *testing.T) {
	for _, finish := range []string{"retry", "sweep"} {
		t.Run(finish, func(t *testing.T) {
			f := newFixture()
			f.sink.Fail = func(*message.Outgoing) error { return errors.New("broker down") }
			res, err := f.place(t, "O-1", "fp", "O-1")
			if err != nil || res.Dispatched || res.DispatchErr == nil || res.Replayed {
				t.Fatalf("commit = %+v, %v", res, err)
			}
			f.sink.Fail = nil
			if finish == "retry" {
				res, err = f.place(t, "O-1", "fp", "O-1")
				if err != nil || !res.Replayed || !res.Dispatched || res.Events != 1 {
					t.Fatalf("retry = %+v, %v", res, err)
				}
			} else {
				s := outbox.Sweeper{Store: f.store, Targets: []txn.Target{orders}, EndpointID: "SalesEndpoint", Publisher: f.sink,
					MinimumAge: time.Nanosecond, Retention: time.Hour}
				rep, err := s.Run(context.Background(), time.Now().Add(time.Second))
				if err != nil || rep.Dispatched != 1 || rep.Events != 1 {
					t.Fatalf("sweep = %+v, %v", rep, err)
				}
			}
			if sent := f.sink.Sent(); len(sent) != 1 || sent[0].MessageID != "OrderPlaced-O-1" {
				t.Fatalf("sent %d", len(sent))
			}
			st, _ := txn.ReadRequest(context.Background(), f.store, orders, "C-1", "SalesEndpoint", "O-1")
			if !st.Dispatched {
				t.Fatalf("record not dispatched: %+v", st)
			}
		})
	}
}

func TestConcurrentRequestsWithOneKeyCommitOnce(t *testing.T) {
	f := newFixture()
	const n = 32
	var wg sync.WaitGroup
	var fresh, replayed atomic.Int64
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := f.place(t, "O-1", "fp", "O-1")
			switch {
			case err != nil:
				t.Error(err)
			case res.Replayed:
				replayed.Add(1)
			default:
				fresh.Add(1)
			}
		}()
	}
	wg.Wait()
	if fresh.Load() != 1 || replayed.Load() != n-1 {
		t.Fatalf("%d fresh, %d replayed", fresh.Load(), replayed.Load())
	}
	for _, m := range f.sink.Sent() {
		if m.MessageID != "OrderPlaced-O-1" {
			t.Fatalf("sent %s", m.MessageID)
		}
	}
}

func TestPublishIsOneSend(t *testing.T) {
	f := newFixture()
	err := f.door.Publish(context.Background(), message.Publication{EventTypeID: "OrderPlaced", MessageID: "OrderPlaced-O-1",
		EventJSON: `{}`, SessionID: "O-1", CorrelationID: "c"})
	if err != nil || f.sink.sends.Load() != 1 || f.store.reads.Load()+f.store.batches.Load() != 0 {
		t.Fatalf("publish: %v, %d sends, %d store requests", err, f.sink.sends.Load(), f.store.reads.Load()+f.store.batches.Load())
	}
}

func TestRecordIsApartFromInboxMarkers(t *testing.T) {
	if txn.RequestID("E", "K") == txn.MarkerID("E", "K") {
		t.Fatal("a request record shares an inbox marker's id")
	}
	f := newFixture()
	if _, err := f.place(t, "O-1", "fp", "O-1"); err != nil {
		t.Fatal(err)
	}
	if st, err := txn.ReadMarker(context.Background(), f.store, orders, "C-1", "SalesEndpoint", "O-1"); err != nil || st.Found {
		t.Fatalf("an inbox marker of MessageId O-1 is found: %+v, %v", st, err)
	}
}

// stalled answers nothing until its call's context ends: a Service Bus
// connection, or a Cosmos DB one for the marks, that is open and stalled.
type stalled struct{ calls atomic.Int64 }

func (s *stalled) wait(ctx context.Context) error {
	s.calls.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

func (s *stalled) Publish(ctx context.Context, _ *message.Outgoing) error { return s.wait(ctx) }

func (s *stalled) PublishBatch(ctx context.Context, _ []*message.Outgoing) error { return s.wait(ctx) }

// stalledMarks is a store whose marks (a batch of one patch) stall.
type stalledMarks struct {
	txn.PendingFinder
	stalled
}

func (s *stalledMarks) Execute(ctx context.Context, t txn.Target, pk string, ops []txn.Op) (txn.Result, error) {
	if len(ops) == 1 && ops[0].Kind == txn.OpPatch {
		return txn.Result{}, s.wait(ctx)
	}
	return s.PendingFinder.Execute(ctx, t, pk, ops)
}

// within runs f and fails t when it does not return within 30 s.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not return: a call that is never answered holds it", what)
	}
}

// TestStalledSendOrMarkIsBounded: under a context without a deadline, a
// send or a mark that is never answered fails at the door's call timeout;
// the request is committed and answered (not sent), its events stay in
// the record for the sweep, and Publish's own send fails the same way.
func TestStalledSendOrMarkIsBounded(t *testing.T) {
	for _, which := range []string{"send", "mark"} {
		t.Run(which, func(t *testing.T) {
			f := newFixture()
			var stall *stalled
			if which == "send" {
				stall = &stalled{}
				f.door.Publisher = stall
			} else {
				sm := &stalledMarks{PendingFinder: f.store}
				stall = &sm.stalled
				f.door.Store = sm
			}
			f.door.CallTimeout = 20 * time.Millisecond
			var res frontdoor.Result
			var err error
			within(t, "Commit", func() { res, err = f.place(t, "O-1", "fp", "O-1") })
			if err != nil || res.Replayed || res.Dispatched || res.Events != 1 || !errors.Is(res.DispatchErr, context.DeadlineExceeded) {
				t.Fatalf("commit = %+v, %v; want committed, not sent, with the call's deadline", res, err)
			}
			if stall.calls.Load() != 1 {
				t.Errorf("%d stalled calls, want 1", stall.calls.Load())
			}
			st, err := txn.ReadRequest(context.Background(), f.store, orders, "C-1", "SalesEndpoint", "O-1")
			if err != nil || st.Pending == nil || len(st.Pending.Events) != 1 {
				t.Fatalf("record %+v, %v; want its event kept for the sweep", st, err)
			}
			if which == "send" {
				within(t, "Publish", func() {
					err = f.door.Publish(context.Background(), message.Publication{EventTypeID: "OrderPlaced", MessageID: "OrderPlaced-O-2",
						EventJSON: `{}`, SessionID: "s", CorrelationID: "c"})
				})
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Publish = %v, want the call's deadline", err)
				}
			}
		})
	}
}
