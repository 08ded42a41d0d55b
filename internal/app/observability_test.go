package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testlog"
	"github.com/nimbus-go/functions-subscriber/internal/devhost"
	"github.com/nimbus-go/functions-subscriber/internal/funchost"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/session"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// chargingStore is an in-memory inbox that charges request units the way
// the Cosmos adapter reports them: on the invocation's telemetry.Charge.
type chargingStore struct {
	inbox.Store
	checkRU, recordRU float64
	failRecords       int
}

func (s *chargingStore) HasProcessed(ctx context.Context, k inbox.Key) (bool, error) {
	telemetry.ChargeFrom(ctx).Add(s.checkRU)
	return s.Store.HasProcessed(ctx, k)
}

func (s *chargingStore) RecordProcessed(ctx context.Context, k inbox.Key) error {
	telemetry.ChargeFrom(ctx).Add(s.recordRU)
	if s.failRecords > 0 {
		s.failRecords--
		return errors.New("503 from the store")
	}
	return s.Store.RecordProcessed(ctx, k)
}

type obsApp struct {
	*App
	logs     *testlog.Buffer
	stderr   *testlog.Buffer
	spans    *tracetest.SpanRecorder
	store    *chargingStore
	handlers []trace.SpanContext
}

// newObsApp builds the app on a Cosmos inbox configuration (so request
// charges are reported) with a charging in-memory store, a recording tracer
// and a captured stderr. handler, when set, runs in the event handler.
func newObsApp(t *testing.T, handler func(ctx context.Context) error) *obsApp {
	t.Helper()
	cfg, err := config.Load(config.FromMap(map[string]string{
		config.KeyEndpoint:               "BillingEndpoint",
		config.KeyInboxEnabled:           "true",
		config.KeyInboxStore:             "Cosmos",
		config.KeyCosmosConnectionString: "AccountEndpoint=http://127.0.0.1:1/;AccountKey=a2V5;",
		config.KeyResolverSink:           "InMemory",
		config.KeyRetryBaseDelay:         "0",
	}))
	if err != nil {
		t.Fatal(err)
	}
	mem, _ := inbox.NewMemoryStore(inbox.MemoryOptions{})
	oa := &obsApp{logs: &testlog.Buffer{}, stderr: &testlog.Buffer{}, spans: tracetest.NewSpanRecorder(),
		store: &chargingStore{Store: mem, checkRU: 1, recordRU: 5.71}}
	reg := subscriber.NewRegistry()
	reg.Handle("OrderPlaced", func(ctx context.Context, ev *subscriber.Event) (subscriber.Result, error) {
		oa.handlers = append(oa.handlers, trace.SpanContextFromContext(ctx))
		if handler != nil {
			if err := handler(ctx); err != nil {
				return subscriber.Result{}, err
			}
		}
		return subscriber.Completed(), nil
	})
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(oa.spans))
	oa.App, err = New(cfg, Deps{Handlers: reg, Log: zerolog.New(oa.logs), Version: "test", Store: oa.store,
		Sessions:       session.NewMemory(session.MemoryOptions{}),
		TracerProvider: tp, Stderr: oa.stderr})
	if err != nil {
		t.Fatal(err)
	}
	return oa
}

type answer struct {
	status int
	body   string
	Logs   []string
}

func (oa *obsApp) post(t *testing.T, ctx context.Context, env []byte) answer {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/"+fnFor(env), bytes.NewReader(env)).WithContext(ctx)
	req.Header.Set("X-Azure-Functions-InvocationId", "inv-obs")
	oa.Handler().ServeHTTP(rec, req)
	a := answer{status: rec.Code, body: rec.Body.String()}
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
		t.Fatalf("answer %q: %v", a.body, err)
	}
	return a
}

const (
	inTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	inSpan  = "00f067aa0ba902b7"
)

