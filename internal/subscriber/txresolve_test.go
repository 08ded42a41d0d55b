package subscriber

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// faultyTxn is a transactional store in memory whose next batches fail
// as planned: lose applies a batch and then loses its answer (a connection
// dropped after Cosmos DB received the request); failMarks fails the
// dispatched marks (a batch of one patch) before they take effect, as a
// throttled request does.
type faultyTxn struct {
	*txn.Memory
	mu        sync.Mutex
	lose      int
	failMarks int
	marks     int
}

func (s *faultyTxn) Execute(ctx context.Context, target txn.Target, pk string, ops []txn.Op) (txn.Result, error) {
	s.mu.Lock()
	mark := len(ops) == 1 && ops[0].Kind == txn.OpPatch
	if mark {
		s.marks++
		if s.failMarks > 0 {
			s.failMarks--
			s.mu.Unlock()
			return txn.Result{}, &txn.TransientError{Status: 429}
		}
	}
	lose := !mark && s.lose > 0
	if lose {
		s.lose--
	}
	s.mu.Unlock()
	res, err := s.Memory.Execute(ctx, target, pk, ops)
	if lose && err == nil {
		return txn.Result{}, &txn.AmbiguousError{Err: errors.New("the connection closed after the request was sent")}
	}
	return res, err
}

// txResolveFixture is a pipeline with a transactional OrderPlaced handler
// on store, whose Resolver responses and events go to pub.
type txResolveFixture struct {
	p     *Pipeline
	pub   *resolver.Memory
	store *faultyTxn
	runs  int
}

