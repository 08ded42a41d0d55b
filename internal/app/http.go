package app

import (
	"fmt"
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/funchost"
	"github.com/nimbus-go/functions-subscriber/internal/handlerlog"
	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// HTTPFunction is an HTTP-triggered function of the endpoint app, served
// at funchost.RoutePrefix+Route. Its name, route and methods have been
// checked by the caller (package nimbus).
type HTTPFunction struct {
	Name    string
	Route   string
	Methods []string
	Handler http.Handler
}

var serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

// serveHTTPFunctions routes the HTTP functions, each request wrapped by
// httpInvocation.
func (h *host) serveHTTPFunctions(fs []HTTPFunction) {
	for _, f := range fs {
		h.server.HandleHTTP(f.Name, f.Route, f.Methods, h.httpInvocation(f))
	}
}

// httpInvocation wraps an HTTP function's handler: a server span that
// continues the request's traceparent (the request's context carries it,
// so what the handler publishes continues the trace), the Cosmos request
// charge summed on that context, one log line and the metrics per
// request, and a panic answered 500 and logged without a value of the
// request.
func (h *host) httpInvocation(f HTTPFunction) http.Handler {
	route := funchost.RoutePrefix + f.Route
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := h.now()
		ctx := telemetry.ExtractHeader(r.Context(), r.Header)
		hasParent := trace.SpanContextFromContext(ctx).IsValid()
		ctx, span := h.tracer.Start(ctx, r.Method+" "+route, serverSpan...)
		defer span.End()
		ctx, charge := telemetry.WithCharge(ctx)
		rw := &statusWriter{ResponseWriter: w}
		inv := &funchost.Invocation{Function: f.Name, InvocationID: r.Header.Get("X-Azure-Functions-InvocationId")}
		logged := &handlerlog.Sink{}
		ctx = handlerlog.WithContext(ctx, handlerlog.New(h.log, f.Name, inv.InvocationID, logged).WithFields(ctx))
		panicked := false
		func() {
			defer func() {
				p := recover()
				if p == nil {
					return
				}
				if p == http.ErrAbortHandler {
					// The handler aborts the response on purpose.
					panic(p)
				}
				panicked = true
				h.log.Error().Str("function", f.Name).Str("invocationId", logsafe.Bound(inv.InvocationID)).
					Str("panic", logsafe.Bound(panicText(p))).Str("stack", logsafe.Stack(debug.Stack())).
					Msg("HTTP function panicked; answering 500")
				if !rw.wrote {
					http.Error(rw, "internal error", http.StatusInternalServerError)
				}
			}()
			f.Handler.ServeHTTP(rw, r.WithContext(ctx))
		}()
		status := rw.statusCode()
		if panicked {
			status = http.StatusInternalServerError
		}
		d := h.now().Sub(start)
		outcome := httpOutcome(status, panicked)
		h.metrics.Inc(telemetry.HTTPRequests, telemetry.TagOutcome, outcome)
		h.metrics.Record(telemetry.HTTPDuration, telemetry.TagOutcome, outcome, float64(d.Microseconds())/1000)
		if span.IsRecording() {
			span.SetAttributes(
				attribute.String("http.request.method", r.Method),
				attribute.String("http.route", route),
				attribute.Int("http.response.status_code", status),
				attribute.String("faas.trigger", "http"),
				attribute.String("faas.name", f.Name),
				attribute.Bool("nimbus.has_parent_trace", hasParent),
				attribute.String(telemetry.TagOutcome, outcome),
				attribute.Float64("nimbus.cosmos.request_charge", charge.RequestUnits()),
			)
			if status >= 500 {
				span.SetStatus(codes.Error, outcome)
			}
		}
		level := zerolog.InfoLevel
		if status >= 500 {
			level = zerolog.ErrorLevel
		}
		if ev := h.invocationLine(level, inv); ev != nil {
			ev = ev.Str("method", logsafe.Bound(r.Method)).Str("route", route).Int("status", status).Str("outcome", outcome).
				Bool("hasParentTrace", hasParent).Float64("durationMs", float64(d.Microseconds())/1000)
			h.withCharge(ev, charge).Msg("HTTP request answered")
		}
		// The host logs an HTTP function's stderr, not a response's Logs:
		// the handler's warnings and errors go there.
		for _, l := range handlerLines(logged) {
			h.recent.add(inv.InvocationID, h.stderrLine(l))
		}
		line := f.Name + " request answered " + strconv.Itoa(status) + ": method=" + logsafe.Bound(r.Method) + " route=" + route
		if inv.InvocationID != "" {
			line += " invocationId=" + strconv.Quote(logsafe.Bound(inv.InvocationID))
		}
		line += " durationMs=" + string(appendMillis(nil, d.Microseconds()))
		if status >= 500 {
			h.recent.add(inv.InvocationID, h.stderrLine("error: "+line))
			return
		}
		h.recent.add(inv.InvocationID, line)
	})
}

// panicText names a panic's value without quoting it: a handler's panic
// value may hold what it read from the request. A runtime error's text
// (an index out of range, a nil dereference) holds none and is kept.
func panicText(p any) string {
	if re, ok := p.(runtime.Error); ok {
		return logsafe.Bound(re.Error())
	}
	return fmt.Sprintf("a value of type %T (not logged: it may hold the request's values)", p)
}

// httpOutcome is the outcome tag of an HTTP function's request: its
// status class, or panicked.
func httpOutcome(status int, panicked bool) string {
	switch {
	case panicked:
		return "panicked"
	case status >= 100 && status < 600:
		return "http_" + strconv.Itoa(status/100) + "xx"
	}
	return "http_other"
}

// statusWriter records the status an HTTP function answered.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// statusCode is the status answered: 200 when the handler wrote nothing.
func (w *statusWriter) statusCode() int {
	if !w.wrote {
		return http.StatusOK
	}
	return w.status
}
