package devhost_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/app/apptest"
	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/devhost"
	"github.com/nimbus-go/functions-subscriber/internal/funchost"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
)

// startApp serves the endpoint app with the given Resolver sink.
func startApp(t *testing.T, sink string) *devhost.Client {
	t.Helper()
	port := apptest.Serve(t, map[string]string{config.KeyResolverSink: sink,
		"ServiceBusConnection": "Endpoint=sb://localhost/;SharedAccessKeyName=k;SharedAccessKey=ZGV2"})
	return &devhost.Client{BaseURL: "http://127.0.0.1:" + strconv.Itoa(port)}
}

func order(json string) devhost.Event {
	return devhost.Event{Endpoint: "BillingEndpoint", Publisher: "ShopEndpoint", EventTypeID: "OrderPlaced", EventJSON: json}
}

// An event invocation is the EventRequest NimBus's forwarder delivers,
// wrapped as the host wraps it: the pipeline's own decoders read back
// every field asked for, and the defaults NimBus's publisher applies.
func TestEventInvocationIsWhatTheHostSends(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name                      string
		e                         devhost.Event
		wantID, wantSession       string
		wantDeliveries            int
		wantBody, wantEventTypeID string
	}{
		{"defaults", order(`{"OrderId":"O-1"}`), nimbusmsg.DefaultMessageID("OrderPlaced", `{"OrderId":"O-1"}`),
			nimbusmsg.DefaultMessageID("OrderPlaced", `{"OrderId":"O-1"}`), 1, `{"OrderId":"O-1"}`, "OrderPlaced"},
		{"given ids and delivery count", devhost.Event{Endpoint: "BillingEndpoint", Publisher: "ShopEndpoint", EventTypeID: "OrderPlaced",
			EventJSON: `{}`, MessageID: "m-7", SessionID: "customer-7", DeliveryCount: 4}, "m-7", "customer-7", 4, `{}`, "OrderPlaced"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, env := devhost.EventInvocation("Subscriber", c.e, 3, now)
			sb, err := funchost.DecodeServiceBus(env, "message")
			if err != nil {
				t.Fatalf("the envelope does not decode: %v\n%s", err, env)
			}
			if sb.MessageID == nil || *sb.MessageID != c.wantID || sb.SessionID == nil || *sb.SessionID != c.wantSession || sb.DeliveryCount != c.wantDeliveries {
				t.Errorf("MessageId %v, SessionId %v, DeliveryCount %d; want %s, %s, %d", deref(sb.MessageID), deref(sb.SessionID), sb.DeliveryCount, c.wantID, c.wantSession, c.wantDeliveries)
			}
			in, err := message.Read(message.Broker{MessageID: sb.MessageID, SessionID: sb.SessionID, CorrelationID: sb.CorrelationID}, sb.ApplicationProperties, sb.Body)
			if err != nil {
				t.Fatal(err)
			}
			if in.Type != message.EventRequest || in.To != "BillingEndpoint" || in.From != "ShopEndpoint" || deref(in.EventTypeID) != c.wantEventTypeID {
				t.Errorf("read %+v", in)
			}
			if got := deref(in.Content.EventContent.EventJSON); got != c.wantBody {
				t.Errorf("EventJson %q, want %q", got, c.wantBody)
			}
			if string(m.Body) != string(sb.Body) {
				t.Errorf("the message body and the delivered body differ")
			}
		})
	}
}

// The client reads the host's answer, the lines the host logs for the
// invocation (the response's Logs on success, the stderr line on failure)
// and what the endpoint sent.
func TestClientShowsAnswerLogLineAndSentMessages(t *testing.T) {
	c := startApp(t, "InMemory")
	ctx := t.Context()
	now := time.Now()

	_, env := devhost.EventInvocation("Subscriber", order(`{"OrderId":"O-1"}`), 1, now)
	a, err := c.Invoke(ctx, "Subscriber", "inv-1", env)
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != 200 || len(a.Logs) == 0 || !strings.Contains(a.Logs[0], "outcome=completed") {
		t.Fatalf("answer %+v", a)
	}
	lines, err := c.InvocationLines(ctx, "inv-1")
	if err != nil || strings.Join(lines, "\n") != strings.Join(a.Logs, "\n") {
		t.Errorf("invocation lines %q (%v), want the response's Logs %q", lines, err, a.Logs)
	}
	sent, err := c.Sent(ctx)
	if err != nil || len(sent) != 1 || devhost.Label(sent[0]) != "ResolutionResponse" {
		t.Fatalf("sent %+v (%v)", sent, err)
	}

	_, env = devhost.EventInvocation("Subscriber", order(`{"OrderId":"O-2","Fail":"permanent"}`), 2, now)
	if a, err = c.Invoke(ctx, "Subscriber", "inv-2", env); err != nil || a.Status != 422 || len(a.Logs) != 0 {
		t.Fatalf("answer %+v (%v), want 422 without Logs", a, err)
	}
	lines, err = c.InvocationLines(ctx, "inv-2")
	if err != nil || len(lines) != 1 || !strings.HasPrefix(lines[0], "error: Subscriber invocation answered 422: ") ||
		!strings.Contains(lines[0], "outcome=permanent_failure") || !strings.Contains(lines[0], "invocationId=inv-2") {
		t.Errorf("invocation lines %q (%v), want the stderr line of the failure", lines, err)
	}
	if lines, err := c.InvocationLines(ctx, "never-invoked"); err != nil || len(lines) != 0 {
		t.Errorf("an unknown invocation has lines %q (%v)", lines, err)
	}
}

