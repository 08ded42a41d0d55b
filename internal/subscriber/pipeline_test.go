package subscriber

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// trace records the order of interesting events across fakes.
type trace struct {
	mu     sync.Mutex
	events []string
}

func (t *trace) add(format string, args ...any) {
	t.mu.Lock()
	t.events = append(t.events, fmt.Sprintf(format, args...))
	t.mu.Unlock()
}

func (t *trace) get() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.events...)
}

// spyStore wraps a MemoryStore, tracing calls and injecting failures.
type spyStore struct {
	inner     *inbox.MemoryStore
	tr        *trace
	failCheck error
	failRec   error
	checks    int
	records   int
	mu        sync.Mutex
}

func (s *spyStore) HasProcessed(ctx context.Context, k inbox.Key) (bool, error) {
	s.mu.Lock()
	s.checks++
	s.mu.Unlock()
	s.tr.add("check %s/%s", k.EndpointID, k.MessageID)
	if s.failCheck != nil {
		return false, s.failCheck
	}
	return s.inner.HasProcessed(ctx, k)
}

func (s *spyStore) RecordProcessed(ctx context.Context, k inbox.Key) error {
	s.mu.Lock()
	s.records++
	s.mu.Unlock()
	s.tr.add("record %s/%s", k.EndpointID, k.MessageID)
	if s.failRec != nil {
		return s.failRec
	}
	return s.inner.RecordProcessed(ctx, k)
}

func (s *spyStore) PurgeExpired(ctx context.Context, e string, t time.Time) (int, error) {
	return s.inner.PurgeExpired(ctx, e, t)
}

