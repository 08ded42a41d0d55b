package nimbustest_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/nimbus"
	"github.com/nimbus-go/functions-subscriber/nimbustest"
)

// NewEvent encodes the payload as a publisher does and fills a first
// delivery's fields; a json.RawMessage is taken as it is.
func TestNewEvent(t *testing.T) {
	ev := nimbustest.NewEvent("OrderPlaced", map[string]string{"Note": "<b>&"})
	if ev.JSON != `{"Note":"<b>&"}` || ev.EventTypeID != "OrderPlaced" || ev.MessageID == "" || ev.SessionID != ev.MessageID ||
		ev.CorrelationID == "" || ev.EventID == "" || ev.From != nimbustest.DefaultPublisher || ev.DeliveryCount != 1 ||
		ev.Attempt != nimbus.AttemptOriginal || ev.EnqueuedTime.IsZero() {
		t.Fatalf("event %+v", ev)
	}
	if other := nimbustest.NewEvent("OrderPlaced", nil); other.MessageID == ev.MessageID || other.JSON != "null" {
		t.Fatalf("second event %+v", other)
	}
	if raw := nimbustest.NewEvent("OrderPlaced", json.RawMessage(`{ "a" : 1 }`)); raw.JSON != `{ "a" : 1 }` {
		t.Fatalf("raw JSON %q", raw.JSON)
	}
	for _, bad := range []func(){
		func() { nimbustest.NewEvent("", nil) },
		func() { nimbustest.NewEvent("X", json.RawMessage(`{`)) },
		func() { nimbustest.NewEvent("X", func() {}) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.HasPrefix(r.(string), "nimbustest: ") {
					t.Errorf("panic = %v", r)
				}
			}()
			bad()
		}()
	}
}

// A handler called on HandlerContext logs through nimbus.Logger into the
// Logs, with the event's ids, bounded as in the app, and its publications
// are on the event.
func TestHandlerContextRecordsWhatTheHandlerLogged(t *testing.T) {
	ev := nimbustest.NewEvent("OrderPlaced", map[string]string{"OrderId": "O-1"})
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	ctx, logs := nimbustest.HandlerContext(trace.ContextWithSpanContext(context.Background(), sc), ev)
	h := func(ctx context.Context, ev *nimbus.Event) (nimbus.Result, error) {
		l := nimbus.Logger(ctx)
		l.Debug("checking", "orderId", "O-1")
		l.Warn("slow", "note", strings.Repeat("n", 50_000))
		return nimbus.Completed(), ev.Publish(nimbus.Publication{EventTypeID: "OrderAccepted", MessageID: "OrderAccepted-O-1"})
	}
	if _, err := h(ctx, ev); err != nil {
		t.Fatal(err)
	}
	recs := logs.Records()
	if len(recs) != 2 {
		t.Fatalf("records %+v (lines %s)", recs, logs)
	}
	if recs[0].Level != slog.LevelDebug || recs[0].Message != "checking" || recs[0].Attrs["orderId"] != "O-1" ||
		recs[0].Attrs["messageId"] != ev.MessageID || recs[0].Attrs["eventTypeId"] != "OrderPlaced" ||
		recs[0].Attrs["traceId"] != sc.TraceID().String() || recs[0].Attrs["spanId"] != sc.SpanID().String() || recs[0].Time.IsZero() {
		t.Fatalf("first record %+v", recs[0])
	}
	if _, ok := recs[0].Attrs["function"]; ok {
		t.Errorf("a unit test's record names a function: %+v", recs[0])
	}
	if recs[1].Level != slog.LevelWarn || len(recs[1].Attrs["note"]) >= 50_000 || !strings.Contains(recs[1].Attrs["note"], "truncated") {
		t.Fatalf("second record: level %v, note of %d bytes", recs[1].Level, len(recs[1].Attrs["note"]))
	}
	if pubs := ev.Published(); len(pubs) != 1 || pubs[0].MessageID != "OrderAccepted-O-1" {
		t.Fatalf("published %+v", pubs)
	}
}
