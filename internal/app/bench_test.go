package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// countingStore counts store calls for the per-message figures.
type countingStore struct {
	inbox.Store
	checks, records atomic.Int64
}

func (c *countingStore) HasProcessed(ctx context.Context, k inbox.Key) (bool, error) {
	c.checks.Add(1)
	return c.Store.HasProcessed(ctx, k)
}

func (c *countingStore) RecordProcessed(ctx context.Context, k inbox.Key) error {
	c.records.Add(1)
	return c.Store.RecordProcessed(ctx, k)
}

const idWidth = 12

// benchEnvelope is a realistic NimBus EventRequest envelope whose MessageId
// is a fixed-width number that the loop rewrites in place.
func benchEnvelope(id string) ([]byte, int) {
	env := hostwire.ServiceBus(hostwire.ServiceBusMessage{
		FunctionName:   FuncSubscriber,
		Body:           []byte(`{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1001\",\"CustomerId\":\"C-7\",\"Amount\":42.5,\"Lines\":[{\"Sku\":\"A\",\"Qty\":2}]}"},"ErrorContent":null}`),
		MessageID:      id,
		SessionID:      hostwire.S("customer-7"),
		CorrelationID:  hostwire.S("corr-1"),
		ContentType:    hostwire.S("application/json"),
		LockToken:      "5e3d6a39-8f6c-4f55-9c0e-0d2a1f4b7c11",
		DeliveryCount:  1,
		SequenceNumber: 41,
		EnqueuedTime:   time.Now(),
		Properties: hostwire.Props(
			"To", "BillingEndpoint", "From", "ShopEndpoint", "MessageType", "EventRequest", "EventId", "8c1f3f0e-3f4e-4d1a-9a0e-0f2f8b0f6c21",
			"EventTypeId", "OrderPlaced", "OriginatingMessageId", "self", "ParentMessageId", "self",
			"RetryCount", 0, "OriginatingFrom", "ShopEndpoint"),
		Namespace: "sb-bench.servicebus.windows.net", UtcNow: time.Now(), RandGUID: "0f8fad5b-d9cb-469f-a165-70867728950e",
	})
	return env, bytes.Index(env, []byte(id))
}

func setID(env []byte, at, n int) {
	b := env[at : at+idWidth]
	for i := idWidth - 1; i >= 0; i-- {
		b[i] = byte('0' + n%10)
		n /= 10
	}
}

func runInvocationBench(b *testing.B, inboxOn bool, mode string) {
	// The tracer provider main installs when no OTLP exporter is configured.
	runInvocationBenchWith(b, inboxOn, mode, telemetry.PropagatingTracerProvider())
}

func runInvocationBenchWith(b *testing.B, inboxOn bool, mode string, tp trace.TracerProvider) {
	cfg, err := config.Load(config.FromMap(map[string]string{
		config.KeyEndpoint: "BillingEndpoint", config.KeyInboxEnabled: fmt.Sprint(inboxOn),
		config.KeyInboxStore: "InMemory", config.KeyResolverSink: "InMemory",
	}))
	if err != nil {
		b.Fatal(err)
	}
	mem, _ := inbox.NewMemoryStore(inbox.MemoryOptions{})
	store := &countingStore{Store: mem}
	reg := subscriber.NewRegistry()
	reg.Handle("OrderPlaced", func(ctx context.Context, ev *subscriber.Event) (subscriber.Result, error) {
		return subscriber.Completed(), nil
	})
	deps := Deps{Handlers: reg, Log: zerolog.New(io.Discard), Publisher: nopPublisher{}, TracerProvider: tp}
	if inboxOn {
		deps.Store = store
	}
	a, err := New(cfg, deps)
	if err != nil {
		b.Fatal(err)
	}
	h := a.Handler()
	env, at := benchEnvelope(fmt.Sprintf("%0*d", idWidth, 0))
	if mode == "bypass" {
		env = bytes.Replace(env, []byte(`"MessageId":"\"000000000000\"",`), nil, 1)
	}
	if mode == "duplicate" {
		req := httptest.NewRequest(http.MethodPost, "/Subscriber", bytes.NewReader(env))
		h.ServeHTTP(httptest.NewRecorder(), req)
		store.checks.Store(0)
		store.records.Store(0)
	}
	rec := &discardWriter{h: http.Header{}}
	reader := bytes.NewReader(env)
	req := httptest.NewRequest(http.MethodPost, "/Subscriber", reader)
	b.ReportAllocs()
	b.SetBytes(int64(len(env)))
	i := 0
	for b.Loop() {
		i++
		if mode == "fresh" {
			setID(env, at, i)
		}
		reader.Reset(env)
		req.Body = io.NopCloser(reader)
		req.ContentLength = int64(len(env))
		rec.status = 0
		h.ServeHTTP(rec, req)
		if rec.status != 200 {
			b.Fatalf("status %d", rec.status)
		}
	}
	b.ReportMetric(float64(store.checks.Load())/float64(i), "checks/msg")
	b.ReportMetric(float64(store.records.Load())/float64(i), "records/msg")
}

