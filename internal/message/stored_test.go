package message_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
)

// roundTrip stores o, writes it as JSON, reads it back and returns the
// message it keeps, failing t on any error.
func roundTrip(t testing.TB, o *message.Outgoing) (*message.Outgoing, []byte) {
	t.Helper()
	s, err := message.StoredOf(o)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back message.Stored
	if err := json.Unmarshal(doc, &back); err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	return back.Outgoing(), doc
}

// sameOutgoing compares two messages exactly: properties with their Go
// types, broker fields, body bytes (nil and empty told apart).
func sameOutgoing(t testing.TB, got, want *message.Outgoing) {
	t.Helper()
	if !reflect.DeepEqual(got.ApplicationProperties, want.ApplicationProperties) {
		t.Errorf("properties %#v\nwant %#v", got.ApplicationProperties, want.ApplicationProperties)
	}
	if got.MessageID != want.MessageID || got.SessionID != want.SessionID {
		t.Errorf("MessageId %q SessionId %q, want %q %q", got.MessageID, got.SessionID, want.MessageID, want.SessionID)
	}
	if !reflect.DeepEqual(got.CorrelationID, want.CorrelationID) {
		t.Errorf("CorrelationId %v, want %v", deref(got.CorrelationID), deref(want.CorrelationID))
	}
	if !bytes.Equal(got.Body, want.Body) || (got.Body == nil) != (want.Body == nil) {
		t.Errorf("body %q (nil %v), want %q (nil %v)", got.Body, got.Body == nil, want.Body, want.Body == nil)
	}
}