func tracedEnvelope(id string, extra ...any) []byte {
	props := append([]any{"To", "BillingEndpoint", "From", "ShopEndpoint", "MessageType", "EventRequest", "EventId", "evt-1",
		"EventTypeId", "OrderPlaced", "OriginatingMessageId", "self", "ParentMessageId", "self", "RetryCount", 0, "OriginatingFrom", "ShopEndpoint"}, extra...)
	return hostwire.ServiceBus(hostwire.ServiceBusMessage{
		FunctionName: FuncSubscriber, MessageID: id, SessionID: hostwire.S("customer-1"),
		Body:          []byte(`{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"` + secretPayload + `\"}"},"ErrorContent":null}`),
		DeliveryCount: 1, SequenceNumber: 7, EnqueuedTime: time.Now().Add(-time.Second),
		Properties: hostwire.Props(props...),
		Namespace:  "sb.test", UtcNow: time.Now(), RandGUID: "00000000-0000-0000-0000-000000000000",
	})
}

// The invocation's span continues the message's traceparent (tracestate
// kept); the inbox check, the handler and the record are its children, and
// the handler's ctx carries the handler span.
func TestInvocationContinuesTheMessageTrace(t *testing.T) {
	oa := newObsApp(t, nil)
	env := tracedEnvelope("m-1", "traceparent", "00-"+inTrace+"-"+inSpan+"-01", "tracestate", "congo=t61rcWkgMzE")
	if a := oa.post(t, context.Background(), env); a.status != 200 {
		t.Fatalf("status %d", a.status)
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range oa.spans.Ended() {
		byName[s.Name()] = s
	}
	root, ok := byName["process BillingEndpoint"]
	if !ok {
		t.Fatalf("no invocation span among %v", byName)
	}
	if root.Parent().TraceID().String() != inTrace || root.Parent().SpanID().String() != inSpan || !root.Parent().IsRemote() ||
		root.SpanContext().TraceState().String() != "congo=t61rcWkgMzE" || root.SpanKind() != trace.SpanKindConsumer {
		t.Fatalf("invocation span parent %v state %q kind %v", root.Parent(), root.SpanContext().TraceState(), root.SpanKind())
	}
	attrs := map[string]string{}
	for _, kv := range root.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	if attrs["nimbus.outcome"] != "completed" || attrs["messaging.message.id"] != "m-1" || attrs["nimbus.has_parent_trace"] != "true" ||
		attrs["nimbus.cosmos.request_charge"] != "6.71" {
		t.Fatalf("invocation span attributes %v", attrs)
	}
	for _, name := range []string{"nimbus.inbox.check", "nimbus.handler", "nimbus.inbox.record"} {
		s, ok := byName[name]
		if !ok || s.Parent().SpanID() != root.SpanContext().SpanID() || s.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Errorf("%s: missing or not a child of the invocation span", name)
		}
	}
	if len(oa.handlers) != 1 || oa.handlers[0].SpanID() != byName["nimbus.handler"].SpanContext().SpanID() {
		t.Fatal("the handler's ctx does not carry the handler span")
	}

	// A Diagnostic-Id in the W3C form is the fallback; without either, the
	// invocation starts a new trace.
	oa.spans = tracetest.NewSpanRecorder()
	oa.post(t, context.Background(), tracedEnvelope("m-2", "Diagnostic-Id", "00-"+inTrace+"-"+inSpan+"-01"))
	oa.post(t, context.Background(), tracedEnvelope("m-3"))
	if got := oa.handlers[1].TraceID().String(); got != inTrace {
		t.Errorf("Diagnostic-Id not continued: trace %s", got)
	}
	if got := oa.handlers[2]; !got.IsValid() || got.TraceID().String() == inTrace {
		t.Errorf("a message without trace context got trace %s", got.TraceID())
	}
}

