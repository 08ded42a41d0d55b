package nimbusmsg

import (
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/funchost"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/message"
)

var guid = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func checkProps(t *testing.T, got, want map[string]any) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("property %s missing; want %T %#v", k, w, w)
		} else if !reflect.DeepEqual(g, w) {
			t.Errorf("property %s = %T %#v; want %T %#v", k, g, g, w, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected property %s = %T %#v", k, g, g)
		}
	}
}

func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

const orderJSON = `{"OrderId":"O-1"}`

func order() Event {
	return Event{Publisher: "Shop", Endpoint: "Billing", EventTypeID: "OrderPlaced", EventJSON: orderJSON,
		SessionID: "customer-1", CorrelationID: "corr-1", EventID: "ev-1", MessageID: "msg-1"}
}

func TestDefaultMessageID(t *testing.T) {
	// xxHash64 with seed 0 of the empty input is ef46db3751d8e999 (the
	// algorithm's published test vector).
	if got := DefaultMessageID("T", ""); got != "T-ef46db3751d8e999" {
		t.Fatalf("got %s", got)
	}
	if got := Published(Event{EventTypeID: "T", EventJSON: ""}).MessageID; got != "T-ef46db3751d8e999" {
		t.Fatalf("default MessageId %s", got)
	}
}

func TestEventRequest(t *testing.T) {
	m := EventRequest(order())
	checkProps(t, m.ApplicationProperties, map[string]any{
		"To": "Billing", "From": "Shop", "MessageType": "EventRequest", "EventId": "ev-1",
		"OriginatingMessageId": "self", "ParentMessageId": "self", "RetryCount": int32(0),
		"OriginatingFrom": "Shop", "EventTypeId": "OrderPlaced",
	})
	wantBody := `{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1\"}"},"ErrorContent":null}`
	if string(m.Body) != wantBody || m.MessageID != "msg-1" || m.SessionID != "customer-1" || str(m.CorrelationID) != "corr-1" {
		t.Fatalf("body %s id %s session %s correlation %s", m.Body, m.MessageID, m.SessionID, str(m.CorrelationID))
	}
	p := Published(order())
	checkProps(t, p.ApplicationProperties, map[string]any{
		"To": "OrderPlaced", "MessageType": "EventRequest", "EventId": nil,
		"OriginatingMessageId": "self", "ParentMessageId": "self", "RetryCount": int32(0),
		"OriginatingFrom": "Shop", "EventTypeId": "OrderPlaced",
	})
	e := order()
	e.EventID, e.CorrelationID = "", ""
	d := EventRequest(e)
	if id, _ := d.ApplicationProperties["EventId"].(string); !guid.MatchString(id) || !guid.MatchString(str(d.CorrelationID)) {
		t.Fatalf("defaults: EventId %v CorrelationId %s", d.ApplicationProperties["EventId"], str(d.CorrelationID))
	}
}