type nopPublisher struct{}

func (nopPublisher) Publish(ctx context.Context, m *message.Outgoing) error { return nil }

// discardWriter is a ResponseWriter that keeps only the status.
type discardWriter struct {
	h      http.Header
	status int
}

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(s int)           { d.status = s }

var _ resolver.Publisher = nopPublisher{}

// BenchmarkInvocation measures one whole invocation, envelope bytes in to
// response bytes out, through the real HTTP handler with the in-memory
// store, and reports store calls per message.
func BenchmarkInvocation(b *testing.B) {
	b.Run("inbox=off", func(b *testing.B) { runInvocationBench(b, false, "fresh") })
	b.Run("inbox=fresh", func(b *testing.B) { runInvocationBench(b, true, "fresh") })
	b.Run("inbox=duplicate", func(b *testing.B) { runInvocationBench(b, true, "duplicate") })
	b.Run("inbox=bypass", func(b *testing.B) { runInvocationBench(b, true, "bypass") })
}

// BenchmarkInvocationTracing measures what tracing costs a fresh delivery
// (four spans: invocation, inbox check, handler, record): with no tracer at
// all (a no-op provider, the floor), with the provider main installs when
// nothing is exported, and with the SDK recording every span into a batch
// processor whose exporter discards them (export on).
func BenchmarkInvocationTracing(b *testing.B) {
	b.Run("tracer=noop", func(b *testing.B) { runInvocationBenchWith(b, true, "fresh", noop.NewTracerProvider()) })
	b.Run("tracer=export-off", func(b *testing.B) {
		runInvocationBenchWith(b, true, "fresh", telemetry.PropagatingTracerProvider())
	})
	b.Run("tracer=export-on", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		runInvocationBenchWith(b, true, "fresh", tp)
	})
}

// discardExporter drops exported spans.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkLargeInvocation measures the memory one invocation takes per
// byte of its envelope (the figure behind NimBus__Host__MaxBodyBytesInFlight):
// a 4 MB event, base64-encoded in the envelope as the host sends it.
func BenchmarkLargeInvocation(b *testing.B) {
	cfg, err := config.Load(config.FromMap(map[string]string{
		config.KeyEndpoint: "BillingEndpoint", config.KeyResolverSink: "InMemory",
	}))
	if err != nil {
		b.Fatal(err)
	}
	reg := subscriber.NewRegistry()
	reg.Handle("OrderPlaced", func(context.Context, *subscriber.Event) (subscriber.Result, error) {
		return subscriber.Completed(), nil
	})
	pub := &resolver.Memory{}
	a, err := New(cfg, Deps{Handlers: reg, Log: zerolog.Nop(), Publisher: pub})
	if err != nil {
		b.Fatal(err)
	}
	event := `{\"Blob\":\"` + string(bytes.Repeat([]byte("x"), 4<<20)) + `\"}`
	env := hostwire.ServiceBus(hostwire.ServiceBusMessage{
		FunctionName: FuncSubscriber,
		Body:         []byte(`{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"` + event + `"},"ErrorContent":null}`),
		MessageID:    "m-1", SessionID: hostwire.S("s"), DeliveryCount: 1, SequenceNumber: 1, EnqueuedTime: time.Now(),
		Properties: hostwire.Props("To", "BillingEndpoint", "From", "Shop", "MessageType", "EventRequest", "EventId", "e-1", "EventTypeId", "OrderPlaced"),
		Namespace:  "sb", UtcNow: time.Now(), RandGUID: "0f8fad5b-d9cb-469f-a165-70867728950e",
	})
	h := a.Handler()
	b.SetBytes(int64(len(env)))
	b.ReportAllocs()
	for b.Loop() {
		pub.Reset()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/"+FuncSubscriber, bytes.NewReader(env)))
		if rec.Code != 200 {
			b.Fatalf("status %d", rec.Code)
		}
	}
}
