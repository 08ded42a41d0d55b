package resolver

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// publishOnly is a Publisher that does not schedule.
type publishOnly struct{ m *Memory }

func (p publishOnly) Publish(ctx context.Context, m *message.Outgoing) error {
	return p.m.Publish(ctx, m)
}

// Traced sends a copy of each message with its send span's trace context
// in the sink, and schedules only when the sink does.
func TestTracedAddsTheSendSpansTraceContext(t *testing.T) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	cases := []struct {
		name string
		sink Publisher
		// schedule sends through Schedule rather than Publish.
		schedule bool
		fail     error
		span     string
	}{
		{name: "publish to memory", sink: &Memory{}, span: "send E"},
		{name: "schedule on memory", sink: &Memory{}, schedule: true, span: "schedule E"},
		{name: "publish to a sink that does not schedule", sink: publishOnly{&Memory{}}, span: "send E"},
		{name: "failed publish", sink: &Memory{Fail: func(*message.Outgoing) error { return errors.New("down") }}, fail: errors.New("down"), span: "send E"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			p := Traced(c.sink, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer(telemetry.TracerName), "E")
			_, isMem := c.sink.(*Memory)
			if _, ok := p.(scheduler); ok != isMem {
				t.Fatalf("Traced schedules = %v, the sink schedules = %v", ok, isMem)
			}
			ctx := telemetry.Extract(context.Background(), map[string]any{telemetry.PropTraceParent: parent, telemetry.PropTraceState: "k=v"})
			m := &message.Outgoing{SessionID: "s", ApplicationProperties: map[string]any{"To": "Resolver", telemetry.PropTraceParent: "carried"}}
			var err error
			if c.schedule {
				err = p.(scheduler).Schedule(ctx, m, time.Unix(1, 0))
			} else {
				err = p.Publish(ctx, m)
			}
			if (err == nil) != (c.fail == nil) {
				t.Fatalf("error %v, want %v", err, c.fail)
			}
			if m.ApplicationProperties[telemetry.PropTraceParent] != "carried" || len(m.ApplicationProperties) != 2 {
				t.Errorf("the caller's message changed: %v", m.ApplicationProperties)
			}
			spans := rec.Ended()
			if len(spans) != 1 || spans[0].Name() != c.span || spans[0].SpanKind() != trace.SpanKindProducer {
				t.Fatalf("spans %v", spans)
			}
			if c.fail != nil {
				if spans[0].Status().Code != codes.Error {
					t.Errorf("span status %v, want Error", spans[0].Status())
				}
				return
			}
			var mem *Memory
			switch s := c.sink.(type) {
			case *Memory:
				mem = s
			case publishOnly:
				mem = s.m
			}
			sent := mem.Sent()
			if len(sent) != 1 || sent[0].SessionID != "s" || sent[0].ApplicationProperties["To"] != "Resolver" {
				t.Fatalf("sent %v", sent)
			}
			want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + spans[0].SpanContext().SpanID().String() + "-01"
			if got := sent[0].ApplicationProperties; got[telemetry.PropTraceParent] != want || got[telemetry.PropTraceState] != "k=v" {
				t.Errorf("trace properties %v, want traceparent %s and tracestate k=v", got, want)
			}
			if _, scheduled := mem.ScheduledAt(sent[0]); scheduled != c.schedule {
				t.Errorf("scheduled = %v, want %v", scheduled, c.schedule)
			}
		})
	}
}
