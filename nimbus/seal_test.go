package nimbus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/funchosttest"
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
	cfg, err := config.Load(config.FromMap(map[string]string{config.KeyEndpoint: "BillingEndpoint", config.KeyResolverSink: "InMemory",
		config.KeyInboxEnabled: "true", config.KeyInboxStore: "InMemory"}))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := app.New(cfg, app.Deps{Handlers: a.registry(func(string) string { return "" }), Log: zerolog.Nop(),
		Publisher: nopPublisher{}, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	env := funchosttest.ServiceBus(funchosttest.ServiceBusMessage{
		FunctionName: app.FuncSubscriber,
		Body:         []byte(`{"EventContent":{"EventTypeId":"PaymentReceived","EventJson":"{}"},"ErrorContent":null}`),
		MessageID:    "m-1", SessionID: funchosttest.S("k"), DeliveryCount: 1, SequenceNumber: 1, EnqueuedTime: time.Now(),
		Properties: funchosttest.Props("To", "BillingEndpoint", "From", "Shop", "MessageType", "EventRequest", "EventId", "e-1", "EventTypeId", "PaymentReceived"),
		Namespace:  "sb", UtcNow: time.Now(), RandGUID: "0f8fad5b-d9cb-469f-a165-70867728950e",
	})
	rec := httptest.NewRecorder()
	svc.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/"+app.FuncSubscriber, bytes.NewReader(env)))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if KindOf(lateErr) != KindPermanent || !errors.Is(lateErr, txn.ErrDone) {
		t.Errorf("a write queued after the handler returned: %v (kind %v), want a Permanent ErrDone", lateErr, KindOf(lateErr))
	}
	rec = httptest.NewRecorder()
	svc.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/_nimbus/txn?database=Billing&container=ledger", nil))
	var docs []struct{ ID, Type string }
	if err := json.Unmarshal(rec.Body.Bytes(), &docs); err != nil {
		t.Fatalf("%v: %s", err, rec.Body)
	}
	var ids []string
	for _, d := range docs {
		if d.Type != txn.MarkerType {
			ids = append(ids, d.ID)
		}
	}
	if !slices.Equal(ids, []string{"before"}) {
		t.Fatalf("committed documents %v, want only the one queued before the handler returned", ids)
	}
}
