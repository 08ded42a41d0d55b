package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

// BenchmarkCloudEventInvocation measures whole invocations with CloudEvents
// on, each a fresh delivery (1 check + 1 record), against the native case of
// BenchmarkInvocation: a native message (the detection probes only), a
// binary-mode event keyed on (source, id), and a structured-mode event keyed
// on the MessageId.
func BenchmarkCloudEventInvocation(b *testing.B) {
	data := `{"OrderId":"O-1001","CustomerId":"C-7","Amount":42.5,"Lines":[{"Sku":"A","Qty":2}]}`
	b.Run("native", func(b *testing.B) {
		env, at := benchEnvelope(fmt.Sprintf("%0*d", idWidth, 0))
		runCloudEventBench(b, "MessageId", env, at)
	})
	b.Run("binary", func(b *testing.B) {
		env := ceBenchEnvelope("application/json", []byte(data), "broker-id",
			"cloudEvents:specversion", "1.0", "cloudEvents:id", fmt.Sprintf("%0*d", idWidth, 0),
			"cloudEvents:source", "/crm/leads", "cloudEvents:type", "com.acme.crm.OrderPlaced", "cloudEvents:subject", "lead/42")
		runCloudEventBench(b, "SourceAndId", env, bytes.Index(env, []byte(`"cloudEvents:id":"`))+len(`"cloudEvents:id":"`))
	})
	b.Run("structured", func(b *testing.B) {
		body := []byte(`{"specversion":"1.0","id":"evt-1","source":"/crm/leads","type":"com.acme.crm.OrderPlaced","subject":"lead/42","datacontenttype":"application/json","data":` + data + `}`)
		env := ceBenchEnvelope("application/cloudevents+json", body, fmt.Sprintf("%0*d", idWidth, 0))
		runCloudEventBench(b, "MessageId", env, bytes.Index(env, []byte(fmt.Sprintf("%0*d", idWidth, 0))))
	})
}

func ceBenchEnvelope(contentType string, body []byte, messageID string, props ...any) []byte {
	return hostwire.ServiceBus(hostwire.ServiceBusMessage{
		FunctionName: FuncCloudEventsIngress, Body: body, MessageID: messageID,
		SessionID: hostwire.S("lead-42"), ContentType: hostwire.S(contentType),
		LockToken: "5e3d6a39-8f6c-4f55-9c0e-0d2a1f4b7c11", DeliveryCount: 1, SequenceNumber: 41, EnqueuedTime: time.Now(),
		Properties: hostwire.Props(props...),
		Namespace:  "sb-bench.servicebus.windows.net", UtcNow: time.Now(), RandGUID: "0f8fad5b-d9cb-469f-a165-70867728950e",
	})
}

func runCloudEventBench(b *testing.B, dedup string, env []byte, at int) {
	cfg, err := config.Load(config.FromMap(map[string]string{
		config.KeyEndpoint: "BillingEndpoint", config.KeyInboxEnabled: "true", config.KeyInboxStore: "InMemory",
		config.KeyResolverSink: "InMemory", config.KeyCloudEventsEnabled: "true", config.KeyCloudEventsDeduplication: dedup,
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
	a, err := New(cfg, Deps{Handlers: reg, Log: zerolog.New(io.Discard), Publisher: nopPublisher{}, Store: store})
	if err != nil {
		b.Fatal(err)
	}
	h := a.Handler()
	rec := &discardWriter{h: map[string][]string{}}
	reader := bytes.NewReader(env)
	req := httptest.NewRequest("POST", "/"+FuncCloudEventsIngress, reader)
	b.ReportAllocs()
	b.SetBytes(int64(len(env)))
	i := 0
	for b.Loop() {
		i++
		setID(env, at, i)
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
