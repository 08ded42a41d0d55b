package message

import (
	"fmt"
	"testing"
)

func TestNewParkedCopy(t *testing.T) {
	in := failedEvent(t, map[string]any{"RetryCount": "2", "OriginatingMessageId": "o-1"})
	body := []byte(" {\"EventContent\":null} ") // sent unchanged, even when not canonical
	out := NewParkedCopy(in, body, 7, "m-1")
	checkProps(t, out.ApplicationProperties, map[string]any{
		"To": "Deferred", "From": "shop", "MessageType": "EventRequest", "EventId": "ev-1",
		"OriginatingMessageId": "o-1", "ParentMessageId": "m-1", "RetryCount": int32(2), "OriginatingFrom": "shop",
		"EventTypeId": "OrderPlaced", "OriginalSessionId": "s-1", "DeferralSequence": int32(7), "InboxMessageId": "m-1",
	})
	if string(out.Body) != string(body) || out.SessionID != "s-1" || *out.CorrelationID != "c-1" {
		t.Fatalf("body %q session %q correlation %q (want the inbound CorrelationId c-1)", out.Body, out.SessionID, *out.CorrelationID)
	}
	// No stand-in id: no InboxMessageId; RetryCount absent → 0; the
	// MessageType of a control request is kept.
	rs, err := Read(Broker{MessageID: Ptr("m-2"), SessionID: Ptr("s-1")}, map[string]any{
		"To": "billing", "From": "Manager", "MessageType": "ResubmissionRequest", "EventId": "ev-1"}, []byte(testBody))
	if err != nil {
		t.Fatal(err)
	}
	out = NewParkedCopy(rs, []byte(testBody), 0, "")
	checkProps(t, out.ApplicationProperties, map[string]any{
		"To": "Deferred", "From": "Manager", "MessageType": "ResubmissionRequest", "EventId": "ev-1",
		"OriginatingMessageId": "m-2", "ParentMessageId": "m-2", "RetryCount": int32(0), "OriginatingFrom": "Manager",
		"EventTypeId": "OrderPlaced", "OriginalSessionId": "s-1", "DeferralSequence": int32(0),
	})
	if out.CorrelationID != nil {
		t.Fatal("an absent inbound CorrelationId stays absent")
	}
}

func TestNewProcessDeferredRequest(t *testing.T) {
	in := failedEvent(t, map[string]any{"RetryCount": "3"})
	out := NewProcessDeferredRequest(in)
	checkProps(t, out.ApplicationProperties, map[string]any{
		"To": "DeferredProcessor", "MessageType": "ProcessDeferredRequest", "EventId": "ev-1",
		"OriginatingMessageId": "m-1", "ParentMessageId": "m-1", "RetryCount": int32(0), "OriginatingFrom": "self",
		"EventTypeId": "OrderPlaced",
	})
	if string(out.Body) != `{"EventContent":null,"ErrorContent":null}` || out.SessionID != "s-1" || *out.CorrelationID != "m-1" {
		t.Fatalf("body %s session %q correlation %q", out.Body, out.SessionID, *out.CorrelationID)
	}
}

func TestReplayedProperties(t *testing.T) {
	parked := NewParkedCopy(failedEvent(t, nil), nil, 4, "m-1").ApplicationProperties
	parked["traceparent"] = "00-abc-def-01"
	parked["deferralsequence"] = "kept: names compare exactly"
	before := fmt.Sprint(parked)
	got := ReplayedProperties(parked, "billing")
	checkProps(t, got, map[string]any{
		"To": "billing", "From": "shop", "MessageType": "EventRequest", "EventId": "ev-1",
		"OriginatingMessageId": "m-1", "ParentMessageId": "m-1", "RetryCount": int32(0), "OriginatingFrom": "shop",
		"EventTypeId": "OrderPlaced", "InboxMessageId": "m-1", "traceparent": "00-abc-def-01",
		"deferralsequence": "kept: names compare exactly",
	})
	if fmt.Sprint(parked) != before {
		t.Fatal("the parked map must not change")
	}
}

func TestDeferralSequenceOf(t *testing.T) {
	cases := []struct {
		v    any
		want int64
		ok   bool
	}{
		{int32(7), 7, true}, {int64(8), 8, true}, {9, 9, true}, {"10", 10, true}, {" 11 ", 11, true},
		{"+12", 12, true}, {"-1", -1, true}, {"2147483648", 0, false}, {int64(1 << 40), 0, false},
		{"x", 0, false}, {nil, 0, false}, {"", 0, false},
	}
	for _, c := range cases {
		got, ok := DeferralSequenceOf(map[string]any{"DeferralSequence": c.v})
		if got != c.want || ok != c.ok {
			t.Errorf("%#v → %d, %v; want %d, %v", c.v, got, ok, c.want, c.ok)
		}
	}
	if got, ok := DeferralSequenceOf(map[string]any{}); got != 0 || ok {
		t.Error("missing must be 0, false")
	}
}
