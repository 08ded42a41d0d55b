package message

import (
	"reflect"
	"strings"
	"testing"
)

func sp(s string) *string { return &s }

func TestDetectCloudEvent(t *testing.T) {
	o := &CloudEventOptions{}
	cases := []struct {
		name        string
		contentType string
		props       map[string]any
		want        Mode
	}{
		{"structured", "application/cloudevents+json", nil, ModeStructured},
		{"structured, any case, with parameters", "Application/CloudEvents+JSON; charset=utf-8", nil, ModeStructured},
		{"structured wins over markers", "application/cloudevents+json", map[string]any{"ce-id": "x"}, ModeStructured},
		{"binary by cloudEvents:specversion", "", map[string]any{"cloudEvents:specversion": "1.0"}, ModeBinary},
		{"binary by ce-id", "application/json", map[string]any{"ce-id": "x"}, ModeBinary},
		{"binary by cloudEvents:source", "", map[string]any{"cloudEvents:source": "/s"}, ModeBinary},
		{"binary by ce-type", "", map[string]any{"ce-type": "t"}, ModeBinary},
		{"a null marker is absent", "", map[string]any{"ce-type": nil}, ""},
		{"subject alone is no marker", "", map[string]any{"ce-subject": "s", "cloudEvents:time": "t"}, ""},
		{"prefix is case-sensitive", "", map[string]any{"CE-id": "x", "cloudevents:id": "x"}, ""},
		{"batch content type is not structured", "application/cloudevents-batch+json", nil, ""},
		{"native", "application/json", map[string]any{"MessageType": "EventRequest"}, ""},
	}
	for _, c := range cases {
		ce := o.DetectCloudEvent(c.contentType, c.props, []byte(`{}`))
		got := Mode("")
		if ce != nil {
			got = ce.Mode
		}
		if got != c.want {
			t.Errorf("%s: mode %q, want %q", c.name, got, c.want)
		}
	}
	// Configured prefixes replace the defaults.
	custom := &CloudEventOptions{Prefixes: []string{"x-ce-"}}
	if custom.DetectCloudEvent("", map[string]any{"ce-id": "x"}, nil) != nil {
		t.Error("ce- detected although only x-ce- is configured")
	}
	if ce := custom.DetectCloudEvent("", map[string]any{"x-ce-id": "x"}, nil); ce == nil || *ce.ID != "x" {
		t.Error("x-ce-id not detected")
	}
}

func TestBinaryCloudEventAttributesAndExtensions(t *testing.T) {
	o := &CloudEventOptions{}
	props := map[string]any{
		"cloudEvents:specversion": "1.0", "cloudEvents:id": "id-canonical", "ce-id": "id-alternate",
		"ce-source": "/crm", "ce-type": "com.acme.OrderPlaced", "ce-subject": "lead/1", "ce-time": "2026-11-30T12:00:00Z",
		"ce-dataschema": "https://schemas/x", "ce-sessionid": "s-alt", "cloudEvents:sessionid": "s-canonical",
		"ce-tenant": "t1", "ce-priority": float64(3), "ce-flag": true, "ce-": "ignored", "ce-nothing": nil,
		"MessageType": "ignored here", "Diagnostic-Id": "00-abc",
	}
	ce := o.DetectCloudEvent("application/json", props, []byte("{\"a\":\"\xff\"}"))
	if *ce.ID != "id-canonical" || *ce.Source != "/crm" || *ce.Type != "com.acme.OrderPlaced" || *ce.Subject != "lead/1" ||
		*ce.Time != "2026-11-30T12:00:00Z" || *ce.DataSchema != "https://schemas/x" || *ce.DataContentType != "application/json" {
		t.Fatalf("attributes %+v", ce)
	}
	if *ce.Data != "{\"a\":\"\ufffd\"}" {
		t.Fatalf("data %q: the body as UTF-8 text, invalid bytes replaced", *ce.Data)
	}
	want := map[string]string{"sessionid": "s-canonical", "tenant": "t1", "priority": "3", "flag": "True"}
	if !reflect.DeepEqual(ce.Extensions, want) {
		t.Fatalf("extensions %v, want %v", ce.Extensions, want)
	}
	if ce := o.DetectCloudEvent("", map[string]any{"ce-id": "x"}, nil); ce.Data != nil || ce.DataContentType != nil {
		t.Fatal("an empty body is no data; no content type is none")
	}
}

