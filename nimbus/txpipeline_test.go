package nimbus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testlog"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// onHandlerEnd runs a function when the handler's span ends: after the
// handler returned and before the pipeline goes on, which waits for it.
type onHandlerEnd struct {
	sdktrace.SpanProcessor
	f func()
}

func (p onHandlerEnd) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (p onHandlerEnd) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.Name() == "nimbus.handler" {
		p.f()
	}
}
func (p onHandlerEnd) Shutdown(context.Context) error   { return nil }
func (p onHandlerEnd) ForceFlush(context.Context) error { return nil }

// A Tx is sealed when the handler returns: a goroutine of the handler that
// queues a write after that gets a Permanent error, and the batch commits
// only what was queued before.
func TestTxIsSealedWhenTheHandlerReturns(t *testing.T) {
	late := make(chan error, 1)
	release := make(chan struct{})
	a := New()
	a.HandleTx("PaymentReceived", ledgerContainer, byFixedKey, func(ctx context.Context, ev *Event, tx *Tx) (Result, error) {
		if err := tx.Create(ledgerDoc{ID: "before", CustomerID: "k"}); err != nil {
			return Result{}, err
		}
		go func() {
			<-release
			late <- tx.Create(ledgerDoc{ID: "after", CustomerID: "k"})
		}()
		return Completed(), nil
	})
	var lateErr error
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(onHandlerEnd{f: func() {
		close(release)
		select {
		case lateErr = <-late:
		case <-time.After(10 * time.Second):
			lateErr = errors.New("the goroutine did not queue")
		}
	}}))
	h := txService(t, a, tp, nil)
	if code := deliverPayment(h, "m-1"); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	if KindOf(lateErr) != KindPermanent || !errors.Is(lateErr, txn.ErrDone) {
		t.Errorf("a write queued after the handler returned: %v (kind %v), want a Permanent ErrDone", lateErr, KindOf(lateErr))
	}
	if ids, _ := ledgerDocs(t, h); !slices.Equal(ids, []string{"before"}) {
		t.Fatalf("committed documents %v, want only the one queued before the handler returned", ids)
	}
}

