package servicebus

import (
	"context"
	"errors"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testctx"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// tee publishes and schedules every message on both sinks, so one traced
// send reaches the Service Bus adapter and the in-memory sink alike.
type tee struct {
	sb  *ResolverPublisher
	mem *resolver.Memory
}

func (t tee) Publish(ctx context.Context, m *message.Outgoing) error {
	return errors.Join(t.sb.Publish(ctx, m), t.mem.Publish(ctx, m))
}

func (t tee) Schedule(ctx context.Context, m *message.Outgoing, at time.Time) error {
	return errors.Join(t.sb.Schedule(ctx, m, at), t.mem.Schedule(ctx, m, at))
}

// Every send runs in a producer span whose traceparent and tracestate the
// message carries as AMQP strings, replacing any carried over: the message
// the local Service Bus delivers and the one the in-memory sink keeps carry
// the same ones, added once by resolver.Traced. The caller's properties are
// not changed and keep their AMQP types.
func TestSendCarriesTheSendSpansTraceContext(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, testenv.NimBusTopology(endpoint))
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer(telemetry.TracerName)
	mem := &resolver.Memory{}
	p := resolver.Traced(tee{sb: newPublisher(t, sb.ConnectionString).ResolverPublisher, mem: mem}, tracer, endpoint)
	sched, ok := p.(interface {
		Schedule(ctx context.Context, m *message.Outgoing, at time.Time) error
	})
	if !ok {
		t.Fatal("the traced publisher of a scheduling sink does not schedule")
	}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	const carried = "00-" + traceID + "-1111111111111111-01"
	ctx := telemetry.Extract(testctx.Timeout(t, 20*time.Second), map[string]any{
		telemetry.PropTraceParent: "00-" + traceID + "-00f067aa0ba902b7-01", telemetry.PropTraceState: "congo=t61rcWkgMzE"})

	sends := []struct {
		name, session, span string
		send                func(m *message.Outgoing) error
	}{
		{"publish", "s-send", "send " + endpoint, func(m *message.Outgoing) error { return p.Publish(ctx, m) }},
		{"schedule", "s-schedule", "schedule " + endpoint, func(m *message.Outgoing) error { return sched.Schedule(ctx, m, time.Now()) }},
	}
	for i, s := range sends {
		t.Run(s.name, func(t *testing.T) {
			out := message.NewResponse(inbound(t, message.Ptr("in-1"), s.session, "ev-1"), message.Resolution, message.Timings{QueueTimeMs: 1}, nil)
			out.ApplicationProperties[telemetry.PropTraceParent] = carried
			before := len(out.ApplicationProperties)
			if err := s.send(out); err != nil {
				t.Fatal(err)
			}
			if len(out.ApplicationProperties) != before || out.ApplicationProperties[telemetry.PropTraceParent] != carried {
				t.Fatal("the send changed the caller's properties")
			}
			spans := rec.Ended()
			if len(spans) != i+1 || spans[i].Name() != s.span || spans[i].SpanKind() != trace.SpanKindProducer ||
				spans[i].Parent().SpanID().String() != "00f067aa0ba902b7" {
				t.Fatalf("spans %v", spans)
			}
			want := "00-" + traceID + "-" + spans[i].SpanContext().SpanID().String() + "-01"
			delivered := receiveResolver(t, sb.Client(t), s.session, 1)[0].ApplicationProperties
			kept := mem.Sent()[i].ApplicationProperties
			for sink, props := range map[string]map[string]any{"Service Bus": delivered, "memory": kept} {
				if tp, ok := props[telemetry.PropTraceParent].(string); !ok || tp != want {
					t.Errorf("%s: traceparent %#v, want %q (the send span)", sink, props[telemetry.PropTraceParent], want)
				}
				if ts, ok := props[telemetry.PropTraceState].(string); !ok || ts != "congo=t61rcWkgMzE" {
					t.Errorf("%s: tracestate %#v", sink, props[telemetry.PropTraceState])
				}
				if _, ok := props[message.PropRetryCount].(int32); !ok {
					t.Errorf("%s: RetryCount is %T, want int32", sink, props[message.PropRetryCount])
				}
			}
			// Every property is the same on both, but From, which the
			// Resolver subscription's rule stamps on the way.
			for k, v := range kept {
				if delivered[k] != v {
					t.Errorf("%s: Service Bus delivered %#v, memory kept %#v", k, delivered[k], v)
				}
			}
			for k := range delivered {
				if _, ok := kept[k]; !ok && k != message.PropFrom {
					t.Errorf("%s: delivered by Service Bus only", k)
				}
			}
		})
	}
}

// Without a span context (no parent, a tracer that records nothing) a send
// writes no trace context: the message goes as it is.
func TestSendWithoutSpanContextWritesNone(t *testing.T) {
	t.Parallel()
	mem := &resolver.Memory{}
	p := resolver.Traced(mem, noop.NewTracerProvider().Tracer(telemetry.TracerName), endpoint)
	out := &message.Outgoing{SessionID: "s-plain", ApplicationProperties: map[string]any{"To": "Resolver"}}
	if err := p.Publish(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	if got := mem.Sent()[0].ApplicationProperties; len(got) != 1 || got["To"] != "Resolver" {
		t.Errorf("properties %v, want To only", got)
	}
}

// The Service Bus client sends a message's properties as given, a
// traceparent included: the trace context is its sender's to add.
func TestClientSendsTraceContextAsGiven(t *testing.T) {
	t.Parallel()
	topo := testenv.NimBusTopology(endpoint)
	topo.Queues = append(topo.Queues, testenv.Queue{Name: "q", RequiresSession: true})
	sb := testenv.StartServiceBus(t, topo)
	c := newClient(t, sb.ConnectionString)
	const given = "00-4bf92f3577b34da6a3ce929d0e0e4736-2222222222222222-01"
	ctx := testctx.Timeout(t, 20*time.Second)
	if err := c.Send(ctx, "q", &Message{Body: []byte("{}"), SessionID: "s-given",
		ApplicationProperties: map[string]any{"To": "Resolver", telemetry.PropTraceParent: given}}); err != nil {
		t.Fatal(err)
	}
	r, err := sb.Client(t).AcceptSessionForQueue(ctx, "q", "s-given", nil)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(ms) != 1 {
		t.Fatalf("%d messages, %v", len(ms), err)
	}
	if got := ms[0].ApplicationProperties[telemetry.PropTraceParent]; got != given {
		t.Errorf("traceparent %#v, want %q as given", got, given)
	}
}
