package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testlog"
	"github.com/nimbus-go/functions-subscriber/internal/funchost"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/resolverapp"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
	"github.com/nimbus-go/functions-subscriber/internal/tracking"
)

// chargingWriter is an in-memory tracking store that charges request units
// the way the Cosmos adapter reports them (on the invocation's
// telemetry.Charge): 2 RU per history write, 3 per upload. fail makes the
// next history writes fail with err.
type chargingWriter struct {
	tracking.Writer
	mu   sync.Mutex
	fail int
	err  error
}

func (w *chargingWriter) StoreMessage(ctx context.Context, m tracking.MessageEntity) error {
	telemetry.ChargeFrom(ctx).Add(2)
	w.mu.Lock()
	failing := w.fail > 0
	if failing {
		w.fail--
	}
	w.mu.Unlock()
	if failing {
		return w.err
	}
	return w.Writer.StoreMessage(ctx, m)
}

func (w *chargingWriter) Upload(ctx context.Context, key tracking.Key, status tracking.ResolutionStatus, row tracking.UnresolvedEvent) (bool, error) {
	telemetry.ChargeFrom(ctx).Add(3)
	return w.Writer.Upload(ctx, key, status, row)
}

// spanScheduler keeps the span context each scheduled re-send was given.
type spanScheduler struct {
	mu    sync.Mutex
	spans []trace.SpanContext
}

func (s *spanScheduler) ScheduleRedelivery(ctx context.Context, _ *resolverapp.Redelivery, _ time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spans = append(s.spans, trace.SpanContextFromContext(ctx))
	return nil
}

type resolverObs struct {
	*App
	logs   *testlog.Buffer
	stderr *testlog.Buffer
	spans  *tracetest.SpanRecorder
	store  *chargingWriter
	sched  *spanScheduler
}

// newResolverObs builds the Resolver app on a Cosmos tracking
// configuration (so request charges are reported) with a charging
// in-memory store, a recording tracer and a captured stderr.
func newResolverObs(t *testing.T) *resolverObs {
	t.Helper()
	cfg, err := config.Load(config.FromMap(map[string]string{
		config.KeyApp:                      "Resolver",
		config.KeyTrackingStore:            "Cosmos",
		config.KeyTrackingConnectionString: "AccountEndpoint=http://127.0.0.1:1/;AccountKey=a2V5;",
		config.KeyServiceBus:               "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v",
		config.KeyRetryBaseDelay:           "0",
	}))
	if err != nil {
		t.Fatal(err)
	}
	ro := &resolverObs{logs: &testlog.Buffer{}, stderr: &testlog.Buffer{}, spans: tracetest.NewSpanRecorder(),
		store: &chargingWriter{Writer: &tracking.Memory{}}, sched: &spanScheduler{}}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(ro.spans))
	ro.App, err = New(cfg, Deps{Log: zerolog.New(ro.logs), TracerProvider: tp, Stderr: ro.stderr,
		Resolver: ResolverDeps{Tracking: ro.store, Scheduler: ro.sched}})
	if err != nil {
		t.Fatal(err)
	}
	return ro
}

func (ro *resolverObs) post(t *testing.T, ctx context.Context, env []byte) answer {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/"+FuncResolver, bytes.NewReader(env)).WithContext(ctx)
	req.Header.Set("X-Azure-Functions-InvocationId", "inv-resolver")
	ro.Handler().ServeHTTP(rec, req)
	a := answer{status: rec.Code, body: rec.Body.String()}
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
		t.Fatalf("answer %q: %v", a.body, err)
	}
	return a
}

// providerDetail stands for what a store provider's error text carries
// (account host, request path).
const providerDetail = "https://acct.documents.azure.com/dbs/nimbus/colls/messages"

// resolverEnvelope is the traced EventRequest (its body carries
// secretPayload) as the Resolver function receives it.
func resolverEnvelope(id string, extra ...any) []byte {
	return bytes.Replace(tracedEnvelope(id, extra...), []byte(`"`+FuncSubscriber+`"`), []byte(`"`+FuncResolver+`"`), 1)
}

