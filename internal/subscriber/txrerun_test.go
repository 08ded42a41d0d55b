package subscriber

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// balanceDoc is the document the re-run tests' handler keeps: a count in
// partition txPartition.
type balanceDoc struct {
	Count int `json:"count"`
}

// balance reads the count from the store itself; found is false when the
// document does not exist.
func (w *fakeNimbus) balance() (count int, found bool) {
	w.t.Helper()
	body, _, found, err := w.txn.Read(context.Background(), txTarget, txPartition, "balance")
	if err != nil {
		w.t.Fatal(err)
	}
	if !found {
		return 0, false
	}
	var b balanceDoc
	if err := json.Unmarshal(body, &b); err != nil {
		w.t.Fatal(err)
	}
	return b.Count, true
}

// writeBalance commits a change of the balance as another writer of the
// partition does, outside the delivery: "bump" adds one (creating the
// document at 1 when it is missing), "delete" deletes it.
func (w *fakeNimbus) writeBalance(change string) {
	w.t.Helper()
	count, found := w.balance()
	t := txn.Begin(w.txn, txTarget, txPartition, w.clock)
	var err error
	switch change {
	case "bump":
		err = t.Unit().Upsert(map[string]any{"id": "balance", "customerId": txPartition, "count": count + 1}, "")
	case "delete":
		if !found {
			w.t.Fatal("no balance to delete")
		}
		err = t.Unit().Delete("balance", "")
	}
	if err != nil {
		w.t.Fatal(err)
	}
	if _, err := t.Commit(context.Background()); err != nil {
		w.t.Fatal(err)
	}
}

// rerunHandler makes w's transactional handler a read-modify-write of the
// balance, as a ledger does: it reads the balance, queues a document of
// its own run ("run-<n>") and the balance plus one (a Replace under the
// ETag it read, or a Create when there was none). Before it returns,
// between its read and its batch, interfere(n) may change the partition as
// another writer would. It returns every unit the handler was given.
func rerunHandler(w *fakeNimbus, interfere func(run int)) *[]*txn.Unit {
	var units []*txn.Unit
	w.txOps = func(ev *Event, u *txn.Unit) error {
		units = append(units, u)
		run := len(units)
		var b balanceDoc
		found, etag, err := u.Read(context.Background(), "balance", &b)
		if err != nil {
			return err
		}
		if interfere != nil {
			interfere(run)
		}
		if err := u.Create(map[string]any{"id": fmt.Sprintf("run-%d", run), "customerId": txPartition}); err != nil {
			return err
		}
		doc := map[string]any{"id": "balance", "customerId": txPartition, "count": b.Count + 1}
		if !found {
			return u.Create(doc)
		}
		return u.Replace(doc, etag)
	}
	return &units
}

// withMetrics gives w's pipeline instruments of its own.
func withMetrics(w *fakeNimbus) *telemetry.Metrics {
	m := telemetry.NewMetrics(telemetry.MetricsOptions{})
	w.p.o.Metrics = m
	return m
}