type fixture struct {
	t       *testing.T
	tr      *trace
	store   *spyStore
	pub     *resolver.Memory
	reg     *Registry
	metrics *telemetry.Metrics
	now     time.Time
	p       *Pipeline
	handled int
	handler HandlerFunc
}

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func newFixture(t *testing.T, endpoint string, store *spyStore) *fixture {
	t.Helper()
	f := &fixture{t: t, tr: &trace{}, pub: &resolver.Memory{}, reg: NewRegistry(), metrics: &telemetry.Metrics{}, now: t0}
	if store == nil {
		mem, _ := inbox.NewMemoryStore(inbox.MemoryOptions{})
		store = &spyStore{inner: mem}
	}
	store.tr = f.tr
	f.store = store
	f.pub.Fail = func(m *message.Outgoing) error { f.tr.add("publish %s", m.Type()); return nil }
	f.handler = func(ctx context.Context, ev *Event) (Result, error) { return Completed(), nil }
	f.reg.Handle("OrderPlaced", func(ctx context.Context, ev *Event) (Result, error) {
		f.handled++
		f.tr.add("handler-start")
		f.now = f.now.Add(250 * time.Millisecond)
		defer f.tr.add("handler-end")
		return f.handler(ctx, ev)
	})
	var err error
	f.p, err = New(Options{
		EndpointID:    endpoint,
		Inbox:         store,
		Publisher:     f.pub,
		Handlers:      f.reg,
		Metrics:       f.metrics,
		Now:           func() time.Time { return f.now },
		Version:       "test",
		RecordBackoff: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func str(s string) *string { return &s }

// delivery builds a NimBus EventRequest as the transport would deliver it.
func delivery(messageID *string, mutate ...func(props map[string]any, d *Delivery)) *Delivery {
	props := map[string]any{
		"To": "billing", "From": "shop", "MessageType": "EventRequest", "EventId": "event-1",
		"EventTypeId": "OrderPlaced", "OriginatingMessageId": "self", "ParentMessageId": "self",
		"RetryCount": "0", "OriginatingFrom": "shop",
	}
	d := &Delivery{
		Broker: message.Broker{
			MessageID: messageID, SessionID: str("customer-1"), CorrelationID: str("corr-1"),
			EnqueuedTime: t0.Add(-1500 * time.Millisecond), DeliveryCount: 1,
		},
		Properties: props,
		Body:       []byte(`{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1\"}"},"ErrorContent":null}`),
	}
	for _, m := range mutate {
		m(props, d)
	}
	return d
}

func (f *fixture) process(d *Delivery) Report {
	f.t.Helper()
	return f.p.Process(context.Background(), d)
}

func TestFirstDeliveryChecksThenHandlesThenRecordsThenResponds(t *testing.T) {
	f := newFixture(t, "billing", nil)
	r := f.process(delivery(str("message-1")))
	if r.Outcome != OutcomeCompleted || r.Inbox != InboxNew || !r.Outcome.Completes() || !r.HandlerRan {
		t.Fatalf("report = %+v", r)
	}
	want := []string{"check billing/message-1", "handler-start", "handler-end", "record billing/message-1", "publish ResolutionResponse"}
	if got := f.tr.get(); !reflect.DeepEqual(got, want) {
		t.Fatalf("order = %q, want %q", got, want)
	}
	if f.store.checks != 1 || f.store.records != 1 {
		t.Fatalf("store calls: %d checks, %d records", f.store.checks, f.store.records)
	}
}

func TestResolutionResponseWireFormat(t *testing.T) {
	f := newFixture(t, "billing", nil)
	f.process(delivery(str("message-1"), func(p map[string]any, d *Delivery) {
		p["RetryCount"] = "2"
		p["OriginatingMessageId"] = "origin-9"
	}))
	sent := f.pub.Sent()
	if len(sent) != 1 {
		t.Fatalf("sent %d responses", len(sent))
	}
	m := sent[0]
	want := map[string]any{
		"To": "Resolver", "MessageType": "ResolutionResponse", "EventId": "event-1",
		"OriginatingMessageId": "origin-9", "ParentMessageId": "message-1", "RetryCount": int32(2),
		"OriginatingFrom": "shop", "EventTypeId": "OrderPlaced",
		"QueueTimeMs": int64(1500), "ProcessingTimeMs": int64(250),
	}
	if !reflect.DeepEqual(m.ApplicationProperties, want) {
		t.Fatalf("properties\n got %#v\nwant %#v", m.ApplicationProperties, want)
	}
	if _, hasFrom := m.ApplicationProperties["From"]; hasFrom {
		t.Fatal("a response must not carry From (the topology stamps it)")
	}
	if m.SessionID != "customer-1" || m.CorrelationID == nil || *m.CorrelationID != "message-1" {
		t.Fatalf("SessionID %q CorrelationID %v", m.SessionID, m.CorrelationID)
	}
	wantBody := `{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1\"}"},"ErrorContent":null}`
	if string(m.Body) != wantBody {
		t.Fatalf("body\n got %s\nwant %s", m.Body, wantBody)
	}
}

func TestOriginatingMessageIDSelfBecomesInboundMessageID(t *testing.T) {
	f := newFixture(t, "billing", nil)
	f.process(delivery(str("message-1"), func(p map[string]any, d *Delivery) { p["OriginatingMessageId"] = "SELF" }))
	if got := f.pub.Sent()[0].ApplicationProperties["OriginatingMessageId"]; got != "message-1" {
		t.Fatalf("OriginatingMessageId = %v", got)
	}
}

func TestDuplicateSkipsHandlerSendsSkipResponseAndCounts(t *testing.T) {
	f := newFixture(t, "billing", nil)
	f.process(delivery(str("message-1")))
	f.tr = &trace{}
	f.store.tr = f.tr
	r := f.process(delivery(str("message-1"), func(p map[string]any, d *Delivery) { d.Broker.DeliveryCount = 2 }))
	if r.Outcome != OutcomeDuplicate || r.Inbox != InboxDuplicate || !r.Outcome.Completes() || r.HandlerRan {
		t.Fatalf("report = %+v", r)
	}
	if f.handled != 1 {
		t.Fatalf("handler ran %d times", f.handled)
	}
	if got, want := f.tr.get(), []string{"check billing/message-1", "publish SkipResponse"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("duplicate order = %q, want %q", got, want)
	}
	sent := f.pub.Sent()
	skip := sent[len(sent)-1]
	wantBody := `{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1\"}"},"ErrorContent":{"ErrorText":"DuplicateDetected","ErrorType":null,"ExceptionStackTrace":null,"ExceptionSource":null}}`
	if string(skip.Body) != wantBody || skip.ApplicationProperties["MessageType"] != "SkipResponse" || skip.ApplicationProperties["To"] != "Resolver" {
		t.Fatalf("skip response = %s %v", skip.Body, skip.ApplicationProperties)
	}
	if f.metrics.Get(telemetry.DuplicateDetected, "") != 1 {
		t.Fatal("duplicate counter not incremented")
	}
}

func TestFanOutEndpointsSharingOneStoreEachRunTheirHandler(t *testing.T) {
	mem, _ := inbox.NewMemoryStore(inbox.MemoryOptions{})
	billing := newFixture(t, "billing", &spyStore{inner: mem})
	shipping := newFixture(t, "shipping", &spyStore{inner: mem})
	// The same broker MessageId reaches both endpoints; To differs per copy.
	if r := billing.process(delivery(str("message-1"))); r.Outcome != OutcomeCompleted {
		t.Fatal(r)
	}
	if r := shipping.process(delivery(str("message-1"), func(p map[string]any, d *Delivery) { p["To"] = "shipping" })); r.Outcome != OutcomeCompleted {
		t.Fatalf("shipping first delivery: %+v", r)
	}
	if r := shipping.process(delivery(str("message-1"))); r.Outcome != OutcomeDuplicate {
		t.Fatalf("shipping redelivery: %+v", r)
	}
	if billing.handled != 1 || shipping.handled != 1 {
		t.Fatalf("handled billing=%d shipping=%d", billing.handled, shipping.handled)
	}
}

func TestInboxKeyUsesConfiguredEndpointNotTo(t *testing.T) {
	f := newFixture(t, "billing", nil)
	f.process(delivery(str("m"), func(p map[string]any, d *Delivery) { p["To"] = "OrderPlaced" }))
	if got := f.tr.get()[0]; got != "check billing/m" {
		t.Fatalf("first store call = %q", got)
	}
	// A reused id under another To on the same endpoint is still a duplicate.
	if r := f.process(delivery(str("m"), func(p map[string]any, d *Delivery) { p["To"] = "Other" })); r.Outcome != OutcomeDuplicate {
		t.Fatalf("outcome = %s", r.Outcome)
	}
}

func TestPendingHandoffIsNotRecordedAndRedeliveryRerunsHandler(t *testing.T) {
	f := newFixture(t, "billing", nil)
	f.handler = func(ctx context.Context, ev *Event) (Result, error) {
		return PendingHandoff(Handoff{Reason: "ManualApproval", ExternalJobID: "job-7", ExpectedIn: time.Hour}), nil
	}
	for i := range 2 {
		r := f.process(delivery(str("message-1")))
		if r.Outcome != OutcomePendingHandoff || !r.Outcome.Completes() || f.store.records != 0 {
			t.Fatalf("delivery %d: %+v", i, r)
		}
	}
	if f.handled != 2 || f.store.records != 0 {
		t.Fatalf("handled %d, records %d", f.handled, f.store.records)
	}
	p := f.pub.Sent()[0].ApplicationProperties
	if p["MessageType"] != "PendingHandoffResponse" || p["HandoffReason"] != "ManualApproval" || p["ExternalJobId"] != "job-7" {
		t.Fatalf("handoff properties = %v", p)
	}
	if want := "2026-11-30T13:00:00.2500000Z"; p["ExpectedBy"] != want {
		t.Fatalf("ExpectedBy = %v, want %s", p["ExpectedBy"], want)
	}
}

func TestHandlerFailureIsNotRecordedAndFails(t *testing.T) {
	for name, herr := range map[string]error{
		"transient": Transient(errors.New("db busy")),
		"permanent": Permanent(errors.New("bad data")),
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, "billing", nil)
			f.handler = func(ctx context.Context, ev *Event) (Result, error) { return Result{}, herr }
			r := f.process(delivery(str("message-1")))
			want := OutcomeHandlerFailed
			if name == "permanent" {
				// Failed at once, without the pause: the broker dead-letters it.
				want = OutcomePermanentFailure
			}
			if r.Outcome != want || r.Outcome.Completes() || !errors.Is(r.Err, herr) {
				t.Fatalf("report = %+v", r)
			}
			if f.store.checks != 1 || f.store.records != 0 || len(f.pub.Sent()) != 0 {
				t.Fatalf("checks %d records %d responses %d", f.store.checks, f.store.records, len(f.pub.Sent()))
			}
			// The redelivery runs the handler again and, on success, records.
			f.handler = func(ctx context.Context, ev *Event) (Result, error) { return Completed(), nil }
			if r := f.process(delivery(str("message-1"))); r.Outcome != OutcomeCompleted {
				t.Fatalf("redelivery: %+v", r)
			}
			if r := f.process(delivery(str("message-1"))); r.Outcome != OutcomeDuplicate {
				t.Fatalf("third delivery: %+v", r)
			}
			if f.handled != 2 {
				t.Fatalf("handled %d, want 2", f.handled)
			}
		})
	}
}

