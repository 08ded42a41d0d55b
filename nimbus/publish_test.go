package nimbus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

// secretMarshaler fails its MarshalJSON with an error that quotes a value.
type secretMarshaler struct{}

func (secretMarshaler) MarshalJSON() ([]byte, error) {
	return nil, errors.New("card 4111-1111 refused")
}

// A refused publication is a Permanent error that names the problem and
// quotes no value of the payload, whether the event was delivered by the
// pipeline or built by a test; the refused publication is not kept.
func TestPublishRefusals(t *testing.T) {
	cases := []struct {
		name string
		p    Publication
		want string
	}{
		{"empty event type", Publication{MessageID: "m-1", Payload: 1}, "event type is empty"},
		{"empty message id", Publication{EventTypeID: "A", Payload: 1}, "message id is empty"},
		{"message id too long", Publication{EventTypeID: "A", MessageID: strings.Repeat("i", 129), Payload: 1}, "at most 128"},
		{"session key too long", Publication{EventTypeID: "A", MessageID: "m-1", SessionID: strings.Repeat("s", 129), Payload: 1}, "at most 128"},
		{"channel", Publication{EventTypeID: "A", MessageID: "m-1", Payload: map[string]any{"c": make(chan int)}}, "chan int"},
		{"NaN", Publication{EventTypeID: "A", MessageID: "m-1", Payload: map[string]float64{"secret": math.NaN()}}, "cannot represent"},
		{"failing MarshalJSON", Publication{EventTypeID: "A", MessageID: "m-1", Payload: secretMarshaler{}}, "MarshalJSON or MarshalText method of nimbus.secretMarshaler"},
		{"raw message not JSON", Publication{EventTypeID: "A", MessageID: "m-1", Payload: json.RawMessage(`{"card":"4111`)}, "json.RawMessage"},
	}
	for _, c := range cases {
		for _, delivered := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/delivered=%v", c.name, delivered), func(t *testing.T) {
				var err error
				var published []Publication
				if delivered {
					published, err = publishDelivered(t, c.p)
				} else {
					ev := &Event{EventTypeID: "OrderPlaced"}
					err, published = ev.Publish(c.p), ev.Published()
				}
				if KindOf(err) != KindPermanent || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("error %v (kind %v), want a Permanent one naming %q", err, KindOf(err), c.want)
				}
				if msg := err.Error(); strings.Contains(msg, "4111") || strings.Contains(msg, "unsupported value:") {
					t.Fatalf("the error quotes a value: %q", msg)
				}
				if len(published) != 0 {
					t.Fatalf("kept %v", published)
				}
			})
		}
	}
}

// publishDelivered publishes p from the handler of a delivery through the
// pipeline and returns what the event kept and Publish's error.
func publishDelivered(t *testing.T, p Publication) (published []Publication, err error) {
	t.Helper()
	a := New()
	a.Handle("OrderPlaced", func(_ context.Context, ev *Event) (Result, error) {
		err = ev.Publish(p)
		published = ev.Published()
		return Completed(), nil
	})
	runOne(t, a, nil)
	return published, err
}

// The same message id twice in one delivery is refused the second time.
func TestPublishRefusesARepeatedMessageID(t *testing.T) {
	ev := &Event{EventTypeID: "OrderPlaced"}
	if err := ev.Publish(Publication{EventTypeID: "A", MessageID: "m-1", Payload: 1}); err != nil {
		t.Fatal(err)
	}
	err := ev.Publish(Publication{EventTypeID: "B", MessageID: "m-1", Payload: 2})
	if KindOf(err) != KindPermanent || !strings.Contains(err.Error(), "already published") {
		t.Fatalf("repeated id: %v", err)
	}
	if got := ev.Published(); len(got) != 1 || got[0].EventTypeID != "A" {
		t.Fatalf("kept %+v", got)
	}
}

// The payload is encoding/json's encoding without HTML escaping, as
// NimBus's serializer writes it; a json.RawMessage goes as it is.
func TestPublishEncodesThePayload(t *testing.T) {
	cases := []struct {
		payload any
		want    string
	}{
		{struct {
			Name string `json:"Name"`
			N    int    `json:"N"`
		}{"a<b>&c", 2}, `{"Name":"a<b>&c","N":2}`},
		{json.RawMessage(`{"OrderId":"O-1"}`), `{"OrderId":"O-1"}`},
		{json.RawMessage(`{ "OrderId" : "O-1",
  "Amount": 1.50 }`), `{ "OrderId" : "O-1",
  "Amount": 1.50 }`},
		{nil, `null`},
		{map[string]int{"b": 2, "a": 1}, `{"a":1,"b":2}`},
	}
	for _, c := range cases {
		got, err := encodePayload(c.payload)
		if err != nil || got != c.want {
			t.Errorf("encodePayload(%#v) = %s, %v, want %s", c.payload, got, err, c.want)
		}
	}
}

