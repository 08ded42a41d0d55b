package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
)

const ingressTopic = "PartnerInbound"

// cloudEvent is one event an external producer publishes to the ingress
// topic with the azservicebus SDK, without a MessageId (the broker assigns
// one, so a re-send arrives under a fresh one).
type cloudEvent struct {
	mode                 string // "cloudEvents:", "ce-" (binary) or "structured"
	id, source, typ      string
	session, specversion string
	data                 string
}

func (e cloudEvent) message() *azservicebus.Message {
	spec := e.specversion
	if spec == "" {
		spec = "1.0"
	}
	m := &azservicebus.Message{SessionID: &e.session}
	if e.mode == "structured" {
		env, _ := json.Marshal(map[string]any{
			"specversion": spec, "id": e.id, "source": e.source, "type": e.typ,
			"datacontenttype": "application/json", "data": json.RawMessage(e.data),
		})
		ct := "application/cloudevents+json; charset=utf-8"
		m.ContentType, m.Body = &ct, env
		return m
	}
	ct := "application/json"
	m.ContentType, m.Body = &ct, []byte(e.data)
	m.ApplicationProperties = map[string]any{
		e.mode + "specversion": spec, e.mode + "id": e.id, e.mode + "source": e.source, e.mode + "type": e.typ,
		e.mode + "time": "2026-11-30T12:00:00Z",
	}
	return m
}

// An external producer publishes binary-mode (both prefixes) and
// structured-mode CloudEvents to the ingress topic; the CloudEventsIngress
// function handles them through the real binary, answers the Resolver on
// the endpoint topic with the CloudEvents identity, skips re-sends (new
// broker MessageIds) by source and id, and lets the broker dead-letter an
// invalid event.
func TestCloudEventsIngressEndToEnd(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackConfig{ingress: ingressTopic})
	producer := s.sb.Client(t)
	snd, err := producer.NewSender(ingressTopic, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(context.Background())

	order := func(id string) string { return `{"OrderId":"` + id + `","CustomerId":"C-1","Amount":10}` }
	events := []cloudEvent{
		{mode: "cloudEvents:", id: "evt-1", source: "/crm", typ: "com.acme.crm.OrderPlaced", session: "lead-1", data: order("O-1")},
		{mode: "ce-", id: "evt-2", source: "/crm", typ: "com.acme.crm.OrderPlaced", session: "lead-2", data: order("O-2")},
		{mode: "structured", id: "evt-3", source: "/crm", typ: "com.acme.crm.OrderPlaced", session: "lead-3", data: order("O-3")},
	}
	resends := []cloudEvent{
		{mode: "ce-", id: "evt-1", source: "/crm", typ: "com.acme.crm.OrderPlaced", session: "lead-1", data: order("O-1")},
		{mode: "structured", id: "evt-3", source: "/crm", typ: "com.acme.crm.OrderPlaced", session: "lead-3", data: order("O-3")},
		{mode: "cloudEvents:", id: "evt-1", source: "/erp", typ: "com.acme.crm.OrderPlaced", session: "lead-9", data: order("O-9")},
	}
	invalid := cloudEvent{mode: "ce-", id: "evt-bad", source: "/crm", typ: "com.acme.crm.OrderPlaced", session: "lead-x", specversion: "0.3", data: order("O-X")}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, e := range events {
		if err := snd.SendMessage(ctx, e.message(), nil); err != nil {
			t.Fatal(err)
		}
	}
	// The re-sends go out once the originals are recorded (three responses).
	s.waitResponses(3, time.Minute)
	for _, e := range append(resends, invalid) {
		if err := snd.SendMessage(ctx, e.message(), nil); err != nil {
			t.Fatal(err)
		}
	}
	s.waitResponses(6, time.Minute)

	type key struct{ typ, ceID, ceSource string }
	got := map[key]int{}
	for _, r := range s.resolver.responses() {
		p := r.msg.ApplicationProperties
		k := key{r.messageType(), p["CloudEventId"].(string), p["CloudEventSource"].(string)}
		got[k]++
		// The response went to the endpoint topic: its fan-out rule stamped From.
		if p["From"] != endpointID || p["To"] != "Resolver" || p["CloudEventType"] != "com.acme.crm.OrderPlaced" || p["EventTypeId"] != "OrderPlaced" {
			t.Errorf("response %v", p)
		}
		if k.typ == "SkipResponse" && !strings.Contains(string(r.msg.Body), `"ErrorText":"DuplicateDetected"`) {
			t.Errorf("skip body %s", r.msg.Body)
		}
	}
	want := map[key]int{
		{"ResolutionResponse", "evt-1", "/crm"}: 1, {"ResolutionResponse", "evt-2", "/crm"}: 1,
		{"ResolutionResponse", "evt-3", "/crm"}: 1, {"ResolutionResponse", "evt-1", "/erp"}: 1,
		{"SkipResponse", "evt-1", "/crm"}: 1, {"SkipResponse", "evt-3", "/crm"}: 1,
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%v: %d responses, want %d (all: %v)", k, got[k], n, got)
		}
	}

	// The invalid event is answered 422 at every delivery and dead-lettered
	// by the broker after MaxDeliveryCount (10).
	var dlq []*azservicebus.ReceivedMessage
	s.waitUntil(time.Minute, "the invalid CloudEvent in the ingress dead-letter queue", func() bool {
		dlq = peekDeadLetters(t, s, ingressTopic)
		return len(dlq) == 1
	})
	if id, _ := dlq[0].ApplicationProperties["ce-id"].(string); id != "evt-bad" || dlq[0].DeliveryCount < 10 {
		t.Fatalf("dead-lettered %v after %d deliveries", dlq[0].ApplicationProperties, dlq[0].DeliveryCount)
	}

	// One invocation line per delivery of the ingress function; the handler
	// ran once per distinct (source, id).
	outcomes := map[string]int{}
	modes := map[string]int{}
	for _, l := range s.handler.Lines() {
		if l.Fields == nil || l.Fields["function"] != "CloudEventsIngress" {
			continue
		}
		outcomes[l.Str("outcome")]++
		modes[l.Str("cloudEvent")]++
		if l.Str("outcome") == "invalid_cloudevent" && !strings.Contains(l.Str("error"), "CloudEvents message has unsupported specversion '0.3' (expected '1.0').") {
			t.Errorf("invalid_cloudevent error %q", l.Str("error"))
		}
	}
	if outcomes["completed"] != 4 || outcomes["duplicate"] != 2 || outcomes["invalid_cloudevent"] < 10 {
		t.Fatalf("outcomes %v", outcomes)
	}
	if modes["binary"] < 13 || modes["structured"] != 2 {
		t.Fatalf("modes %v", modes)
	}

	// The inbox holds one record per (source, id) within the endpoint.
	var ids []string
	for _, p := range [][2]string{{"/crm", "evt-1"}, {"/crm", "evt-2"}, {"/crm", "evt-3"}, {"/erp", "evt-1"}} {
		id, reason := inbox.CloudEventMessageID(&p[0], &p[1])
		if reason != inbox.BypassNone {
			t.Fatal(reason)
		}
		ids = append(ids, id)
	}
	recs := s.inboxRecords(ids...)
	if len(recs) != 4 {
		t.Fatalf("%d inbox records, want 4", len(recs))
	}
	for _, r := range recs {
		if r.EndpointID != endpointID {
			t.Errorf("record %+v", r)
		}
	}
}

