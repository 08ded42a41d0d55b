package telemetry

import (
	"context"
	"math/rand/v2"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// Trace context application properties. NimBus writes and reads only
// traceparent and tracestate (W3C Trace Context) on every message it sends;
// older Azure SDKs wrote Diagnostic-Id, which is accepted on the way in
// when traceparent is absent and never written.
const (
	PropTraceParent  = "traceparent"
	PropTraceState   = "tracestate"
	PropDiagnosticID = "Diagnostic-Id"
)

// TracerName is the instrumentation scope of this module's spans, NimBus's
// consumer ActivitySource name.
const TracerName = "NimBus.Consumer"

var w3c = propagation.TraceContext{}

// Properties adapts Service Bus application properties to the
// OpenTelemetry text-map carrier: values are read when they are strings and
// written as strings (AMQP string), as NimBus writes them.
type Properties map[string]any

// Get returns the string value of key, or "".
func (p Properties) Get(key string) string {
	s, _ := p[key].(string)
	return s
}

// Set sets key to the string value.
func (p Properties) Set(key, value string) { p[key] = value }

// Keys lists the keys.
func (p Properties) Keys() []string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	return keys
}

// diagnosticID reads a Diagnostic-Id in the W3C form as traceparent.
type diagnosticID struct{ Properties }

func (d diagnosticID) Get(key string) string {
	if key == PropTraceParent {
		return d.Properties.Get(PropDiagnosticID)
	}
	return d.Properties.Get(key)
}

// Extract returns ctx carrying the remote span context of the inbound
// application properties: traceparent (with tracestate), or, when it is
// absent, a Diagnostic-Id in the W3C form. Malformed values are ignored.
func Extract(ctx context.Context, props map[string]any) context.Context {
	p := Properties(props)
	if p.Get(PropTraceParent) != "" {
		return w3c.Extract(ctx, p)
	}
	if p.Get(PropDiagnosticID) != "" {
		return w3c.Extract(ctx, diagnosticID{p})
	}
	return ctx
}

// ExtractHeader returns ctx carrying the remote span context of an HTTP
// request's traceparent and tracestate headers; malformed values are
// ignored.
func ExtractHeader(ctx context.Context, h http.Header) context.Context {
	return w3c.Extract(ctx, propagation.HeaderCarrier(h))
}

// Inject returns a copy of props with the traceparent and tracestate of
// ctx's current span set (tracestate only when it is not empty), replacing
// any the caller carried over. props itself is not changed. Without a valid
// span context the copy carries neither.
func Inject(ctx context.Context, props map[string]any) map[string]any {
	out := make(map[string]any, len(props)+2)
	for k, v := range props {
		out[k] = v
	}
	delete(out, PropTraceParent)
	delete(out, PropTraceState)
	w3c.Inject(ctx, Properties(out))
	return out
}

// PropagatingTracerProvider returns a TracerProvider that records nothing
// and exports nothing but still continues traces: each span gets a new span
// id under the parent's trace id, flags and tracestate (a new sampled trace
// when there is no parent), so the traceparent written on outgoing messages
// names this hop, as it does with export on. It is the provider used when no
// exporter is configured: the SDK's own non-recording spans would clear the
// sampled flag that the upstream publisher set.
func PropagatingTracerProvider() trace.TracerProvider { return propagatingProvider{} }

type propagatingProvider struct{ embedded.TracerProvider }

func (propagatingProvider) Tracer(string, ...trace.TracerOption) trace.Tracer {
	return propagatingTracer{}
}

type propagatingTracer struct{ embedded.Tracer }

func (propagatingTracer) Start(ctx context.Context, _ string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanContextFromContext(ctx)
	if len(opts) > 0 {
		if c := trace.NewSpanStartConfig(opts...); c.NewRoot() {
			parent = trace.SpanContext{}
		}
	}
	cfg := trace.SpanContextConfig{TraceFlags: trace.FlagsSampled}
	if parent.IsValid() {
		cfg.TraceID, cfg.TraceFlags, cfg.TraceState = parent.TraceID(), parent.TraceFlags(), parent.TraceState()
	} else {
		for !cfg.TraceID.IsValid() {
			putUint64(cfg.TraceID[:8], rand.Uint64())
			putUint64(cfg.TraceID[8:], rand.Uint64())
		}
	}
	for !cfg.SpanID.IsValid() {
		putUint64(cfg.SpanID[:], rand.Uint64())
	}
	s := &propagatingSpan{sc: trace.NewSpanContext(cfg)}
	return trace.ContextWithSpan(ctx, s), s
}

func putUint64(b []byte, v uint64) {
	_ = b[7]
	for i := range 8 {
		b[i] = byte(v >> (56 - 8*i))
	}
}

// propagatingSpan is a non-recording span with its own span context.
type propagatingSpan struct {
	noop.Span
	sc trace.SpanContext
}

func (s *propagatingSpan) SpanContext() trace.SpanContext       { return s.sc }
func (s *propagatingSpan) TracerProvider() trace.TracerProvider { return propagatingProvider{} }