// The Resolver invocation continues the message's trace with a consumer
// span; its history write and status upload are children; a scheduled
// re-send is given the invocation's span.
func TestResolverInvocationContinuesTheMessageTrace(t *testing.T) {
	ro := newResolverObs(t)
	a := ro.post(t, context.Background(), resolverEnvelope("m-1", "traceparent", "00-"+inTrace+"-"+inSpan+"-01", "tracestate", "congo=t61rcWkgMzE"))
	if a.status != 200 {
		t.Fatalf("status %d %s", a.status, a.body)
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range ro.spans.Ended() {
		byName[s.Name()] = s
	}
	root, ok := byName["process Resolver"]
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
	if attrs["nimbus.outcome"] != "written" || attrs["messaging.message.id"] != "m-1" || attrs["nimbus.has_parent_trace"] != "true" ||
		attrs["nimbus.cosmos.request_charge"] != "5" || attrs["nimbus.message.type"] != "EventRequest" || attrs["nimbus.endpoint"] != "BillingEndpoint" {
		t.Fatalf("invocation span attributes %v", attrs)
	}
	for _, name := range []string{"nimbus.tracking.history", "nimbus.tracking.upload"} {
		s, ok := byName[name]
		if !ok || s.Parent().SpanID() != root.SpanContext().SpanID() || s.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Errorf("%s: missing or not a child of the invocation span", name)
		}
	}

	// A response reads the event's history (handoff wall clock); the late
	// request copy is refused and gets its Comment audit: each in a child
	// span.
	ro.post(t, context.Background(), resolverEnvelope("rsp-1", "MessageType", "ResolutionResponse", "From", "BillingEndpoint"))
	ro.post(t, context.Background(), resolverEnvelope("m-1"))
	children := map[string]int{}
	roots := map[trace.SpanID]bool{}
	for _, s := range ro.spans.Ended() {
		if s.Name() == "process Resolver" {
			roots[s.SpanContext().SpanID()] = true
		}
	}
	for _, s := range ro.spans.Ended() {
		if roots[s.Parent().SpanID()] {
			children[s.Name()]++
		}
	}
	if len(roots) != 3 || children["nimbus.tracking.history"] != 3 || children["nimbus.tracking.upload"] != 3 ||
		children["nimbus.tracking.history.read"] != 1 || children["nimbus.tracking.audit"] != 1 {
		t.Fatalf("%d invocation spans; their children %v", len(roots), children)
	}

	// Diagnostic-Id is the fallback; a failing history write is a failed
	// child span, and the re-send it schedules carries the invocation's
	// span (servicebus.Client.Schedule writes its traceparent).
	ro.spans = tracetest.NewSpanRecorder()
	ro.store.fail, ro.store.err = 3, &tracking.StoreError{Op: "StoreMessage", Kind: tracking.FailureThrottled, Err: errors.New("429")}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(ro.spans))
	ro.tracer = tp.Tracer(telemetry.TracerName)
	ro.resolver.svc, _ = resolverapp.NewService(resolverapp.Options{Store: ro.store, Scheduler: ro.sched, Tracer: ro.tracer,
		Pause: func(context.Context, time.Duration) {}})
	if a := ro.post(t, context.Background(), resolverEnvelope("m-2", "Diagnostic-Id", "00-"+inTrace+"-"+inSpan+"-01")); a.status != 200 {
		t.Fatalf("rescheduled: status %d", a.status)
	}
	var inv sdktrace.ReadOnlySpan
	failed := 0
	for _, s := range ro.spans.Ended() {
		switch s.Name() {
		case "process Resolver":
			inv = s
		case "nimbus.tracking.history":
			if s.Status().Code.String() == "Error" {
				failed++
			}
		}
	}
	if inv == nil || inv.Parent().TraceID().String() != inTrace {
		t.Fatalf("Diagnostic-Id not continued: %v", inv)
	}
	if failed != 3 {
		t.Errorf("%d failed history spans, want 3 (the write and its two quick retries)", failed)
	}
	if len(ro.sched.spans) != 1 || ro.sched.spans[0].TraceID().String() != inTrace || ro.sched.spans[0].SpanID() != inv.SpanContext().SpanID() {
		t.Fatalf("re-send span contexts %v, want the invocation's span %v", ro.sched.spans, inv.SpanContext())
	}
}