// A plain error and a panic are failed events: ErrorResponse with the
// error's text and type, nothing recorded, the message completed.
func TestPlainErrorOrPanicIsAFailedEvent(t *testing.T) {
	for name, c := range map[string]struct {
		h              HandlerFunc
		text, typeName string
	}{
		"plain": {func(context.Context, *Event) (Result, error) { return Result{}, errors.New("plain") }, "plain", "Error"},
		"panic": {func(context.Context, *Event) (Result, error) { panic("nil map") }, "handler panicked: nil map", "Panic"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, "billing", nil)
			f.handler = c.h
			r := f.process(delivery(str("message-1")))
			if r.Outcome != OutcomeEventFailed || !r.Outcome.Completes() || f.store.records != 0 || !r.Published {
				t.Fatalf("report = %+v", r)
			}
			sent := f.pub.Sent()
			if len(sent) != 1 || sent[0].Type() != "ErrorResponse" {
				t.Fatalf("sent %d messages", len(sent))
			}
			body, err := message.ParseContent(sent[0].Body)
			if err != nil || body.ErrorContent == nil || deref(body.ErrorContent.ErrorText) != c.text || deref(body.ErrorContent.ErrorType) != c.typeName {
				t.Fatalf("ErrorResponse body = %s", sent[0].Body)
			}
			if name == "panic" && len(r.Stack) == 0 {
				t.Fatal("no stack kept for the panic")
			}
		})
	}
}

