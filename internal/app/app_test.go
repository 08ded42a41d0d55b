package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testlog"
	"github.com/nimbus-go/functions-subscriber/internal/devhost"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/sleep"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

const secretPayload = "PAYLOAD-SECRET-4711"

type testApp struct {
	*App
	logs    *testlog.Buffer
	pub     *resolver.Memory
	handled int
	mu      sync.Mutex
}

func newTestApp(t testing.TB, settings map[string]string, fail func(n int) error) *testApp {
	t.Helper()
	m := map[string]string{
		config.KeyEndpoint:       "BillingEndpoint",
		config.KeyInboxEnabled:   "true",
		config.KeyInboxStore:     "InMemory",
		config.KeyResolverSink:   "InMemory",
		config.KeyRetryBaseDelay: "0",
	}
	for k, v := range settings {
		m[k] = v
	}
	cfg, err := config.Load(config.FromMap(m))
	if err != nil {
		t.Fatal(err)
	}
	ta := &testApp{logs: &testlog.Buffer{}}
	reg := subscriber.NewRegistry()
	reg.Handle("OrderPlaced", func(ctx context.Context, ev *subscriber.Event) (subscriber.Result, error) {
		ta.mu.Lock()
		ta.handled++
		n := ta.handled
		ta.mu.Unlock()
		if fail != nil {
			if err := fail(n); err != nil {
				return subscriber.Result{}, err
			}
		}
		return subscriber.Completed(), nil
	})
	a, err := New(cfg, Deps{Handlers: reg, Log: zerolog.New(ta.logs), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ta.App = a
	ta.pub = a.endpoint.memory
	return ta
}

type msg struct {
	id            string
	eventType     string
	deliveryCount int
	noID          bool
}

func envelope(m msg) []byte {
	if m.eventType == "" {
		m.eventType = "OrderPlaced"
	}
	if m.deliveryCount == 0 {
		m.deliveryCount = 1
	}
	body := `{"EventContent":{"EventTypeId":"` + m.eventType + `","EventJson":"{\"OrderId\":\"` + secretPayload + `\"}"},"ErrorContent":null}`
	id := m.id
	if m.noID {
		id = ""
	}
	return hostwire.ServiceBus(hostwire.ServiceBusMessage{
		FunctionName: FuncSubscriber, Body: []byte(body), MessageID: id, SessionID: hostwire.S("customer-1"),
		DeliveryCount: m.deliveryCount, SequenceNumber: 7, EnqueuedTime: time.Now().Add(-time.Second),
		Properties: hostwire.Props(
			"To", "BillingEndpoint", "From", "ShopEndpoint", "MessageType", "EventRequest", "EventId", "evt-1",
			"EventTypeId", m.eventType, "OriginatingMessageId", "self", "ParentMessageId", "self",
			"RetryCount", 0, "OriginatingFrom", "ShopEndpoint"),
		Namespace: "sb.test", UtcNow: time.Now(), RandGUID: "00000000-0000-0000-0000-000000000000",
	})
}

func (ta *testApp) post(t testing.TB, fn string, body []byte) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/"+fn, bytes.NewReader(body))
	req.Header.Set("X-Azure-Functions-InvocationId", "inv-test")
	ta.Handler().ServeHTTP(rec, req)
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q", ct)
	}
	return rec.Code, rec.Body.String()
}

