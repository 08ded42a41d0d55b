package servicebus

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
	"github.com/nimbus-go/functions-subscriber/internal/testctx"
	"github.com/nimbus-go/functions-subscriber/internal/testenv"
)

// Every send runs in a producer span whose traceparent and tracestate the
// message carries as AMQP strings, replacing any carried over; the caller's
// properties are not changed and keep their AMQP types.
func TestSendCarriesTheSendSpansTraceContext(t *testing.T) {
	topo := testenv.NimBusTopology(endpoint)
	topo.Queues = append(topo.Queues, testenv.Queue{Name: "q", RequiresSession: true})
	sb := testenv.StartServiceBus(t, topo)
	rec := tracetest.NewSpanRecorder()
	c, err := New(Options{ConnectionString: sb.ConnectionString, Retry: fastRetry,
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	p, err := NewResolverPublisher(c, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	ctx := telemetry.Extract(testctx.Timeout(t, 20*time.Second), map[string]any{
		telemetry.PropTraceParent: "00-" + traceID + "-00f067aa0ba902b7-01", telemetry.PropTraceState: "congo=t61rcWkgMzE"})

	out := message.NewResponse(inbound(t, message.Ptr("in-1"), "s-trace", "ev-1"), message.Resolution, message.Timings{QueueTimeMs: 1}, nil)
	out.ApplicationProperties[telemetry.PropTraceParent] = "00-" + traceID + "-1111111111111111-01" // carried over: replaced
	before := len(out.ApplicationProperties)
	if err := p.Publish(ctx, out); err != nil {
		t.Fatal(err)
	}
	if len(out.ApplicationProperties) != before || out.ApplicationProperties[telemetry.PropTraceParent] != "00-"+traceID+"-1111111111111111-01" {
		t.Fatal("Publish changed the caller's properties")
	}
	got := receiveResolver(t, sb.Client(t), "s-trace", 1)[0]
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != "send "+endpoint || spans[0].SpanKind() != trace.SpanKindProducer {
		t.Fatalf("spans %v", spans)
	}
	want := "00-" + traceID + "-" + spans[0].SpanContext().SpanID().String() + "-01"
	if tp, ok := got.ApplicationProperties[telemetry.PropTraceParent].(string); !ok || tp != want {
		t.Errorf("traceparent %#v, want %q (the send span)", got.ApplicationProperties[telemetry.PropTraceParent], want)
	}
	if ts, ok := got.ApplicationProperties[telemetry.PropTraceState].(string); !ok || ts != "congo=t61rcWkgMzE" {
		t.Errorf("tracestate %#v", got.ApplicationProperties[telemetry.PropTraceState])
	}
	if _, ok := got.ApplicationProperties["RetryCount"].(int32); !ok {
		t.Errorf("RetryCount is %T, want int32", got.ApplicationProperties["RetryCount"])
	}

	// Schedule does the same; without any span context nothing is written.
	if _, err := c.Schedule(ctx, "q", &Message{Body: []byte("{}"), SessionID: "s-sched",
		ApplicationProperties: map[string]any{"To": "Resolver"}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	plain, err := New(Options{ConnectionString: sb.ConnectionString, Retry: fastRetry, TracerProvider: noop.NewTracerProvider()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plain.Close(context.Background()) })
	if err := plain.Send(testctx.Timeout(t, 10*time.Second), "q", &Message{Body: []byte("{}"), SessionID: "s-plain",
		ApplicationProperties: map[string]any{"To": "Resolver"}}); err != nil {
		t.Fatal(err)
	}
	for session, wantTrace := range map[string]bool{"s-sched": true, "s-plain": false} {
		r, err := sb.Client(t).AcceptSessionForQueue(testctx.Timeout(t, 10*time.Second), "q", session, nil)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := r.ReceiveMessages(testctx.Timeout(t, 10*time.Second), 1, nil)
		if err != nil || len(ms) != 1 {
			t.Fatalf("%s: %d messages, %v", session, len(ms), err)
		}
		m := ms[0]
		_, has := m.ApplicationProperties[telemetry.PropTraceParent]
		if has != wantTrace {
			t.Errorf("%s: traceparent present = %v, want %v (%v)", session, has, wantTrace, m.ApplicationProperties)
		}
	}
}