// txService is the app serving a's registrations with the inbox in memory,
// its spans started by tp (nil: none), its log written to log (nil: none).
func txService(t *testing.T, a *App, tp trace.TracerProvider, log io.Writer) http.Handler {
	t.Helper()
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	logger := zerolog.Nop()
	if log != nil {
		logger = zerolog.New(log)
	}
	svc, err := app.New(inMemoryConfig(t), app.Deps{Handlers: a.registry(func(string) string { return "" }), Log: logger,
		Publisher: nopPublisher{}, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	return svc.Handler()
}

// deliverPayment invokes the Subscriber function with a PaymentReceived
// event of MessageId msgID ("" for none) and returns the status; event,
// when given, is the event's JSON ({} otherwise).
func deliverPayment(h http.Handler, msgID string, event ...string) int {
	ev := []byte(`"{}"`)
	if len(event) > 0 {
		ev, _ = json.Marshal(event[0])
	}
	env := hostwire.ServiceBus(hostwire.ServiceBusMessage{
		FunctionName: app.FuncSubscriber,
		Body:         []byte(`{"EventContent":{"EventTypeId":"PaymentReceived","EventJson":` + string(ev) + `},"ErrorContent":null}`),
		MessageID:    msgID, SessionID: hostwire.S("k"), DeliveryCount: 1, SequenceNumber: 1, EnqueuedTime: time.Now(),
		Properties: hostwire.Props("To", "BillingEndpoint", "From", "Shop", "MessageType", "EventRequest", "EventId", "e-1", "EventTypeId", "PaymentReceived"),
		Namespace:  "sb", UtcNow: time.Now(), RandGUID: "0f8fad5b-d9cb-469f-a165-70867728950e",
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/"+app.FuncSubscriber, bytes.NewReader(env)))
	return rec.Code
}

// ledgerDocs lists the ids of the ledger's business documents and counts
// its markers.
func ledgerDocs(t *testing.T, h http.Handler) (ids []string, markers int) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/_nimbus/txn?database=Billing&container=ledger", nil))
	var docs []struct{ ID, Type string }
	if err := json.Unmarshal(rec.Body.Bytes(), &docs); err != nil {
		t.Fatalf("%v: %s", err, rec.Body)
	}
	for _, d := range docs {
		if d.Type == txn.MarkerType {
			markers++
			continue
		}
		ids = append(ids, d.ID)
	}
	slices.Sort(ids)
	return ids, markers
}

// A delivery without a MessageId cannot be recorded: as docs/exactly-once.md
// says, the inbox is bypassed and the batch commits without a marker, so a
// second copy applies the event again. With a MessageId, the second copy
// is a duplicate.
func TestTxDeliveryWithoutMessageIDCommitsWithoutAMarker(t *testing.T) {
	runs := 0
	a := New()
	a.HandleTx("PaymentReceived", ledgerContainer, byFixedKey, func(ctx context.Context, ev *Event, tx *Tx) (Result, error) {
		runs++
		return Completed(), tx.Create(ledgerDoc{ID: fmt.Sprintf("run-%d", runs), CustomerID: "k"})
	})
	var log testlog.Buffer
	h := txService(t, a, nil, &log)
	for range 2 {
		if code := deliverPayment(h, ""); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
	}
	if ids, markers := ledgerDocs(t, h); !slices.Equal(ids, []string{"run-1", "run-2"}) || markers != 0 {
		t.Fatalf("documents %v and %d markers, want both runs committed without a marker", ids, markers)
	}
	lines := 0
	for _, l := range testlog.ParseLines(t, log.String()) {
		if l["outcome"] == nil {
			continue
		}
		lines++
		if l["inbox"] != "bypassed" || l["outcome"] != "completed" {
			t.Errorf("invocation line %v, want a completed delivery with the inbox bypassed", l)
		}
	}
	if lines != 2 {
		t.Errorf("%d invocation lines, want 2", lines)
	}
	for range 2 {
		if code := deliverPayment(h, "m-1"); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
	}
	if ids, markers := ledgerDocs(t, h); len(ids) != 3 || markers != 1 || runs != 3 {
		t.Fatalf("documents %v, %d markers, %d runs: want one more run and its marker", ids, markers, runs)
	}
}

// The duplicate check is per (MessageId, partition): a copy whose body maps
// to another partition finds no marker there and commits again, as
// docs/exactly-once.md says; a copy mapping to the same partition is a
// duplicate.
func TestTxDuplicateScopeIsMessageIDAndPartition(t *testing.T) {
	runs := 0
	a := New()
	HandleEventTx(a, "PaymentReceived", ledgerContainer, func(p struct{ Customer string }) (string, error) { return p.Customer, nil },
		func(ctx context.Context, ev *Event, tx *Tx, p struct{ Customer string }) (Result, error) {
			runs++
			return Completed(), tx.Create(ledgerDoc{ID: "payment", CustomerID: p.Customer})
		})
	h := txService(t, a, nil, nil)
	for _, customer := range []string{"c-1", "c-1", "c-2"} {
		if code := deliverPayment(h, "m-1", `{"Customer":"`+customer+`"}`); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
	}
	if runs != 2 {
		t.Fatalf("the handler ran %d times, want 2: once per partition", runs)
	}
}

// A transactional handler whose publication's payload cannot be encoded
// fails the delivery even when it ignores Publish's error and returns
// Completed: its writes and its marker are not committed, so no applied
// effect goes unannounced.
func TestTxUnencodablePayloadCommitsNothing(t *testing.T) {
	var perr error
	a := New()
	a.HandleTx("PaymentReceived", ledgerContainer, byFixedKey, func(ctx context.Context, ev *Event, tx *Tx) (Result, error) {
		if err := tx.Create(ledgerDoc{ID: "applied", CustomerID: "k"}); err != nil {
			return Result{}, err
		}
		perr = ev.Publish(Publication{EventTypeID: "PaymentApplied", MessageID: "applied-m-1", Payload: secretMarshaler{}})
		return Completed(), nil // the error is ignored
	})
	var log testlog.Buffer
	h := txService(t, a, nil, &log)
	code := deliverPayment(h, "m-1")
	if KindOf(perr) != KindPermanent {
		t.Fatalf("publish error %v (kind %v), want Permanent", perr, KindOf(perr))
	}
	if ids, markers := ledgerDocs(t, h); len(ids) != 0 || markers != 0 {
		t.Fatalf("status %d: committed documents %v and %d markers, want nothing committed", code, ids, markers)
	}
	outcomes := 0
	for _, l := range testlog.ParseLines(t, log.String()) {
		if l["outcome"] == nil {
			continue
		}
		outcomes++
		if l["outcome"] != "permanent_failure" {
			t.Errorf("invocation line %v, want permanent_failure", l)
		}
	}
	if outcomes != 1 {
		t.Errorf("%d invocation lines, want 1", outcomes)
	}
}
