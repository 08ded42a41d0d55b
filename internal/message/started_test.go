package message

import (
	"errors"
	"testing"
)

func TestNewStartedEventIsNimBusPublishWire(t *testing.T) {
	out, err := NewStartedEvent(Publication{Endpoint: "SalesEndpoint", EventTypeID: "OrderPlaced", MessageID: "OrderPlaced-O-1",
		EventJSON: `{"OrderId":"O-1"}`, SessionID: "O-1", CorrelationID: "corr-1", TraceParent: "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		PropTo: "OrderPlaced", PropMessageType: "EventRequest", PropEventID: nil, PropOriginatingMessageID: "self",
		PropParentMessageID: "self", PropRetryCount: int32(0), PropOriginatingFrom: "SalesEndpoint", PropEventTypeID: "OrderPlaced",
		PropTraceParent: "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01",
	}
	p := out.ApplicationProperties
	if len(p) != len(want) {
		t.Fatalf("properties %v, want %v", p, want)
	}
	for k, v := range want {
		if got, ok := p[k]; !ok || got != v {
			t.Errorf("%s = %#v, want %#v", k, got, v)
		}
	}
	if _, ok := p[PropFrom]; ok {
		t.Error("From is set; the forwarder matches From IS NULL")
	}
	if out.MessageID != "OrderPlaced-O-1" || out.SessionID != "O-1" || *out.CorrelationID != "corr-1" {
		t.Errorf("ids %s %s %s", out.MessageID, out.SessionID, *out.CorrelationID)
	}
	if got := string(out.Body); got != `{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1\"}"},"ErrorContent":null}` {
		t.Errorf("body %s", got)
	}
	for _, bad := range []Publication{
		{EventTypeID: "X", MessageID: "m", EventJSON: "{}", CorrelationID: "c"},
		{EventTypeID: "X", MessageID: "m", EventJSON: "{}", SessionID: "s"},
		{EventTypeID: "X", EventJSON: "{}", SessionID: "s", CorrelationID: "c"},
		{EventTypeID: "X", MessageID: "m", EventJSON: "{", SessionID: "s", CorrelationID: "c"},
	} {
		if _, err := NewStartedEvent(bad); !errors.Is(err, ErrInvalidPublication) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}
