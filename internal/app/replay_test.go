package app

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
)

var update = flag.Bool("update", false, "rewrite the NimBus replay fixtures")

// nimbusFixture is an EventRequest as NimBus's forwarder delivers it to
// BillingEndpoint, in the envelope the Functions host builds.
func nimbusFixture(stringData bool) []byte {
	return hostwire.ServiceBus(hostwire.ServiceBusMessage{
		FunctionName:       FuncSubscriber,
		StringData:         stringData,
		Body:               []byte(`{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1001\",\"CustomerId\":\"C-7\",\"Amount\":42.5,\"Note\":\"<b>\\u00e9t\\u00e9</b>\"}"},"ErrorContent":null}`),
		MessageID:          "OrderPlaced-3f2a9c0d11e84b7a",
		SessionID:          hostwire.S("C-7"),
		CorrelationID:      hostwire.S("9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d"),
		LockToken:          "5e3d6a39-8f6c-4f55-9c0e-0d2a1f4b7c11",
		DeliveryCount:      1,
		SequenceNumber:     1042,
		EnqueuedTime:       time.Date(2026, 11, 30, 9, 15, 2, 0, time.UTC),
		SessionLockedUntil: time.Date(2026, 11, 30, 9, 16, 2, 510e6, time.UTC),
		Properties: hostwire.Props(
			"To", "BillingEndpoint", "From", "ShopEndpoint", "MessageType", "EventRequest",
			"EventId", "7f9c2b6e-1d4a-4c8e-9b1f-3a2d5e6f7a8b", "EventTypeId", "OrderPlaced",
			"OriginatingMessageId", "self", "ParentMessageId", "self", "RetryCount", int32(0),
			"OriginatingFrom", "ShopEndpoint", "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
		Namespace: "sb-nimbus.servicebus.windows.net",
		ClientID:  "sb-nimbus.servicebus.windows.net-4e773554-f6b7-4ea2-b07d-4c5fd5aba741",
		UtcNow:    time.Date(2026, 11, 30, 9, 15, 2, 734512300, time.UTC),
		RandGUID:  "0f8fad5b-d9cb-469f-a165-70867728950e",
	})
}

func TestNimBusFixtureReplay(t *testing.T) {
	for name, stringData := range map[string]bool{"nimbus_event_request_binary.json": false, "nimbus_event_request_string.json": true} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("..", "funchost", "testdata", "host", name)
			if *update {
				if err := os.WriteFile(path, append(nimbusFixture(stringData), '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			env, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			ta := newTestApp(t, nil, nil)
			if status, _ := ta.post(t, FuncSubscriber, bytes.TrimSpace(env)); status != 200 {
				t.Fatalf("status %d", status)
			}
			sent := ta.pub.Sent()
			if len(sent) != 1 {
				t.Fatalf("%d responses", len(sent))
			}
			m := sent[0]
			p := m.ApplicationProperties
			delete(p, "QueueTimeMs") // depends on the replay time
			if _, ok := p["ProcessingTimeMs"].(int64); !ok {
				t.Fatalf("ProcessingTimeMs = %#v", p["ProcessingTimeMs"])
			}
			delete(p, "ProcessingTimeMs")
			want := map[string]any{
				"To": "Resolver", "MessageType": "ResolutionResponse", "EventId": "7f9c2b6e-1d4a-4c8e-9b1f-3a2d5e6f7a8b",
				"OriginatingMessageId": "OrderPlaced-3f2a9c0d11e84b7a", "ParentMessageId": "OrderPlaced-3f2a9c0d11e84b7a",
				"RetryCount": int32(0), "OriginatingFrom": "ShopEndpoint", "EventTypeId": "OrderPlaced",
				// The response continues the fixture's trace; the global
				// tracer provider records no span of its own, so the send
				// carries the fixture's span context.
				"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			}
			if !reflect.DeepEqual(p, want) {
				t.Fatalf("properties\n got %#v\nwant %#v", p, want)
			}
			if m.SessionID != "C-7" || *m.CorrelationID != "OrderPlaced-3f2a9c0d11e84b7a" {
				t.Fatalf("session %q correlation %q", m.SessionID, *m.CorrelationID)
			}
			wantBody := `{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1001\",\"CustomerId\":\"C-7\",\"Amount\":42.5,\"Note\":\"<b>\\u00e9t\\u00e9</b>\"}"},"ErrorContent":null}`
			if string(m.Body) != wantBody {
				t.Fatalf("body\n got %s\nwant %s", m.Body, wantBody)
			}
		})
	}
}