func TestStoreCheckFailureIsSanitizedTransientFailure(t *testing.T) {
	secret := errors.New("dial cosmos: AccountKey=c2VjcmV0 password=hunter2 refused")
	f := newFixture(t, "billing", &spyStore{failCheck: secret})
	r := f.process(delivery(str("message-1")))
	if r.Outcome != OutcomeTransientFailure || r.Outcome.Completes() || r.StoreOp != "check" {
		t.Fatalf("report = %+v", r)
	}
	if f.handled != 0 || len(f.pub.Sent()) != 0 {
		t.Fatal("handler ran or a response was sent after a failed check")
	}
	if msg := r.Err.Error(); strings.Contains(msg, "hunter2") || strings.Contains(msg, "AccountKey") {
		t.Fatalf("error leaks provider details: %s", msg)
	}
	if !errors.Is(r.Err, secret) {
		t.Fatal("cause not kept for errors.Is")
	}
	if f.metrics.Get(telemetry.InboxOperationFailed, "nimbus.store.operation=check") != 1 {
		t.Fatal("check failure not counted")
	}
}

func TestStoreRecordFailureAfterHandlerIsTransient(t *testing.T) {
	mem, _ := inbox.NewMemoryStore(inbox.MemoryOptions{})
	f := newFixture(t, "billing", &spyStore{inner: mem, failRec: errors.New("503")})
	r := f.process(delivery(str("message-1")))
	if r.Outcome != OutcomeTransientFailure || r.StoreOp != "record" || r.Published {
		t.Fatalf("report = %+v", r)
	}
	ev := f.tr.get()
	want := []string{"check billing/message-1", "handler-start", "handler-end"}
	for range 6 {
		want = append(want, "record billing/message-1")
	}
	if !reflect.DeepEqual(ev, want) || f.handled != 1 || f.store.records != 6 || r.RecordRetries != 5 || !r.HandlerRan {
		t.Fatalf("order = %q (records %d, retries %d), want %q", ev, f.store.records, r.RecordRetries, want)
	}
	if f.metrics.Get(telemetry.InboxOperationFailed, "nimbus.store.operation=record") != 1 {
		t.Fatal("record failure not counted")
	}
}

// A record that fails once is retried within the invocation, so the
// redelivery is a duplicate and the handler does not run again.
func TestTransientRecordFailureIsRetriedInTheInvocation(t *testing.T) {
	mem, _ := inbox.NewMemoryStore(inbox.MemoryOptions{})
	s := &flakyRecordStore{spyStore: spyStore{inner: mem}, failures: 1}
	f := newFixture(t, "billing", &s.spyStore)
	f.p.o.Inbox = s
	r := f.process(delivery(str("message-1")))
	if r.Outcome != OutcomeCompleted || f.store.records != 2 || r.RecordRetries != 1 {
		t.Fatalf("report = %+v", r)
	}
	if r := f.process(delivery(str("message-1"))); r.Outcome != OutcomeDuplicate || f.handled != 1 {
		t.Fatalf("redelivery = %+v, handled %d", r, f.handled)
	}
}

type flakyRecordStore struct {
	spyStore
	failures int
}