// A completed Resolver invocation's Logs carry its summary, request charge
// and warnings; metrics are tagged with the endpoint's outcome tag; a
// failing one writes one stderr line instead. Nothing from the body (the
// tracking row's content) reaches a log, and every entry is bounded.
func TestResolverLogsMetricsAndStderr(t *testing.T) {
	ro := newResolverObs(t)
	check := func(a answer, status int, want ...string) {
		t.Helper()
		if a.status != status || strings.Contains(a.body, secretPayload) {
			t.Fatalf("status %d (want %d), body %s", a.status, status, a.body)
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
	check(ro.post(t, context.Background(), resolverEnvelope("m-1")), 200,
		"tracking row written: outcome=written messageId=m-1 sessionId=customer-1 eventId=evt-1 messageType=EventRequest endpoint=BillingEndpoint status=Pending",
		"requestCharge=5 cosmosRequests=2")
	// The request arriving after the response is refused by the stale-write
	// guard.
	check(ro.post(t, context.Background(), resolverEnvelope("rsp-1", "MessageType", "ResolutionResponse", "From", "BillingEndpoint")), 200,
		"outcome=written", "messageType=ResolutionResponse", "status=Completed")
	check(ro.post(t, context.Background(), resolverEnvelope("m-1")), 200, "outcome=stale", "warning: stale copy of messageId=m-1 refused")
	ro.resolver.svc, _ = resolverapp.NewService(resolverapp.Options{Store: ro.store, Scheduler: ro.sched, Tracer: ro.tracer,
		Pause: func(context.Context, time.Duration) {}})
	ro.store.fail, ro.store.err = 1, &tracking.StoreError{Op: "StoreMessage", Kind: tracking.FailureTransient, Err: errors.New("503 from " + providerDetail)}
	check(ro.post(t, context.Background(), resolverEnvelope("m-3", "EventId", "evt-3")), 200, "outcome=written", "warning: the tracking store write was retried 1 time(s)")
	ro.store.fail = 3
	a := ro.post(t, context.Background(), resolverEnvelope("m-4", "EventId", "evt-4"))
	check(a, 200, "outcome=rescheduled",
		"warning: the tracking store failed (transient, operation=StoreMessage, attempt=1): a copy of messageId=m-4 is scheduled on the Resolver topic in 5s: tracking store operation StoreMessage failed (transient)")
	if strings.Contains(a.body, providerDetail) {
		t.Fatalf("Logs carry the provider's text: %s", a.body)
	}
	long := strings.Repeat("x", 100<<10)
	a = ro.post(t, context.Background(), resolverEnvelope(long, "EventId", "evt-5"))
	check(a, 200, "[truncated: ")
	if len(a.body) > 2*funchost.MaxLogs*funchost.MaxLogUnits {
		t.Fatalf("answer of %d bytes", len(a.body))
	}
	if ro.stderr.String() != "" {
		t.Fatalf("stderr written for completed invocations: %s", ro.stderr.String())
	}
	m := ro.Metrics()
	if m.Get(telemetry.Invocations, "nimbus.outcome=written") != 4 || m.Get(telemetry.Invocations, "nimbus.outcome=stale") != 1 ||
		m.Get(telemetry.ProcessDuration+".count", "nimbus.outcome=rescheduled") != 1 ||
		m.Get(telemetry.RequestCharge+".sum", "nimbus.outcome=stale") != 5 || m.Get(telemetry.RequestCharge+".count", "nimbus.outcome=written") != 4 {
		t.Fatalf("metrics %v", m.Snapshot())
	}

	// Failures: no Logs (the host drops them), one stderr line worded for
	// the level.
	for _, c := range []struct {
		name   string
		ctx    func() context.Context
		env    []byte
		prefix string
		has    string
	}{
		{"invalid message", context.Background, hostwire.ServiceBus(hostwire.ServiceBusMessage{
			FunctionName: FuncResolver, Body: []byte(`{"EventJson":"` + secretPayload + `"}`), MessageID: "m-6", SessionID: hostwire.S("s"), DeliveryCount: 1,
			EnqueuedTime: time.Now(), Properties: hostwire.Props("MessageType", "ResolutionResponse", "EventId", "e"),
			UtcNow: time.Now(), RandGUID: "00000000-0000-0000-0000-000000000000",
		}),
			"error: Resolver invocation answered 422: message is not a valid NimBus message", "outcome=invalid_message"},
		{"store rejected", func() context.Context {
			ro.store.fail, ro.store.err = 1, &tracking.StoreError{Op: "StoreMessage", Kind: tracking.FailurePermanent, Err: errors.New("400 from " + providerDetail)}
			return context.Background()
		}, resolverEnvelope("m-8", "EventId", "evt-8"), "error: Resolver invocation answered 422: the tracking store refused the write permanently",
			`operation=StoreMessage error="tracking store operation StoreMessage failed (permanent)"`},
		{"malformed envelope", context.Background, []byte(`{"Data":{"message":"not base64!"},"Metadata":{}}`),
			"error: Resolver invocation answered 400: malformed invocation envelope", "outcome=malformed_invocation"},
		{"cancelled", func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, resolverEnvelope("m-7", "EventId", "evt-7"), "warning: Resolver invocation answered 503: invocation cancelled", "outcome=canceled"},
	} {
		ro.stderr.Reset()
		if a := ro.post(t, c.ctx(), c.env); a.status < 300 || len(a.Logs) != 0 {
			t.Fatalf("%s: answered %d with Logs %q", c.name, a.status, a.Logs)
		}
		line := ro.stderr.String()
		if !strings.HasPrefix(line, c.prefix) || !strings.Contains(line, c.has) || strings.Count(line, "\n") != 1 ||
			strings.Contains(line, secretPayload) || strings.Contains(line, providerDetail) {
			t.Fatalf("%s: stderr %q", c.name, line)
		}
		if strings.HasPrefix(c.prefix, "warning") && (strings.Contains(line, "error") || strings.Contains(line, "fail")) {
			t.Fatalf("%s: a warning line %q reads as an error", c.name, line)
		}
	}
	for _, l := range ro.logs.Lines(t) {
		b, _ := json.Marshal(l)
		if strings.Contains(string(b), secretPayload) {
			t.Fatalf("a log line carries the payload: %s", b)
		}
		// Store failures are named by operation and kind on stdout too.
		if strings.Contains(string(b), providerDetail) {
			t.Fatalf("a log line carries the store provider's text: %s", b)
		}
	}
}

// Against the local Cosmos server, every request the tracking store makes
// for an invocation is counted on its line and in Logs, and the charges the
// responses report are summed. A proxy in front of the server counts the
// requests and sets x-ms-request-charge: 1.25 on every response, so both
// figures are known.
func TestResolverRequestChargeAgainstLocalCosmos(t *testing.T) {
	cos := testenv.StartCosmos(t, testenv.CosmosOptions{Consistency: "Strong"})
	target, err := url.Parse(cos.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	var requests atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewUnstartedServer(proxy)
	// The account read names the server's own address as the region to
	// use: point it at the proxy, so every request goes through it.
	own, via := []byte(target.Host), []byte(srv.Listener.Addr().String())
	proxy.ModifyResponse = func(r *http.Response) error {
		requests.Add(1)
		r.Header.Set("x-ms-request-charge", "1.25")
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return err
		}
		_ = r.Body.Close()
		body = bytes.ReplaceAll(body, own, via)
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		r.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	srv.Start()
	t.Cleanup(srv.Close)
	cfg, err := config.Load(config.FromMap(map[string]string{
		config.KeyApp:                      "Resolver",
		config.KeyTrackingStore:            "Cosmos",
		config.KeyTrackingConnectionString: "AccountEndpoint=" + srv.URL + "/;AccountKey=" + cos.Key + ";",
		config.KeyServiceBus:               "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v",
		config.KeyRetryBaseDelay:           "0",
	}))
	if err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	a, err := New(cfg, Deps{Log: zerolog.New(logs), Resolver: ResolverDeps{Scheduler: &spanScheduler{}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	ro := &resolverObs{App: a, logs: logs}
	for i, env := range [][]byte{
		resolverEnvelope("m-1", "EventId", "evt-1"),
		resolverEnvelope("m-2", "EventId", "evt-2"),
		resolverEnvelope("rsp-1", "EventId", "evt-1", "MessageType", "ResolutionResponse", "From", "BillingEndpoint"),
		resolverEnvelope("m-1", "EventId", "evt-1"),
	} {
		before := requests.Load()
		ans := ro.post(t, context.Background(), env)
		n := requests.Load() - before
		if ans.status != 200 || n == 0 {
			t.Fatalf("invocation %d: status %d after %d requests", i, ans.status, n)
		}
		lines := logs.Lines(t)
		line := lines[len(lines)-1]
		wantOutcome := map[int]string{0: "written", 1: "written", 2: "written", 3: "stale"}[i]
		if line["outcome"] != wantOutcome || line["cosmosRequests"] != float64(n) || line["requestCharge"] != 1.25*float64(n) {
			t.Fatalf("invocation %d (%d requests through the proxy): line %v", i, n, line)
		}
		if len(ans.Logs) == 0 || !strings.Contains(ans.Logs[0], "cosmosRequests=") {
			t.Fatalf("Logs %q", ans.Logs)
		}
		t.Logf("invocation %d, %s: %d Cosmos requests", i, wantOutcome, n)
	}
	if got := a.Metrics().Get(telemetry.RequestCharge+".count", "nimbus.outcome=written"); got != 3 {
		t.Fatalf("RU histogram count %v", got)
	}
}

// BenchmarkResolverInvocationTracing measures one Resolver invocation (an
// EventRequest written to the in-memory tracking store: history write and
// status upload, three spans) through the real HTTP handler, with no tracer
// (the floor), with the provider main installs when nothing is exported,
// and with the SDK recording every span into a discarding batch exporter.
func BenchmarkResolverInvocationTracing(b *testing.B) {
	b.Run("tracer=noop", func(b *testing.B) { runResolverBench(b, noop.NewTracerProvider()) })
	b.Run("tracer=export-off", func(b *testing.B) { runResolverBench(b, telemetry.PropagatingTracerProvider()) })
	b.Run("tracer=export-on", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		runResolverBench(b, tp)
	})
}

func runResolverBench(b *testing.B, tp trace.TracerProvider) {
	cfg, err := config.Load(config.FromMap(map[string]string{
		config.KeyApp: "Resolver", config.KeyTrackingStore: "InMemory",
		config.KeyServiceBus: "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v",
	}))
	if err != nil {
		b.Fatal(err)
	}
	a, err := New(cfg, Deps{Log: zerolog.New(io.Discard), TracerProvider: tp,
		Resolver: ResolverDeps{Tracking: &tracking.Memory{}, Scheduler: &spanScheduler{}}})
	if err != nil {
		b.Fatal(err)
	}
	h := a.Handler()
	// The same EventRequest each time: Pending over Pending is written, the
	// history upserted by MessageId, so the store does not grow.
	env := resolverEnvelope("m-bench", "traceparent", "00-"+inTrace+"-"+inSpan+"-01")
	rec := &discardWriter{h: http.Header{}}
	reader := bytes.NewReader(env)
	req := httptest.NewRequest(http.MethodPost, "/"+FuncResolver, reader)
	b.ReportAllocs()
	b.SetBytes(int64(len(env)))
	for b.Loop() {
		reader.Reset(env)
		req.Body = io.NopCloser(reader)
		req.ContentLength = int64(len(env))
		rec.status = 0
		h.ServeHTTP(rec, req)
		if rec.status != 200 {
			b.Fatalf("status %d", rec.status)
		}
	}
}