// The in-memory sink (/_nimbus/resolver) shows what the Service Bus
// adapter would send, the trace context included: the response carries the
// traceparent of its send span, a producer span under the invocation's, in
// the message's trace, and the message's tracestate.
func TestMemorySinkShowsTheSendSpansTraceContext(t *testing.T) {
	oa := newObsApp(t, nil)
	env := tracedEnvelope("m-1", "traceparent", "00-"+inTrace+"-"+inSpan+"-01", "tracestate", "congo=t61rcWkgMzE")
	if a := oa.post(t, context.Background(), env); a.status != 200 {
		t.Fatalf("status %d", a.status)
	}
	var root, send sdktrace.ReadOnlySpan
	for _, s := range oa.spans.Ended() {
		switch s.Name() {
		case "process BillingEndpoint":
			root = s
		case "send BillingEndpoint":
			send = s
		}
	}
	if root == nil || send == nil || send.SpanKind() != trace.SpanKindProducer || send.Parent().SpanID() != root.SpanContext().SpanID() {
		t.Fatalf("invocation span %v, send span %v", root, send)
	}
	rec := httptest.NewRecorder()
	oa.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/_nimbus/resolver", nil))
	var sent []devhost.SentResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &sent); err != nil || len(sent) != 1 {
		t.Fatalf("sink = %s (%v)", rec.Body.String(), err)
	}
	want := map[string]devhost.TypedValue{
		"traceparent": {Type: "string", Value: "00-" + inTrace + "-" + send.SpanContext().SpanID().String() + "-01"},
		"tracestate":  {Type: "string", Value: "congo=t61rcWkgMzE"},
	}
	for k, w := range want {
		if got := sent[0].Properties[k]; got != w {
			t.Errorf("%s = %+v, want %+v", k, got, w)
		}
	}
}

// Every Cosmos request's charge is summed per invocation: on the log line,
// in Logs, in the RU histogram and on the span.
func TestRequestChargeIsSummedPerInvocation(t *testing.T) {
	oa := newObsApp(t, nil)
	a := oa.post(t, context.Background(), tracedEnvelope("m-1"))
	dup := oa.post(t, context.Background(), tracedEnvelope("m-1"))
	lines := oa.logs.Lines(t)
	if len(lines) != 2 || lines[0]["requestCharge"] != 6.71 || lines[0]["cosmosRequests"] != 2.0 ||
		lines[1]["requestCharge"] != 1.0 || lines[1]["cosmosRequests"] != 1.0 {
		t.Fatalf("log lines %v", lines)
	}
	if len(a.Logs) == 0 || !strings.Contains(a.Logs[0], "requestCharge=6.71 cosmosRequests=2") ||
		len(dup.Logs) == 0 || !strings.Contains(dup.Logs[0], "requestCharge=1 cosmosRequests=1") {
		t.Fatalf("Logs %q / %q", a.Logs, dup.Logs)
	}
	m := oa.Metrics()
	if m.Get(telemetry.RequestCharge+".sum", "nimbus.outcome=completed") != 6.71 || m.Get(telemetry.RequestCharge+".count", "nimbus.outcome=completed") != 1 ||
		m.Get(telemetry.RequestCharge+".sum", "nimbus.outcome=duplicate") != 1 || m.Get(telemetry.ProcessDuration+".count", "nimbus.outcome=duplicate") != 1 {
		t.Fatalf("metrics %v", m.Snapshot())
	}
}

// A completed invocation's Logs carry its summary and its warnings
// (duplicate, bypassed inbox, retried record), bounded, without payload.
func TestLogsCarrySummaryAndWarningsBoundedAndPayloadFree(t *testing.T) {
	oa := newObsApp(t, nil)
	contains := func(a answer, want ...string) {
		t.Helper()
		if a.status != 200 || strings.Contains(a.body, secretPayload) {
			t.Fatalf("status %d, body %s", a.status, a.body)
		}
		joined := strings.Join(a.Logs, "\n")
		for _, w := range want {
			if !strings.Contains(joined, w) {
				t.Errorf("Logs %q lack %q", a.Logs, w)
			}
		}
		for _, l := range a.Logs {
			if len([]rune(l)) > funchost.MaxLogUnits+64 {
				t.Errorf("a Logs entry of %d characters", len(l))
			}
		}
	}
	contains(oa.post(t, context.Background(), tracedEnvelope("m-1")), "invocation completed: outcome=completed inbox=new messageId=m-1")
	contains(oa.post(t, context.Background(), tracedEnvelope("m-1")), "outcome=duplicate", "warning: duplicate delivery of messageId=m-1")
	contains(oa.post(t, context.Background(), tracedEnvelope("")), "inbox=bypassed", "warning: inbox deduplication bypassed (bypassReason=missing_or_blank)")
	oa.store.failRecords = 2
	contains(oa.post(t, context.Background(), tracedEnvelope("m-2")), "outcome=completed", "warning: the inbox record was retried 2 time(s)")
	long := strings.Repeat("x", 100<<10)
	a := oa.post(t, context.Background(), tracedEnvelope(long))
	contains(a, "[truncated: ")
	if len(a.body) > 2*funchost.MaxLogs*funchost.MaxLogUnits {
		t.Fatalf("answer of %d bytes", len(a.body))
	}
	if oa.stderr.String() != "" {
		t.Fatalf("stderr written for completed invocations: %s", oa.stderr.String())
	}
}