func TestSubscriberInvocationsThroughTheProtocol(t *testing.T) {
	ta := newTestApp(t, nil, func(n int) error {
		if n == 2 {
			return subscriber.Transient(errors.New("billing system busy"))
		}
		return nil
	})
	steps := []struct {
		name    string
		env     []byte
		status  int
		outcome string
		inbox   string
		resp    string
	}{
		{"fresh", envelope(msg{id: "m-1"}), 200, "completed", "new", "ResolutionResponse"},
		{"redelivery after success", envelope(msg{id: "m-1", deliveryCount: 2}), 200, "duplicate", "duplicate", "SkipResponse"},
		{"failing attempt", envelope(msg{id: "m-2"}), 503, "handler_failed", "new", ""},
		{"retried attempt", envelope(msg{id: "m-2", deliveryCount: 2}), 200, "completed", "new", "ResolutionResponse"},
		{"missing message id", envelope(msg{noID: true}), 200, "completed", "bypassed", "ResolutionResponse"},
		{"unknown event type", envelope(msg{id: "m-3", eventType: "CustomerMoved"}), 200, "unsupported", "new", "UnsupportedResponse"},
		{"malformed envelope", []byte(`{"Data":{"message":"not base64!"},"Metadata":{}}`), 400, "malformed_invocation", "not_reached", ""},
	}
	for _, s := range steps {
		ta.logs.Reset()
		before := len(ta.pub.Sent())
		status, body := ta.post(t, FuncSubscriber, s.env)
		var resp struct {
			Outputs     map[string]any
			Logs        []string
			ReturnValue any
		}
		if err := json.Unmarshal([]byte(body), &resp); status != s.status || err != nil || resp.Outputs == nil || resp.ReturnValue != nil {
			t.Fatalf("%s: status %d body %q, want %d (%v)", s.name, status, body, s.status, err)
		}
		// A completed invocation's summary goes in Logs (the host logs it
		// under the invocation); a failed one's Logs would be ignored.
		if wantLogs := s.status == 200; wantLogs != (len(resp.Logs) > 0) ||
			(wantLogs && !strings.Contains(resp.Logs[0], "outcome="+s.outcome+" inbox="+s.inbox)) {
			t.Fatalf("%s: Logs %q", s.name, resp.Logs)
		}
		lines := ta.logs.Lines(t)
		if len(lines) != 1 {
			t.Fatalf("%s: %d log lines, want exactly 1: %v", s.name, len(lines), lines)
		}
		l := lines[0]
		if l["outcome"] != s.outcome || l["inbox"] != s.inbox || l["function"] != FuncSubscriber || l["endpoint"] != "BillingEndpoint" {
			t.Fatalf("%s: log line %v", s.name, l)
		}
		for _, k := range []string{"messageId", "sessionId", "eventTypeId", "messageType", "durationMs", "invocationId"} {
			if _, ok := l[k]; !ok {
				t.Errorf("%s: log line lacks %s", s.name, k)
			}
		}
		sent := ta.pub.Sent()[before:]
		switch {
		case s.resp == "" && len(sent) != 0:
			t.Fatalf("%s: unexpected response %s", s.name, sent[0].Type())
		case s.resp != "" && (len(sent) != 1 || sent[0].Type() != s.resp):
			t.Fatalf("%s: responses %d, want one %s", s.name, len(sent), s.resp)
		}
	}
	raw := ta.logs.String()
	if strings.Contains(raw, secretPayload) {
		t.Fatal("a log line contains the payload")
	}
	if ta.handled != 4 {
		t.Fatalf("handler ran %d times, want 4 (fresh, failing, retried, bypass)", ta.handled)
	}
	if got := ta.Metrics().Get("nimbus.invocations", "nimbus.outcome=duplicate"); got != 1 {
		t.Fatalf("duplicate invocations counter = %v", got)
	}
}

func TestLogsNeverContainPayloadOnAnyPath(t *testing.T) {
	ta := newTestApp(t, nil, func(int) error { return errors.New("handler failed") })
	ta.post(t, FuncSubscriber, envelope(msg{id: "p-1"}))
	ta.post(t, FuncSubscriber, envelope(msg{noID: true}))
	bad := bytes.Replace(envelope(msg{id: "p-2"}), []byte(`"MessageType":"EventRequest"`), []byte(`"MessageType":"`+secretPayload+`"`), 1)
	ta.post(t, FuncSubscriber, bad)
	if strings.Contains(ta.logs.String(), secretPayload) {
		t.Fatalf("payload in logs:\n%s", ta.logs.String())
	}
}

