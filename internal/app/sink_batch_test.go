package app

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testlog"
	"github.com/nimbus-go/functions-subscriber/internal/devhost"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// A batch reaches the in-memory sink message by message, shown as every
// other outgoing message is, a published event with its MessageId.
func TestMemorySinkShowsABatch(t *testing.T) {
	ta := newTestApp(t, nil, nil)
	if status, _ := ta.post(t, FuncSubscriber, envelope(msg{id: "m-1"})); status != 200 {
		t.Fatalf("status %d", status)
	}
	in, err := message.Read(message.Broker{MessageID: message.Ptr("m-2"), SessionID: message.Ptr("customer-1"), CorrelationID: message.Ptr("c-2")},
		map[string]any{"To": "BillingEndpoint", "From": "ShopEndpoint", "MessageType": "EventRequest", "EventId": "evt-2", "EventTypeId": "OrderPlaced"},
		[]byte(`{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{}"},"ErrorContent":null}`))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := message.NewPublishedEvent(in, message.Publication{Endpoint: "BillingEndpoint", EventTypeID: "OrderAccepted",
		EventJSON: `{"OrderId":"O-2"}`, MessageID: "OrderAccepted-O-2"})
	if err != nil {
		t.Fatal(err)
	}
	resp := message.NewResponse(in, message.Resolution, message.Timings{QueueTimeMs: 3, ProcessingTimeMs: 4}, nil)
	if err := ta.pub.PublishBatch(context.Background(), []*message.Outgoing{ev, resp}); err != nil {
		t.Fatal(err)
	}

	rec := httptest.NewRecorder()
	ta.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/_nimbus/resolver", nil))
	var sent []devhost.SentResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &sent); err != nil || len(sent) != 3 {
		t.Fatalf("sink = %s (%v)", rec.Body.String(), err)
	}
	if sent[0].MessageID != "" || sent[2].MessageID != "" || sent[1].MessageID != "OrderAccepted-O-2" {
		t.Errorf("MessageIds %q %q %q, want only the event's", sent[0].MessageID, sent[1].MessageID, sent[2].MessageID)
	}
	e := sent[1]
	want := map[string]devhost.TypedValue{
		"To": {Type: "string", Value: "OrderAccepted"}, "MessageType": {Type: "string", Value: "EventRequest"}, "EventId": {Type: "null", Value: nil},
		"OriginatingMessageId": {Type: "string", Value: "m-2"}, "ParentMessageId": {Type: "string", Value: "m-2"}, "RetryCount": {Type: "int", Value: 0.0},
		"OriginatingFrom": {Type: "string", Value: "BillingEndpoint"}, "EventTypeId": {Type: "string", Value: "OrderAccepted"},
	}
	if len(e.Properties) != len(want) {
		t.Errorf("properties %v", e.Properties)
	}
	for k, w := range want {
		if got := e.Properties[k]; got != w {
			t.Errorf("%s = %+v, want %+v", k, got, w)
		}
	}
	if e.Body != `{"EventContent":{"EventTypeId":"OrderAccepted","EventJson":"{\"OrderId\":\"O-2\"}"},"ErrorContent":null}` ||
		e.SessionID != "customer-1" || e.CorrelationID == nil || *e.CorrelationID != "c-2" {
		t.Errorf("event %+v", e)
	}
	if sent[2].Properties["MessageType"].Value != "ResolutionResponse" || sent[2].Properties["QueueTimeMs"].Type != "long" {
		t.Errorf("response %+v", sent[2])
	}
}

// publishingApp is an endpoint app (inbox and sink in memory) whose
// OrderPlaced handler publishes InvoiceRequested and OrderAccepted.
func publishingApp(t *testing.T) *testApp {
	t.Helper()
	cfg, err := config.Load(config.FromMap(map[string]string{config.KeyEndpoint: "BillingEndpoint", config.KeyInboxEnabled: "true",
		config.KeyInboxStore: "InMemory", config.KeyResolverSink: "InMemory", config.KeyRetryBaseDelay: "0"}))
	if err != nil {
		t.Fatal(err)
	}
	reg := subscriber.NewRegistry()
	reg.Handle("OrderPlaced", func(ctx context.Context, ev *subscriber.Event) (subscriber.Result, error) {
		for _, typ := range []string{"InvoiceRequested", "OrderAccepted"} {
			if err := ev.Publish(subscriber.Publication{EventTypeID: typ, MessageID: typ + "-O-1", JSON: `{"OrderId":"O-1"}`}); err != nil {
				return subscriber.Result{}, err
			}
		}
		return subscriber.Completed(), nil
	})
	logs := &testlog.Buffer{}
	a, err := New(cfg, Deps{Handlers: reg, Log: zerolog.New(logs), Version: "test", TracerProvider: telemetry.PropagatingTracerProvider()})
	if err != nil {
		t.Fatal(err)
	}
	return &testApp{App: a, logs: logs, pub: a.endpoint.memory}
}