func TestMapType(t *testing.T) {
	o := &CloudEventOptions{TypeMap: map[string]string{"com.acme.order.placed": "OrderPlaced"}}
	for in, want := range map[string]string{
		"com.acme.OrderPlaced": "OrderPlaced", "OrderPlaced": "OrderPlaced", "com.acme.": "com.acme.",
		"": "", ".x": "x", "com.acme.order.placed": "OrderPlaced", "a..b": "b",
	} {
		if got := o.MapType(&in); *got != want {
			t.Errorf("MapType(%q) = %q, want %q", in, *got, want)
		}
	}
	if o.MapType(nil) != nil {
		t.Error("nil type maps to non-nil")
	}
}

// The fallbacks of NimBus's MessageContext, each only when the native
// property is absent.
func TestReadCloudEventFallbacks(t *testing.T) {
	o := &CloudEventOptions{}
	props := map[string]any{"ce-specversion": "1.0", "ce-id": "lead-1", "ce-source": "/crm", "ce-type": "com.acme.OrderPlaced"}
	in, err := ReadWith(Broker{}, props, []byte(`{"x":1}`), o)
	if err != nil {
		t.Fatal(err)
	}
	if in.Type != EventRequest || in.To != "OrderPlaced" || in.From != "/crm" || *in.EventID != "lead-1" ||
		*in.EventTypeID != "OrderPlaced" || *in.OriginatingFrom != "/crm" || *in.MessageID != "lead-1" ||
		*in.SessionID != "lead-1" || in.CorrelationID != nil || in.OriginatingMessageID != Self || in.ParentMessageID != Self {
		t.Fatalf("read %+v", in)
	}
	if c := string(in.Content.AppendJSON(nil)); c != `{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"x\":1}"},"ErrorContent":null}` {
		t.Fatalf("content %s", c)
	}

	// Broker properties and native application properties win.
	native := map[string]any{"ce-id": "lead-1", "ce-source": "/crm", "ce-type": "com.acme.OrderPlaced",
		"ce-sessionid": "s-ext", "ce-correlationid": "c-ext",
		"To": "Billing", "From": "Crm", "EventId": "e-9", "EventTypeId": "Other", "OriginatingFrom": "Origin", "MessageType": "EventRequest"}
	in, _ = ReadWith(Broker{MessageID: sp("m-1"), SessionID: sp("s-1"), CorrelationID: sp("c-1")}, native, nil, o)
	if in.To != "Billing" || in.From != "Crm" || *in.EventID != "e-9" || *in.EventTypeID != "Other" || *in.OriginatingFrom != "Origin" ||
		*in.MessageID != "m-1" || *in.SessionID != "s-1" || *in.CorrelationID != "c-1" {
		t.Fatalf("native wins: %+v", in)
	}

	// Mapped session and correlation attributes, and the last resorts.
	in, _ = ReadWith(Broker{}, map[string]any{"ce-source": "/crm", "ce-sessionid": "s-ext", "ce-correlationid": "c-ext"}, nil, o)
	if *in.SessionID != "s-ext" || *in.CorrelationID != "c-ext" || *in.MessageID != CloudEventMissingID || *in.EventID != CloudEventMissingID ||
		in.EventTypeID != nil || in.To != "" {
		t.Fatalf("fallbacks: %+v", in)
	}
	in, _ = ReadWith(Broker{MessageID: sp("broker-1")}, map[string]any{"ce-type": "T"}, nil, o)
	if in.From != External || in.OriginatingFrom != nil || *in.EventID != "broker-1" || *in.SessionID != Self {
		t.Fatalf("no source, no id: %+v", in)
	}
	subj := &CloudEventOptions{SessionIDAttribute: "Subject", CorrelationIDAttribute: "tenant"}
	in, _ = ReadWith(Broker{}, map[string]any{"ce-id": "i", "ce-subject": "lead/7", "ce-sessionid": "s", "ce-tenant": "t"}, nil, subj)
	if *in.SessionID != "lead/7" || *in.CorrelationID != "t" {
		t.Fatalf("session from subject, correlation from tenant: %+v", in)
	}

	// Off: the same properties are a message without NimBus properties.
	if _, err := ReadWith(Broker{}, props, nil, nil); err == nil {
		t.Fatal("CloudEvents off: read as native must fail")
	}
}