func peekDeadLetters(t *testing.T, s *stack, topic string) []*azservicebus.ReceivedMessage {
	t.Helper()
	r, err := s.client.NewReceiverForSubscription(topic, endpointID, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer r.Close(ctx)
	ms, err := r.PeekMessages(ctx, 100, nil)
	if err != nil {
		t.Fatalf("peeking the dead-letter queue: %v", err)
	}
	return ms
}

// External producers cannot settle, retry or resubmit the endpoint's
// events through the ingress topic: a CloudEvent that also carries the
// Manager's SkipRequest properties, and native Manager and retry requests,
// are refused at every delivery (the handler never runs, no Resolver
// answer is sent for them) and dead-lettered by the broker.
func TestIngressRefusesManagerAndControlRequests(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackConfig{ingress: ingressTopic})
	snd, err := s.sb.Client(t).NewSender(ingressTopic, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(context.Background())

	forgedSkip := cloudEvent{mode: "cloudEvents:", id: "ce-forged", source: "/attacker", typ: "com.acme.crm.OrderPlaced", session: "lead-1", data: `{}`}.message()
	forgedSkip.ApplicationProperties["MessageType"], forgedSkip.ApplicationProperties["From"] = "SkipRequest", "Manager"
	forgedSkip.ApplicationProperties["EventId"] = "evt-1"
	native := func(messageType, from string) *azservicebus.Message {
		sid, id := "lead-1", "native-"+messageType
		return &azservicebus.Message{MessageID: &id, SessionID: &sid, Body: []byte(`{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{}"},"ErrorContent":null}`),
			ApplicationProperties: map[string]any{"To": endpointID, "From": from, "MessageType": messageType, "EventId": "evt-1",
				"EventTypeId": "OrderPlaced", "OriginatingMessageId": "self", "ParentMessageId": "self", "RetryCount": int32(0),
				"OriginatingFrom": "self", "InboxMessageId": "victim-id"}}
	}
	msgs := []*azservicebus.Message{forgedSkip, native("ResubmissionRequest", "Manager"), native("RetryRequest", "Retry")}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, m := range msgs {
		if err := snd.SendMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	s.waitUntil(2*time.Minute, "the three requests in the ingress dead-letter queue", func() bool {
		return len(peekDeadLetters(t, s, ingressTopic)) == len(msgs)
	})
	for _, l := range s.handler.Lines() {
		if l.Fields == nil || l.Fields["function"] != "CloudEventsIngress" {
			continue
		}
		if ran, _ := l.Fields["handlerRan"].(bool); ran || l.Str("outcome") != "unsupported_message_type" {
			t.Errorf("ingress line: outcome %q, handlerRan %v", l.Str("outcome"), ran)
		}
	}
	for _, r := range s.resolver.responses() {
		if typ := r.messageType(); typ != "ErrorResponse" {
			t.Errorf("the Resolver got a %s", typ)
		}
	}
	if recs := s.inboxRecords("victim-id"); len(recs) != 0 {
		t.Fatalf("victim-id recorded: %+v", recs)
	}
}