func (s *flakyRecordStore) RecordProcessed(ctx context.Context, k inbox.Key) error {
	if s.failures > 0 {
		s.failures--
		s.records++
		return errors.New("connection reset")
	}
	return s.spyStore.RecordProcessed(ctx, k)
}

func TestMissingOrBlankMessageIDBypassesTheInbox(t *testing.T) {
	for name, id := range map[string]*string{"missing": nil, "empty": str(""), "blank": str("   "), "too long": str(strings.Repeat("m", 513))} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, "billing", nil)
			for range 2 {
				r := f.process(delivery(id))
				if r.Outcome != OutcomeCompleted || r.Inbox != InboxBypassed || r.BypassReason == "" {
					t.Fatalf("report = %+v", r)
				}
			}
			if f.handled != 2 || f.store.checks+f.store.records != 0 {
				t.Fatalf("handled %d, store calls %d", f.handled, f.store.checks+f.store.records)
			}
			if id == nil {
				m := f.pub.Sent()[0]
				if m.CorrelationID != nil || m.ApplicationProperties["ParentMessageId"] != "self" || m.ApplicationProperties["OriginatingMessageId"] != "self" {
					t.Fatalf("missing-id response: corr %v props %v", m.CorrelationID, m.ApplicationProperties)
				}
			}
		})
	}
}

func TestMessageIDAt512UsesTheStore(t *testing.T) {
	f := newFixture(t, "billing", nil)
	r := f.process(delivery(str(strings.Repeat("m", 512))))
	if r.Inbox != InboxNew || f.store.checks != 1 || f.store.records != 1 {
		t.Fatalf("report %+v, store %d/%d", r, f.store.checks, f.store.records)
	}
}

func TestBlankEndpointBypasses(t *testing.T) {
	f := newFixture(t, "   ", nil)
	if r := f.process(delivery(str("m"))); r.Inbox != InboxBypassed || f.store.checks != 0 {
		t.Fatalf("report %+v", r)
	}
}

func TestInboxOffMakesNoStoreCalls(t *testing.T) {
	f := newFixture(t, "billing", nil)
	f.p.o.Inbox = nil
	for range 2 {
		if r := f.process(delivery(str("m"))); r.Outcome != OutcomeCompleted || r.Inbox != InboxOff {
			t.Fatalf("report = %+v", r)
		}
	}
	if f.handled != 2 || f.store.checks != 0 || f.store.records != 0 {
		t.Fatalf("handled %d store %d/%d", f.handled, f.store.checks, f.store.records)
	}
}

func TestUnknownEventTypeIsUnsupportedAndNotRecorded(t *testing.T) {
	f := newFixture(t, "billing", nil)
	mut := func(p map[string]any, d *Delivery) {
		p["EventTypeId"] = "CustomerMoved"
		d.Body = []byte(`{"EventContent":{"EventTypeId":"CustomerMoved","EventJson":"{}"},"ErrorContent":null}`)
	}
	for range 2 {
		r := f.process(delivery(str("m"), mut))
		if r.Outcome != OutcomeUnsupported || !r.Outcome.Completes() || f.store.records != 0 {
			t.Fatalf("report = %+v", r)
		}
	}
	m := f.pub.Sent()[0]
	if m.ApplicationProperties["MessageType"] != "UnsupportedResponse" || m.ApplicationProperties["EventTypeId"] != "CustomerMoved" {
		t.Fatalf("props = %v", m.ApplicationProperties)
	}
}

func TestEventTypeFallsBackToBody(t *testing.T) {
	f := newFixture(t, "billing", nil)
	var got string
	f.handler = func(ctx context.Context, ev *Event) (Result, error) { got = ev.EventTypeID; return Completed(), nil }
	r := f.process(delivery(str("m"), func(p map[string]any, d *Delivery) { delete(p, "EventTypeId") }))
	if r.Outcome != OutcomeCompleted || got != "OrderPlaced" || len(f.pub.Sent()) != 1 {
		t.Fatalf("report = %+v, handler saw %q", r, got)
	}
	// A type read from the body is payload: the report does not carry it
	// for the log line, only that it came from the body.
	if r.EventTypeID != "" || !r.EventTypeFromBody {
		t.Fatalf("report exposes the body's event type: %+v", r)
	}
}