// Every logged string is bounded, and a value read from the body (here a
// 1 MB event type with no EventTypeId property) is not logged at all.
func TestLogLinesAreBoundedAndCarryNoBodyValues(t *testing.T) {
	ta := newTestApp(t, nil, nil)
	bodyType := secretPayload + strings.Repeat("t", 1<<20)
	body := `{"EventContent":{"EventTypeId":"` + bodyType + `","EventJson":"{}"},"ErrorContent":null}`
	env := hostwire.ServiceBus(hostwire.ServiceBusMessage{
		FunctionName: FuncSubscriber, Body: []byte(body), MessageID: strings.Repeat("m", 1<<20), SessionID: hostwire.S("s-1"),
		DeliveryCount: 1, SequenceNumber: 1, EnqueuedTime: time.Now(),
		Properties: hostwire.Props("To", "BillingEndpoint", "From", "ShopEndpoint", "MessageType", "EventRequest", "EventId", "evt-1"),
		Namespace:  "sb.test", UtcNow: time.Now(), RandGUID: "00000000-0000-0000-0000-000000000000",
	})
	req := httptest.NewRequest(http.MethodPost, "/"+FuncSubscriber, bytes.NewReader(env))
	req.Header.Set("X-Azure-Functions-InvocationId", strings.Repeat("i", 200<<10))
	rec := httptest.NewRecorder()
	ta.Handler().ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("status %d", rec.Code)
	}
	raw := ta.logs.String()
	if strings.Contains(raw, secretPayload) {
		t.Fatal("the body's event type reached the log")
	}
	lines := ta.logs.Lines(t)
	if len(lines) != 1 || len(raw) > 8<<10 {
		t.Fatalf("%d lines, %d bytes: one bounded line expected", len(lines), len(raw))
	}
	l := lines[0]
	if l["outcome"] != "unsupported" || l["inbox"] != "bypassed" || l["eventTypeSource"] != "body" || l["eventTypeId"] != "" {
		t.Fatalf("line = %v", l)
	}
	for _, k := range []string{"messageId", "invocationId"} {
		if v, _ := l[k].(string); !strings.Contains(v, "[truncated: ") {
			t.Errorf("%s not marked truncated", k)
		}
	}
}

// A handler's permanent failure fails the invocation at once (no pause), so
// the broker dead-letters the message after its last delivery.
func TestPermanentFailureIsAnsweredWithoutPause(t *testing.T) {
	ta := newTestApp(t, map[string]string{config.KeyRetryBaseDelay: "00:00:02"}, func(int) error {
		return subscriber.Permanent(errors.New("order can never be billed"))
	})
	paused := false
	ta.App.pause = func(context.Context, time.Duration) { paused = true }
	status, _ := ta.post(t, FuncSubscriber, envelope(msg{id: "perm-1"}))
	lines := ta.logs.Lines(t)
	if status != http.StatusUnprocessableEntity || paused || lines[len(lines)-1]["outcome"] != "permanent_failure" {
		t.Fatalf("status %d, paused %v, line %v", status, paused, lines[len(lines)-1])
	}
	if len(ta.pub.Sent()) != 0 {
		t.Fatal("a response was sent for a failed delivery")
	}
}

func TestInboxOffChecksNothing(t *testing.T) {
	ta := newTestApp(t, map[string]string{config.KeyInboxEnabled: "false"}, nil)
	if ta.endpoint.store != nil {
		t.Fatal("a store was built with the inbox off")
	}
	for range 2 {
		if status, _ := ta.post(t, FuncSubscriber, envelope(msg{id: "m-1"})); status != 200 {
			t.Fatal(status)
		}
	}
	if ta.handled != 2 {
		t.Fatalf("handled %d", ta.handled)
	}
	if l := ta.logs.Lines(t); l[0]["inbox"] != "off" {
		t.Fatalf("inbox = %v", l[0]["inbox"])
	}
}