// A batch that conflicts because another writer changed the partition
// between the handler's read and its batch is run again within the
// invocation, from the handler on, in a new unit of work on fresh reads,
// until it commits: the delivery completes at once (no 503, no
// redelivery), the report and the metric count the re-runs, and nothing a
// conflicted run queued is committed. The three conflicts a handler
// operation can meet: the ETag changed (412), the document it creates was
// created meanwhile (409), the document it replaces was deleted (404).
func TestTxConflictIsRerunOnFreshReads(t *testing.T) {
	cases := []struct {
		name string
		// seed is the balance before the delivery (-1: none).
		seed int
		// change is the other writer's change, made in runs 1..conflicts.
		change    string
		conflicts int
		// want is the balance after the delivery.
		want int
	}{
		{"412: replaced meanwhile, three times", 0, "bump", 3, 3 + 1},
		{"409: created meanwhile", -1, "bump", 1, 1 + 1},
		{"404: deleted meanwhile", 5, "delete", 1, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
			m := withMetrics(w)
			seedBalance(w, c.seed)
			units := rerunHandler(w, func(run int) {
				if run <= c.conflicts {
					w.writeBalance(c.change)
				}
			})
			r := w.p.Process(context.Background(), w.event("msg-1", "event-1"))
			if r.Outcome != OutcomeCompleted || r.Err != nil {
				t.Fatalf("%s: %v", r.Outcome, r.Err)
			}
			if r.TxnReruns != c.conflicts || len(w.runs) != c.conflicts+1 || len(*units) != c.conflicts+1 {
				t.Fatalf("reported %d re-runs, the handler ran %d times with %d units; want %d re-runs", r.TxnReruns, len(w.runs), len(*units), c.conflicts)
			}
			if w.batches != c.conflicts+1 {
				t.Fatalf("%d batches sent, want %d", w.batches, c.conflicts+1)
			}
			// Only the last run's writes are committed, with the marker.
			last := fmt.Sprintf("run-%d", c.conflicts+1)
			if got := w.effects(); !slices.Equal(got, []string{"balance", last}) && !slices.Equal(got, []string{last, "balance"}) {
				t.Fatalf("documents %v, want the balance and %s only", got, last)
			}
			if n, _ := w.balance(); n != c.want || !w.marked("msg-1") {
				t.Fatalf("balance %d, marker %v; want %d and the marker", n, w.marked("msg-1"), c.want)
			}
			// Every run had a unit of its own, sealed once it returned.
			for i, u := range *units {
				if slices.Index(*units, u) != i {
					t.Fatalf("run %d was given the unit of run %d", i+1, slices.Index(*units, u)+1)
				}
				if err := u.Create(map[string]any{"id": "late", "customerId": txPartition}); !errors.Is(err, txn.ErrDone) {
					t.Fatalf("the unit of run %d is not sealed: %v", i+1, err)
				}
			}
			if got := w.responses(); !slices.Equal(got, []string{"ResolutionResponse event-1"}) {
				t.Fatalf("responses %v", got)
			}
			if got := m.Get(telemetry.TxnReruns, telemetry.TagOutcome+"=completed"); got != float64(c.conflicts) {
				t.Fatalf("%s = %v, want %d", telemetry.TxnReruns, got, c.conflicts)
			}
		})
	}
}

// seedBalance creates the balance at count; none when count < 0.
func seedBalance(w *fakeNimbus, count int) {
	w.t.Helper()
	if count < 0 {
		return
	}
	t := txn.Begin(w.txn, txTarget, txPartition, w.clock)
	if err := t.Unit().Create(map[string]any{"id": "balance", "customerId": txPartition, "count": count}); err != nil {
		w.t.Fatal(err)
	}
	if _, err := t.Commit(context.Background()); err != nil {
		w.t.Fatal(err)
	}
}

// newWith rebuilds w's pipeline from its options changed by change, through
// New (so New's defaults and limits apply).
func newWith(w *fakeNimbus, change func(o *Options)) {
	w.t.Helper()
	o := w.p.o
	change(&o)
	p, err := New(o)
	if err != nil {
		w.t.Fatal(err)
	}
	w.p = p
}

// A batch that conflicts on every run is run again TxnConflictReruns times
// (default 5; negative: never) and then answers the conflict as before
// re-runs existed: txn_conflict, 503 after the redelivery pause, nothing
// committed, no response.
func TestTxConflictsBeyondTheReruns(t *testing.T) {
	cases := []struct {
		name          string
		option, reran int
	}{
		{"the default bound", 0, 5},
		{"a bound of 2", 2, 2},
		{"re-runs off", -1, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
			newWith(w, func(o *Options) { o.TxnConflictReruns = c.option })
			m := withMetrics(w)
			seedBalance(w, 0)
			rerunHandler(w, func(int) { w.writeBalance("bump") })
			r := w.p.Process(context.Background(), w.event("msg-1", "event-1"))
			if r.Outcome != OutcomeTxnConflict || !errors.Is(r.Err, txn.ErrConflict) {
				t.Fatalf("%s: %v", r.Outcome, r.Err)
			}
			if s := r.Outcome.Spec(); s.Status != http.StatusServiceUnavailable || !s.Pause {
				t.Fatalf("the conflict settles %d, pause %v", s.Status, s.Pause)
			}
			if r.TxnReruns != c.reran || len(w.runs) != c.reran+1 || w.batches != c.reran+1 {
				t.Fatalf("%d re-runs reported, %d runs, %d batches; want %d re-runs", r.TxnReruns, len(w.runs), w.batches, c.reran)
			}
			if n, _ := w.balance(); n != c.reran+1 || w.marked("msg-1") || !slices.Equal(w.effects(), []string{"balance"}) {
				t.Fatalf("balance %d (the other writer's %d), marker %v, documents %v: something of a run was committed", n, c.reran+1, w.marked("msg-1"), w.effects())
			}
			if got := w.responses(); len(got) != 0 {
				t.Fatalf("responses %v", got)
			}
			if got := m.Get(telemetry.TxnReruns, telemetry.TagOutcome+"=txn_conflict"); got != float64(c.reran) {
				t.Fatalf("%s = %v, want %d", telemetry.TxnReruns, got, c.reran)
			}
		})
	}
}

