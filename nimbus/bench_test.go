package nimbus

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/funchosttest"
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

func benchInvocation(b *testing.B, reg *subscriber.Registry) {
	cfg, err := config.Load(config.FromMap(map[string]string{
		config.KeyEndpoint: "BillingEndpoint", config.KeyResolverSink: "InMemory",
	}))
	if err != nil {
		b.Fatal(err)
	}
	svc, err := app.New(cfg, app.Deps{Handlers: reg, Log: zerolog.Nop(), Publisher: nopPublisher{},
		TracerProvider: telemetry.PropagatingTracerProvider()})
	if err != nil {
		b.Fatal(err)
	}
	env := funchosttest.ServiceBus(funchosttest.ServiceBusMessage{
		FunctionName: app.FuncSubscriber,
		Body:         []byte(`{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1001\",\"Amount\":42.5}"},"ErrorContent":null}`),
		MessageID:    "m-1", SessionID: funchosttest.S("customer-7"), DeliveryCount: 1, SequenceNumber: 1, EnqueuedTime: time.Now(),
		Properties: funchosttest.Props("To", "BillingEndpoint", "From", "Shop", "MessageType", "EventRequest", "EventId", "e-1", "EventTypeId", "OrderPlaced"),
		Namespace:  "sb", UtcNow: time.Now(), RandGUID: "0f8fad5b-d9cb-469f-a165-70867728950e",
	})
	h := svc.Handler()
	b.ReportAllocs()
	for b.Loop() {
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