// Forwarded applies the forwarder rule's action to an event published
// mid-workflow and keeps its lineage, trace context, ids and body; the
// published message is left as it was.
func TestForwardedKeepsTheLineage(t *testing.T) {
	published := PublishedFromContext(Event{Publisher: "Orders", EventTypeID: "OrderAccepted", EventJSON: orderJSON, MessageID: "OrderAccepted-O-1"},
		HandlerContext{MessageID: "in-1", SessionID: "customer-1", CorrelationID: "corr-1", OriginatingMessageID: "origin-1",
			TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
	f := Forwarded(published, "Orders", "Billing", "ev-9")
	checkProps(t, f.ApplicationProperties, map[string]any{
		"To": "Billing", "From": "Orders", "MessageType": "EventRequest", "EventId": "ev-9",
		"OriginatingMessageId": "origin-1", "ParentMessageId": "in-1", "RetryCount": int32(0),
		"OriginatingFrom": "Orders", "EventTypeId": "OrderAccepted",
		"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	})
	if f.MessageID != "OrderAccepted-O-1" || f.SessionID != "customer-1" || str(f.CorrelationID) != "corr-1" || string(f.Body) != string(published.Body) {
		t.Errorf("id %s session %s correlation %s body %s", f.MessageID, f.SessionID, str(f.CorrelationID), f.Body)
	}
	if _, ok := published.ApplicationProperties["From"]; ok || published.ApplicationProperties["To"] != "OrderAccepted" {
		t.Errorf("the published message changed: %v", published.ApplicationProperties)
	}
	if id, _ := Forwarded(published, "Orders", "Billing", "").ApplicationProperties["EventId"].(string); !guid.MatchString(id) {
		t.Errorf("default EventId %q", id)
	}
}

// failed is the ErrorResponse a subscriber sent for EventRequest(order()),
// as the Resolver stores it once the broker assigned it "er-1".
func failed(t *testing.T) ErrorResponse {
	t.Helper()
	in := read(t, EventRequest(order()), "")
	return ErrorResponseOf(message.NewErrorResponse(in, "boom", "X", message.Timings{QueueTimeMs: -1}), "er-1")
}

func TestManagerMessages(t *testing.T) {
	er := failed(t)
	if er != (ErrorResponse{MessageID: "er-1", CorrelationID: "msg-1", EventID: "ev-1", SessionID: "customer-1", OriginatingMessageID: "msg-1"}) {
		t.Fatalf("ErrorResponseOf = %+v", er)
	}
	r := Resubmission(er, "Billing", "OrderPlaced", `{"OrderId":"O-1","Fixed":true}`)
	checkProps(t, r.ApplicationProperties, map[string]any{
		"To": "Billing", "From": "Manager", "MessageType": "ResubmissionRequest", "EventId": "ev-1",
		"OriginatingMessageId": "msg-1", "ParentMessageId": "er-1", "RetryCount": int32(0),
		"OriginatingFrom": "self", "EventTypeId": "OrderPlaced",
	})
	if string(r.Body) != `{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1\",\"Fixed\":true}"},"ErrorContent":null}` ||
		r.MessageID != "" || r.SessionID != "customer-1" || str(r.CorrelationID) != "msg-1" {
		t.Fatalf("resubmission body %s id %q session %s correlation %s", r.Body, r.MessageID, r.SessionID, str(r.CorrelationID))
	}

	s := Skip(er, "Billing", "OrderPlaced")
	checkProps(t, s.ApplicationProperties, map[string]any{
		"To": "Billing", "From": "Manager", "MessageType": "SkipRequest", "EventId": "ev-1",
		"OriginatingMessageId": "msg-1", "ParentMessageId": "er-1", "RetryCount": int32(0),
		"OriginatingFrom": "self", "EventTypeId": "OrderPlaced",
	})
	if string(s.Body) != `{"EventContent":null,"ErrorContent":null}` || s.MessageID != "" || str(s.CorrelationID) != "er-1" {
		t.Fatalf("skip body %s id %q correlation %s (want the ErrorResponse's own id)", s.Body, s.MessageID, str(s.CorrelationID))
	}

	// A stored entity without OriginatingMessageId falls back to its MessageId.
	er.OriginatingMessageID = ""
	if got := Skip(er, "Billing", "").ApplicationProperties; got["OriginatingMessageId"] != "er-1" || got["EventTypeId"] != nil {
		t.Fatalf("fallback: %v", got)
	}
}

func TestHandoffSettlements(t *testing.T) {
	pending := read(t, EventRequest(order()), "")
	s := SettlementOf(pending)
	if s != (Settlement{To: "Billing", EventID: "ev-1", SessionID: "customer-1", CorrelationID: "corr-1",
		ParentMessageID: "msg-1", OriginatingMessageID: "self", EventTypeID: "OrderPlaced"}) {
		t.Fatalf("SettlementOf = %+v", s)
	}
	want := map[string]any{
		"To": "Billing", "From": "Manager", "EventId": "ev-1", "OriginatingMessageId": "self",
		"ParentMessageId": "msg-1", "RetryCount": int32(0), "OriginatingFrom": "self", "EventTypeId": "OrderPlaced",
	}
	c := HandoffCompleted(s, `{"Invoice":"I-9"}`)
	want["MessageType"] = "HandoffCompletedRequest"
	checkProps(t, c.ApplicationProperties, want)
	if string(c.Body) != `{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"Invoice\":\"I-9\"}"},"ErrorContent":null}` {
		t.Fatalf("completed body %s", c.Body)
	}
	if !guid.MatchString(c.MessageID) || c.SessionID != "customer-1" || str(c.CorrelationID) != "corr-1" {
		t.Fatalf("completed id %q session %s correlation %s", c.MessageID, c.SessionID, str(c.CorrelationID))
	}
	if b := HandoffCompleted(s, "").Body; string(b) != `{"EventContent":null,"ErrorContent":null}` {
		t.Fatalf("completed without details %s", b)
	}

	f := HandoffFailed(s, "ERP rejected", "ErpError")
	want["MessageType"] = "HandoffFailedRequest"
	checkProps(t, f.ApplicationProperties, want)
	if string(f.Body) != `{"EventContent":null,"ErrorContent":{"ErrorText":"ERP rejected","ErrorType":"ErpError","ExceptionStackTrace":null,"ExceptionSource":null}}` {
		t.Fatalf("failed body %s", f.Body)
	}
	if f.MessageID == c.MessageID {
		t.Fatal("every settlement gets a fresh MessageId")
	}
	if b := HandoffFailed(s, "x", "").Body; string(b) != `{"EventContent":null,"ErrorContent":{"ErrorText":"x","ErrorType":null,"ExceptionStackTrace":null,"ExceptionSource":null}}` {
		t.Fatalf("failed without type %s", b)
	}
	// No OriginatingMessageId: the parent's id.
	s.OriginatingMessageID = ""
	if got := HandoffFailed(s, "x", "").ApplicationProperties["OriginatingMessageId"]; got != "msg-1" {
		t.Fatalf("fallback %v", got)
	}
	// The subscriber reads the failed settlement's text as NimBus does.
	text, typ := message.HandoffError(read(t, f, ""))
	if text != "ERP rejected" || typ != "HandoffFailedException" {
		t.Fatalf("HandoffError %q %q", text, typ)
	}
}

func TestRoutedAndReplayed(t *testing.T) {
	in := read(t, EventRequest(order()), "")
	retry := FromOutgoing(message.NewRetryRequest(in, in.Content.AppendJSON(nil), "msg-1"))
	got := retry.Routed("Billing")
	if got.ApplicationProperties["To"] != "Billing" || got.ApplicationProperties["From"] != "Retry" || retry.ApplicationProperties["To"] != "Retry" {
		t.Fatalf("routed %v (original %v)", got.ApplicationProperties, retry.ApplicationProperties)
	}
	if r := EventRequest(order()).Routed("X").ApplicationProperties; r["To"] != "Billing" || r["From"] != "Shop" {
		t.Fatalf("an event is not rerouted: %v", r)
	}
	parked := FromOutgoing(message.NewParkedCopy(in, EventRequest(order()).Body, 3, "msg-1"))
	rp := Replayed(parked, "Billing")
	if _, ok := rp.ApplicationProperties["DeferralSequence"]; ok || rp.ApplicationProperties["To"] != "Billing" ||
		rp.ApplicationProperties["InboxMessageId"] != "msg-1" || rp.SessionID != "customer-1" || str(rp.CorrelationID) != "corr-1" {
		t.Fatalf("replayed %+v", rp)
	}
	// The replayed copy reads back as the original event with its stand-in id.
	back := read(t, rp, "replay-1")
	if back.Type != message.EventRequest || back.From != "Shop" || str(back.EventID) != "ev-1" || str(back.InboxMessageID) != "msg-1" {
		t.Fatalf("read back %+v", back)
	}
}

// read delivers m through a hostwire envelope, decodes it as the
// handler does and reads it.
func read(t *testing.T, m Message, brokerID string) *message.Inbound {
	t.Helper()
	env, err := hostwire.Build(m.Delivery("Billing", brokerID, 1, time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)))
	if err != nil {
		t.Fatal(err)
	}
	d, err := funchost.DecodeServiceBus(env, "message")
	if err != nil {
		t.Fatal(err)
	}
	in, err := message.Read(message.Broker{MessageID: d.MessageID, SessionID: d.SessionID, CorrelationID: d.CorrelationID,
		EnqueuedTime: d.EnqueuedTime, DeliveryCount: d.DeliveryCount}, d.ApplicationProperties, d.Body)
	if err != nil {
		t.Fatal(err)
	}
	if in.Content == nil {
		t.Fatalf("content: %v", in.ContentErr)
	}
	return in
}

func TestDeliveryKeepsWireOrderAndTypes(t *testing.T) {
	m := FromOutgoing(message.NewParkedCopy(read(t, EventRequest(order()), ""), nil, 2, "msg-1"))
	var names []string
	for _, p := range m.Properties() {
		names = append(names, p.Name)
	}
	want := []string{"To", "MessageType", "EventId", "OriginatingMessageId", "ParentMessageId", "RetryCount",
		"OriginatingFrom", "From", "EventTypeId", "OriginalSessionId", "DeferralSequence", "InboxMessageId"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("order %v", names)
	}
	d := m.Delivery("f", "b-1", 3, time.Unix(0, 0))
	if d.MessageID != "b-1" || d.DeliveryCount != 3 || str(d.SessionID) != "customer-1" {
		t.Fatalf("delivery %+v", d)
	}
}

// PublishedFromContext follows PublishFromContext: the publish's
// properties, the handler context's session and correlation, and its
// lineage.
func TestPublishedFromContext(t *testing.T) {
	e := Event{Publisher: "Billing", EventTypeID: "InvoiceRequested", EventJSON: `{"OrderId":"O-1"}`, MessageID: "InvoiceRequested-O-1",
		SessionID: "ignored", CorrelationID: "ignored", Endpoint: "ignored", EventID: "ignored"}
	ctx := HandlerContext{MessageID: "in-1", SessionID: "customer-1", CorrelationID: "corr-1", OriginatingMessageID: "self",
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	m := PublishedFromContext(e, ctx)
	checkProps(t, m.ApplicationProperties, map[string]any{
		"To": "InvoiceRequested", "MessageType": "EventRequest", "EventId": nil, "OriginatingMessageId": "in-1",
		"ParentMessageId": "in-1", "RetryCount": int32(0), "OriginatingFrom": "Billing", "EventTypeId": "InvoiceRequested",
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	})
	if string(m.Body) != `{"EventContent":{"EventTypeId":"InvoiceRequested","EventJson":"{\"OrderId\":\"O-1\"}"},"ErrorContent":null}` ||
		m.MessageID != "InvoiceRequested-O-1" || m.SessionID != "customer-1" || str(m.CorrelationID) != "corr-1" {
		t.Fatalf("body %s id %s session %s correlation %s", m.Body, m.MessageID, m.SessionID, str(m.CorrelationID))
	}
	for origin, want := range map[string]string{"o-0": "o-0", "SELF": "in-1", "": "in-1", "  ": "in-1"} {
		ctx.OriginatingMessageID = origin
		if got := PublishedFromContext(e, ctx).ApplicationProperties["OriginatingMessageId"]; got != want {
			t.Errorf("origin %q: OriginatingMessageId %v, want %s", origin, got, want)
		}
	}
	e.Publisher, ctx.TraceState = "", "k=v"
	if p := PublishedFromContext(e, ctx).ApplicationProperties; p["OriginatingFrom"] != "self" || p["tracestate"] != "k=v" {
		t.Errorf("no publisher: %v", p)
	}
}
