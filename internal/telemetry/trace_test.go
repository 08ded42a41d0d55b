package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

const (
	inTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	inSpan   = "00f067aa0ba902b7"
	inParent = "00-" + inTrace + "-" + inSpan + "-01"
)

func TestExtractReadsTraceparentThenDiagnosticID(t *testing.T) {
	for _, c := range []struct {
		name      string
		props     map[string]any
		wantTrace string
		wantState string
	}{
		{"traceparent and tracestate", map[string]any{PropTraceParent: inParent, PropTraceState: "congo=t61rcWkgMzE"}, inTrace, "congo=t61rcWkgMzE"},
		{"traceparent wins over Diagnostic-Id", map[string]any{PropTraceParent: inParent, PropDiagnosticID: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, inTrace, ""},
		{"Diagnostic-Id in the W3C form", map[string]any{PropDiagnosticID: inParent}, inTrace, ""},
		{"hierarchical Diagnostic-Id is ignored", map[string]any{PropDiagnosticID: "|abc.1."}, "", ""},
		{"malformed traceparent is ignored", map[string]any{PropTraceParent: "00-xyz-" + inSpan + "-01"}, "", ""},
		{"non-string traceparent is ignored", map[string]any{PropTraceParent: int32(1)}, "", ""},
		{"nothing", nil, "", ""},
	} {
		sc := trace.SpanContextFromContext(Extract(context.Background(), c.props))
		if c.wantTrace == "" {
			if sc.IsValid() {
				t.Errorf("%s: extracted %v, want nothing", c.name, sc)
			}
			continue
		}
		if sc.TraceID().String() != c.wantTrace || sc.SpanID().String() != inSpan || !sc.IsSampled() || !sc.IsRemote() ||
			sc.TraceState().String() != c.wantState {
			t.Errorf("%s: extracted %s/%s sampled=%v state=%q", c.name, sc.TraceID(), sc.SpanID(), sc.IsSampled(), sc.TraceState())
		}
	}
}

func TestInjectWritesStringsOnACopy(t *testing.T) {
	ctx := Extract(context.Background(), map[string]any{PropTraceParent: inParent, PropTraceState: "congo=t61rcWkgMzE"})
	ctx, span := PropagatingTracerProvider().Tracer("t").Start(ctx, "send")
	props := map[string]any{"MessageType": "ResolutionResponse", "RetryCount": int32(0), PropTraceParent: "00-stale", PropTraceState: "stale=1"}
	out := Inject(ctx, props)
	if props[PropTraceParent] != "00-stale" || props[PropTraceState] != "stale=1" || len(props) != 4 {
		t.Fatalf("Inject changed its input: %v", props)
	}
	want := "00-" + inTrace + "-" + span.SpanContext().SpanID().String() + "-01"
	if tp, ok := out[PropTraceParent].(string); !ok || tp != want {
		t.Fatalf("traceparent %#v, want %q", out[PropTraceParent], want)
	}
	if ts, ok := out[PropTraceState].(string); !ok || ts != "congo=t61rcWkgMzE" {
		t.Fatalf("tracestate %#v", out[PropTraceState])
	}
	if out["RetryCount"] != int32(0) || out["MessageType"] != "ResolutionResponse" {
		t.Fatalf("other properties changed: %v", out)
	}
	// Without a tracestate none is written, and a stale one is dropped.
	ctx, _ = PropagatingTracerProvider().Tracer("t").Start(Extract(context.Background(), map[string]any{PropTraceParent: inParent}), "send")
	if out := Inject(ctx, props); out[PropTraceState] != nil {
		t.Fatalf("tracestate %#v, want none", out[PropTraceState])
	}
	// Without a span context neither is written.
	if out := Inject(context.Background(), props); out[PropTraceParent] != nil || out[PropTraceState] != nil {
		t.Fatalf("wrote trace context without a span: %v", out)
	}
}

func TestPropagatingTracerContinuesTheTrace(t *testing.T) {
	tr := PropagatingTracerProvider().Tracer("t")
	parent := Extract(context.Background(), map[string]any{PropTraceParent: inParent, PropTraceState: "a=b"})
	ctx, span := tr.Start(parent, "process")
	sc := span.SpanContext()
	if sc.TraceID().String() != inTrace || sc.SpanID().String() == inSpan || !sc.SpanID().IsValid() || !sc.IsSampled() || sc.TraceState().String() != "a=b" {
		t.Fatalf("child %s/%s sampled=%v state=%q", sc.TraceID(), sc.SpanID(), sc.IsSampled(), sc.TraceState())
	}
	if span.IsRecording() || trace.SpanFromContext(ctx) != span {
		t.Fatal("the span records, or ctx does not carry it")
	}
	_, child := tr.Start(ctx, "send")
	if child.SpanContext().TraceID() != sc.TraceID() || child.SpanContext().SpanID() == sc.SpanID() {
		t.Fatal("a grandchild did not continue the trace with its own span id")
	}
	// An unsampled parent stays unsampled.
	_, s := tr.Start(Extract(context.Background(), map[string]any{PropTraceParent: "00-" + inTrace + "-" + inSpan + "-00"}), "x")
	if s.SpanContext().IsSampled() {
		t.Fatal("the sampled flag was set on an unsampled trace")
	}
	// Without a parent, a new sampled trace; WithNewRoot ignores the parent.
	seen := map[trace.TraceID]bool{}
	for _, c := range []context.Context{context.Background(), context.Background(), parent} {
		_, root := tr.Start(c, "root", trace.WithNewRoot())
		rc := root.SpanContext()
		if !rc.IsValid() || !rc.IsSampled() || rc.TraceID().String() == inTrace || seen[rc.TraceID()] {
			t.Fatalf("root %s/%s sampled=%v", rc.TraceID(), rc.SpanID(), rc.IsSampled())
		}
		seen[rc.TraceID()] = true
	}
}

func BenchmarkPropagatingSpan(b *testing.B) {
	tr := PropagatingTracerProvider().Tracer("t")
	ctx := Extract(context.Background(), map[string]any{PropTraceParent: inParent})
	b.ReportAllocs()
	for b.Loop() {
		_, s := tr.Start(ctx, "x")
		s.End()
	}
}
