package devhost_test

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/devhost"
	"github.com/nimbus-go/functions-subscriber/internal/funchost"
	"github.com/nimbus-go/functions-subscriber/internal/message"
)

var guid = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// read decodes an invocation envelope as the pipeline does.
func read(t *testing.T, env []byte) *message.Inbound {
	t.Helper()
	sb, err := funchost.DecodeServiceBus(env, "message")
	if err != nil {
		t.Fatalf("the envelope does not decode: %v\n%s", err, env)
	}
	in, err := message.Read(message.Broker{MessageID: sb.MessageID, SessionID: sb.SessionID, CorrelationID: sb.CorrelationID}, sb.ApplicationProperties, sb.Body)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// The lineage of an event further down a workflow reaches the delivery's
// properties; without it, the delivery carries a first event's.
func TestEventInvocationCarriesTheLineage(t *testing.T) {
	e := order(`{"OrderId":"O-1"}`)
	e.CorrelationID, e.ParentMessageID, e.OriginatingMessageID = "corr-1", "parent-1", "origin-1"
	e.OriginatingFrom, e.From = "Web", "Orders"
	e.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	env := mustEnv(devhost.EventInvocation("Subscriber", e, 1, time.Now()))
	if sb, err := funchost.DecodeServiceBus(env, "message"); err != nil || sb.ApplicationProperties["traceparent"] != e.TraceParent {
		t.Errorf("traceparent: %v (%v)", sb.ApplicationProperties["traceparent"], err)
	}
	in := read(t, env)
	if deref(in.CorrelationID) != "corr-1" || in.ParentMessageID != "parent-1" || in.OriginatingMessageID != "origin-1" ||
		deref(in.OriginatingFrom) != "Web" || in.From != "Orders" || in.To != "BillingEndpoint" {
		t.Errorf("CorrelationId %s ParentMessageId %s OriginatingMessageId %s OriginatingFrom %s From %s To %s", deref(in.CorrelationID),
			in.ParentMessageID, in.OriginatingMessageID, deref(in.OriginatingFrom), in.From, in.To)
	}
	in = read(t, mustEnv(devhost.EventInvocation("Subscriber", order(`{"OrderId":"O-1"}`), 2, time.Now())))
	if !guid.MatchString(deref(in.CorrelationID)) || in.ParentMessageID != message.Self || in.OriginatingMessageID != message.Self ||
		deref(in.OriginatingFrom) != "ShopEndpoint" || in.From != "ShopEndpoint" {
		t.Errorf("defaults: CorrelationId %s ParentMessageId %s OriginatingMessageId %s OriginatingFrom %s From %s", deref(in.CorrelationID),
			in.ParentMessageID, in.OriginatingMessageID, deref(in.OriginatingFrom), in.From)
	}
}

func mustEnv(_ any, env []byte) []byte { return env }

// sinkJSON is what GET /_nimbus/resolver of a publishing app shows: its
// ResolutionResponse, the event it published, and a parked copy.
const sinkJSON = `[
{"sessionId":"c-1","correlationId":"in-1","applicationProperties":{"To":{"type":"string","value":"Resolver"},
 "MessageType":{"type":"string","value":"ResolutionResponse"}},"body":"{}"},
{"messageId":"OrderAccepted-O-1","sessionId":"c-1","correlationId":"corr-1","applicationProperties":{
 "To":{"type":"string","value":"OrderAccepted"},"MessageType":{"type":"string","value":"EventRequest"},
 "EventId":{"type":"null","value":null},"OriginatingMessageId":{"type":"string","value":"origin-1"},
 "ParentMessageId":{"type":"string","value":"in-1"},"RetryCount":{"type":"int","value":0},
 "OriginatingFrom":{"type":"string","value":"Orders"},"EventTypeId":{"type":"string","value":"OrderAccepted"},
 "QueueTimeMs":{"type":"long","value":12},
 "traceparent":{"type":"string","value":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}},
 "body":"{\"EventContent\":{\"EventTypeId\":\"OrderAccepted\",\"EventJson\":\"{\\\"OrderId\\\":\\\"O-1\\\"}\"},\"ErrorContent\":null}"},
{"messageId":"parked-1","sessionId":"c-1","correlationId":"corr-1","applicationProperties":{
 "To":{"type":"string","value":"Deferred"},"From":{"type":"string","value":"Orders"},"MessageType":{"type":"string","value":"EventRequest"}},"body":"{}"},
{"messageId":"reply-1","sessionId":"c-1","applicationProperties":{"To":{"type":"string","value":"Resolver"},
 "MessageType":{"type":"string","value":"HeartbeatResponse"}},"body":"{}"}
]`

// Forward applies NimBus's forwarding rule to the event as it was
// published, and names what it cannot forward.
func TestForward(t *testing.T) {
	var sent []devhost.SentResponse
	if err := json.Unmarshal([]byte(sinkJSON), &sent); err != nil {
		t.Fatal(err)
	}
	m, err := devhost.Forward(sent, "OrderAccepted-O-1", "", "Billing")
	if err != nil {
		t.Fatal(err)
	}
	p := m.ApplicationProperties
	if p["From"] != "Orders" || p["To"] != "Billing" || !guid.MatchString(p["EventId"].(string)) || p["RetryCount"] != int32(0) ||
		p["QueueTimeMs"] != int64(12) || p["traceparent"] != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
		t.Errorf("properties %v", p)
	}
	in := read(t, devhost.Invocation("Subscriber", m, 2, 1, time.Now()))
	if deref(in.MessageID) != "OrderAccepted-O-1" || deref(in.SessionID) != "c-1" || deref(in.CorrelationID) != "corr-1" ||
		in.ParentMessageID != "in-1" || in.OriginatingMessageID != "origin-1" || deref(in.OriginatingFrom) != "Orders" ||
		deref(in.Content.EventContent.EventJSON) != `{"OrderId":"O-1"}` || in.Type != message.EventRequest || in.From != "Orders" {
		t.Errorf("delivered %+v", in)
	}
	if m, err := devhost.Forward(sent, "OrderAccepted-O-1", "OrdersTopic", "Billing"); err != nil || m.ApplicationProperties["From"] != "OrdersTopic" {
		t.Errorf("a given publisher: %v, %v", m.ApplicationProperties, err)
	}
	for _, c := range []struct {
		id   string
		want error
		text string
	}{
		{"OrderAccepted-O-404", devhost.ErrNoSuchMessage, "these MessageIds: OrderAccepted-O-1, parked-1, reply-1"},
		{"parked-1", devhost.ErrAlreadyForwarded, "(From Orders, To Deferred)"},
		{"reply-1", devhost.ErrNotAnEvent, "it is a HeartbeatResponse"},
	} {
		if _, err := devhost.Forward(sent, c.id, "", "Billing"); !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%s: %v, want %v with %q", c.id, err, c.want, c.text)
		}
	}
	if _, err := devhost.Forward(sent[:1], "x", "", "Billing"); err == nil || !strings.Contains(err.Error(), "no published event") {
		t.Errorf("a sink without events: %v", err)
	}
	// A publisher that names no endpoint (OriginatingFrom self) needs one.
	sent[1].Properties["OriginatingFrom"] = devhost.TypedValue{Type: "string", Value: "self"}
	if _, err := devhost.Forward(sent, "OrderAccepted-O-1", "", "Billing"); err == nil || !strings.Contains(err.Error(), "give the endpoint") {
		t.Errorf("OriginatingFrom self: %v", err)
	}
}