// Publish and Published are safe for concurrent use by a handler's
// goroutines.
func TestPublishConcurrently(t *testing.T) {
	ev := &Event{EventTypeID: "OrderPlaced"}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if err := ev.Publish(Publication{EventTypeID: "A", MessageID: fmt.Sprintf("m-%d", i), Payload: i}); err != nil {
				t.Error(err)
			}
			_ = ev.Published()
		})
	}
	wg.Wait()
	if n := len(ev.Published()); n != 20 {
		t.Fatalf("kept %d of 20", n)
	}
}

// A Tx the pipeline did not make has no delivery to publish from.
func TestTxPublishWithoutADelivery(t *testing.T) {
	err := (&Tx{}).Publish(Publication{EventTypeID: "A", MessageID: "m-1"})
	if KindOf(err) != KindPermanent || !errors.Is(err, subscriber.ErrNotDelivered) {
		t.Fatal(err)
	}
}

// A publication's problems are the pipeline's, which wraps
// message.ErrInvalidPublication for them.
func TestPublishRefusalIsThePipelines(t *testing.T) {
	err := (&Event{}).Publish(Publication{EventTypeID: "A", Payload: 1})
	if !errors.Is(err, message.ErrInvalidPublication) {
		t.Fatal(err)
	}
}

// runOne serves a's registrations (the inbox in memory, the responses and
// events kept by a resolver.Memory) and delivers one OrderPlaced event,
// MessageId m-1 in session s-1 with CorrelationId c-1; it returns the
// status and what was sent.
func runOne(t *testing.T, a *App, log io.Writer, stderr ...io.Writer) (int, []*message.Outgoing) {
	t.Helper()
	logger := zerolog.Nop()
	if log != nil {
		logger = zerolog.New(log)
	}
	mem := &resolver.Memory{}
	deps := app.Deps{Handlers: a.registry(func(string) string { return "" }), Log: logger,
		Publisher: mem, TracerProvider: noop.NewTracerProvider(), Pause: func(context.Context, time.Duration) {}}
	if len(stderr) > 0 {
		deps.Stderr = stderr[0]
	}
	svc, err := app.New(inMemoryConfig(t), deps)
	if err != nil {
		t.Fatal(err)
	}
	env := hostwire.ServiceBus(hostwire.ServiceBusMessage{
		FunctionName: app.FuncSubscriber,
		Body:         []byte(`{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1\"}"},"ErrorContent":null}`),
		MessageID:    "m-1", SessionID: hostwire.S("s-1"), CorrelationID: hostwire.S("c-1"), DeliveryCount: 1, SequenceNumber: 1, EnqueuedTime: time.Now(),
		Properties: hostwire.Props("To", "BillingEndpoint", "From", "Shop", "MessageType", "EventRequest", "EventId", "e-1", "EventTypeId", "OrderPlaced"),
		Namespace:  "sb", UtcNow: time.Now(), RandGUID: "0f8fad5b-d9cb-469f-a165-70867728950e",
	})
	rec := httptest.NewRecorder()
	svc.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/"+app.FuncSubscriber, bytes.NewReader(env)))
	return rec.Code, mem.Sent()
}

// A delivered event's publications go out when the handler completes, in
// order, before the response, as NimBus's PublishFromContext sends them,
// with the payload encoded; Published lists them.
func TestPublishFromADelivery(t *testing.T) {
	type accepted struct {
		OrderID string `json:"OrderId"`
	}
	var published []Publication
	a := New()
	a.Handle("OrderPlaced", func(_ context.Context, ev *Event) (Result, error) {
		for _, p := range []Publication{
			{EventTypeID: "InvoiceRequested", MessageID: "InvoiceRequested-O-1", Payload: map[string]any{"OrderId": "O-1"}},
			{EventTypeID: "OrderAccepted", MessageID: "OrderAccepted-O-1", Payload: accepted{"O-1"}, SessionID: "orders"},
		} {
			if err := ev.Publish(p); err != nil {
				return Result{}, err
			}
		}
		published = ev.Published()
		return Completed(), nil
	})
	code, sent := runOne(t, a, nil)
	if code != http.StatusOK || len(sent) != 3 || len(published) != 2 {
		t.Fatalf("status %d, sent %d, published %d", code, len(sent), len(published))
	}
	for i, want := range []struct{ typ, id, session, json string }{
		{"InvoiceRequested", "InvoiceRequested-O-1", "s-1", `{"OrderId":"O-1"}`},
		{"OrderAccepted", "OrderAccepted-O-1", "orders", `{"OrderId":"O-1"}`},
	} {
		m := sent[i]
		c, err := message.ParseContent(m.Body)
		if err != nil || c.EventContent == nil || *c.EventContent.EventJSON != want.json || *c.EventContent.EventTypeID != want.typ {
			t.Fatalf("event %d body %s", i, m.Body)
		}
		props := m.ApplicationProperties
		if m.MessageID != want.id || m.SessionID != want.session || *m.CorrelationID != "c-1" || props["To"] != want.typ ||
			props["ParentMessageId"] != "m-1" || props["OriginatingFrom"] != "BillingEndpoint" || props["MessageType"] != "EventRequest" {
			t.Fatalf("event %d: %s %s %s %v", i, m.MessageID, m.SessionID, *m.CorrelationID, props)
		}
		if _, ok := props["From"]; ok {
			t.Fatalf("event %d has a From", i)
		}
	}
	if sent[2].Type() != "ResolutionResponse" {
		t.Fatalf("last sent %s", sent[2].Type())
	}
}

