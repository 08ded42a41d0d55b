package minihost

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/funchost/funchosttest"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
)

func ptr[T any](v T) *T { return &v }

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// TestServiceBusInvocationMatchesFixture builds the envelope the way the
// mini host does, from a received message, and compares it with the host's.
func TestServiceBusInvocationMatchesFixture(t *testing.T) {
	t.Parallel()
	m := &azservicebus.ReceivedMessage{
		Body:           []byte(`{"orderId":"A-1001","amount":42.5,"customer":{"id":7},"lines":[1,2]}`),
		MessageID:      "7c9e6679-7425-40de-944b-e07fc1f90ae7",
		SessionID:      ptr("order-A-1001"),
		CorrelationID:  ptr("corr-77"),
		ContentType:    ptr("application/json"),
		Subject:        ptr("OrderCreated"),
		DeliveryCount:  1,
		LockToken:      [16]byte{0x5e, 0x3d, 0x6a, 0x39, 0x8f, 0x6c, 0x4f, 0x55, 0x9c, 0x0e, 0x0d, 0x2a, 0x1f, 0x4b, 0x7c, 0x11},
		SequenceNumber: ptr(int64(41)),
		EnqueuedTime:   ptr(at("2025-01-15T10:20:05.5Z")), // sub-seconds are dropped
		TimeToLive:     ptr(14 * 24 * time.Hour),
		ApplicationProperties: map[string]any{
			"schemaVersion": int32(2),
			"eventType":     "OrderCreated",
		},
	}
	trigger := TriggerFromMessage(m, at("2025-01-15T10:21:05.123Z"), "sb-demo.servicebus.windows.net", "")
	trigger.FunctionName, trigger.Binding = "OrderEvents", "message"
	trigger.UtcNow, trigger.RandGUID = at("2025-01-15T10:20:05.4567891Z"), "0f8fad5b-d9cb-469f-a165-70867728950e"
	got, err := hostwire.Build(trigger)
	if err != nil {
		t.Fatal(err)
	}
	if want := funchosttest.HostFixture(t, "sb_session_binary.json"); !bytes.Equal(got, want) {
		t.Fatalf("envelope differs from the fixture\n got %s\nwant %s", got, want)
	}
}

func TestTriggerFromMessage(t *testing.T) {
	t.Parallel()
	enq := at("2025-01-15T10:20:05.5Z")
	m := &azservicebus.ReceivedMessage{
		Body:                  []byte("b"),
		MessageID:             "m-1",
		SessionID:             ptr("s"),
		DeliveryCount:         2,
		LockToken:             [16]byte{0x5e, 0x3d, 0x6a, 0x39, 0x8f, 0x6c, 0x4f, 0x55, 0x9c, 0x0e, 0x0d, 0x2a, 0x1f, 0x4b, 0x7c, 0x11},
		SequenceNumber:        ptr(int64(41)),
		EnqueuedTime:          &enq,
		TimeToLive:            ptr(time.Duration(0)),
		ApplicationProperties: map[string]any{"z": "last", "a": int32(1), "m": nil},
	}
	lockedUntil := enq.Add(time.Minute)
	tr := TriggerFromMessage(m, lockedUntil, "ns", "id")
	if tr.LockToken != "5e3d6a39-8f6c-4f55-9c0e-0d2a1f4b7c11" {
		t.Errorf("LockToken = %s", tr.LockToken)
	}
	if !tr.ExpiresAt.IsZero() {
		t.Errorf("unlimited TTL: ExpiresAt = %v, want zero (no time to live)", tr.ExpiresAt)
	}
	if tr.DeliveryCount != 2 || tr.SequenceNumber != 41 || !tr.EnqueuedTime.Equal(enq) || *tr.SessionID != "s" || !tr.SessionLockedUntil.Equal(lockedUntil) {
		t.Errorf("trigger = %+v", tr)
	}
	if tr.Namespace != "ns" || tr.ClientID != "id" || string(tr.Body) != "b" || tr.MessageID != "m-1" {
		t.Errorf("trigger = %+v", tr)
	}
	var names []string
	for _, p := range tr.Properties {
		names = append(names, p.Name)
	}
	if strings.Join(names, ",") != "a,m,z" {
		t.Errorf("property order %v, want sorted", names)
	}
	m.TimeToLive = ptr(time.Hour)
	if tr := TriggerFromMessage(m, lockedUntil, "ns", "id"); !tr.ExpiresAt.Equal(enq.Add(time.Hour)) {
		t.Errorf("ExpiresAt = %v, want enqueued + TTL", tr.ExpiresAt)
	}
	m.TimeToLive = ptr(time.Duration(1<<63 - 1)) // past DateTimeOffset.MaxValue
	if tr := TriggerFromMessage(m, lockedUntil, "ns", "id"); !tr.ExpiresAt.IsZero() {
		t.Errorf("ExpiresAt = %v, want zero (capped)", tr.ExpiresAt)
	}
}