// A re-run whose batch meets the marker another copy of the message
// committed meanwhile is a duplicate: nothing of it applied, SkipResponse.
func TestTxRerunFindsAnotherCopysMarker(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
	seedBalance(w, 0)
	rerunHandler(w, func(run int) {
		switch run {
		case 1:
			w.writeBalance("bump")
		case 2:
			w.commitMarkerOnly("msg-1")
		}
	})
	r := w.p.Process(context.Background(), w.event("msg-1", "event-1"))
	if r.Outcome != OutcomeDuplicate || r.Inbox != InboxDuplicate || r.TxnReruns != 1 || !r.HandlerRan {
		t.Fatalf("%s (inbox %s, %d re-runs, ran %v): %v", r.Outcome, r.Inbox, r.TxnReruns, r.HandlerRan, r.Err)
	}
	if n, _ := w.balance(); n != 1 || !slices.Equal(w.effects(), []string{"balance"}) {
		t.Fatalf("balance %d, documents %v: the duplicate applied something", n, w.effects())
	}
	if got := w.responses(); !slices.Equal(got, []string{"SkipResponse event-1"}) {
		t.Fatalf("responses %v", got)
	}
}

// The invocation cancelled (the host gave up, or the process shuts down)
// ends the re-runs: the conflict is answered at once.
func TestTxRerunsStopWhenTheInvocationIsCancelled(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
	seedBalance(w, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rerunHandler(w, func(int) {
		w.writeBalance("bump")
		cancel()
	})
	r := w.p.Process(ctx, w.event("msg-1", "event-1"))
	if r.Outcome != OutcomeTxnConflict || r.TxnReruns != 0 || len(w.runs) != 1 {
		t.Fatalf("%s after %d runs (%d re-runs reported): %v", r.Outcome, len(w.runs), r.TxnReruns, r.Err)
	}
}

// What a goroutine of a conflicted run queues after the run returned goes
// nowhere: not into that run's batch, not into the re-run's.
func TestTxLateWriteOfAConflictedRunIsNotCommitted(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
	seedBalance(w, 0)
	released := make(chan struct{})
	late := make(chan error, 1)
	var units *[]*txn.Unit
	units = rerunHandler(w, func(run int) {
		switch run {
		case 1:
			u := (*units)[0]
			go func() {
				<-released
				late <- u.Create(map[string]any{"id": "late", "customerId": txPartition})
			}()
			w.writeBalance("bump")
		case 2:
			// Run 1 has returned and its batch conflicted.
			close(released)
			if err := <-late; !errors.Is(err, txn.ErrDone) {
				t.Errorf("the late write of run 1: %v, want ErrDone", err)
			}
		}
	})
	r := w.p.Process(context.Background(), w.event("msg-1", "event-1"))
	if r.Outcome != OutcomeCompleted || r.TxnReruns != 1 {
		t.Fatalf("%s after %d re-runs: %v", r.Outcome, r.TxnReruns, r.Err)
	}
	if got := w.effects(); slices.Contains(got, "late") || slices.Contains(got, "run-1") {
		t.Fatalf("documents %v", got)
	}
}

// The wait before a re-run is drawn from zero to a bound that starts at
// TxnRerunBackoff (default 20ms) and doubles up to TxnRerunMaxBackoff
// (default 1s): full jitter, decided by Options.Rand. Every re-run draws.
func TestTxRerunWaitIsJitteredExponential(t *testing.T) {
	w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
	rnd := 0.5
	newWith(w, func(o *Options) {
		o.TxnRerunBackoff, o.TxnRerunMaxBackoff = 0, 0
		o.Rand = func() float64 { return rnd }
	})
	ms := time.Millisecond
	for n, want := range []time.Duration{10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 500 * ms, 500 * ms} {
		if got := w.p.txnRerunWait(n); got != want {
			t.Errorf("rand 0.5: the wait before re-run %d is %v, want %v", n+1, got, want)
		}
	}
	for _, c := range []struct {
		rnd  float64
		n    int
		want time.Duration
	}{{0, 3, 0}, {0.25, 0, 5 * ms}, {0.999, 0, 19980 * time.Microsecond}, {0.999, 40, 999 * ms}} {
		rnd = c.rnd
		if got := w.p.txnRerunWait(c.n); got != c.want {
			t.Errorf("rand %v: the wait before re-run %d is %v, want %v", c.rnd, c.n+1, got, c.want)
		}
	}

	// Each re-run draws its wait.
	w = newFakeNimbus(t, fakeNimbusOptions{tx: true})
	var draws []int
	w.p.o.Rand = func() float64 { draws = append(draws, len(w.runs)); return 0.5 }
	seedBalance(w, 0)
	rerunHandler(w, func(run int) {
		if run <= 3 {
			w.writeBalance("bump")
		}
	})
	if r := w.p.Process(context.Background(), w.event("msg-1", "event-1")); r.Outcome != OutcomeCompleted || r.TxnReruns != 3 {
		t.Fatalf("%s after %d re-runs: %v", r.Outcome, r.TxnReruns, r.Err)
	}
	if !slices.Equal(draws, []int{1, 2, 3}) {
		t.Fatalf("waits drawn after runs %v, want one after each of the 3 conflicted runs", draws)
	}
}

// settleWatch wraps the stores to see the contexts the steps after the
// handler (the inbox record, the batch) get.
type settleWatch struct {
	mu sync.Mutex
	// ctxs are the contexts of the records and batches, in order;
	// liveBefore[i] says whether any earlier one was still live when
	// the i-th began.
	ctxs       []context.Context
	liveBefore []bool
}

func (s *settleWatch) saw(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	live := false
	for _, c := range s.ctxs {
		live = live || c.Err() == nil
	}
	s.ctxs = append(s.ctxs, ctx)
	s.liveBefore = append(s.liveBefore, live)
}

type watchedInbox struct {
	inbox.Store
	s *settleWatch
}

func (i watchedInbox) RecordProcessed(ctx context.Context, k inbox.Key) error {
	i.s.saw(ctx)
	return i.Store.RecordProcessed(ctx, k)
}

type watchedTxn struct {
	txn.Store
	s *settleWatch
}

func (x watchedTxn) Execute(ctx context.Context, t txn.Target, pk string, ops []txn.Op) (txn.Result, error) {
	x.s.saw(ctx)
	return x.Store.Execute(ctx, t, pk, ops)
}

// The context of the steps after the handler (SettleTimeout from its first
// use) is released when the delivery ends, not left to its timeout; a
// conflicted batch's is released before the re-run's batch gets its own.
func TestSettleContextEndsWithTheDelivery(t *testing.T) {
	t.Run("plain record", func(t *testing.T) {
		w := newFakeNimbus(t, fakeNimbusOptions{})
		s := &settleWatch{}
		w.p.o.Inbox = watchedInbox{w.p.o.Inbox, s}
		if r := w.p.Process(context.Background(), w.event("msg-1", "event-1")); r.Outcome != OutcomeCompleted {
			t.Fatalf("%s: %v", r.Outcome, r.Err)
		}
		if len(s.ctxs) != 1 || s.ctxs[0].Err() == nil {
			t.Fatalf("%d records; the record's context is still live after the delivery ended", len(s.ctxs))
		}
	})
	t.Run("transactional re-runs", func(t *testing.T) {
		w := newFakeNimbus(t, fakeNimbusOptions{tx: true})
		s := &settleWatch{}
		w.p.o.Txn = watchedTxn{w.p.o.Txn, s}
		seedBalance(w, 0)
		rerunHandler(w, func(run int) {
			if run <= 2 {
				w.writeBalance("bump")
			}
		})
		if r := w.p.Process(context.Background(), w.event("msg-1", "event-1")); r.Outcome != OutcomeCompleted || r.TxnReruns != 2 {
			t.Fatalf("%s after %d re-runs: %v", r.Outcome, r.TxnReruns, r.Err)
		}
		if len(s.ctxs) != 3 || !slices.Equal(s.liveBefore, []bool{false, false, false}) {
			t.Fatalf("%d batches; an earlier batch's context was live when the next began: %v", len(s.ctxs), s.liveBefore)
		}
		for i, c := range s.ctxs {
			if c.Err() == nil {
				t.Fatalf("batch %d's context is still live after the delivery ended", i+1)
			}
		}
	})
}