func TestUnknownFunctionIs404AndHealthIsFast(t *testing.T) {
	ta := newTestApp(t, nil, nil)
	if status, _ := ta.post(t, "Nope", []byte(`{}`)); status != 404 {
		t.Fatalf("status %d", status)
	}
	rec := httptest.NewRecorder()
	ta.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != 200 {
		t.Fatalf("GET / = %d", rec.Code)
	}
}

func TestMemorySinkShowsTypedProperties(t *testing.T) {
	ta := newTestApp(t, nil, nil)
	ta.post(t, FuncSubscriber, envelope(msg{id: "m-1"}))
	rec := httptest.NewRecorder()
	ta.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/_nimbus/resolver", nil))
	var sent []devhost.SentResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &sent); err != nil || len(sent) != 1 {
		t.Fatalf("sink = %s (%v)", rec.Body.String(), err)
	}
	p := sent[0].Properties
	if p["RetryCount"].Type != "int" || p["QueueTimeMs"].Type != "long" || p["To"].Value != "Resolver" {
		t.Fatalf("properties = %+v", p)
	}
}

// A transient failure is answered only after a pause that doubles with each
// delivery, so a short outage does not spend the broker's MaxDeliveryCount
// at once; a message that can never succeed is answered at once. (The
// random number 1 takes the top of each jittered pause.)
func TestTransientFailuresArePacedByDeliveryCount(t *testing.T) {
	ta := newTestApp(t, map[string]string{config.KeyRetryBaseDelay: "00:00:02", config.KeyRetryMaxDelay: "00:00:10"}, func(int) error {
		return subscriber.Transient(errors.New("downstream unavailable"))
	})
	var got []time.Duration
	ta.App.pause = func(ctx context.Context, d time.Duration) { got = append(got, d) }
	ta.App.rand = func() float64 { return 1 }
	for n := 1; n <= 5; n++ {
		if status, _ := ta.post(t, FuncSubscriber, envelope(msg{id: "m-1", deliveryCount: n})); status != 503 {
			t.Fatalf("delivery %d: status %d", n, status)
		}
	}
	bad := bytes.Replace(envelope(msg{id: "m-2"}), []byte(`"MessageType":"EventRequest"`), []byte(`"MessageType":"Bogus"`), 1)
	if status, _ := ta.post(t, FuncSubscriber, bad); status == 200 {
		t.Fatal("invalid message completed")
	}
	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pauses = %v, want %v (and none for the invalid message)", got, want)
	}
}