func TestStoredRoundTrip(t *testing.T) {
	in := delivered(t, nimbusmsg.EventRequest(nimbusmsg.Event{Publisher: "Shop", Endpoint: "Billing", EventTypeID: "OrderPlaced",
		EventJSON: `{"OrderId":"O-1"}`, SessionID: "s-1", CorrelationID: "c-1", EventID: "ev-1", MessageID: "m-1"}), "")
	event, err := message.NewPublishedEvent(in, message.Publication{Endpoint: "Billing", EventTypeID: "PaymentRecorded",
		EventJSON: recordedJSON, MessageID: "PaymentRecorded-P-1", TraceParent: traceParent, TraceState: "k=v"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		o    *message.Outgoing
	}{
		{"published event", event},
		{"response with int32 and int64 timings", message.NewResponse(in, message.Resolution, message.Timings{QueueTimeMs: 1<<53 + 1, ProcessingTimeMs: 7}, nil)},
		{"parked copy", message.NewParkedCopy(in, []byte(`{"EventContent":null,"ErrorContent":null}`), 3, "m-1")},
		{"extremes", &message.Outgoing{MessageID: "x", ApplicationProperties: map[string]any{
			"minInt": int32(math.MinInt32), "maxInt": int32(math.MaxInt32), "minLong": int64(math.MinInt64), "maxLong": int64(math.MaxInt64),
			"zeroLong": int64(0), "null": nil, "empty": "", "digits": "12", "typed look-alike": `{"int":1}`,
			"unicode \u2028 name": "é😀\x00<&>",
		}, Body: []byte{}}},
		{"no correlation, no properties, no body", &message.Outgoing{SessionID: "s"}},
		{"body that is not UTF-8", &message.Outgoing{MessageID: "b", CorrelationID: message.Ptr(""), ApplicationProperties: map[string]any{},
			Body: []byte{'{', 0xff, 0xfe, '}', 0}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, doc := roundTrip(t, c.o)
			sameOutgoing(t, got, c.o)
			if !utf8.Valid(c.o.Body) && !bytes.Contains(doc, []byte(`"bodyBase64":`)) {
				t.Errorf("a body that is not UTF-8 is not kept in base64: %s", doc)
			}
		})
	}
}

// The document form is pinned: it is what sits in Cosmos DB and what an
// operator reads.
func TestStoredDocument(t *testing.T) {
	s := message.Stored{MessageID: "PaymentRecorded-P-1", SessionID: "customer-1", CorrelationID: message.Ptr("c-1"),
		ApplicationProperties: map[string]any{"To": "PaymentRecorded", "EventId": nil, "RetryCount": int32(0), "QueueTimeMs": int64(12)},
		Body:                  []byte(`{"EventContent":{"EventTypeId":"PaymentRecorded","EventJson":"{\"A\":1}"},"ErrorContent":null}`)}
	doc, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"messageId":"PaymentRecorded-P-1","sessionId":"customer-1","correlationId":"c-1",` +
		`"applicationProperties":{"EventId":null,"QueueTimeMs":{"long":"12"},"RetryCount":{"int":0},"To":"PaymentRecorded"},` +
		`"body":"{\"EventContent\":{\"EventTypeId\":\"PaymentRecorded\",\"EventJson\":\"{\\\"A\\\":1}\"},\"ErrorContent\":null}"}`
	if string(doc) != want {
		t.Errorf("document\n %s\nwant\n %s", doc, want)
	}
	s.CorrelationID, s.Body, s.ApplicationProperties = nil, []byte{0xff}, nil
	if doc, _ = json.Marshal(s); string(doc) != `{"messageId":"PaymentRecorded-P-1","sessionId":"customer-1","correlationId":null,"applicationProperties":null,"bodyBase64":"/w=="}` {
		t.Errorf("document %s", doc)
	}
}

// A store that holds numbers as doubles (Cosmos DB's query engine, the
// JavaScript stand-in) keeps every long: its digits are a string.
func TestStoredSurvivesADoubleStore(t *testing.T) {
	o := &message.Outgoing{MessageID: "m", ApplicationProperties: map[string]any{"big": int64(1<<60 + 1), "n": int32(-7)}, Body: []byte("{}")}
	s, err := message.StoredOf(o)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := json.Marshal(s)
	var generic any // numbers decode as float64
	if err := json.Unmarshal(doc, &generic); err != nil {
		t.Fatal(err)
	}
	again, _ := json.Marshal(generic)
	var back message.Stored
	if err := json.Unmarshal(again, &back); err != nil {
		t.Fatal(err)
	}
	sameOutgoing(t, back.Outgoing(), o)
}

func TestStoredRefusesWhatItDoesNotWrite(t *testing.T) {
	if _, err := message.StoredOf(&message.Outgoing{ApplicationProperties: map[string]any{"n": 1}}); !errors.Is(err, message.ErrUnsupportedProperty) {
		t.Errorf("a Go int property: %v", err)
	}
	if _, err := json.Marshal(message.Stored{ApplicationProperties: map[string]any{"f": 1.5}}); !errors.Is(err, message.ErrUnsupportedProperty) {
		t.Errorf("marshal a float property: %v", err)
	}
	for _, doc := range []string{
		`{"applicationProperties":{"n":1}}`,
		`{"applicationProperties":{"n":true}}`,
		`{"applicationProperties":{"n":[1]}}`,
		`{"applicationProperties":{"n":{"int":2147483648}}}`,
		`{"applicationProperties":{"n":{"int":1.5}}}`,
		`{"applicationProperties":{"n":{"int":"1"}}}`,
		`{"applicationProperties":{"n":{"long":12}}}`,
		`{"applicationProperties":{"n":{"long":"9223372036854775808"}}}`,
		`{"applicationProperties":{"n":{"long":"1e3"}}}`,
		`{"applicationProperties":{"n":{"int":1,"long":"1"}}}`,
		`{"applicationProperties":{"n":{"double":"1"}}}`,
		`{"body":"x","bodyBase64":"eA=="}`,
		`{"messageId":1}`,
	} {
		var s message.Stored
		err := json.Unmarshal([]byte(doc), &s)
		if err == nil {
			t.Errorf("%s read as %+v", doc, s)
			continue
		}
		if strings.Contains(doc, `"n"`) && !strings.Contains(err.Error(), `"n"`) {
			t.Errorf("%s: the error %q does not name the property", doc, err)
		}
	}
	// Stored copies: changing the message afterwards changes nothing stored.
	o := &message.Outgoing{CorrelationID: message.Ptr("c"), ApplicationProperties: map[string]any{"To": "A"}, Body: []byte("{}")}
	s, _ := message.StoredOf(o)
	o.ApplicationProperties["To"], o.Body[0], *o.CorrelationID = "B", '[', "d"
	if s.ApplicationProperties["To"] != "A" || string(s.Body) != "{}" || *s.CorrelationID != "c" {
		t.Errorf("the stored message shares memory with the message: %+v", s)
	}
}

// FuzzStoredRoundTrip builds messages from arbitrary bytes and strings and
// checks that storing, writing and reading them loses nothing.
func FuzzStoredRoundTrip(f *testing.F) {
	f.Add("To", "Resolver", int64(12), []byte(`{"EventContent":null,"ErrorContent":null}`), true)
	f.Add("é\u2028", "\x00\xff", int64(math.MinInt64), []byte{0xff, 0}, false)
	f.Add("", "", int64(1<<53+1), []byte(nil), true)
	f.Fuzz(func(t *testing.T, name, value string, n int64, body []byte, corr bool) {
		props := map[string]any{
			name: value, name + "#int": int32(n), name + "#long": n, name + "#null": nil,
		}
		o := &message.Outgoing{MessageID: value, SessionID: name, ApplicationProperties: props, Body: body}
		if corr {
			o.CorrelationID = &value
		}
		got, _ := roundTrip(t, o)
		// JSON strings hold Unicode text: a name or value that is not UTF-8
		// is kept with U+FFFD in place of each invalid byte, as
		// encoding/json writes it; the body keeps every byte.
		want := &message.Outgoing{MessageID: valid(o.MessageID), SessionID: valid(o.SessionID), Body: o.Body,
			ApplicationProperties: map[string]any{}}
		for k, v := range props {
			if s, ok := v.(string); ok {
				v = valid(s)
			}
			want.ApplicationProperties[valid(k)] = v
		}
		if len(want.ApplicationProperties) != len(props) {
			t.Skip("two names collide once made valid UTF-8")
		}
		if corr {
			c := valid(value)
			want.CorrelationID = &c
		}
		sameOutgoing(t, got, want)
	})
}

// valid replaces each byte of s that is not part of valid UTF-8 with
// U+FFFD, as encoding/json does.
func valid(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteString("\ufffd")
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}
