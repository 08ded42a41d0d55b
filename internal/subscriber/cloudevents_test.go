package subscriber

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// newCEFixture is newFixture with CloudEvents detection on (default
// options) and, when bySource, deduplication by (source, id).
func newCEFixture(t *testing.T, endpoint string, store *spyStore, bySource bool) *fixture {
	t.Helper()
	f := newFixture(t, endpoint, store)
	o := f.p.o
	o.CloudEvents = &message.CloudEventOptions{}
	o.DeduplicateCloudEventsBySource = bySource
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	return f
}

// binaryCE is a binary-mode CloudEvent as an external producer sends it: no
// NimBus properties, attributes under prefix, the event as the body. Like
// NimBus's InboxCloudEventsScopeTests it has no broker MessageId unless a
// mutator sets one.
func binaryCE(prefix, id, typ string, mutate ...func(props map[string]any, d *Delivery)) *Delivery {
	props := map[string]any{
		prefix + "specversion": "1.0", prefix + "id": id, prefix + "source": "/crm/leads",
		prefix + "type": typ,
	}
	d := &Delivery{
		Broker:     message.Broker{EnqueuedTime: t0, DeliveryCount: 1, ContentType: "application/json"},
		Properties: props,
		Body:       []byte(`{"OrderId":"O-7"}`),
	}
	for _, m := range mutate {
		m(props, d)
	}
	return d
}

// NimBus InboxCloudEventsScopeTests: the check is keyed by the configured
// endpoint, not the mapped type that stands in for To.
func TestCloudEventInboxKeyUsesTheConfiguredEndpointNotTheMappedType(t *testing.T) {
	f := newCEFixture(t, "Billing", nil, false)
	d := binaryCE(message.PrefixCanonical, "ext-1", "com.acme.OrderPlaced")
	in, err := message.ReadWith(d.Broker, d.Properties, d.Body, &message.CloudEventOptions{})
	if err != nil || in.To != "OrderPlaced" {
		t.Fatalf("To = %q (err %v), want the mapped type OrderPlaced", in.To, err)
	}
	r := f.process(d)
	if r.Outcome != OutcomeCompleted || r.CloudEvent != "binary" {
		t.Fatalf("report %+v", r)
	}
	want := []string{"check Billing/ext-1", "handler-start", "handler-end", "record Billing/ext-1", "publish ResolutionResponse"}
	if got := f.tr.get(); !reflect.DeepEqual(got, want) {
		t.Fatalf("trace %q, want %q", got, want)
	}
}

// NimBus InboxCloudEventsScopeTests: two endpoints sharing a store do not
// skip each other's first delivery of the same type and id.
func TestCloudEventSameTypeOnTwoEndpointsSharingAStoreDoNotCrossSkip(t *testing.T) {
	mem, _ := inbox.NewMemoryStore(inbox.MemoryOptions{})
	billing := newCEFixture(t, "Billing", &spyStore{inner: mem}, false)
	shipping := newCEFixture(t, "Shipping", &spyStore{inner: mem}, false)

	if r := billing.process(binaryCE("cloudEvents:", "ext-1", "com.acme.OrderPlaced")); r.Outcome != OutcomeCompleted {
		t.Fatalf("billing first: %+v", r)
	}
	if r := billing.process(binaryCE("cloudEvents:", "ext-1", "com.acme.OrderPlaced")); r.Outcome != OutcomeDuplicate {
		t.Fatalf("billing again: %+v", r)
	}
	if r := shipping.process(binaryCE("cloudEvents:", "ext-1", "com.acme.OrderPlaced")); r.Outcome != OutcomeCompleted || shipping.handled != 1 {
		t.Fatalf("shipping first: %+v (handled %d)", r, shipping.handled)
	}
}

// NimBus InboxCloudEventsScopeTests: an id reused across event types on one
// endpoint is a duplicate (the key does not depend on the type).
func TestCloudEventReusedIDAcrossEventTypesOnOneEndpointIsDuplicate(t *testing.T) {
	f := newCEFixture(t, "Billing", nil, false)
	f.reg.Handle("InvoicePaid", func(ctx context.Context, ev *Event) (Result, error) { return Completed(), nil })
	if r := f.process(binaryCE("cloudEvents:", "ext-1", "com.acme.OrderPlaced")); r.Outcome != OutcomeCompleted {
		t.Fatalf("first: %+v", r)
	}
	if r := f.process(binaryCE("cloudEvents:", "ext-1", "com.acme.InvoicePaid")); r.Outcome != OutcomeDuplicate || r.HandlerRan {
		t.Fatalf("second type, same id: %+v", r)
	}
}