// A failing invocation's answer carries no Logs (the host would drop them);
// its line goes to stderr, worded for the level the host should log it at.
func TestFailingInvocationsWriteOneStderrLine(t *testing.T) {
	var cancel context.CancelFunc
	oa := newObsApp(t, func(ctx context.Context) error {
		if cancel != nil {
			cancel()
			return ctx.Err()
		}
		return subscriber.Transient(errors.New("downstream said no\nsecond line"))
	})
	a := oa.post(t, context.Background(), tracedEnvelope("m-1"))
	if a.status != 503 || a.body != funchost.ResponseBody {
		t.Fatalf("failed answer %d %s", a.status, a.body)
	}
	line := oa.stderr.String()
	if !strings.HasPrefix(line, "error: Subscriber invocation answered 503: handler failed") || strings.Count(line, "\n") != 1 ||
		!strings.Contains(line, "outcome=handler_failed") || !strings.Contains(line, "messageId=m-1") ||
		!strings.Contains(line, `error="downstream said no\nsecond line"`) || strings.Contains(line, secretPayload) {
		t.Fatalf("stderr %q", line)
	}
	oa.stderr.Reset()
	oa.post(t, context.Background(), []byte(`{"Data":{"message":"not base64!"},"Metadata":{}}`))
	if line := oa.stderr.String(); !strings.HasPrefix(line, "error: Subscriber invocation answered 400: malformed invocation envelope") {
		t.Fatalf("stderr %q", line)
	}
	oa.stderr.Reset()
	ctx, c := context.WithCancel(context.Background())
	cancel = c
	oa.post(t, ctx, tracedEnvelope("m-2"))
	line = oa.stderr.String()
	if !strings.HasPrefix(line, "warning: Subscriber invocation answered 503: invocation cancelled") || strings.Contains(line, "error") ||
		strings.Contains(line, "fail") || !strings.Contains(line, "outcome=canceled") {
		t.Fatalf("a cancellation's stderr line %q must read as a warning", line)
	}
	// stdout keeps one JSON line per invocation.
	if n := len(oa.logs.Lines(t)); n != 3 {
		t.Fatalf("%d stdout lines, want 3", n)
	}
}

// The cleanup timer's summary goes in Logs when it succeeds; a failed run's
// line goes to stderr at Error level, without the provider's details.
func TestCleanupSummaryInLogsAndFailureOnStderr(t *testing.T) {
	oa := newObsApp(t, nil)
	a := oa.post(t, context.Background(), timerEnvelope())
	if a.status != 200 || len(a.Logs) != 1 || !strings.HasPrefix(a.Logs[0], "inbox cleanup finished: outcome=purged purged=0") ||
		!strings.Contains(a.Logs[0], "requestCharge=0 cosmosRequests=0") || oa.stderr.String() != "" {
		t.Fatalf("cleanup answer %d %q, stderr %q", a.status, a.Logs, oa.stderr.String())
	}
	oa.store.Store = failingPurge{oa.store.Store}
	if a := oa.post(t, context.Background(), timerEnvelope()); a.status == 200 || len(a.Logs) != 0 {
		t.Fatalf("failed cleanup answered %d with Logs %q", a.status, a.Logs)
	}
	line := oa.stderr.String()
	if !strings.HasPrefix(line, "error: InboxCleanup invocation failed: inbox cleanup failed") || strings.Contains(line, "AccountKey") ||
		strings.Count(line, "\n") != 1 {
		t.Fatalf("stderr %q", line)
	}
}

// fnFor routes a timer envelope to InboxCleanup, anything else to Subscriber.
func fnFor(env []byte) string {
	if bytes.Contains(env, []byte(`"timer"`)) {
		return FuncInboxCleanup
	}
	return FuncSubscriber
}
