package nimbus_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/compose"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testlog"
	"github.com/nimbus-go/functions-subscriber/internal/devhost"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/nimbus"
)

// logApp is a composed app whose handler for OrderPlaced is h, with its
// stdout, stderr and spans.
type logApp struct {
	svc            *app.App
	stdout, stderr testlog.Buffer
	spans          *tracetest.SpanRecorder
}

func newLogApp(t *testing.T, level string, register func(a *nimbus.App)) *logApp {
	t.Helper()
	a := nimbus.New()
	register(a)
	la := &logApp{spans: tracetest.NewSpanRecorder()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(la.spans))
	env := []string{"NimBus__Endpoint=BillingEndpoint", "NimBus__Inbox__Enabled=true", "NimBus__Inbox__Store=InMemory",
		"NimBus__Resolver__Sink=InMemory", "NimBus__Retry__BaseDelay=0", "NimBus__LogLevel=" + level}
	svc, err := compose.App(a, compose.Options{Environ: env, Stdout: &la.stdout, Stderr: &la.stderr,
		Deps: app.Deps{Publisher: &resolver.Memory{}, TracerProvider: tp, Pause: func(context.Context, time.Duration) {}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close(context.Background()) })
	la.svc = svc
	return la
}

// deliver posts one OrderPlaced event and returns the status and the Logs
// of the answer.
func (la *logApp) deliver(t *testing.T, messageID string) (int, []string) {
	t.Helper()
	_, env := devhost.EventInvocation("Subscriber", devhost.Event{Endpoint: "BillingEndpoint", Publisher: "ShopEndpoint",
		EventTypeID: "OrderPlaced", EventJSON: `{"OrderId":"O-1"}`, MessageID: messageID}, 1, time.Now())
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/Subscriber", bytes.NewReader(env))
	req.Header.Set("X-Azure-Functions-InvocationId", "inv-"+messageID)
	la.svc.Handler().ServeHTTP(rec, req)
	var body struct{ Logs []string }
	if rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("answer %q: %v", rec.Body, err)
		}
	}
	return rec.Code, body.Logs
}

// lines returns the JSON lines on stdout whose source is the handler, and
// the pipeline's invocation line (the one with an outcome; nil when the
// level leaves it out).
func (la *logApp) lines(t *testing.T) (handler []map[string]any, invocation map[string]any) {
	t.Helper()
	for _, l := range la.stdout.Lines(t) {
		switch {
		case l["source"] == "handler":
			handler = append(handler, l)
		case l["outcome"] != nil:
			invocation = l
		}
	}
	return handler, invocation
}

// A handler's records are the app's JSON lines with the invocation's
// fields and the trace and span ids of the nimbus.handler span, at the
// level words and time format of the pipeline's line.
func TestHandlerLoggerCarriesTheInvocationsFields(t *testing.T) {
	la := newLogApp(t, "debug", func(a *nimbus.App) {
		a.Handle("OrderPlaced", func(ctx context.Context, ev *nimbus.Event) (nimbus.Result, error) {
			nimbus.Logger(ctx).Debug("looking up", "orderId", "O-1")
			nimbus.Logger(ctx).With("customer", "C-7").WithGroup("order").Info("accepted", "lines", 3, "paid", true, "amount", 12.5,
				slog.Group("ship", "city", "Oslo"), "wait", 1500*time.Millisecond, "level", "mine")
			return nimbus.Completed(), nil
		})
	})
	if code, _ := la.deliver(t, "OrderPlaced-O-1"); code != http.StatusOK {
		t.Fatalf("status %d: %s", code, la.stderr.String())
	}
	lines, inv := la.lines(t)
	if inv == nil || inv["invocationId"] != "inv-OrderPlaced-O-1" {
		t.Fatalf("invocation line %v", inv)
	}
	if len(lines) != 2 {
		t.Fatalf("handler lines = %d, want 2: %s", len(lines), la.stdout.String())
	}
	var handlerSpan sdktrace.ReadOnlySpan
	for _, s := range la.spans.Ended() {
		if s.Name() == "nimbus.handler" {
			handlerSpan = s
		}
	}
	if handlerSpan == nil {
		t.Fatal("no nimbus.handler span")
	}
	for _, l := range lines {
		for k, want := range map[string]any{"function": "Subscriber", "invocationId": inv["invocationId"], "messageId": "OrderPlaced-O-1",
			"eventTypeId": "OrderPlaced", "traceId": handlerSpan.SpanContext().TraceID().String(), "spanId": handlerSpan.SpanContext().SpanID().String()} {
			if l[k] != want || want == nil {
				t.Errorf("%s = %v, want %v (line %v)", k, l[k], want, l)
			}
		}
		ts, ok := l["time"].(string)
		if _, err := time.Parse(time.RFC3339Nano, ts); !ok || err != nil {
			t.Errorf("time %v is not the pipeline's RFC 3339 time", l["time"])
		}
	}
	if lines[0]["level"] != "debug" || lines[0]["message"] != "looking up" || lines[0]["orderId"] != "O-1" {
		t.Errorf("first line %v", lines[0])
	}
	want := map[string]any{"level": "info", "message": "accepted", "customer": "C-7", "order.lines": 3.0, "order.paid": true,
		"order.amount": 12.5, "order.ship.city": "Oslo", "order.wait": "1.5s", "order.level": "mine"}
	for k, v := range want {
		if lines[1][k] != v {
			t.Errorf("%s = %v, want %v", k, lines[1][k], v)
		}
	}
	// A key that is one of the line's own fields is moved aside.
	la2 := newLogApp(t, "info", func(a *nimbus.App) {
		a.Handle("OrderPlaced", func(ctx context.Context, ev *nimbus.Event) (nimbus.Result, error) {
			nimbus.Logger(ctx).Info("m", "messageId", "mine", "level", "mine")
			return nimbus.Completed(), nil
		})
	})
	la2.deliver(t, "OrderPlaced-O-2")
	lines, _ = la2.lines(t)
	if len(lines) != 1 || lines[0]["messageId"] != "OrderPlaced-O-2" || lines[0]["attr.messageId"] != "mine" ||
		lines[0]["level"] != "info" || lines[0]["attr.level"] != "mine" {
		t.Fatalf("lines %v", lines)
	}
}

