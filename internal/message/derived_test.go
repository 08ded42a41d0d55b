package message

import (
	"testing"
)

func TestOriginatingMessageIDRule(t *testing.T) {
	cases := []struct {
		orig any
		msg  *string
		want string
	}{
		{"self", Ptr("m-1"), "m-1"},
		{"SELF", Ptr("m-1"), "m-1"}, // case-insensitive
		{nil, Ptr("m-1"), "m-1"},    // absent reads as self
		{"o-9", Ptr("m-1"), "o-9"},
		{"self", nil, "self"}, // no MessageId: written as self
	}
	for _, c := range cases {
		props := map[string]any{"To": "billing", "From": "shop", "MessageType": "EventRequest", "EventId": "e"}
		if c.orig != nil {
			props["OriginatingMessageId"] = c.orig
		}
		in, err := Read(Broker{MessageID: c.msg, SessionID: Ptr("s")}, props, []byte(testBody))
		if err != nil {
			t.Fatal(err)
		}
		for name, out := range map[string]*Outgoing{
			"error": NewErrorResponse(in, "x", "", tm), "parked": NewParkedCopy(in, nil, 0, ""),
			"retry": NewRetryRequest(in, nil, ""), "process": NewProcessDeferredRequest(in),
		} {
			if got := out.ApplicationProperties[PropOriginatingMessageID]; got != c.want {
				t.Errorf("%s: orig %v msg %v → %v, want %s", name, c.orig, c.msg, got, c.want)
			}
			wantParent := "self"
			if c.msg != nil {
				wantParent = *c.msg
			}
			if got := out.ApplicationProperties[PropParentMessageID]; got != wantParent {
				t.Errorf("%s: ParentMessageId %v, want %s", name, got, wantParent)
			}
		}
	}
}
