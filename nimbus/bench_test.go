package nimbus

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

type nopPublisher struct{}

func (nopPublisher) Publish(context.Context, *message.Outgoing) error { return nil }

// BenchmarkInvocation measures one whole invocation (envelope in, response
// out, in-memory stores, inbox off) with the handler registered through the
// public API and directly on the pipeline's registry: the difference is the
// cost of the conversion.
func BenchmarkInvocation(b *testing.B) {
	public := New()
	public.Handle("OrderPlaced", func(context.Context, *Event) (Result, error) { return Completed(), nil })
	direct := subscriber.NewRegistry()
	direct.Handle("OrderPlaced", func(context.Context, *subscriber.Event) (subscriber.Result, error) {
		return subscriber.Completed(), nil
	})
	b.Run("api=internal", func(b *testing.B) { benchInvocation(b, direct) })
	b.Run("api=public", func(b *testing.B) { benchInvocation(b, public.registry(func(string) string { return "" })) })
}

// BenchmarkInvocationTx compares a fresh delivery (inbox on, in memory,
// a new MessageId each time) of a transactional handler that queues two
// documents with that of a plain handler writing the same two documents
// itself (to an in-memory map): the transactional path replaces the
// handler's writes and the inbox record by one batch with the marker, and
// adds the marker read to the inbox check.
func BenchmarkInvocationTx(b *testing.B) {
	type doc struct {
		ID         string `json:"id"`
		CustomerID string `json:"customerId"`
		MessageID  string `json:"messageId"`
	}
	var mu sync.Mutex
	written := map[string][]byte{}
	plain := New()
	plain.Handle("OrderPlaced", func(ctx context.Context, ev *Event) (Result, error) {
		for _, id := range []string{"payment-" + ev.MessageID, "balance-c-7"} {
			body, err := json.Marshal(doc{ID: id, CustomerID: "c-7", MessageID: ev.MessageID})
			if err != nil {
				return Result{}, err
			}
			mu.Lock()
			written[id] = body
			mu.Unlock()
		}
		return Completed(), nil
	})
	tx := New()
	tx.HandleTx("OrderPlaced", Container{DatabaseID: "Billing", ContainerID: "ledger", PartitionKeyPath: "/customerId"},
		// A partition per message: the in-memory store copies a partition
		// per batch, which is not what is measured here.
		func(ev *Event) (string, error) { return ev.MessageID, nil },
		func(ctx context.Context, ev *Event, tx *Tx) (Result, error) {
			c := tx.PartitionKey()
			if err := tx.Create(doc{ID: "payment-" + ev.MessageID, CustomerID: c, MessageID: ev.MessageID}); err != nil {
				return Result{}, err
			}
			return Completed(), tx.Upsert(doc{ID: "balance-" + c, CustomerID: c, MessageID: ev.MessageID}, nil)
		})
	// The same transactional handler publishing one event: stored in the
	// marker with the batch, sent with the response, then marked.
	txPub := New()
	txPub.HandleTx("OrderPlaced", Container{DatabaseID: "Billing", ContainerID: "ledger", PartitionKeyPath: "/customerId"},
		func(ev *Event) (string, error) { return ev.MessageID, nil },
		func(ctx context.Context, ev *Event, tx *Tx) (Result, error) {
			c := tx.PartitionKey()
			if err := tx.Create(doc{ID: "payment-" + ev.MessageID, CustomerID: c, MessageID: ev.MessageID}); err != nil {
				return Result{}, err
			}
			if err := tx.Upsert(doc{ID: "balance-" + c, CustomerID: c, MessageID: ev.MessageID}, nil); err != nil {
				return Result{}, err
			}
			return Completed(), tx.Publish(Publication{EventTypeID: "PaymentRecorded", MessageID: "PaymentRecorded-" + ev.MessageID,
				Payload: map[string]any{"PaymentId": ev.MessageID, "CustomerId": c, "AmountCents": 1250, "BalanceCents": 5000}})
		})
	noSetting := func(string) string { return "" }
	inbox := map[string]string{config.KeyInboxEnabled: "true", config.KeyInboxStore: "InMemory"}
	b.Run("handler=plain,writes=2", func(b *testing.B) { benchInvocation(b, plain.registry(noSetting), inbox) })
	b.Run("handler=tx,writes=2", func(b *testing.B) { benchInvocation(b, tx.registry(noSetting), inbox) })
	b.Run("handler=tx,writes=2,events=1", func(b *testing.B) { benchInvocation(b, txPub.registry(noSetting), inbox) })
}

// benchInvocation measures invocations of reg; with settings (the inbox
// on), each invocation carries a new MessageId, so each is fresh.
func benchInvocation(b *testing.B, reg *subscriber.Registry, settings ...map[string]string) {
	m := map[string]string{config.KeyEndpoint: "BillingEndpoint", config.KeyResolverSink: "InMemory"}
	for _, s := range settings {
		maps.Copy(m, s)
	}
	cfg, err := config.Load(config.FromMap(m))
	if err != nil {
		b.Fatal(err)
	}
	svc, err := app.New(cfg, app.Deps{Handlers: reg, Log: zerolog.Nop(), Publisher: nopPublisher{},
		TracerProvider: telemetry.PropagatingTracerProvider()})
	if err != nil {
		b.Fatal(err)
	}
	env := hostwire.ServiceBus(hostwire.ServiceBusMessage{
		FunctionName: app.FuncSubscriber,
		Body:         []byte(`{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1001\",\"Amount\":42.5}"},"ErrorContent":null}`),
		MessageID:    "m-00000000", SessionID: hostwire.S("customer-7"), DeliveryCount: 1, SequenceNumber: 1, EnqueuedTime: time.Now(),
		Properties: hostwire.Props("To", "BillingEndpoint", "From", "Shop", "MessageType", "EventRequest", "EventId", "e-1", "EventTypeId", "OrderPlaced"),
		Namespace:  "sb", UtcNow: time.Now(), RandGUID: "0f8fad5b-d9cb-469f-a165-70867728950e",
	})
	h := svc.Handler()
	id := bytes.Index(env, []byte("m-00000000")) + 2
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		if len(settings) > 0 {
			n++
			for i, v := 7, n; i >= 0; i, v = i-1, v/10 {
				env[id+i] = byte('0' + v%10)
			}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/"+app.FuncSubscriber, bytes.NewReader(env)))
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d", rec.Code)
		}
	}
}

// BenchmarkAdapt measures the conversion alone: the pipeline's event to
// an Event, the Result back.
func BenchmarkAdapt(b *testing.B) {
	in := &subscriber.Event{EventTypeID: "OrderPlaced", JSON: `{"OrderId":"O-1"}`, MessageID: "m-1", SessionID: "s-1",
		EventID: "e-1", DeliveryCount: 1, EnqueuedTime: time.Now(), Attempt: subscriber.AttemptOriginal}
	cases := []struct {
		name string
		h    subscriber.HandlerFunc
	}{
		{"api=internal", func(context.Context, *subscriber.Event) (subscriber.Result, error) {
			return subscriber.Completed(), nil
		}},
		{"api=public", adapt(func(context.Context, *Event) (Result, error) { return Completed(), nil })},
		{"api=public,handoff", adapt(func(context.Context, *Event) (Result, error) {
			return PendingHandoff(Handoff{Reason: "ManualApproval", ExternalJobID: "j-1"}), nil
		})},
	}
	ctx := context.Background()
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.h(ctx, in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