// Beyond NimBus: keyed on (source, id), a producer's re-send with a fresh
// broker MessageId is a duplicate; another source with the same id is not.
func TestCloudEventDeduplicationBySourceAndID(t *testing.T) {
	withBroker := func(mid, source string) func(map[string]any, *Delivery) {
		return func(p map[string]any, d *Delivery) {
			d.Broker.MessageID = str(mid)
			p["ce-source"] = source
		}
	}
	f := newCEFixture(t, "Billing", nil, true)
	if r := f.process(binaryCE("ce-", "lead-42", "com.acme.OrderPlaced", withBroker("broker-1", "/crm"))); r.Outcome != OutcomeCompleted {
		t.Fatalf("first: %+v", r)
	}
	key, _ := inbox.CloudEventMessageID(str("/crm"), str("lead-42"))
	if got := f.tr.get()[0]; got != "check Billing/"+key {
		t.Fatalf("check %q, want the (source, id) key", got)
	}
	r := f.process(binaryCE("ce-", "lead-42", "com.acme.OrderPlaced", withBroker("broker-2", "/crm")))
	if r.Outcome != OutcomeDuplicate || f.handled != 1 {
		t.Fatalf("re-send with a new broker MessageId: %+v (handled %d)", r, f.handled)
	}
	// The SkipResponse still correlates with the delivery's broker MessageId.
	sent := f.pub.Sent()
	if m := sent[len(sent)-1]; m.Type() != "SkipResponse" || *m.CorrelationID != "broker-2" || m.ApplicationProperties["CloudEventId"] != "lead-42" {
		t.Fatalf("skip response %+v", m)
	}
	if r := f.process(binaryCE("ce-", "lead-42", "com.acme.OrderPlaced", withBroker("broker-3", "/erp"))); r.Outcome != OutcomeCompleted || f.handled != 2 {
		t.Fatalf("another source, same id: %+v (handled %d)", r, f.handled)
	}
	// Native messages keep the MessageId key.
	if r := f.process(delivery(str("broker-1"))); r.Outcome != OutcomeCompleted {
		t.Fatalf("native message with a broker id used by a CloudEvent: %+v", r)
	}

	// Without the setting, the re-send is not recognised (NimBus's gap).
	g := newCEFixture(t, "Billing", nil, false)
	g.process(binaryCE("ce-", "lead-42", "com.acme.OrderPlaced", withBroker("broker-1", "/crm")))
	if r := g.process(binaryCE("ce-", "lead-42", "com.acme.OrderPlaced", withBroker("broker-2", "/crm"))); r.Outcome != OutcomeCompleted || g.handled != 2 {
		t.Fatalf("MessageId keying: %+v", r)
	}
}

func TestCloudEventIdentityTooLongBypassesTheInbox(t *testing.T) {
	f := newCEFixture(t, "Billing", nil, true)
	long := strings.Repeat("s", 496)
	r := f.process(binaryCE("ce-", "id-1", "com.acme.OrderPlaced", func(p map[string]any, d *Delivery) {
		p["ce-source"] = long
		d.Broker.MessageID = str("broker-1")
	}))
	if r.Outcome != OutcomeCompleted || r.Inbox != InboxBypassed || r.BypassReason != inbox.BypassTooLong || f.store.checks != 0 || f.store.records != 0 {
		t.Fatalf("report %+v, store %d/%d", r, f.store.checks, f.store.records)
	}
	if got := f.metrics.Get(telemetry.InboxBypassed, telemetry.TagBypassReason+"="+inbox.BypassTooLong); got != 1 {
		t.Fatalf("bypass counter %v", got)
	}
}

func TestCloudEventValidationFailsAtOnceWithNimBusTexts(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(map[string]any, *Delivery)
		want   string
	}{
		{"missing id", func(p map[string]any, _ *Delivery) { delete(p, "cloudEvents:id") }, "CloudEvents message missing required attribute 'id'."},
		{"empty source", func(p map[string]any, _ *Delivery) { p["cloudEvents:source"] = "" }, "CloudEvents message missing required attribute 'source'."},
		{"missing type", func(p map[string]any, _ *Delivery) { delete(p, "cloudEvents:type") }, "CloudEvents message missing required attribute 'type'."},
		{"specversion 0.3", func(p map[string]any, _ *Delivery) { p["cloudEvents:specversion"] = "0.3" }, "CloudEvents message has unsupported specversion '0.3' (expected '1.0')."},
		{"no specversion", func(p map[string]any, _ *Delivery) { delete(p, "cloudEvents:specversion") }, "CloudEvents message has unsupported specversion '<null>' (expected '1.0')."},
		{"unknown type", func(p map[string]any, _ *Delivery) { p["cloudEvents:type"] = "com.acme.Unknown" }, "CloudEvents type 'com.acme.Unknown' maps to no registered event contract."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newCEFixture(t, "Billing", nil, false)
			r := f.process(binaryCE("cloudEvents:", "ext-1", "com.acme.OrderPlaced", c.mutate))
			if r.Outcome != OutcomeInvalidCloudEvent || r.HandlerRan || r.Published || !IsPermanent(r.Err) {
				t.Fatalf("report %+v", r)
			}
			var ie *message.InvalidCloudEventError
			if !errors.As(r.Err, &ie) || ie.Text != c.want {
				t.Fatalf("error %q, want %q", r.Err, c.want)
			}
			if s := r.Outcome.Spec(); s.Status != 422 || s.Pause {
				t.Fatalf("spec %+v: want 422 at once", s)
			}
			if len(f.pub.Sent()) != 0 || f.store.records != 0 {
				t.Fatal("an invalid CloudEvent must send nothing and record nothing")
			}
		})
	}
}

