package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// The consumer of the events the sample endpoint publishes, and the tap
// that shows what reached the endpoint's own topic.
const (
	consumerID = "InvoicingEndpoint"
	tapSub     = "tap"
)

// publishingTopology is NimBus's topology for the endpoint and a consumer
// of the given event types (NimBus's forwarder from the endpoint's topic),
// with a tap on the endpoint's topic that receives the published events
// and the responses, in the order the topic got them.
func publishingTopology(eventTypes ...string) func(testenv.Topology) testenv.Topology {
	return func(testenv.Topology) testenv.Topology {
		topo := testenv.NimBusTopology(endpointID, consumerID).WithForwarder(endpointID, consumerID, eventTypes...)
		tap := testenv.Subscription{Name: tapSub, RequiresSession: true, MaxDeliveryCount: 10,
			Rules: []testenv.Rule{{Name: "responses", Equals: map[string]string{"To": testenv.ResolverTopic}}}}
		for _, typ := range eventTypes {
			tap.Rules = append(tap.Rules, testenv.Rule{Name: typ, Equals: map[string]string{"EventTypeId": typ}})
		}
		for i := range topo.Topics {
			if topo.Topics[i].Name == endpointID {
				topo.Topics[i].Subscriptions = append(topo.Topics[i].Subscriptions, tap)
			}
		}
		return topo
	}
}

// publishedWant is what NimBus's PublishFromContext writes for an event of
// type typ published while handling in (sent with CorrelationId corr):
// the application properties with their AMQP types, written out here
// independently of the code under test.
func publishedWant(in event, typ string) map[string]any {
	return map[string]any{
		"To":                   typ,
		"MessageType":          "EventRequest",
		"EventId":              nil,
		"OriginatingMessageId": in.MessageID, // the inbound one is "self"
		"ParentMessageId":      in.MessageID,
		"RetryCount":           int32(0),
		"OriginatingFrom":      endpointID,
		"EventTypeId":          typ,
	}
}