// Errors that reach the log line never quote the body: not a mismatched
// type, not a value encoding/json would quote when decoding fails.
func TestFailureTextsNeverQuoteTheBody(t *testing.T) {
	const secret = "SECRET-BODY-VALUE-4711"
	f := newFixture(t, "billing", nil)
	body := `{"EventContent":{"EventTypeId":"` + secret + `","EventJson":"{}"},"ErrorContent":null}`
	r := f.process(delivery(str("m"), func(p map[string]any, d *Delivery) { d.Body = []byte(body) }))
	if r.Outcome != OutcomeInvalidMessage || strings.Contains(r.Err.Error(), secret) {
		t.Fatalf("mismatch error quotes the body: %v", r.Err)
	}

	for name, eventJSON := range map[string]string{
		"wrong type": `{"Amount":"` + secret + `"}`,
		"number":     `{"OrderId":4711123}`,
		"syntax":     `{"OrderId":` + secret,
	} {
		ev := &Event{EventTypeID: "OrderPlaced", JSON: eventJSON}
		var v struct {
			OrderID string  `json:"OrderId"`
			Amount  float64 `json:"Amount"`
		}
		err := ev.Decode(&v)
		if err == nil || !IsPermanent(err) {
			t.Fatalf("%s: err = %v", name, err)
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "4711123") {
			t.Errorf("%s: decode error quotes the payload: %v", name, err)
		}
		var de *DecodeError
		if !errors.As(err, &de) || errors.Unwrap(de) == nil {
			t.Errorf("%s: the encoding/json cause is not reachable", name)
		}
		t.Logf("%s: %v", name, err)
	}
}

func TestInvalidMessagesFailWithoutStoreCalls(t *testing.T) {
	cases := map[string]func(map[string]any, *Delivery){
		"no MessageType":      func(p map[string]any, d *Delivery) { delete(p, "MessageType") },
		"bad MessageType":     func(p map[string]any, d *Delivery) { p["MessageType"] = "eventrequest" },
		"no From":             func(p map[string]any, d *Delivery) { delete(p, "From") },
		"no To":               func(p map[string]any, d *Delivery) { delete(p, "To") },
		"no EventId property": func(p map[string]any, d *Delivery) { delete(p, "EventId") },
	}
	for name, mut := range cases {
		f := newFixture(t, "billing", nil)
		r := f.process(delivery(str("m"), mut))
		if r.Outcome != OutcomeInvalidMessage || r.Outcome.Completes() || !errors.Is(r.Err, message.ErrInvalidMessage) {
			t.Errorf("%s: report = %+v", name, r)
		}
		if f.store.checks != 0 || f.handled != 0 {
			t.Errorf("%s: store/handler touched", name)
		}
	}
}

func TestUnreadableBodyOrMismatchedTypeIsPermanent(t *testing.T) {
	for name, body := range map[string]string{
		"not json":     `<xml/>`,
		"type differs": `{"EventContent":{"EventTypeId":"Other","EventJson":"{}"},"ErrorContent":null}`,
	} {
		f := newFixture(t, "billing", nil)
		r := f.process(delivery(str("m"), func(p map[string]any, d *Delivery) { d.Body = []byte(body) }))
		if r.Outcome != OutcomeInvalidMessage || !IsPermanent(r.Err) || f.handled != 0 || f.store.records != 0 {
			t.Errorf("%s: report = %+v", name, r)
		}
	}
}

// A readable body whose EventContent is null reaches the handler (NimBus's
// dispatch), with empty JSON; an empty EventTypeId property falls back to
// the body's type.
func TestNullEventContentReachesTheHandler(t *testing.T) {
	f := newFixture(t, "billing", nil)
	var got *Event
	f.handler = func(ctx context.Context, ev *Event) (Result, error) { got = ev; return Completed(), nil }
	r := f.process(delivery(str("m-1"), func(p map[string]any, d *Delivery) { d.Body = []byte(`{"EventContent":null,"ErrorContent":null}`) }))
	if r.Outcome != OutcomeCompleted || got == nil || got.JSON != "" || got.EventTypeID != "OrderPlaced" {
		t.Fatalf("report %+v, event %+v", r, got)
	}
	got = nil
	r = f.process(delivery(str("m-2"), func(p map[string]any, d *Delivery) { p["EventTypeId"] = "" }))
	if r.Outcome != OutcomeCompleted || got == nil || got.EventTypeID != "OrderPlaced" || r.EventTypeID != "" || !r.EventTypeFromBody {
		t.Fatalf("empty property: report %+v, event %+v", r, got)
	}
}

