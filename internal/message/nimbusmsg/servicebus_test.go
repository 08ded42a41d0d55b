package nimbusmsg

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testctx"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/servicebus"
)

// These tests send every builder's message through the local Service Bus
// with NimBus's topology and compare what the endpoint's subscriptions
// receive: each property's name, AMQP type and value, the body bytes and
// the broker fields.

func sendAll(t *testing.T, c *servicebus.Client, topic string, ms ...Message) {
	t.Helper()
	for _, m := range ms {
		err := c.Send(testctx.Timeout(t, 10*time.Second), topic, &servicebus.Message{
			Body: m.Body, ApplicationProperties: m.ApplicationProperties, SessionID: m.SessionID,
			CorrelationID: m.CorrelationID, MessageID: m.MessageID,
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// same compares a received message with what was built.
func same(t *testing.T, name string, got *azservicebus.ReceivedMessage, want Message) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		checkProps(t, got.ApplicationProperties, want.ApplicationProperties)
		if string(got.Body) != string(want.Body) {
			t.Errorf("body %s, want %s", got.Body, want.Body)
		}
		if want.MessageID != "" && got.MessageID != want.MessageID {
			t.Errorf("MessageId %s, want %s", got.MessageID, want.MessageID)
		}
		if str(got.SessionID) != want.SessionID || str(got.CorrelationID) != str(want.CorrelationID) {
			t.Errorf("session %s correlation %s, want %s %s", str(got.SessionID), str(got.CorrelationID), want.SessionID, str(want.CorrelationID))
		}
	})
}

func TestBuildersThroughServiceBus(t *testing.T) {
	sb := testenv.StartServiceBus(t, testenv.NimBusTopology("Shop", "Billing").WithForwarder("Shop", "Billing", "OrderPlaced"))
	c, err := servicebus.New(servicebus.Options{ConnectionString: sb.ConnectionString, Retry: azservicebus.RetryOptions{MaxRetries: 2, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	rc := sb.Client(t)
	const sid = "customer-1"

	// Publisher → forwarder → endpoint subscription.
	e := order()
	e.EventID = ""
	sendAll(t, c, "Shop", Published(e))
	got := testenv.ReceiveSession(t, rc, "Billing", "Billing", sid, 1, 20*time.Second)[0]
	id, ok := got.ApplicationProperties["EventId"]
	if !ok || id == nil || fmt.Sprint(id) == "" {
		t.Fatalf("the forwarder must stamp an EventId: %#v", id)
	}
	e.EventID = fmt.Sprint(id)
	want := EventRequest(e)
	if s, isString := id.(string); !isString {
		// newid() is an AMQP uuid on the wire; the Functions host hands it
		// to the handler as its string, which the builder writes.
		want.ApplicationProperties["EventId"] = id
		t.Logf("forwarder EventId arrives as %T %s", id, s)
	}
	same(t, "EventRequest", got, want)

	// Manager and handoff messages to the endpoint topic.
	in := read(t, EventRequest(order()), "")
	er := ErrorResponseOf(message.NewErrorResponse(in, "boom", "X", message.Timings{QueueTimeMs: -1}), "er-1")
	s := SettlementOf(in)
	manager := []Message{
		Resubmission(er, "Billing", "OrderPlaced", orderJSON),
		Skip(er, "Billing", "OrderPlaced"),
		HandoffCompleted(s, `{"Invoice":"I-9"}`),
		HandoffFailed(s, "ERP rejected", "ErpError"),
	}
	sendAll(t, c, "Billing", manager...)
	for i, m := range testenv.ReceiveSession(t, rc, "Billing", "Billing", sid, len(manager), 20*time.Second) {
		same(t, manager[i].ApplicationProperties["MessageType"].(string), m, manager[i])
	}

	// RetryRequest: the retry rule rewrites To and stamps From.
	retry := FromOutgoing(message.NewRetryRequest(in, in.Content.AppendJSON(nil), "msg-1"))
	sendAll(t, c, "Billing", retry)
	same(t, "RetryRequest", testenv.ReceiveSession(t, rc, "Billing", "Billing", sid, 1, 20*time.Second)[0], retry.Routed("Billing"))

	// Parked copies reach the Deferred subscription in the session.
	parked := []Message{
		FromOutgoing(message.NewParkedCopy(in, EventRequest(order()).Body, 0, "msg-1")),
		FromOutgoing(message.NewParkedCopy(in, EventRequest(order()).Body, 1, "")),
	}
	sendAll(t, c, "Billing", parked...)
	for i, m := range testenv.ReceiveSession(t, rc, "Billing", "Deferred", sid, 2, 20*time.Second) {
		same(t, fmt.Sprintf("parked %d", i), m, parked[i])
		if seq, ok := message.DeferralSequenceOf(m.ApplicationProperties); !ok || seq != int64(i) {
			t.Errorf("DeferralSequence read back as %d, %v", seq, ok)
		}
	}

	// ProcessDeferredRequest reaches the DeferredProcessor subscription.
	pd := FromOutgoing(message.NewProcessDeferredRequest(in))
	sendAll(t, c, "Billing", pd)
	r, err := rc.NewReceiverForSubscription("Billing", "DeferredProcessor", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := r.ReceiveMessages(testctx.Timeout(t, 20*time.Second), 1, nil)
	if err != nil || len(ms) != 1 {
		t.Fatalf("ProcessDeferredRequest: %v (%d)", err, len(ms))
	}
	same(t, "ProcessDeferredRequest", ms[0], pd)
}

// The events a handler publishes cross the real SDK and the broker as
// NimBus's PublishFromContext sends them: on the publisher's topic exactly
// (every property with its AMQP type, MessageId, session, correlation,
// body), and at each consumer after the forwarder stamped From, EventId
// and To.
func TestPublishedEventsThroughServiceBus(t *testing.T) {
	topo := testenv.NimBusTopology("Billing", "Invoicing").WithForwarder("Billing", "Invoicing", "InvoiceRequested", "OrderAccepted")
	for i := range topo.Topics {
		if topo.Topics[i].Name == "Billing" {
			// A catch-all tap shows what the publisher's topic received.
			topo.Topics[i].Subscriptions = append(topo.Topics[i].Subscriptions, testenv.Subscription{Name: "tap", RequiresSession: true})
		}
	}
	sb := testenv.StartServiceBus(t, topo)
	c, err := servicebus.New(servicebus.Options{ConnectionString: sb.ConnectionString, Retry: azservicebus.RetryOptions{MaxRetries: 2, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	rc := sb.Client(t)

	delivery := order()
	delivery.Endpoint = "Billing"
	in := read(t, EventRequest(delivery), "")
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := HandlerContext{MessageID: "msg-1", SessionID: "customer-1", CorrelationID: "corr-1", OriginatingMessageID: "self", TraceParent: tp, TraceState: "k=v"}
	events := []Event{
		{Publisher: "Billing", EventTypeID: "InvoiceRequested", EventJSON: `{"OrderId":"O-1","CustomerId":"C-1","Amount":12.5}`, MessageID: "InvoiceRequested-O-1"},
		{Publisher: "Billing", EventTypeID: "OrderAccepted", EventJSON: `{"OrderId":"O-1","Note":"é \u2028"}`, MessageID: "OrderAccepted-O-1"},
	}
	var sent []Message
	for _, e := range events {
		out, err := message.NewPublishedEvent(in, message.Publication{Endpoint: "Billing", EventTypeID: e.EventTypeID, EventJSON: e.EventJSON,
			MessageID: e.MessageID, TraceParent: tp, TraceState: "k=v"})
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, FromOutgoing(out))
	}
	sendAll(t, c, "Billing", sent...)

	for i, got := range testenv.ReceiveSession(t, rc, "Billing", "tap", "customer-1", len(events), 20*time.Second) {
		want := PublishedFromContext(events[i], ctx)
		same(t, "published "+events[i].EventTypeID, got, want)
		if got.MessageID != events[i].MessageID {
			t.Errorf("MessageId %s, want %s", got.MessageID, events[i].MessageID)
		}
	}
	for i, got := range testenv.ReceiveSession(t, rc, "Invoicing", "Invoicing", "customer-1", len(events), 20*time.Second) {
		want := PublishedFromContext(events[i], ctx)
		id := got.ApplicationProperties["EventId"]
		if id == nil || fmt.Sprint(id) == "" {
			t.Fatalf("the forwarder must stamp an EventId: %#v", id)
		}
		want.ApplicationProperties["From"] = "Billing"
		want.ApplicationProperties["EventId"] = id
		want.ApplicationProperties["To"] = "Invoicing"
		same(t, "forwarded "+events[i].EventTypeID, got, want)
	}
}