// newTxResolveFixture registers a handler that creates the order's
// document and publishes the events publish names (none: it publishes
// nothing).
func newTxResolveFixture(t *testing.T, publish ...string) *txResolveFixture {
	t.Helper()
	f := &txResolveFixture{pub: &resolver.Memory{}, store: &faultyTxn{Memory: txn.NewMemory(func() time.Time { return t0 })}}
	reg := NewRegistry()
	reg.HandleTx("OrderPlaced", TxBinding{Target: txTarget, PartitionKey: func(*Event) (string, error) { return txPartition, nil }},
		func(ctx context.Context, ev *Event, u *txn.Unit) (Result, error) {
			f.runs++
			for _, id := range publish {
				if err := ev.Publish(Publication{EventTypeID: "OrderAccepted", MessageID: id, JSON: `{}`}); err != nil {
					return Result{}, err
				}
			}
			return Completed(), u.Create(map[string]any{"id": "order-" + ev.MessageID, "customerId": txPartition})
		})
	mem, _ := inbox.NewMemoryStore(inbox.MemoryOptions{})
	var err error
	f.p, err = New(Options{EndpointID: "billing", Inbox: mem, Txn: f.store, Publisher: f.pub, Handlers: reg,
		Now: func() time.Time { return t0 }, RecordBackoff: time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// sent lists the messages sent since from, each as its type and the
// message it answers (a response's CorrelationId) or its own MessageId.
func (f *txResolveFixture) sent(from int) []string {
	var out []string
	for _, m := range f.pub.Sent()[from:] {
		if m.Type() == message.EventRequest.String() {
			out = append(out, "EventRequest "+m.MessageID)
			continue
		}
		s := m.Type() + " " + deref(m.CorrelationID)
		if bytes.Contains(m.Body, []byte(`"ErrorText":"DuplicateDetected"`)) {
			s += " DuplicateDetected"
		}
		out = append(out, s)
	}
	return out
}

// A transactional handler that publishes nothing, whose batch was applied
// and its answer lost, has its ResolutionResponse sent by the redelivery
// that finds its marker: the Resolver hears the event completed, not only
// a SkipResponse DuplicateDetected. The handler does not run again.
func TestTxAnswerLostRedeliveryResolves(t *testing.T) {
	f := newTxResolveFixture(t)
	f.store.lose = 1
	d := delivery(str("m-1"))
	r := f.p.Process(context.Background(), d)
	if r.Outcome != OutcomeTxnAmbiguous || r.Published {
		t.Fatalf("first delivery: %s, published %v: %v", r.Outcome, r.Published, r.Err)
	}
	if got := f.sent(0); len(got) != 0 {
		t.Fatalf("the first delivery sent %v", got)
	}
	r = f.p.Process(context.Background(), redelivery(d))
	if r.Outcome != OutcomeDuplicateResolved || r.HandlerRan || !r.Published || r.Inbox != InboxDuplicate {
		t.Fatalf("redelivery: %s, handler ran %v, published %v, inbox %s: %v", r.Outcome, r.HandlerRan, r.Published, r.Inbox, r.Err)
	}
	if got, want := f.sent(0), []string{"ResolutionResponse m-1"}; !slices.Equal(got, want) {
		t.Fatalf("the Resolver got %v, want %v", got, want)
	}
	if f.runs != 1 {
		t.Fatalf("the handler ran %d times", f.runs)
	}
	if !r.Outcome.Completes() {
		t.Fatalf("%s does not complete the message", r.Outcome)
	}
}

// What a copy of a committed message answers, by what its marker records:
// a first delivery of another copy (a producer's re-send under the same
// MessageId) is a duplicate, since the delivery that committed answers for
// the event; a redelivery of a publishing handler's message whose events
// were dispatched is a duplicate too, since its ResolutionResponse went
// with the events; a redelivery of a non-publishing handler's message
// resolves, since nothing records that its response went out.
func TestTxCopyOfCommittedMessageAnswers(t *testing.T) {
	cases := []struct {
		name    string
		publish []string
		copy    func(*Delivery) *Delivery
		outcome Outcome
		want    []string
	}{
		{"first delivery of another copy", nil, func(d *Delivery) *Delivery { c := *d; return &c }, OutcomeDuplicate,
			[]string{"SkipResponse m-1 DuplicateDetected"}},
		{"redelivery, events dispatched", []string{"OrderAccepted-1"}, redelivery, OutcomeDuplicate,
			[]string{"SkipResponse m-1 DuplicateDetected"}},
		{"redelivery, no events", nil, redelivery, OutcomeDuplicateResolved,
			[]string{"ResolutionResponse m-1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newTxResolveFixture(t, c.publish...)
			d := delivery(str("m-1"))
			if r := f.p.Process(context.Background(), d); r.Outcome != OutcomeCompleted {
				t.Fatalf("first delivery: %s: %v", r.Outcome, r.Err)
			}
			n := len(f.pub.Sent())
			r := f.p.Process(context.Background(), c.copy(d))
			if r.Outcome != c.outcome || r.HandlerRan {
				t.Fatalf("copy: %s, handler ran %v: %v", r.Outcome, r.HandlerRan, r.Err)
			}
			if got := f.sent(n); !slices.Equal(got, c.want) {
				t.Fatalf("the copy sent %v, want %v", got, c.want)
			}
		})
	}
}

// A dispatched mark that fails is tried again within the invocation, as
// an inbox record is: the delivery completes with its events sent once,
// and the marker is dispatched. A mark that fails on every attempt fails
// the delivery (its redelivery sends the events again and marks them).
func TestTxDispatchedMarkIsRetried(t *testing.T) {
	f := newTxResolveFixture(t, "OrderAccepted-1")
	f.store.failMarks = 1
	r := f.p.Process(context.Background(), delivery(str("m-1")))
	if r.Outcome != OutcomeCompleted || r.MarkRetries != 1 {
		t.Fatalf("%s after %d mark retries: %v", r.Outcome, r.MarkRetries, r.Err)
	}
	if got, want := f.sent(0), []string{"EventRequest OrderAccepted-1", "ResolutionResponse m-1"}; !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
	if f.store.marks != 2 {
		t.Fatalf("%d mark attempts, want 2", f.store.marks)
	}
	st, err := txn.ReadMarker(context.Background(), f.store, txTarget, txPartition, "billing", "m-1")
	if err != nil || !st.Dispatched {
		t.Fatalf("marker dispatched %v: %v", st.Dispatched, err)
	}

	f = newTxResolveFixture(t, "OrderAccepted-1")
	f.store.failMarks = 1000
	r = f.p.Process(context.Background(), delivery(str("m-1")))
	if r.Outcome != OutcomeTransientFailure || r.StoreOp != opOutboxDispatched || f.store.marks != f.p.o.RecordAttempts {
		t.Fatalf("a mark that always fails: %s (op %s) after %d attempts: %v", r.Outcome, r.StoreOp, f.store.marks, r.Err)
	}
}
