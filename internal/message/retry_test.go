package message

import (
	"testing"
)

func TestNewRetryRequest(t *testing.T) {
	cases := []struct {
		rc    any
		want  int32
		inbox string
	}{
		{nil, 1, "m-0"},   // absent → 1
		{"x", 1, ""},      // unreadable → null → 1
		{int32(2), 3, ""}, // NimBus's SendRetryResponse_RoutesToRetryWithIncrementedCount
		{"0", 1, "m-0"},
	}
	for _, c := range cases {
		in := failedEvent(t, map[string]any{"RetryCount": c.rc})
		out := NewRetryRequest(in, []byte(testBody), c.inbox)
		want := map[string]any{
			"To": "Retry", "MessageType": "RetryRequest", "EventId": "ev-1", "OriginatingMessageId": "m-1",
			"ParentMessageId": "m-1", "RetryCount": c.want, "OriginatingFrom": "shop", "EventTypeId": "OrderPlaced",
		}
		if c.inbox != "" {
			want["InboxMessageId"] = c.inbox
		}
		checkProps(t, out.ApplicationProperties, want)
		if string(out.Body) != testBody || *out.CorrelationID != "m-1" || out.SessionID != "s-1" {
			t.Fatalf("rc %v: body %s correlation %q", c.rc, out.Body, *out.CorrelationID)
		}
	}
}