// An app whose Resolver sink is not in memory serves neither view, and the
// client says why.
func TestClientWithoutInMemorySink(t *testing.T) {
	c := startApp(t, "ServiceBus")
	if _, err := c.Sent(t.Context()); !errors.Is(err, devhost.ErrNotServed) {
		t.Errorf("Sent: %v, want ErrNotServed", err)
	}
	if _, err := c.InvocationLines(t.Context(), "x"); !errors.Is(err, devhost.ErrNotServed) {
		t.Errorf("InvocationLines: %v, want ErrNotServed", err)
	}
	if err := c.Refuse(t.Context(), devhost.Refusal{Count: 1}); !errors.Is(err, devhost.ErrNotServed) {
		t.Errorf("Refuse: %v, want ErrNotServed", err)
	}
}

// Refuse makes the in-memory sink refuse the next send holding a message of
// the type asked for: the invocation that sends it fails, the next one's
// send goes through; a refusal the app cannot read is an error.
func TestClientRefuse(t *testing.T) {
	c := startApp(t, "InMemory")
	ctx := t.Context()
	if err := c.Refuse(ctx, devhost.Refusal{MessageType: "ResolutionResponse", Count: 1}); err != nil {
		t.Fatal(err)
	}
	_, env := devhost.EventInvocation("Subscriber", order(`{"OrderId":"O-1"}`), 1, time.Now())
	if a, err := c.Invoke(ctx, "Subscriber", "inv-1", env); err != nil || a.Status/100 == 2 {
		t.Fatalf("the refused send: %+v, %v", a, err)
	}
	if sent, err := c.Sent(ctx); err != nil || len(sent) != 0 {
		t.Fatalf("sent %v, %v", sent, err)
	}
	_, env = devhost.EventInvocation("Subscriber", order(`{"OrderId":"O-1"}`), 2, time.Now())
	if a, err := c.Invoke(ctx, "Subscriber", "inv-2", env); err != nil || a.Status != 200 {
		t.Fatalf("after the refusal: %+v, %v", a, err)
	}
	if err := c.Refuse(ctx, devhost.Refusal{Count: -1}); err == nil || errors.Is(err, devhost.ErrNotServed) {
		t.Fatalf("a negative count: %v", err)
	}
}

func TestWriteAnswerAndSent(t *testing.T) {
	var b strings.Builder
	devhost.WriteAnswer(&b, "  ", 503, false, "first", "second")
	devhost.WriteAnswer(&b, "  ", 200, true)
	corr := "m-1"
	var sent []devhost.SentResponse
	if err := json.Unmarshal([]byte(`[{"sessionId":"s-1","correlationId":"m-1","applicationProperties":{
		"To":{"type":"string","value":"Resolver"},"MessageType":{"type":"string","value":"ErrorResponse"},
		"EventId":{"type":"string","value":"e-1"},"RetryCount":{"type":"int","value":0}},
		"body":"{\"ErrorContent\":{\"ErrorText\":\"boom\",\"ErrorType\":null}}"}]`), &sent); err != nil {
		t.Fatal(err)
	}
	sent[0].CorrelationID = &corr
	devhost.WriteSent(&b, "  ", sent, false)
	devhost.WriteSent(&b, "  ", nil, false)
	want := `  → HTTP 503: the host abandons the message; the broker redelivers it; log: first
    log: second
  → HTTP 200: timer invocation succeeded
  Resolver ← ErrorResponse (SessionId s-1, CorrelationId m-1, EventId e-1) ErrorText "boom"
  nothing sent
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