// The redelivery pause is jittered: each is drawn uniformly between half the
// delivery's pause and all of it, so deliveries that failed together (the
// copies whose batches conflicted, the messages of one outage) are not
// redelivered together. A zero pause stays zero.
func TestRedeliveryPauseIsJittered(t *testing.T) {
	ta := newTestApp(t, map[string]string{config.KeyRetryBaseDelay: "00:00:02", config.KeyRetryMaxDelay: "00:00:10"}, func(int) error {
		return subscriber.Transient(errors.New("downstream unavailable"))
	})
	var got []time.Duration
	ta.App.pause = func(ctx context.Context, d time.Duration) { got = append(got, d) }
	draws := []float64{0, 0.5, 0.75, 0.25}
	ta.App.rand = func() float64 { r := draws[0]; draws = draws[1:]; return r }
	for _, dc := range []int{1, 1, 2, 4} {
		if status, _ := ta.post(t, FuncSubscriber, envelope(msg{id: "m-1", deliveryCount: dc})); status != 503 {
			t.Fatalf("delivery %d: status %d", dc, status)
		}
	}
	want := []time.Duration{time.Second, 1500 * time.Millisecond, 3500 * time.Millisecond, 6250 * time.Millisecond}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pauses = %v, want %v", got, want)
	}

	zero := newTestApp(t, nil, func(int) error { return subscriber.Transient(errors.New("downstream unavailable")) })
	got = nil
	zero.App.pause = func(ctx context.Context, d time.Duration) { got = append(got, d) }
	zero.App.rand = func() float64 { return 0.9 }
	for dc := 1; dc <= 3; dc++ {
		if status, _ := zero.post(t, FuncSubscriber, envelope(msg{id: "m-2", deliveryCount: dc})); status != 503 {
			t.Fatalf("delivery %d: status %d", dc, status)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint([]time.Duration{0, 0, 0}) {
		t.Fatalf("with BaseDelay 0 the pauses are %v, want none", got)
	}
}

// On shutdown a paced failure answers 503 at once instead of holding the
// process for the rest of its pause.
func TestShutdownEndsAPauseAndAnswers503(t *testing.T) {
	ta := newTestApp(t, map[string]string{config.KeyRetryBaseDelay: "00:01:00", config.KeyRetryMaxDelay: "00:01:00"}, func(int) error {
		return subscriber.Transient(errors.New("downstream unavailable"))
	})
	paused := make(chan struct{})
	ta.App.pause = func(ctx context.Context, d time.Duration) {
		close(paused)
		sleep.For(ctx, d)
	}
	status := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		ta.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/"+FuncSubscriber, bytes.NewReader(envelope(msg{id: "m-1"}))))
		status <- rec.Code
	}()
	<-paused
	ta.BeginShutdown()
	select {
	case code := <-status:
		if code != http.StatusServiceUnavailable {
			t.Fatalf("status %d, want 503", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown did not end the pause")
	}
}

// NimBus__Publish__MaxMessageBytes reaches the pipeline: the same event is
// refused under a 16 KB limit (the delivery fails permanently and nothing
// is published) and sent under a 32 KB one.
func TestPublishMaxMessageBytesSetting(t *testing.T) {
	payload := `{"Note":"` + strings.Repeat("n", 20<<10) + `"}`
	for _, c := range []struct {
		limit   string
		outcome string
		sent    bool
	}{{"16384", "permanent_failure", false}, {"32768", "completed", true}} {
		cfg, err := config.Load(config.FromMap(map[string]string{
			config.KeyEndpoint: "BillingEndpoint", config.KeyInboxEnabled: "true", config.KeyInboxStore: "InMemory",
			config.KeyResolverSink: "InMemory", config.KeyRetryBaseDelay: "0", config.KeyPublishMaxMessageBytes: c.limit,
		}))
		if err != nil {
			t.Fatal(err)
		}
		reg := subscriber.NewRegistry()
		reg.Handle("OrderPlaced", func(ctx context.Context, ev *subscriber.Event) (subscriber.Result, error) {
			if err := ev.Publish(subscriber.Publication{EventTypeID: "OrderNoted", MessageID: "OrderNoted-1", JSON: payload}); err != nil {
				return subscriber.Result{}, err
			}
			return subscriber.Completed(), nil
		})
		logs := &testlog.Buffer{}
		a, err := New(cfg, Deps{Handlers: reg, Log: zerolog.New(logs), Version: "test"})
		if err != nil {
			t.Fatal(err)
		}
		ta := &testApp{App: a, logs: logs, pub: a.endpoint.memory}
		ta.post(t, FuncSubscriber, envelope(msg{id: "m-1"}))
		lines := logs.Lines(t)
		if len(lines) != 1 || lines[0]["outcome"] != c.outcome {
			t.Fatalf("limit %s: log lines %v, want one with outcome %s", c.limit, lines, c.outcome)
		}
		sent := false
		for _, m := range ta.pub.Sent() {
			if m.MessageID == "OrderNoted-1" {
				sent = true
			}
		}
		if sent != c.sent {
			t.Errorf("limit %s: event sent %v, want %v", c.limit, sent, c.sent)
		}
		_ = a.Close(context.Background())
	}
}