func TestNonEventMessageTypesAreNotAcknowledged(t *testing.T) {
	f := newFixture(t, "billing", nil)
	for _, mt := range []string{"ResolutionResponse", "ErrorResponse", "DeferralResponse", "ProcessDeferredRequest", "ContinuationRequest", "11"} {
		r := f.process(delivery(str("m-"+mt), func(p map[string]any, d *Delivery) { p["MessageType"] = mt }))
		if r.Outcome != OutcomeUnsupportedMessageType || r.Outcome.Completes() || f.handled != 0 {
			t.Fatalf("%s: report = %+v", mt, r)
		}
	}
	// An inbound UnsupportedResponse is handled like an EventRequest (NimBus).
	r := f.process(delivery(str("m2"), func(p map[string]any, d *Delivery) { p["MessageType"] = "UnsupportedResponse" }))
	if r.Outcome != OutcomeCompleted {
		t.Fatalf("UnsupportedResponse inbound: %+v", r)
	}
}

func TestPublishFailureIsTransientAndRedeliveryIsSkipped(t *testing.T) {
	f := newFixture(t, "billing", nil)
	f.pub.Fail = func(m *message.Outgoing) error { return errors.New("amqp link detached") }
	r := f.process(delivery(str("m")))
	if r.Outcome != OutcomePublishFailed || r.Outcome.Completes() || f.store.records != 1 {
		t.Fatalf("report = %+v", r)
	}
	f.pub.Fail = nil
	r = f.process(delivery(str("m")))
	if r.Outcome != OutcomeDuplicate || f.handled != 1 {
		t.Fatalf("redelivery report = %+v", r)
	}
	if got := f.pub.Sent()[0].Type(); got != "SkipResponse" {
		t.Fatalf("redelivery answered with %s", got)
	}
}

func TestHeartbeatIsAnsweredBeforeTheInboxAndNeverRecorded(t *testing.T) {
	f := newFixture(t, "billing", nil)
	mut := func(p map[string]any, d *Delivery) {
		p["EventTypeId"] = "nimbus.platform.heartbeat"
		d.Body = []byte(`{"EventContent":{"EventTypeId":"NimBus.Platform.Heartbeat","EventJson":"{\"ForwardSendTime\":\"2026-11-30T11:59:59.0000000Z\"}"},"ErrorContent":null}`)
	}
	for range 2 {
		if r := f.process(delivery(str("hb"), mut)); r.Outcome != OutcomeHeartbeat {
			t.Fatalf("report = %+v", r)
		}
	}
	if f.store.checks+f.store.records != 0 || f.handled != 0 {
		t.Fatal("heartbeat touched the inbox or a handler")
	}
	m := f.pub.Sent()[0]
	if m.ApplicationProperties["From"] != "billing" || m.ApplicationProperties["MessageType"] != "ResolutionResponse" {
		t.Fatalf("heartbeat props = %v", m.ApplicationProperties)
	}
	in, err := message.ParseContent(m.Body)
	if err != nil || !strings.Contains(*in.EventContent.EventJSON, `"ForwardSendTime":"2026-11-30T11:59:59.0000000Z"`) ||
		!strings.Contains(*in.EventContent.EventJSON, `"Endpoint":"billing"`) || !strings.Contains(*in.EventContent.EventJSON, `"SdkVersion":"test"`) {
		t.Fatalf("heartbeat body = %s", m.Body)
	}
}

// A plain EventRequest that happens to carry InboxMessageId is checked
// and recorded on its own MessageId only: InboxMessageId is honoured on
// retries and replayed copies.
func TestInboxMessageIDIsIgnoredOnAPlainEventRequest(t *testing.T) {
	f := newFixture(t, "billing", nil)
	r := f.process(delivery(str("m-1"), func(p map[string]any, d *Delivery) { p["InboxMessageId"] = "original-1" }))
	if r.Outcome != OutcomeCompleted || f.store.checks != 1 || f.store.records != 1 {
		t.Fatalf("report = %+v", r)
	}
	want := []string{"check billing/m-1", "handler-start", "handler-end", "record billing/m-1", "publish ResolutionResponse"}
	if got := f.tr.get(); !reflect.DeepEqual(got, want) {
		t.Fatalf("order = %q\nwant %q", got, want)
	}
	if r := f.process(delivery(str("original-1"))); r.Outcome != OutcomeCompleted {
		t.Fatalf("original: %+v", r)
	}
}

func TestRecordAndResponseSurviveCancellationAfterTheHandler(t *testing.T) {
	f := newFixture(t, "billing", nil)
	ctx, cancel := context.WithCancel(context.Background())
	f.handler = func(context.Context, *Event) (Result, error) { cancel(); return Completed(), nil }
	r := f.p.Process(ctx, delivery(str("m")))
	if r.Outcome != OutcomeCompleted || f.store.records != 1 || !r.Published {
		t.Fatalf("report = %+v", r)
	}
}