// The app's level filters the handler's records, as it does the
// pipeline's.
func TestHandlerLoggerFollowsTheAppsLevel(t *testing.T) {
	enabled := map[slog.Level]bool{}
	la := newLogApp(t, "warn", func(a *nimbus.App) {
		a.Handle("OrderPlaced", func(ctx context.Context, ev *nimbus.Event) (nimbus.Result, error) {
			l := nimbus.Logger(ctx)
			for _, lv := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
				enabled[lv] = l.Enabled(ctx, lv)
				l.Log(ctx, lv, "at "+lv.String())
			}
			return nimbus.Completed(), nil
		})
	})
	la.deliver(t, "OrderPlaced-O-1")
	lines, _ := la.lines(t)
	if len(lines) != 2 || lines[0]["level"] != "warn" || lines[0]["message"] != "at WARN" || lines[1]["level"] != "error" {
		t.Fatalf("lines at warn: %v", lines)
	}
	if enabled[slog.LevelInfo] || enabled[slog.LevelDebug] || !enabled[slog.LevelWarn] || !enabled[slog.LevelError] {
		t.Fatalf("Enabled = %v", enabled)
	}
}

// Every string the handler logs is bounded, and the line is never
// dropped: a huge message and value, invalid UTF-8, a long key, and more
// attributes than a line takes.
func TestHandlerLoggerBoundsWhatItIsGiven(t *testing.T) {
	huge := strings.Repeat("x", 100_000)
	la := newLogApp(t, "info", func(a *nimbus.App) {
		a.Handle("OrderPlaced", func(ctx context.Context, ev *nimbus.Event) (nimbus.Result, error) {
			args := []any{"big", huge, "bad", "a\xffb", strings.Repeat("k", 200), "v", "err", errors.New(huge)}
			for i := range 40 {
				args = append(args, "n"+string(rune('a'+i%26))+string(rune('a'+i/26)), i)
			}
			nimbus.Logger(ctx).Info(huge, args...)
			return nimbus.Completed(), nil
		})
	})
	la.deliver(t, "OrderPlaced-O-1")
	for _, raw := range strings.Split(strings.TrimSpace(la.stdout.String()), "\n") {
		if len(raw) > 20_000 {
			t.Fatalf("a line of %d bytes", len(raw))
		}
	}
	lines, _ := la.lines(t)
	if len(lines) != 1 {
		t.Fatalf("lines %v", lines)
	}
	l := lines[0]
	for _, k := range []string{"message", "big", "err"} {
		s, _ := l[k].(string)
		if len(s) >= len(huge) || !strings.Contains(s, "truncated") {
			t.Errorf("%s not bounded: %d bytes", k, len(s))
		}
	}
	if l["bad"] != "a\uFFFDb" {
		t.Errorf("bad = %q", l["bad"])
	}
	if l["attrsDropped"] != 12.0 {
		t.Errorf("attrsDropped = %v, want 12 (44 attributes, 32 written)", l["attrsDropped"])
	}
	for k := range l {
		if len(k) > 200 {
			t.Errorf("a key of %d bytes", len(k))
		}
	}
}