// orderEnvelope is an OrderPlaced delivery of MessageId m-1 with a
// CorrelationId, on delivery count.
func orderEnvelope(count int) []byte {
	return hostwire.ServiceBus(hostwire.ServiceBusMessage{
		FunctionName: FuncSubscriber, Body: []byte(`{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{}"},"ErrorContent":null}`),
		MessageID: "m-1", SessionID: hostwire.S("customer-1"), CorrelationID: hostwire.S("c-1"), DeliveryCount: count, SequenceNumber: 7,
		EnqueuedTime: time.Now(), Properties: hostwire.Props("To", "BillingEndpoint", "From", "ShopEndpoint", "MessageType", "EventRequest",
			"EventId", "evt-1", "EventTypeId", "OrderPlaced"),
		Namespace: "sb.test", UtcNow: time.Now(), RandGUID: "00000000-0000-0000-0000-000000000000",
	})
}

// sinkContents reads GET /_nimbus/resolver.
func (ta *testApp) sinkContents(t *testing.T) []devhost.SentResponse {
	t.Helper()
	rec := httptest.NewRecorder()
	ta.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, devhost.SentPath, nil))
	var sent []devhost.SentResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &sent); err != nil {
		t.Fatalf("sink = %s (%v)", rec.Body.String(), err)
	}
	return sent
}

// The events a handler publishes reach the in-memory sink as every other
// outgoing message does: in order, before the delivery's response, each
// with its MessageId, the delivery's session and correlation, and its
// properties with their AMQP types.
func TestMemorySinkShowsPublishedEvents(t *testing.T) {
	ta := publishingApp(t)
	if status, _ := ta.post(t, FuncSubscriber, orderEnvelope(1)); status != 200 {
		t.Fatalf("status %d", status)
	}
	sent := ta.sinkContents(t)
	if len(sent) != 3 {
		t.Fatalf("sink holds %d messages", len(sent))
	}
	for i, typ := range []string{"InvoiceRequested", "OrderAccepted"} {
		e := sent[i]
		if e.MessageID != typ+"-O-1" || e.SessionID != "customer-1" || e.CorrelationID == nil || *e.CorrelationID != "c-1" ||
			e.Properties["To"] != (devhost.TypedValue{Type: "string", Value: typ}) ||
			e.Properties["EventId"] != (devhost.TypedValue{Type: "null"}) || e.Properties["ParentMessageId"] != (devhost.TypedValue{Type: "string", Value: "m-1"}) ||
			e.Properties["RetryCount"] != (devhost.TypedValue{Type: "int", Value: 0.0}) || e.Properties["traceparent"].Type != "string" {
			t.Errorf("event %d: %+v", i, e)
		}
		if _, ok := e.Properties["From"]; ok {
			t.Errorf("event %d has a From", i)
		}
	}
	if sent[2].Properties["MessageType"].Value != "ResolutionResponse" {
		t.Errorf("last %+v", sent[2])
	}
}

// POST /_nimbus/resolver/refuse makes the in-memory sink refuse the next
// send holding an event: the delivery fails (events_send_failed) with
// nothing kept, and its redelivery sends the events.
func TestMemorySinkRefusesOnRequest(t *testing.T) {
	ta := publishingApp(t)
	body, _ := json.Marshal(devhost.Refusal{MessageType: "EventRequest", Count: 1})
	rec := httptest.NewRecorder()
	ta.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, devhost.RefusePath, bytes.NewReader(body)))
	if rec.Code != http.StatusNoContent {
		t.Fatalf("refuse: %d %s", rec.Code, rec.Body)
	}
	if status, _ := ta.post(t, FuncSubscriber, orderEnvelope(1)); status != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", status)
	}
	if sent := ta.sinkContents(t); len(sent) != 0 || !strings.Contains(ta.logs.String(), `"outcome":"events_send_failed"`) {
		t.Fatalf("sink %v; log %s", sent, ta.logs)
	}
	if status, _ := ta.post(t, FuncSubscriber, orderEnvelope(2)); status != 200 {
		t.Fatalf("redelivery: status %d", status)
	}
	if sent := ta.sinkContents(t); len(sent) != 3 {
		t.Fatalf("after the redelivery the sink holds %d messages", len(sent))
	}
	rec = httptest.NewRecorder()
	ta.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, devhost.RefusePath, strings.NewReader(`{"count":-1}`)))
	if rec.Code != http.StatusBadRequest {
		t.Fatalf("a negative count: %d", rec.Code)
	}
}