// A structured CloudEvent's attributes come from the body: the texts do not
// quote them, and its type and id are not put on the report.
func TestStructuredCloudEventValuesAreNotReported(t *testing.T) {
	f := newCEFixture(t, "Billing", nil, false)
	d := &Delivery{
		Broker:     message.Broker{MessageID: str("broker-9"), ContentType: "application/cloudevents+json; charset=utf-8", DeliveryCount: 1},
		Properties: map[string]any{},
		Body:       []byte(`{"specversion":"1.0","id":"secret-id","source":"/x","type":"com.acme.SecretType","data":{"a":1}}`),
	}
	r := f.process(d)
	if r.Outcome != OutcomeInvalidCloudEvent || r.CloudEvent != "structured" || r.EventTypeID != "" || r.EventID != "" || !r.EventTypeFromBody {
		t.Fatalf("report %+v", r)
	}
	if strings.Contains(r.Err.Error(), "Secret") || strings.Contains(r.Err.Error(), "secret") {
		t.Fatalf("error quotes a body value: %q", r.Err)
	}
}

func TestCloudEventResponsesCarryTheCloudEventIdentity(t *testing.T) {
	f := newCEFixture(t, "Billing", nil, false)
	var got *Event
	f.handler = func(ctx context.Context, ev *Event) (Result, error) { got = ev; return Completed(), nil }
	d := binaryCE("ce-", "lead-42", "com.acme.crm.OrderPlaced", func(p map[string]any, d *Delivery) {
		p["ce-subject"] = "lead/42"
		p["ce-sessionid"] = "customer-7"
		p["ce-correlationid"] = "corr-5"
		p["ce-tenant"] = "t1"
		d.Broker.EnqueuedTime = t0.Add(-2 * 1e9)
	})
	if r := f.process(d); r.Outcome != OutcomeCompleted {
		t.Fatalf("report %+v", r)
	}
	m := f.pub.Sent()[0]
	want := map[string]any{
		"To": "Resolver", "MessageType": "ResolutionResponse", "EventId": "lead-42",
		"OriginatingMessageId": "lead-42", "ParentMessageId": "lead-42", "RetryCount": int32(0),
		"OriginatingFrom": "/crm/leads", "EventTypeId": "OrderPlaced",
		"QueueTimeMs": int64(2000), "ProcessingTimeMs": int64(250),
		"CloudEventId": "lead-42", "CloudEventSource": "/crm/leads", "CloudEventType": "com.acme.crm.OrderPlaced", "CloudEventSubject": "lead/42",
	}
	if !reflect.DeepEqual(m.ApplicationProperties, want) {
		t.Fatalf("properties\n got %#v\nwant %#v", m.ApplicationProperties, want)
	}
	if m.SessionID != "customer-7" || *m.CorrelationID != "lead-42" {
		t.Fatalf("session %q correlation %q", m.SessionID, *m.CorrelationID)
	}
	if string(m.Body) != `{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-7\"}"},"ErrorContent":null}` {
		t.Fatalf("body %s", m.Body)
	}
	if got.JSON != `{"OrderId":"O-7"}` || got.CorrelationID != "corr-5" || got.SessionID != "customer-7" || got.From != "/crm/leads" ||
		got.CloudEvent == nil || got.CloudEvent.Extensions["tenant"] != "t1" || got.CloudEvent.Subject != "lead/42" {
		t.Fatalf("event %+v / %+v", got, got.CloudEvent)
	}
}

// Native messages are read exactly as before when CloudEvents are on, and a
// CloudEvents-looking message is native when they are off.
func TestCloudEventsOffReadsMarkersAsNative(t *testing.T) {
	f := newFixture(t, "Billing", nil)
	r := f.process(binaryCE("cloudEvents:", "ext-1", "com.acme.OrderPlaced"))
	if r.Outcome != OutcomeInvalidMessage || r.CloudEvent != "" {
		t.Fatalf("report %+v", r)
	}
	g := newCEFixture(t, "billing", nil, true)
	if r := g.process(delivery(str("message-1"))); r.Outcome != OutcomeCompleted || r.CloudEvent != "" {
		t.Fatalf("native with CloudEvents on: %+v", r)
	}
	if _, ok := g.pub.Sent()[0].ApplicationProperties["CloudEventId"]; ok {
		t.Fatal("a native response carries CloudEventId")
	}
}
