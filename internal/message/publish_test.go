package message_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
)

// delivered reads m as the subscriber reads a delivery, with brokerID as
// its MessageId when m carries none.
func delivered(t *testing.T, m nimbusmsg.Message, brokerID string) *message.Inbound {
	t.Helper()
	id := m.MessageID
	if id == "" {
		id = brokerID
	}
	b := message.Broker{MessageID: &id, CorrelationID: m.CorrelationID, DeliveryCount: 1}
	if m.SessionID != "" {
		b.SessionID = &m.SessionID
	}
	in, err := message.Read(b, m.ApplicationProperties, m.Body)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// sameMessage compares every property (name, Go type, value), the broker
// fields and the body.
func sameMessage(t *testing.T, got, want nimbusmsg.Message) {
	t.Helper()
	for k, w := range want.ApplicationProperties {
		g, ok := got.ApplicationProperties[k]
		if !ok {
			t.Errorf("property %s missing; want %T %#v", k, w, w)
		} else if !reflect.DeepEqual(g, w) {
			t.Errorf("property %s = %T %#v; want %T %#v", k, g, g, w, w)
		}
	}
	for k, g := range got.ApplicationProperties {
		if _, ok := want.ApplicationProperties[k]; !ok {
			t.Errorf("unexpected property %s = %T %#v", k, g, g)
		}
	}
	if got.MessageID != want.MessageID || got.SessionID != want.SessionID {
		t.Errorf("MessageId %q SessionId %q, want %q %q", got.MessageID, got.SessionID, want.MessageID, want.SessionID)
	}
	if (got.CorrelationID == nil) != (want.CorrelationID == nil) || (got.CorrelationID != nil && *got.CorrelationID != *want.CorrelationID) {
		t.Errorf("CorrelationId %v, want %v", deref(got.CorrelationID), deref(want.CorrelationID))
	}
	if string(got.Body) != string(want.Body) {
		t.Errorf("body\n %s\nwant\n %s", got.Body, want.Body)
	}
}

func deref(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

const (
	traceParent  = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	recordedJSON = `{"PaymentId":"P-1","CustomerId":"C-1","AmountCents":1250,"BalanceCents":4000,"Note":"é \u2028 <&>"}`
)

// Each published event is what NimBus's PublishFromContext sends for the
// same delivery, property for property, built independently by nimbusmsg.
func TestPublishedEventIsNimBusPublishFromContext(t *testing.T) {
	order := nimbusmsg.Event{Publisher: "Shop", Endpoint: "Billing", EventTypeID: "PaymentReceived",
		EventJSON: `{"PaymentId":"P-1"}`, SessionID: "customer-1", CorrelationID: "corr-1", EventID: "ev-1", MessageID: "in-1"}
	firstHop := nimbusmsg.EventRequest(order)
	secondHop := nimbusmsg.EventRequest(order)
	secondHop.ApplicationProperties["OriginatingMessageId"] = "origin-0"
	secondHop.ApplicationProperties["ParentMessageId"] = "parent-0"

	cases := []struct {
		name     string
		delivery nimbusmsg.Message
		brokerID string
		session  string // the override
		traceSt  string
		endpoint string
		wantCtx  nimbusmsg.HandlerContext
	}{
		{name: "first hop: the origin is the delivery", delivery: firstHop,
			wantCtx: nimbusmsg.HandlerContext{MessageID: "in-1", SessionID: "customer-1", CorrelationID: "corr-1", OriginatingMessageID: "self"}},
		{name: "second hop: the origin is kept", delivery: secondHop, traceSt: "congo=t61rcWkgMzE",
			wantCtx: nimbusmsg.HandlerContext{MessageID: "in-1", SessionID: "customer-1", CorrelationID: "corr-1", OriginatingMessageID: "origin-0"}},
		{name: "origin SELF in another case", delivery: withProp(firstHop, "OriginatingMessageId", "SeLf"),
			wantCtx: nimbusmsg.HandlerContext{MessageID: "in-1", SessionID: "customer-1", CorrelationID: "corr-1", OriginatingMessageID: "SeLf"}},
		{name: "blank origin", delivery: withProp(firstHop, "OriginatingMessageId", " \t"),
			wantCtx: nimbusmsg.HandlerContext{MessageID: "in-1", SessionID: "customer-1", CorrelationID: "corr-1", OriginatingMessageID: " \t"}},
		{name: "another session key", delivery: secondHop, session: "invoice-9",
			wantCtx: nimbusmsg.HandlerContext{MessageID: "in-1", SessionID: "invoice-9", CorrelationID: "corr-1", OriginatingMessageID: "origin-0"}},
		{name: "no endpoint writes self", delivery: firstHop, endpoint: "-",
			wantCtx: nimbusmsg.HandlerContext{MessageID: "in-1", SessionID: "customer-1", CorrelationID: "corr-1", OriginatingMessageID: "self"}},
		// A RetryRequest carries the failed delivery's MessageId as its
		// CorrelationId; the event takes that and the RetryRequest's own id.
		{name: "while handling a RetryRequest", delivery: retryOf(t, firstHop), brokerID: "retry-7",
			wantCtx: nimbusmsg.HandlerContext{MessageID: "retry-7", SessionID: "customer-1", CorrelationID: "in-1", OriginatingMessageID: "in-1"}},
		// The Manager's resubmission: its own broker id and the ErrorResponse's lineage.
		{name: "while handling a resubmission", brokerID: "resub-3",
			delivery: nimbusmsg.Resubmission(nimbusmsg.ErrorResponse{MessageID: "er-1", CorrelationID: "in-1", EventID: "ev-1",
				SessionID: "customer-1", OriginatingMessageID: "in-1"}, "Billing", "PaymentReceived", `{"PaymentId":"P-1"}`),
			wantCtx: nimbusmsg.HandlerContext{MessageID: "resub-3", SessionID: "customer-1", CorrelationID: "in-1", OriginatingMessageID: "in-1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := delivered(t, c.delivery, c.brokerID)
			endpoint := "Billing"
			if c.endpoint == "-" {
				endpoint = ""
			}
			out, err := message.NewPublishedEvent(in, message.Publication{
				Endpoint: endpoint, EventTypeID: "PaymentRecorded", EventJSON: recordedJSON,
				MessageID: "PaymentRecorded-P-1", SessionID: c.session, TraceParent: traceParent, TraceState: c.traceSt,
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx := c.wantCtx
			ctx.TraceParent, ctx.TraceState = traceParent, c.traceSt
			want := nimbusmsg.PublishedFromContext(nimbusmsg.Event{Publisher: endpoint, EventTypeID: "PaymentRecorded",
				EventJSON: recordedJSON, MessageID: "PaymentRecorded-P-1"}, ctx)
			sameMessage(t, nimbusmsg.FromOutgoing(out), want)
		})
	}
}

func withProp(m nimbusmsg.Message, name string, v any) nimbusmsg.Message {
	p := make(map[string]any, len(m.ApplicationProperties))
	for k, x := range m.ApplicationProperties {
		p[k] = x
	}
	p[name] = v
	m.ApplicationProperties = p
	return m
}

// retryOf is the RetryRequest the subscriber schedules for a failed
// delivery of m, as the endpoint subscription's retry rule delivers it.
func retryOf(t *testing.T, m nimbusmsg.Message) nimbusmsg.Message {
	t.Helper()
	in := delivered(t, m, "")
	return nimbusmsg.FromOutgoing(message.NewRetryRequest(in, m.Body, "")).Routed("Billing")
}

// The wire text of one event, literally: NimBus's property set and
// Newtonsoft's body.
func TestPublishedEventWireText(t *testing.T) {
	in := delivered(t, nimbusmsg.EventRequest(nimbusmsg.Event{Publisher: "Shop", Endpoint: "Billing", EventTypeID: "OrderPlaced",
		EventJSON: `{}`, SessionID: "s-1", CorrelationID: "c-1", EventID: "ev-1", MessageID: "m-1"}), "")
	out, err := message.NewPublishedEvent(in, message.Publication{Endpoint: "Billing", EventTypeID: "OrderAccepted",
		EventJSON: `{"OrderId":"O-1","Text":"a\"b\\c\n"}`, MessageID: "OrderAccepted-O-1"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"EventContent":{"EventTypeId":"OrderAccepted","EventJson":"{\"OrderId\":\"O-1\",\"Text\":\"a\\\"b\\\\c\\n\"}"},"ErrorContent":null}`; string(out.Body) != want {
		t.Errorf("body\n %s\nwant\n %s", out.Body, want)
	}
	want := map[string]any{
		"To": "OrderAccepted", "MessageType": "EventRequest", "EventId": nil, "OriginatingMessageId": "m-1",
		"ParentMessageId": "m-1", "RetryCount": int32(0), "OriginatingFrom": "Billing", "EventTypeId": "OrderAccepted",
	}
	if !reflect.DeepEqual(out.ApplicationProperties, want) {
		t.Errorf("properties %#v\nwant %#v", out.ApplicationProperties, want)
	}
	if _, ok := out.ApplicationProperties["From"]; ok {
		t.Error("a From would stop NimBus's forwarder rules (From IS NULL)")
	}
	if out.MessageID != "OrderAccepted-O-1" || out.SessionID != "s-1" || deref(out.CorrelationID) != "c-1" {
		t.Errorf("MessageId %q SessionId %q CorrelationId %s", out.MessageID, out.SessionID, deref(out.CorrelationID))
	}
	// The event reads back as an EventRequest once a forwarder has stamped
	// From, EventId and To.
	m := nimbusmsg.FromOutgoing(out)
	m = withProp(withProp(withProp(m, "From", "Billing"), "EventId", "ev-9"), "To", "Invoicing")
	back := delivered(t, m, "")
	if back.Type != message.EventRequest || deref(back.EventTypeID) != "OrderAccepted" || back.Content == nil ||
		deref(back.Content.EventContent.EventJSON) != `{"OrderId":"O-1","Text":"a\"b\\c\n"}` {
		t.Errorf("read back %+v (content %v)", back, back.ContentErr)
	}
}

func TestPublishedEventRefusesBadInput(t *testing.T) {
	const secret = `{"Card":"4111-1111-1111-1111"`
	base := func() (*message.Inbound, message.Publication) {
		in := delivered(t, nimbusmsg.EventRequest(nimbusmsg.Event{Publisher: "Shop", Endpoint: "Billing", EventTypeID: "X",
			EventJSON: `{}`, SessionID: "s-1", CorrelationID: "c-1", EventID: "ev-1", MessageID: "m-1"}), "")
		return in, message.Publication{Endpoint: "Billing", EventTypeID: "Y", EventJSON: `{"A":1}`, MessageID: "Y-1"}
	}
	cases := []struct {
		name   string
		change func(in *message.Inbound, p *message.Publication) *message.Inbound
		want   string
	}{
		{"no message id", func(in *message.Inbound, p *message.Publication) *message.Inbound { p.MessageID = ""; return in }, "message id is empty"},
		{"blank message id", func(in *message.Inbound, p *message.Publication) *message.Inbound { p.MessageID = " \u00a0"; return in }, "message id is empty"},
		{"message id too long", func(in *message.Inbound, p *message.Publication) *message.Inbound {
			p.MessageID = strings.Repeat("x", 127) + "😀" // 129 UTF-16 code units
			return in
		}, "message id has 129 characters"},
		{"no event type", func(in *message.Inbound, p *message.Publication) *message.Inbound { p.EventTypeID = " "; return in }, "event type is empty"},
		{"payload not JSON", func(in *message.Inbound, p *message.Publication) *message.Inbound { p.EventJSON = secret; return in }, "not valid JSON (29 bytes)"},
		{"blank session key", func(in *message.Inbound, p *message.Publication) *message.Inbound { p.SessionID = "  "; return in }, "session key is blank"},
		{"session key too long", func(in *message.Inbound, p *message.Publication) *message.Inbound {
			p.SessionID = strings.Repeat("s", 129)
			return in
		}, "session key has 129 characters"},
		{"no inbound MessageId", func(in *message.Inbound, p *message.Publication) *message.Inbound { in.MessageID = nil; return in }, "no MessageId"},
		{"no inbound SessionId", func(in *message.Inbound, p *message.Publication) *message.Inbound { in.SessionID = nil; return in }, "no SessionId"},
		{"no delivery", func(in *message.Inbound, p *message.Publication) *message.Inbound { return nil }, "no inbound delivery"},
		{"message too large", func(in *message.Inbound, p *message.Publication) *message.Inbound {
			p.EventJSON = `"` + strings.Repeat("4111", 65536) + `"`
			return in
		}, "(a payload of 262146 bytes, carried as a JSON string); Service Bus accepts at most 262144 here"},
		{"message over a set limit", func(in *message.Inbound, p *message.Publication) *message.Inbound {
			p.EventJSON = `"` + strings.Repeat("4111", 8192) + `"`
			p.MaxBytes = 32 << 10
			return in
		}, "Service Bus accepts at most 32768 here"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in, p := base()
			in = c.change(in, &p)
			out, err := message.NewPublishedEvent(in, p)
			if err == nil || out != nil {
				t.Fatalf("built %+v, %v", out, err)
			}
			if !errors.Is(err, message.ErrInvalidPublication) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want ErrInvalidPublication saying %q", err, c.want)
			}
			if strings.Contains(err.Error(), "4111") {
				t.Errorf("the error quotes the payload: %q", err)
			}
		})
	}
	// The session key replaces a missing inbound session.
	in, p := base()
	in.SessionID = nil
	p.SessionID = "other"
	if out, err := message.NewPublishedEvent(in, p); err != nil || out.SessionID != "other" {
		t.Fatalf("override without an inbound session: %v", err)
	}
	// A delivery without a CorrelationId starts the workflow: its
	// MessageId correlates the events.
	for _, corr := range []*string{nil, message.Ptr(""), message.Ptr(" ")} {
		in, p := base()
		in.CorrelationID = corr
		out, err := message.NewPublishedEvent(in, p)
		if err != nil || out.CorrelationID == nil || *out.CorrelationID != *in.MessageID {
			t.Fatalf("no inbound CorrelationId: %+v, %v; want the inbound MessageId", out, err)
		}
	}
	// 128 UTF-16 code units is the limit, not more.
	in, p = base()
	p.MessageID = strings.Repeat("x", 126) + "😀"
	if _, err := message.NewPublishedEvent(in, p); err != nil {
		t.Fatalf("a 128-unit message id: %v", err)
	}
}

func BenchmarkNewPublishedEvent(b *testing.B) {
	in, err := message.Read(message.Broker{MessageID: message.Ptr("m-1"), SessionID: message.Ptr("s-1"), CorrelationID: message.Ptr("c-1")},
		map[string]any{"To": "Billing", "From": "Shop", "MessageType": "EventRequest", "EventId": "ev-1", "EventTypeId": "X"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	p := message.Publication{Endpoint: "Billing", EventTypeID: "PaymentRecorded", EventJSON: recordedJSON, MessageID: "PaymentRecorded-P-1", TraceParent: traceParent}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := message.NewPublishedEvent(in, p); err != nil {
			b.Fatal(err)
		}
	}
}