func TestCallerCancellationBeforeCheckIsNotADuplicateOrSuccess(t *testing.T) {
	f := newFixture(t, "billing", nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := f.p.Process(ctx, delivery(str("m")))
	if r.Outcome != OutcomeCanceled || r.Outcome.Completes() || f.handled != 0 {
		t.Fatalf("report = %+v", r)
	}
}

func TestMetricsUseOnlyBoundedTags(t *testing.T) {
	f := newFixture(t, "billing", nil)
	f.process(delivery(str("m")))
	f.process(delivery(str("m")))
	f.process(delivery(nil))
	f.store.failCheck = errors.New("x")
	f.process(delivery(str("n")))
	for _, k := range f.metrics.Keys() {
		for _, bad := range []string{"m}", "customer-1", "event-1", "message"} {
			if strings.Contains(k, bad) {
				t.Errorf("counter key %q carries an unbounded value", k)
			}
		}
	}
	if f.metrics.Get(telemetry.InboxBypassed, "nimbus.inbox.bypass_reason=missing_or_blank") != 1 {
		t.Errorf("bypass counter = %v", f.metrics.Snapshot())
	}
}

func TestConcurrentDeliveriesAreSafe(t *testing.T) {
	mem, _ := inbox.NewMemoryStore(inbox.MemoryOptions{})
	reg := NewRegistry()
	var mu sync.Mutex
	runs := map[string]int{}
	reg.Handle("OrderPlaced", func(ctx context.Context, ev *Event) (Result, error) {
		mu.Lock()
		runs[ev.MessageID]++
		mu.Unlock()
		return Completed(), nil
	})
	pub := &resolver.Memory{}
	p, err := New(Options{EndpointID: "billing", Inbox: mem, Publisher: pub, Handlers: reg, Metrics: &telemetry.Metrics{}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := p.Process(context.Background(), delivery(str(fmt.Sprintf("m-%d", i%16))))
			if !r.Outcome.Completes() {
				t.Errorf("outcome %s", r.Outcome)
			}
		}()
	}
	wg.Wait()
	if mem.Len() != 16 || len(runs) != 16 || len(pub.Sent()) != 64 {
		t.Fatalf("records %d, distinct handled %d, responses %d", mem.Len(), len(runs), len(pub.Sent()))
	}
}

// deadlinePublisher records whether every publish carried a deadline.
type deadlinePublisher struct {
	mu        sync.Mutex
	deadlines []time.Duration // remaining time at the call; -1: none
}

func (p *deadlinePublisher) Publish(ctx context.Context, m *message.Outgoing) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := time.Duration(-1)
	if dl, ok := ctx.Deadline(); ok {
		d = time.Until(dl)
	}
	p.deadlines = append(p.deadlines, d)
	return nil
}

// Every response is sent under the settle timeout, on every path: the
// Service Bus SDK has no per-try timeout, so an unbounded context could
// hold an invocation until the host's function timeout.
func TestEveryPublishIsBoundedByTheSettleTimeout(t *testing.T) {
	pub := &deadlinePublisher{}
	reg := NewRegistry()
	reg.Handle("OrderPlaced", func(context.Context, *Event) (Result, error) { return Completed(), nil })
	mem, _ := inbox.NewMemoryStore(inbox.MemoryOptions{})
	p, err := New(Options{EndpointID: "billing", Inbox: mem, Publisher: pub, Handlers: reg, SettleTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()                                                // no deadline of its own
	p.Process(ctx, delivery(str("m-1")))                                       // completed
	p.Process(ctx, delivery(str("m-1")))                                       // duplicate
	p.Process(ctx, delivery(str("m-2"), func(pr map[string]any, d *Delivery) { // unsupported
		pr["EventTypeId"] = "Unknown"
		d.Body = []byte(`{"EventContent":{"EventTypeId":"Unknown","EventJson":"{}"},"ErrorContent":null}`)
	}))
	if len(pub.deadlines) != 3 {
		t.Fatalf("%d publishes, want 3", len(pub.deadlines))
	}
	for i, d := range pub.deadlines {
		if d < 0 || d > 5*time.Second {
			t.Errorf("publish %d: remaining %v, want a deadline within the 5s settle timeout", i, d)
		}
	}
}