// checkPublished asserts a published event as received over AMQP: every
// application property with its AMQP type (no From, a null EventId), the
// traceparent in the inbound's trace, MessageId, session, correlation and
// the body bytes.
func checkPublished(t *testing.T, where string, got *azservicebus.ReceivedMessage, want map[string]any, traceID, messageID, session, corr, body string) {
	t.Helper()
	props := got.ApplicationProperties
	tp, _ := props["traceparent"].(string)
	if parts := strings.Split(tp, "-"); !traceparentForm.MatchString(tp) || parts[1] != traceID {
		t.Errorf("%s: traceparent %q, want one in trace %s", where, tp, traceID)
	}
	rest := map[string]any{}
	for k, v := range props {
		if k != "traceparent" && k != "tracestate" {
			rest[k] = v
		}
	}
	if !reflect.DeepEqual(rest, want) {
		t.Errorf("%s: properties\n%#v\nwant\n%#v", where, rest, want)
	}
	if _, ok := props["EventId"]; !ok {
		t.Errorf("%s: no EventId property (NimBus writes it null)", where)
	}
	if got.MessageID != messageID || deref(got.SessionID) != session || deref(got.CorrelationID) != corr {
		t.Errorf("%s: MessageId %q SessionId %q CorrelationId %q, want %q %q %q", where, got.MessageID, deref(got.SessionID), deref(got.CorrelationID), messageID, session, corr)
	}
	if string(got.Body) != body {
		t.Errorf("%s: body\n%s\nwant\n%s", where, got.Body, body)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// eventBody is the body NimBus writes for an event of type typ with the
// JSON payload js, written out here independently of the code under test.
func eventBody(typ, js string) string {
	return `{"EventContent":{"EventTypeId":` + jsonString(typ) + `,"EventJson":` + jsonString(js) + `},"ErrorContent":null}`
}

// TestOrderPlacedPublishesOverAMQP runs an OrderPlaced through the real
// binary, the mini host and the AMQP stand-in: the endpoint's topic gets
// InvoiceRequested, then OrderAccepted, then the ResolutionResponse, each
// event exactly as NimBus's PublishFromContext writes it; NimBus's
// forwarder delivers both to the consuming endpoint with From, a fresh
// EventId and To stamped (a From on the published event would have stopped
// it).
func TestOrderPlacedPublishesOverAMQP(t *testing.T) {
	t.Parallel()
	types := []string{"InvoiceRequested", "OrderAccepted"}
	s := startStack(t, stackConfig{topology: publishingTopology(types...)})
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		session = "customer-wire"
	)
	in := event{MessageID: "OrderPlaced-wire-1", SessionID: session, EventID: guidFor("OrderPlaced-wire-1"), EventTypeID: orderPlaced,
		EventJSON: `{"OrderId":"O-77","CustomerId":"C-7","Amount":12.5}`}
	m := in.message()
	m.ApplicationProperties["traceparent"] = "00-" + traceID + "-00f067aa0ba902b7-01"
	s.sendRaw(in.MessageID, m)
	s.waitResponses(1, 60*time.Second)
	corr := guidFor("correlation/" + in.MessageID)

	bodies := []string{
		eventBody("InvoiceRequested", `{"OrderId":"O-77","CustomerId":"C-7","Amount":12.5}`),
		eventBody("OrderAccepted", `{"OrderId":"O-77"}`),
	}
	tapped := testenv.ReceiveSession(t, s.sb.Client(t), endpointID, tapSub, session, 3, 30*time.Second)
	for i, typ := range types {
		checkPublished(t, "published "+typ, tapped[i], publishedWant(in, typ), traceID, typ+"-O-77", session, corr, bodies[i])
	}
	if mt := tapped[2].ApplicationProperties["MessageType"]; mt != "ResolutionResponse" {
		t.Errorf("the third message on the endpoint's topic is %v, want the ResolutionResponse after the events", mt)
	}

	forwarded := testenv.ReceiveSession(t, s.sb.Client(t), consumerID, consumerID, session, 2, 30*time.Second)
	for i, typ := range types {
		want := publishedWant(in, typ)
		id, _ := forwarded[i].ApplicationProperties["EventId"].(string)
		if id == "" {
			t.Errorf("forwarded %s: the forwarder stamped no EventId: %#v", typ, forwarded[i].ApplicationProperties["EventId"])
		}
		want["EventId"], want["From"], want["To"] = id, endpointID, consumerID
		checkPublished(t, "forwarded "+typ, forwarded[i], want, traceID, typ+"-O-77", session, corr, bodies[i])
	}
	if t.Failed() {
		t.Log(fmt.Sprint(s.handler.Output(20)))
	}
}

// TestPaymentRecordedPublishesOverAMQP runs two payments of one customer
// through the real binary, the local Cosmos DB server and the AMQP
// stand-in: each PaymentRecorded, stored in its delivery's marker with the
// ledger's writes, reaches the endpoint's topic before its
// ResolutionResponse exactly as NimBus's PublishFromContext writes it, with
// the balance the payment left, and NimBus's forwarder delivers it to the
// consumer; the markers, read straight from Cosmos, keep the events' ids,
// are marked dispatched and expire with the inbox retention.
func TestPaymentRecordedPublishesOverAMQP(t *testing.T) {
	t.Parallel()
	container := ledgerContainerFor(t)
	s := startStack(t, stackConfig{topology: publishingTopology("PaymentRecorded"), settings: ledgerSettings(container)})
	const (
		traceID = "0af7651916cd43dd8448eb211c80319c"
		session = "customer-wire"
	)
	payments := []event{
		payment("PaymentReceived-wire-1", session, "P-1", "C-9", 1250, ""),
		payment("PaymentReceived-wire-2", session, "P-2", "C-9", 750, ""),
	}
	for _, p := range payments {
		m := p.message()
		m.ApplicationProperties["traceparent"] = "00-" + traceID + "-b7ad6b7169203331-01"
		s.sendRaw(p.MessageID, m)
	}
	s.waitResponses(2, 60*time.Second)

	tapped := testenv.ReceiveSession(t, s.sb.Client(t), endpointID, tapSub, session, 4, 30*time.Second)
	bodies := []string{
		eventBody("PaymentRecorded", `{"PaymentId":"P-1","CustomerId":"C-9","AmountCents":1250,"BalanceCents":1250}`),
		eventBody("PaymentRecorded", `{"PaymentId":"P-2","CustomerId":"C-9","AmountCents":750,"BalanceCents":2000}`),
	}
	for i, p := range payments {
		ev, resp := tapped[2*i], tapped[2*i+1]
		checkPublished(t, "published for "+p.MessageID, ev, publishedWant(p, "PaymentRecorded"), traceID,
			fmt.Sprintf("PaymentRecorded-P-%d", i+1), session, guidFor("correlation/"+p.MessageID), bodies[i])
		if resp.ApplicationProperties["MessageType"] != "ResolutionResponse" || deref(resp.CorrelationID) != p.MessageID {
			t.Errorf("after the event of %s the topic got %v (CorrelationId %s), want its ResolutionResponse",
				p.MessageID, resp.ApplicationProperties["MessageType"], deref(resp.CorrelationID))
		}
	}
	forwarded := testenv.ReceiveSession(t, s.sb.Client(t), consumerID, consumerID, session, 2, 30*time.Second)
	for i, p := range payments {
		want := publishedWant(p, "PaymentRecorded")
		id, _ := forwarded[i].ApplicationProperties["EventId"].(string)
		want["EventId"], want["From"], want["To"] = id, endpointID, consumerID
		checkPublished(t, "forwarded for "+p.MessageID, forwarded[i], want, traceID,
			fmt.Sprintf("PaymentRecorded-P-%d", i+1), session, guidFor("correlation/"+p.MessageID), bodies[i])
	}

	// The markers, straight from Cosmos: the events' ids kept, dispatched,
	// the payloads cleared, a ttl.
	s.settle(2, 0, 30*time.Second)
	c, err := s.cosmosClient(t).NewContainer(ledgerDatabase, container)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range payments {
		id := inboxID(endpointID, p.MessageID)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := c.ReadItem(ctx, azcosmos.NewPartitionKeyString("C-9"), id, nil)
		cancel()
		if err != nil {
			t.Fatalf("marker of %s: %v", p.MessageID, err)
		}
		var m struct {
			Outbox []map[string]any `json:"outbox"`
			At     *string          `json:"dispatchedAtUtc"`
			TTL    *int64           `json:"ttl"`
			Resp   json.RawMessage  `json:"response"`
		}
		if err := json.Unmarshal(resp.Value, &m); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("PaymentRecorded-P-%d", i+1)
		if len(m.Outbox) != 1 || m.Outbox[0]["messageId"] != want || len(m.Outbox[0]) != 1 || m.At == nil || m.TTL == nil || *m.TTL <= 0 || m.Resp != nil {
			t.Errorf("marker of %s: %s", p.MessageID, resp.Value)
		}
	}
}
