package resolver

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

func msg(to string) *message.Outgoing {
	return &message.Outgoing{SessionID: "s", ApplicationProperties: map[string]any{"To": to}}
}

func tos(ms []*message.Outgoing) string {
	var b []string
	for _, m := range ms {
		b = append(b, m.ApplicationProperties["To"].(string))
	}
	return strings.Join(b, ",")
}

func TestMemoryPublishBatch(t *testing.T) {
	ctx := context.Background()
	var m Memory
	if err := m.Publish(ctx, msg("first")); err != nil {
		t.Fatal(err)
	}
	if err := m.PublishBatch(ctx, []*message.Outgoing{msg("a"), msg("b"), msg("c")}); err != nil {
		t.Fatal(err)
	}
	if err := m.PublishBatch(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := tos(m.Sent()); got != "first,a,b,c" {
		t.Fatalf("sent %s", got)
	}

	// A refused message refuses the whole batch, as the broker does.
	var asked []string
	m.Fail = func(o *message.Outgoing) error {
		asked = append(asked, o.ApplicationProperties["To"].(string))
		if o.ApplicationProperties["To"] == "y" {
			return errors.New("refused")
		}
		return nil
	}
	if err := m.PublishBatch(ctx, []*message.Outgoing{msg("x"), msg("y"), msg("z")}); err == nil || err.Error() != "refused" {
		t.Fatalf("error %v", err)
	}
	if got := tos(m.Sent()); got != "first,a,b,c" || strings.Join(asked, ",") != "x,y" {
		t.Fatalf("after a refused batch: sent %s, asked %v", got, asked)
	}
	m.Fail = nil
	if err := m.PublishBatch(ctx, []*message.Outgoing{msg("x"), nil}); err == nil {
		t.Fatal("a nil message was accepted")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := m.PublishBatch(cancelled, []*message.Outgoing{msg("x")}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	if got := tos(m.Sent()); got != "first,a,b,c" {
		t.Fatalf("sent %s", got)
	}
}

// batchOnly is a BatchPublisher that does not schedule and counts its
// calls.
type batchOnly struct {
	m                *Memory
	publishes, sends int
}

func (b *batchOnly) Publish(ctx context.Context, m *message.Outgoing) error {
	b.publishes++
	return b.m.Publish(ctx, m)
}

func (b *batchOnly) PublishBatch(ctx context.Context, ms []*message.Outgoing) error {
	b.sends++
	return b.m.PublishBatch(ctx, ms)
}

func TestPublishAll(t *testing.T) {
	ctx := context.Background()
	b := &batchOnly{m: &Memory{}}
	if err := PublishAll(ctx, b, []*message.Outgoing{msg("a"), msg("b")}); err != nil {
		t.Fatal(err)
	}
	if b.sends != 1 || b.publishes != 0 || tos(b.m.Sent()) != "a,b" {
		t.Fatalf("a batch publisher: %d batches, %d publishes, sent %s", b.sends, b.publishes, tos(b.m.Sent()))
	}

	// Without PublishBatch: one Publish each, in order, up to the first failure.
	mem := &Memory{Fail: func(o *message.Outgoing) error {
		if o.ApplicationProperties["To"] == "b" {
			return errors.New("down")
		}
		return nil
	}}
	err := PublishAll(ctx, publishOnly{mem}, []*message.Outgoing{msg("a"), msg("b"), msg("c")})
	if err == nil || !strings.Contains(err.Error(), "message 2 of 3: down") || tos(mem.Sent()) != "a" {
		t.Fatalf("error %v, sent %s", err, tos(mem.Sent()))
	}
	if err := PublishAll(ctx, publishOnly{mem}, nil); err != nil {
		t.Fatal(err)
	}
}

// Traced keeps the wrapped publisher's abilities and sends a batch in one
// producer span: an event keeps the trace context it was published with,
// the response gets the span's.
func TestTracedBatch(t *testing.T) {
	const (
		parent    = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		published = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	)
	for _, c := range []struct {
		name               string
		sink               Publisher
		schedules, batches bool
		fail               bool
		sent               func() []*message.Outgoing
	}{
		{name: "memory schedules and batches", sink: &Memory{}, schedules: true, batches: true},
		{name: "a batch publisher that does not schedule", sink: &batchOnly{m: &Memory{}}, batches: true},
		{name: "a publisher that does neither", sink: publishOnly{&Memory{}}},
		{name: "a refused batch", sink: &Memory{Fail: func(*message.Outgoing) error { return errors.New("down") }}, schedules: true, batches: true, fail: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			p := Traced(c.sink, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer(telemetry.TracerName), "E")
			_, schedules := p.(scheduler)
			b, batches := p.(BatchPublisher)
			if schedules != c.schedules || batches != c.batches {
				t.Fatalf("Traced schedules %v batches %v, want %v %v", schedules, batches, c.schedules, c.batches)
			}
			if !batches {
				return
			}
			ctx := telemetry.Extract(context.Background(), map[string]any{telemetry.PropTraceParent: parent, telemetry.PropTraceState: "k=v"})
			event := &message.Outgoing{MessageID: "E-1", ApplicationProperties: map[string]any{
				"To": "Evt", telemetry.PropTraceParent: published, telemetry.PropTraceState: "pub=1"}}
			response := msg("Resolver")
			err := b.PublishBatch(ctx, []*message.Outgoing{event, response})
			if (err != nil) != c.fail {
				t.Fatalf("error %v", err)
			}
			if len(event.ApplicationProperties) != 3 || len(response.ApplicationProperties) != 1 {
				t.Errorf("the caller's messages changed: %v %v", event.ApplicationProperties, response.ApplicationProperties)
			}
			spans := rec.Ended()
			if len(spans) != 1 || spans[0].Name() != "send E" || spans[0].SpanKind() != trace.SpanKindProducer {
				t.Fatalf("spans %v", spans)
			}
			var count int64
			for _, a := range spans[0].Attributes() {
				if a.Key == attribute.Key("messaging.batch.message_count") {
					count = a.Value.AsInt64()
				}
			}
			if count != 2 {
				t.Errorf("messaging.batch.message_count %d, want 2", count)
			}
			if c.fail {
				if spans[0].Status().Code != codes.Error {
					t.Errorf("span status %v", spans[0].Status())
				}
				return
			}
			var sent []*message.Outgoing
			switch s := c.sink.(type) {
			case *Memory:
				sent = s.Sent()
			case *batchOnly:
				sent = s.m.Sent()
				if s.sends != 1 || s.publishes != 0 {
					t.Errorf("%d batches and %d publishes reached the sink, want one batch", s.sends, s.publishes)
				}
			}
			if len(sent) != 2 || sent[0].MessageID != "E-1" {
				t.Fatalf("sent %v", sent)
			}
			if got := sent[0].ApplicationProperties; got[telemetry.PropTraceParent] != published || got[telemetry.PropTraceState] != "pub=1" {
				t.Errorf("the event's trace context %v, want the one it was published with", got)
			}
			want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + spans[0].SpanContext().SpanID().String() + "-01"
			if got := sent[1].ApplicationProperties; got[telemetry.PropTraceParent] != want || got[telemetry.PropTraceState] != "k=v" {
				t.Errorf("the response's trace context %v, want traceparent %s and tracestate k=v", got, want)
			}
			if err := b.PublishBatch(ctx, nil); err != nil || len(rec.Ended()) != 1 {
				t.Errorf("an empty batch: %v, %d spans", err, len(rec.Ended()))
			}
		})
	}
}