// Warnings and errors a handler logs reach the host as the pipeline's do:
// in the Logs of a completed invocation's answer, after the summary; on
// stderr, before the failure line, for a failing one. Info does not.
func TestHandlerWarningsAndErrorsReachTheHost(t *testing.T) {
	fail := false
	la := newLogApp(t, "info", func(a *nimbus.App) {
		a.Handle("OrderPlaced", func(ctx context.Context, ev *nimbus.Event) (nimbus.Result, error) {
			l := nimbus.Logger(ctx)
			l.Info("routine")
			l.Warn("stock low", "sku", "S 1")
			l.Error("price missing", "sku", "S-2")
			if fail {
				return nimbus.Result{}, nimbus.Transient(errors.New("warehouse down"))
			}
			return nimbus.Completed(), nil
		})
	})
	code, logs := la.deliver(t, "OrderPlaced-O-1")
	if code != http.StatusOK || len(logs) != 3 {
		t.Fatalf("status %d, Logs %q", code, logs)
	}
	if !strings.Contains(logs[0], " outcome=completed ") {
		t.Errorf("Logs[0] = %q, want the summary", logs[0])
	}
	if !strings.HasPrefix(logs[1], "warning: handler logged: stock low:") || !strings.Contains(logs[1], `sku="S 1"`) ||
		!strings.Contains(logs[1], "messageId=OrderPlaced-O-1") {
		t.Errorf("Logs[1] = %q", logs[1])
	}
	if !strings.HasPrefix(logs[2], "error: handler logged: price missing:") || !strings.Contains(logs[2], "sku=S-2") {
		t.Errorf("Logs[2] = %q", logs[2])
	}
	if la.stderr.String() != "" {
		t.Errorf("stderr of a completed invocation: %q", la.stderr.String())
	}

	fail = true
	code, _ = la.deliver(t, "OrderPlaced-O-2")
	if code == http.StatusOK {
		t.Fatal("a transient failure completed")
	}
	stderr := strings.Split(strings.TrimSpace(la.stderr.String()), "\n")
	if len(stderr) != 3 || !strings.HasPrefix(stderr[0], "warning: handler logged: stock low:") ||
		!strings.HasPrefix(stderr[1], "error: handler logged: price missing:") || !strings.Contains(stderr[2], "invocation answered") {
		t.Fatalf("stderr %q", stderr)
	}
}

// At most eight warnings or errors per invocation are kept for the host;
// the rest are counted, and every one is on stdout.
func TestHandlerWarningsForTheHostAreBounded(t *testing.T) {
	la := newLogApp(t, "info", func(a *nimbus.App) {
		a.Handle("OrderPlaced", func(ctx context.Context, ev *nimbus.Event) (nimbus.Result, error) {
			for range 20 {
				nimbus.Logger(ctx).Warn("again")
			}
			return nimbus.Completed(), nil
		})
	})
	_, logs := la.deliver(t, "OrderPlaced-O-1")
	if len(logs) != 8 || !strings.Contains(logs[7], "more log entries") {
		t.Fatalf("Logs %q", logs)
	}
	if lines, _ := la.lines(t); len(lines) != 20 {
		t.Fatalf("stdout has %d handler lines, want 20", len(lines))
	}
}

// Outside a handler, Logger is slog.Default(), which does not panic.
func TestLoggerOutsideAHandlerIsTheDefault(t *testing.T) {
	if nimbus.Logger(context.Background()) != slog.Default() {
		t.Fatal("Logger of a plain context is not slog.Default()")
	}
	nimbus.Logger(context.Background()).Debug("no handler here")
}

// An HTTP function's request context carries a handler logger with the
// function, the host's invocation id and the request span's ids; its
// warnings go to stderr, where the host reads an HTTP function's lines.
func TestHTTPFunctionLogger(t *testing.T) {
	la := newLogApp(t, "info", func(a *nimbus.App) {
		a.Handle("OrderPlaced", func(context.Context, *nimbus.Event) (nimbus.Result, error) { return nimbus.Completed(), nil })
		a.HandleHTTP(nimbus.HTTPFunction{Name: "PlaceOrder", Route: "orders", Methods: []string{"post"},
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				nimbus.Logger(r.Context()).Warn("order without lines", "orderId", "O-9")
				w.WriteHeader(http.StatusAccepted)
			})})
	})
	req := httptest.NewRequest(http.MethodPost, "/api/orders", strings.NewReader(`{}`))
	req.Header.Set("X-Azure-Functions-InvocationId", "inv-http-1")
	rec := httptest.NewRecorder()
	la.svc.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusAccepted {
		t.Fatalf("status %d", rec.Code)
	}
	var line map[string]any
	for _, l := range la.stdout.Lines(t) {
		if l["source"] == "handler" {
			line = l
		}
	}
	var server sdktrace.ReadOnlySpan
	for _, s := range la.spans.Ended() {
		if strings.HasPrefix(s.Name(), "POST ") {
			server = s
		}
	}
	if line == nil || server == nil {
		t.Fatalf("handler line %v, server span %v", line, server)
	}
	for k, want := range map[string]any{"function": "PlaceOrder", "invocationId": "inv-http-1", "level": "warn", "orderId": "O-9",
		"traceId": server.SpanContext().TraceID().String(), "spanId": server.SpanContext().SpanID().String()} {
		if line[k] != want {
			t.Errorf("%s = %v, want %v", k, line[k], want)
		}
	}
	if _, ok := line["messageId"]; ok {
		t.Errorf("an HTTP request's line carries a messageId: %v", line)
	}
	if !strings.HasPrefix(la.stderr.String(), "warning: handler logged: order without lines:") {
		t.Errorf("stderr %q", la.stderr.String())
	}
}