// The invocation's line counts the events sent, or those dropped when the
// handler did not complete.
func TestInvocationLineCountsTheEvents(t *testing.T) {
	for _, c := range []struct {
		name  string
		err   error
		field string
	}{
		{"completed", nil, `"eventsPublished":1`},
		{"failed", errors.New("no"), `"eventsDropped":1`},
		{"transient", Transient(errors.New("busy")), " eventsDropped=1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := New()
			a.Handle("OrderPlaced", func(_ context.Context, ev *Event) (Result, error) {
				if err := ev.Publish(Publication{EventTypeID: "A", MessageID: "a-1", Payload: 1}); err != nil {
					return Result{}, err
				}
				return Completed(), c.err
			})
			var log, stderr bytes.Buffer
			runOne(t, a, &log, &stderr)
			if line := log.String() + stderr.String(); !strings.Contains(line, c.field) {
				t.Fatalf("lines %s lack %s", line, c.field)
			}
		})
	}
}

// A payload encoding/json refuses fails the delivery even when the
// handler ignores Publish's error and returns Completed: nothing is sent
// and no ResolutionResponse says the event completed.
func TestUnencodablePayloadFailsTheDelivery(t *testing.T) {
	a := New()
	var err error
	a.Handle("OrderPlaced", func(_ context.Context, ev *Event) (Result, error) {
		err = ev.Publish(Publication{EventTypeID: "A", MessageID: "m-1", Payload: secretMarshaler{}})
		return Completed(), nil // the error is ignored
	})
	code, sent := runOne(t, a, nil)
	if KindOf(err) != KindPermanent {
		t.Fatalf("publish error %v", err)
	}
	for _, m := range sent {
		if m.Type() == "ResolutionResponse" || m.MessageID == "m-1" && m.Type() != "ErrorResponse" {
			t.Fatalf("status %d: sent %s %s, want the delivery failed", code, m.Type(), m.MessageID)
		}
	}
	if code == http.StatusOK && len(sent) == 0 {
		t.Fatalf("status %d and nothing sent: the refusal was lost", code)
	}
}

// countingPayload counts its encodings.
type countingPayload struct{ n *int }

func (c countingPayload) MarshalJSON() ([]byte, error) {
	*c.n++
	return []byte(`{}`), nil
}

// A delivery publishes at most 1,000 events: the next ones are refused as
// Permanent naming the limit, without their payload being encoded, and
// the delivery fails although the handler ignored the refusals.
func TestPublishIsBoundedPerDelivery(t *testing.T) {
	encoded := 0
	var refused []error
	a := New()
	a.Handle("OrderPlaced", func(_ context.Context, ev *Event) (Result, error) {
		for i := range 1005 {
			if err := ev.Publish(Publication{EventTypeID: "E", MessageID: fmt.Sprintf("E-%d", i), Payload: countingPayload{&encoded}}); err != nil {
				refused = append(refused, err)
			}
		}
		return Completed(), nil
	})
	code, sent := runOne(t, a, nil)
	if len(refused) != 5 || encoded != 1000 {
		t.Fatalf("%d publications refused, %d payloads encoded; want 5 refused and 1,000 encoded", len(refused), encoded)
	}
	for _, err := range refused {
		if KindOf(err) != KindPermanent || !strings.Contains(err.Error(), "at most 1000 events (the limit of events per delivery)") {
			t.Fatalf("refused with %v (kind %v)", err, KindOf(err))
		}
	}
	if code != http.StatusUnprocessableEntity {
		t.Fatalf("status %d, want 422 (the delivery fails permanently)", code)
	}
	for _, m := range sent {
		if m.Type() == message.EventRequest.String() {
			t.Fatal("an event was sent")
		}
	}
}
