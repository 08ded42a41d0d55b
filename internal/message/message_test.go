package message

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestParseType(t *testing.T) {
	cases := []struct {
		in   string
		want Type
		ok   bool
	}{
		{"EventRequest", EventRequest, true},
		{"HandoffFailedRequest", HandoffFailedRequest, true},
		{" SkipResponse ", SkipResponse, true},
		{"eventrequest", Unknown, false}, // case-sensitive, like Enum.TryParse
		{"1", EventRequest, true},
		{"99", Type(99), true}, // numeric strings parse even when undefined
		{"", Unknown, false},
		{"Event Request", Unknown, false},
	}
	for _, c := range cases {
		got, ok := ParseType(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseType(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
	if Type(99).String() != "99" || Type(99).Defined() || !SkipRequest.Defined() {
		t.Error("undefined types must print their ordinal")
	}
}

func TestContentRoundTripKeepsNulls(t *testing.T) {
	c, err := ParseContent([]byte(`{"eventcontent":{"EventTypeId":"OrderPlaced","EventJson":null,"Extra":1},"ErrorContent":null}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":null},"ErrorContent":null}`
	if got := string(c.AppendJSON(nil)); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if got := string((&Content{}).AppendJSON(nil)); got != `{"EventContent":null,"ErrorContent":null}` {
		t.Fatalf("empty content = %s", got)
	}
}

func TestParseContentRejects(t *testing.T) {
	deep := ""
	for range 40 {
		deep += `{"a":`
	}
	for name, body := range map[string]string{
		"empty": "", "text": "hello", "array": "[]", "broken": `{"EventContent":`,
		"wrong type": `{"EventContent":{"EventJson":{"a":1}}}`, "too deep": deep,
	} {
		if _, err := ParseContent([]byte(body)); !errors.Is(err, ErrInvalidContent) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func TestReadDefaultsAndLenientFields(t *testing.T) {
	props := map[string]any{
		"To": "billing", "From": "shop", "MessageType": json.Number("1"), "EventId": nil,
		"RetryCount": "x", "EventTypeId": nil,
	}
	body := []byte(`{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{}"},"ErrorContent":null}`)
	in, err := Read(Broker{}, props, body)
	if err != nil {
		t.Fatal(err)
	}
	if in.Type != EventRequest || in.EventID != nil || in.RetryCount != nil {
		t.Fatalf("in = %+v", in)
	}
	if in.OriginatingMessageID != Self || in.ParentMessageID != Self || in.OriginatingFrom != nil {
		t.Fatalf("defaults = %q %q %v", in.OriginatingMessageID, in.ParentMessageID, in.OriginatingFrom)
	}
	if in.EventTypeID == nil || *in.EventTypeID != "OrderPlaced" {
		t.Fatalf("EventTypeID should fall back to the body: %v", in.EventTypeID)
	}
	// A null EventId is written as an AMQP null on the response.
	out := NewResponse(in, Resolution, Timings{QueueTimeMs: -1}, nil)
	if v, ok := out.ApplicationProperties["EventId"]; !ok || v != nil {
		t.Fatalf("EventId = %#v, %v", v, ok)
	}
	if _, ok := out.ApplicationProperties["QueueTimeMs"]; ok {
		t.Fatal("QueueTimeMs written without an enqueue time")
	}
	if out.ApplicationProperties["RetryCount"] != int32(0) {
		t.Fatalf("RetryCount = %#v", out.ApplicationProperties["RetryCount"])
	}
}

func TestReadPropertyValueRendering(t *testing.T) {
	props := map[string]any{"To": "b", "From": "s", "MessageType": "EventRequest", "EventId": json.Number("42"),
		"RetryCount": json.Number("3"), "Flag": true}
	in, err := Read(Broker{}, props, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *in.EventID != "42" || *in.RetryCount != 3 {
		t.Fatalf("EventID %q RetryCount %d", *in.EventID, *in.RetryCount)
	}
	if v, _ := in.Property("Flag"); v != "True" {
		t.Fatalf("bool renders as %q, want .NET's True", v)
	}
	if in.Content != nil || !errors.Is(in.ContentErr, ErrInvalidContent) {
		t.Fatal("empty body must be reported as invalid content")
	}
}

func TestFormatRoundTrip(t *testing.T) {
	got := FormatRoundTrip(time.Date(2026, 8, 1, 10, 0, 0, 123456789, time.FixedZone("x", 3600)))
	if got != "2026-08-01T09:00:00.1234567Z" {
		t.Fatalf("got %s", got)
	}
}
