package app

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/devhost"
	"github.com/nimbus-go/functions-subscriber/internal/message"
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