func TestParseStructured(t *testing.T) {
	ce := ParseStructured([]byte(` {"specversion":"1.0","id":"i-1","source":"/s","type":"com.acme.T","subject":"sub",
		"time":"2026-11-30T12:00:00Z","datacontenttype":"application/json","dataschema":"ds",
		"data":{ "a" : [1, 2.50, "x"] },"ID":"other","tenant":"t","n":12,"b":false,"o":{"x":1},"arr":[1],"nul":null,"sessionid":"s-1"} `))
	want := &CloudEvent{Mode: ModeStructured, SpecVersion: sp("1.0"), ID: sp("i-1"), Source: sp("/s"), Type: sp("com.acme.T"),
		Subject: sp("sub"), Time: sp("2026-11-30T12:00:00Z"), DataContentType: sp("application/json"), DataSchema: sp("ds"),
		Data:       sp(`{"a":[1,2.50,"x"]}`),
		Extensions: map[string]string{"ID": "other", "tenant": "t", "n": "12", "b": "false", "sessionid": "s-1"}}
	if !reflect.DeepEqual(ce, want) {
		t.Fatalf("parsed\n %+v\nwant\n %+v", ce, want)
	}
	if ce := ParseStructured([]byte(`{"id":7,"source":true,"type":{"x":1},"data":"{\"raw\":1}"}`)); *ce.ID != "7" || *ce.Source != "true" || ce.Type != nil || *ce.Data != `{"raw":1}` {
		t.Fatalf("scalars and string data: %+v", ce)
	}
	for _, bad := range []string{``, `[]`, `{`, `{"id":"x"} {}`, `"x"`, `{"id":"x",}`} {
		if ce := ParseStructured([]byte(bad)); ce.ID != nil || ce.SpecVersion != nil || len(ce.Extensions) != 0 {
			t.Errorf("ParseStructured(%q) = %+v, want an empty CloudEvent", bad, ce)
		}
	}
	// Nesting of 64 is read, 65 is not (Newtonsoft's MaxDepth).
	deep := func(n int) []byte {
		return []byte(`{"id":"x","data":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + `}`)
	}
	if ParseStructured(deep(64)).ID == nil || ParseStructured(deep(65)).ID != nil {
		t.Error("depth limit is not 64")
	}
}

func TestValidateTexts(t *testing.T) {
	ok := &CloudEvent{SpecVersion: sp("1.0"), ID: sp("i"), Source: sp("s"), Type: sp("t")}
	if err := ok.Validate(false); err != nil {
		t.Fatal(err)
	}
	v := *ok
	v.SpecVersion = sp("1.0 ")
	if err := v.Validate(false); err == nil || err.Error() != "CloudEvents message has unsupported specversion '1.0 ' (expected '1.0')." {
		t.Fatalf("%v", err)
	}
	if err := v.Validate(true); strings.Contains(err.Error(), "1.0 ") {
		t.Fatalf("redacted text quotes the value: %v", err)
	}
	if err := ok.NoHandlerError(false); err.Error() != "CloudEvents type 't' maps to no registered event contract." {
		t.Fatal(err)
	}
}

// FuzzParseStructured: the structured-mode parser never panics, and what it
// reads survives being written back as a structured envelope and read again.
func FuzzParseStructured(f *testing.F) {
	for _, s := range []string{
		`{"specversion":"1.0","id":"i","source":"/s","type":"t","data":{"a":1}}`,
		`{"id":7,"data":"text","ext":true,"o":{"x":[1,2]}}`,
		`{"data":null,"subject":"\u00e9\ud83d\ude00"}`,
		`[1,2]`, `{`, `{"id":"a","id":"b"}`, "{\"id\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ce := ParseStructured(body)
		if ce == nil || ce.Mode != ModeStructured || ce.Extensions == nil {
			t.Fatalf("ParseStructured returned %+v", ce)
		}
		again := ParseStructured(ce.AppendStructured(nil))
		if !reflect.DeepEqual(ce, again) {
			t.Fatalf("round trip changed the event:\n %+v\n %+v", ce, again)
		}
	})
}
