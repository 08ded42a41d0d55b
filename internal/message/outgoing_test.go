package message

import (
	"reflect"
	"strings"
	"testing"
)

const testBody = `{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1\"}"},"ErrorContent":null}`

// failedEvent is an EventRequest as a forwarder rule delivers it, with
// RetryCount absent unless rc is given.
func failedEvent(t *testing.T, extra map[string]any) *Inbound {
	t.Helper()
	props := map[string]any{
		"To": "billing", "From": "shop", "MessageType": "EventRequest", "EventId": "ev-1",
		"OriginatingMessageId": "self", "ParentMessageId": "self", "OriginatingFrom": "shop",
		"EventTypeId": "OrderPlaced",
	}
	for k, v := range extra {
		if v == nil {
			delete(props, k)
			continue
		}
		props[k] = v
	}
	in, err := Read(Broker{MessageID: Ptr("m-1"), SessionID: Ptr("s-1"), CorrelationID: Ptr("c-1")}, props, []byte(testBody))
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// checkProps compares every property: name, Go (AMQP) type and value.
func checkProps(t *testing.T, got, want map[string]any) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("property %s missing; want %T %#v", k, w, w)
			continue
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("property %s = %T %#v; want %T %#v", k, g, g, w, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected property %s = %T %#v", k, g, g)
		}
	}
}

// responseProps are the common response properties for failedEvent with
// Timings{QueueTimeMs: 5, ProcessingTimeMs: 7}.
func responseProps(mt string, extra map[string]any) map[string]any {
	p := map[string]any{
		"To": "Resolver", "MessageType": mt, "EventId": "ev-1", "OriginatingMessageId": "m-1",
		"ParentMessageId": "m-1", "RetryCount": int32(0), "OriginatingFrom": "shop", "EventTypeId": "OrderPlaced",
		"QueueTimeMs": int64(5), "ProcessingTimeMs": int64(7),
	}
	for k, v := range extra {
		p[k] = v
	}
	return p
}

var tm = Timings{QueueTimeMs: 5, ProcessingTimeMs: 7}

const eventContentJSON = `{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1\"}"}`

func BenchmarkFailureBuilders(b *testing.B) {
	in, err := Read(Broker{MessageID: Ptr("m-1"), SessionID: Ptr("s-1"), CorrelationID: Ptr("c-1")}, map[string]any{
		"To": "billing", "From": "shop", "MessageType": "EventRequest", "EventId": "ev-1", "EventTypeId": "OrderPlaced"}, []byte(testBody))
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(testBody)
	long := strings.Repeat("at Frame.Method() in File.cs:line 42\n", 200)
	for _, c := range []struct {
		name string
		f    func() *Outgoing
	}{
		{"ErrorResponse", func() *Outgoing { return NewErrorResponse(in, "boom", "X", tm) }},
		{"DeferralResponse", func() *Outgoing { return NewDeferralResponse(in, "ev-0", tm) }},
		{"ParkedCopy", func() *Outgoing { return NewParkedCopy(in, body, 3, "m-1") }},
		{"RetryRequest", func() *Outgoing { return NewRetryRequest(in, body, "m-1") }},
		{"DeadLetterResponse7KB", func() *Outgoing {
			return NewDeadLetterResponse(in, DeadLetter{Reason: "r", Description: long, ErrText: "boom", ErrType: "X"}, tm)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if c.f() == nil {
					b.Fatal("nil")
				}
			}
		})
	}
}
