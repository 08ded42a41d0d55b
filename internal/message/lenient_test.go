package message

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestReadLenientReadsWhatItCan(t *testing.T) {
	b := Broker{MessageID: Ptr("m-1"), SessionID: Ptr("s-1")}
	cases := []struct {
		name  string
		props map[string]any
		check func(t *testing.T, in *Inbound)
	}{
		{"no MessageType", map[string]any{"To": "billing", "From": "shop", "EventId": "e-1", "RetryCount": int32(2)},
			func(t *testing.T, in *Inbound) {
				if in.Type != Unknown || in.To != "billing" || in.From != "shop" || *in.EventID != "e-1" || *in.RetryCount != 2 {
					t.Errorf("%+v", in)
				}
			}},
		{"unparseable MessageType", map[string]any{"MessageType": "Bogus", "To": "billing", "From": "shop", "EventId": "e-1"},
			func(t *testing.T, in *Inbound) {
				if in.Type != Unknown || in.To != "billing" {
					t.Errorf("%+v", in)
				}
			}},
		{"no To, From or EventId", map[string]any{"MessageType": "EventRequest", "InboxMessageId": "m-0", "OriginatingMessageId": "o-1"},
			func(t *testing.T, in *Inbound) {
				if in.Type != EventRequest || in.To != "" || in.From != "" || in.EventID != nil {
					t.Errorf("%+v", in)
				}
				if *in.InboxMessageID != "m-0" || in.OriginatingMessageID != "o-1" || in.ParentMessageID != Self {
					t.Errorf("stand-in and defaults: %+v", in)
				}
				if in.EventTypeID == nil || *in.EventTypeID != "OrderPlaced" {
					t.Errorf("EventTypeId must fall back to the body: %v", in.EventTypeID)
				}
				// The notification can be built and names the event.
				out := NewDeadLetterResponse(in, NewInvalidMessageDeadLetter(PropertyNotDefinedText(PropTo)), Timings{QueueTimeMs: -1})
				if out.ApplicationProperties[PropEventID] != nil || out.ApplicationProperties[PropOriginatingFrom] != "" {
					t.Errorf("props %v", out.ApplicationProperties)
				}
				if out.ApplicationProperties[PropDeadLetterErrorDesc] != "NimBus.Core.Messages.Exceptions.InvalidMessageException: Message.UserProperties[To] is not defined." {
					t.Errorf("description %v", out.ApplicationProperties[PropDeadLetterErrorDesc])
				}
			}},
		{"nil props", nil, func(t *testing.T, in *Inbound) {
			if in.Type != Unknown || in.MessageID == nil || *in.MessageID != "m-1" || in.Content == nil {
				t.Errorf("%+v", in)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Read(b, c.props, []byte(testBody)); err == nil {
				t.Fatal("Read must refuse this message")
			}
			c.check(t, ReadLenient(b, c.props, []byte(testBody)))
		})
	}
}

func TestReadLenientEqualsReadWhenReadable(t *testing.T) {
	b := Broker{MessageID: Ptr("m-1"), SessionID: Ptr("s-1")}
	props := map[string]any{"To": "billing", "From": "shop", "MessageType": "RetryRequest", "EventId": "e-1",
		"RetryCount": json.Number("4"), "InboxMessageId": "m-0"}
	want, err := Read(b, props, []byte(testBody))
	if err != nil {
		t.Fatal(err)
	}
	if got := ReadLenient(b, props, []byte(testBody)); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func FuzzReadLenient(f *testing.F) {
	f.Add("EventRequest", "billing", "shop", "e-1", "2", []byte(testBody), true)
	f.Add("", "", "", "", "", []byte(nil), false)
	f.Add("99", "x", "", "", "-1", []byte(`{"EventContent":{"EventJson":{}}}`), true)
	f.Add("ResolutionResponse", "", "y", "", "x", []byte(`[`), false)
	f.Fuzz(func(t *testing.T, mt, to, from, eventID, rc string, body []byte, withID bool) {
		props := map[string]any{}
		for k, v := range map[string]string{PropMessageType: mt, PropTo: to, PropFrom: from, PropEventID: eventID, PropRetryCount: rc} {
			if v != "" {
				props[k] = v
			}
		}
		b := Broker{}
		if withID {
			b.MessageID, b.SessionID = Ptr(eventID), Ptr(to)
		}
		in := ReadLenient(b, props, body)
		if in == nil {
			t.Fatal("nil Inbound")
		}
		if s, ok := props[PropTo].(string); ok && in.To != s {
			t.Fatalf("To %q, want %q", in.To, s)
		}
		// Every notification builder accepts what it returns.
		_ = NewDeadLetterResponse(in, NewInvalidMessageDeadLetter(mt), Timings{})
		_ = NewParkedCopy(in, body, 1, "")
		_ = NewRetryRequest(in, body, "")
	})
}
