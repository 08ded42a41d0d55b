package scaffold

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/app/apptest"
	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/devhost"
)

var guidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// sentBy returns what the app on port sent, by MessageId for the events it
// published and by MessageType for the rest.
func sentBy(t *testing.T, port int) map[string]devhost.SentResponse {
	t.Helper()
	sent, err := (&devhost.Client{BaseURL: "http://127.0.0.1:" + strconv.Itoa(port)}).Sent(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]devhost.SentResponse{}
	for _, s := range sent {
		key := s.MessageID
		if key == "" {
			key = s.Properties["MessageType"].Value.(string)
		}
		out[key] = s
	}
	return out
}

// shows fails t for each of want that out does not contain.
func shows(t *testing.T, what, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%s: the output does not show %q:\n%s", what, w, out)
		}
	}
}

// wantProps checks the properties of s named in want.
func wantProps(t *testing.T, what string, s devhost.SentResponse, want map[string]any) {
	t.Helper()
	for k, w := range want {
		v, ok := s.Properties[k]
		if !ok {
			t.Errorf("%s: no %s; want %v", what, k, w)
		} else if v.Value != w {
			t.Errorf("%s: %s = %v, want %v", what, k, v.Value, w)
		}
	}
}

// traceID is the trace id of a traceparent property ("" without one).
func traceID(s devhost.SentResponse) string {
	tp, _ := s.Properties["traceparent"].Value.(string)
	if parts := strings.Split(tp, "-"); len(parts) == 4 {
		return parts[1]
	}
	return ""
}

// A workflow goes from one local app to the next: Orders gets OrderPlaced
// further down a workflow (the lineage given by flags) and publishes
// OrderAccepted; invoke --forward-from delivers that event to Billing as
// NimBus's forwarder would (From = Orders, a new EventId, To = Billing,
// the rest kept); what Billing sends back and publishes onward carries the
// workflow's correlation, origin and trace.
func TestInvokeCarriesAWorkflowFromAppToApp(t *testing.T) {
	const traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	orders := apptest.Serve(t, map[string]string{config.KeyEndpoint: "Orders"})
	billing := apptest.Serve(t, map[string]string{config.KeyEndpoint: "Billing"})

	code, out, errOut := run(t, "invoke", "--port", strconv.Itoa(orders), "--endpoint", "Orders", "--publisher", "Web",
		"--from", "WebTopic", "--message-id", "OrderPlaced-O-1", "--session-id", "customer-1", "--correlation-id", "corr-1",
		"--parent-message-id", "parent-1", "--originating-message-id", "origin-1", "--traceparent", traceParent,
		"OrderPlaced", `{"OrderId":"O-1","Publish":["OrderAccepted","InvoiceIssued"]}`)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	shows(t, "Orders", out,
		"Subscriber ← EventRequest OrderPlaced to Orders from WebTopic (MessageId OrderPlaced-O-1, SessionId customer-1, DeliveryCount 1)",
		"  CorrelationId corr-1, ParentMessageId parent-1, OriginatingMessageId origin-1, OriginatingFrom Web, EventId ",
		"topic ← EventRequest To=OrderAccepted (MessageId OrderAccepted-O-1, ParentMessageId OrderPlaced-O-1, SessionId customer-1, CorrelationId corr-1")
	o := sentBy(t, orders)
	// The Resolver learns the delivery's lineage: OriginatingFrom is the
	// delivery's From.
	wantProps(t, "Orders' ResolutionResponse", o["ResolutionResponse"], map[string]any{
		"OriginatingMessageId": "origin-1", "ParentMessageId": "OrderPlaced-O-1", "OriginatingFrom": "WebTopic",
	})
	accepted := o["OrderAccepted-O-1"]
	if _, forwarded := accepted.Properties["From"]; forwarded {
		t.Fatalf("the published event carries From: %v", accepted.Properties)
	}

	code, out, errOut = run(t, "invoke", "--port", strconv.Itoa(billing), "--endpoint", "Billing",
		"--forward-from", strconv.Itoa(orders), "--message-id", "OrderAccepted-O-1")
	if code != 0 {
		t.Fatalf("forward: exit %d\n%s%s", code, out, errOut)
	}
	for _, w := range []string{
		"Subscriber ← EventRequest OrderAccepted to Billing from Orders, forwarded from the app on http://127.0.0.1:" + strconv.Itoa(orders) +
			" (MessageId OrderAccepted-O-1, SessionId customer-1, DeliveryCount 1)",
		"  CorrelationId corr-1, ParentMessageId OrderPlaced-O-1, OriginatingMessageId origin-1, OriginatingFrom Orders, EventId ",
		"outcome=completed inbox=new",
		", traceparent 00-4bf92f3577b34da6a3ce929d0e0e4736-",
		"topic ← EventRequest To=InvoiceIssued (MessageId InvoiceIssued-O-1, ParentMessageId OrderAccepted-O-1, SessionId customer-1, CorrelationId corr-1",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("forward: the output does not show %q:\n%s", w, out)
		}
	}
	b := sentBy(t, billing)
	resp := b["ResolutionResponse"]
	wantProps(t, "Billing's ResolutionResponse", resp, map[string]any{
		"OriginatingMessageId": "origin-1", "ParentMessageId": "OrderAccepted-O-1", "OriginatingFrom": "Orders", "EventTypeId": "OrderAccepted",
	})
	if ev, _ := resp.Properties["EventId"].Value.(string); !guidPattern.MatchString(ev) || resp.SessionID != "customer-1" || deref(resp.CorrelationID) != "OrderAccepted-O-1" {
		t.Errorf("Billing's ResolutionResponse: EventId %v, SessionId %s, CorrelationId %s", resp.Properties["EventId"].Value, resp.SessionID, deref(resp.CorrelationID))
	}
	invoice := b["InvoiceIssued-O-1"]
	wantProps(t, "InvoiceIssued", invoice, map[string]any{"OriginatingMessageId": "origin-1", "ParentMessageId": "OrderAccepted-O-1", "OriginatingFrom": "Billing"})
	if deref(invoice.CorrelationID) != "corr-1" || invoice.SessionID != "customer-1" {
		t.Errorf("InvoiceIssued: CorrelationId %s, SessionId %s", deref(invoice.CorrelationID), invoice.SessionID)
	}
	// The trace the first publisher started goes on: the events Orders
	// and Billing publish are in it.
	if id := traceID(accepted); id != "4bf92f3577b34da6a3ce929d0e0e4736" || traceID(invoice) != id {
		t.Errorf("traceparent: OrderAccepted %v, InvoiceIssued %v", accepted.Properties["traceparent"], invoice.Properties["traceparent"])
	}

	// The forwarder keeps the MessageId: the same event forwarded again is
	// a duplicate in Billing's inbox.
	code, out, _ = run(t, "invoke", "--port", strconv.Itoa(billing), "--endpoint", "Billing",
		"--forward-from", "127.0.0.1:"+strconv.Itoa(orders), "--message-id", "OrderAccepted-O-1")
	if code != 0 || !strings.Contains(out, "outcome=duplicate") || !strings.Contains(out, "Resolver ← SkipResponse") {
		t.Errorf("forwarded again: exit %d\n%s", code, out)
	}
}

// --forward-from names what it cannot forward and refuses flags that the
// forwarded event does not take.
func TestInvokeForwardRefusals(t *testing.T) {
	orders := strconv.Itoa(apptest.Serve(t, map[string]string{config.KeyEndpoint: "Orders"}))
	billing := strconv.Itoa(apptest.Serve(t, map[string]string{config.KeyEndpoint: "Billing"}))
	if code, out, errOut := run(t, "invoke", "--port", orders, "--endpoint", "Orders", "OrderPlaced", `{"OrderId":"O-1","Publish":["OrderAccepted"]}`); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	notServed := httptest.NewServer(http.NotFoundHandler())
	defer notServed.Close()

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--forward-from", orders, "--message-id", "OrderAccepted-O-404"}, exitFailed,
			"--forward-from http://127.0.0.1:" + orders + " --message-id OrderAccepted-O-404: the app sent no message with that MessageId (it sent these MessageIds: OrderAccepted-O-1)"},
		{[]string{"--forward-from", closed, "--message-id", "OrderAccepted-O-1"}, exitFailed, "--forward-from: no app answers on http://127.0.0.1:" + closed},
		{[]string{"--forward-from", notServed.URL, "--message-id", "OrderAccepted-O-1"}, exitFailed, "does not show the messages it sent: run it with NimBus__Resolver__Sink=InMemory"},
		{[]string{"--forward-from", orders}, exitUsage, "--forward-from needs --message-id"},
		{[]string{"--forward-from", orders, "--message-id", "OrderAccepted-O-1", "OrderAccepted", "{}"}, exitUsage, "give no EVENT-TYPE and JSON, got 2 arguments"},
		{[]string{"--forward-from", orders, "--message-id", "OrderAccepted-O-1", "--session-id", "s"}, exitUsage, "--session-id does not go with --forward-from"},
		{[]string{"--forward-from", orders, "--message-id", "OrderAccepted-O-1", "--correlation-id", "c"}, exitUsage, "--correlation-id does not go with --forward-from"},
		{[]string{"--forward-from", orders, "--message-id", "OrderAccepted-O-1", "--traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, exitUsage, "--traceparent does not go with --forward-from"},
		{[]string{"--traceparent", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "OrderPlaced", "{}"}, exitUsage, "is not a W3C traceparent"},
		{[]string{"--forward-from", "http://127.0.0.1/x", "--message-id", "m"}, exitUsage, "is not an app's address"},
		{[]string{"--forward-from", "70000", "--message-id", "m"}, exitUsage, "70000 is not a port number"},
		{[]string{"--correlation-id", "", "OrderPlaced", "{}"}, exitUsage, "--correlation-id is empty"},
		{[]string{"--parent-message-id", " ", "OrderPlaced", "{}"}, exitUsage, "--parent-message-id is empty"},
		{[]string{"--from", "", "OrderPlaced", "{}"}, exitUsage, "--from is empty"},
		{[]string{"--message-id", "", "OrderPlaced", "{}"}, exitUsage, "--message-id is empty"},
		{[]string{"--correlation-id", strings.Repeat("c", 129), "OrderPlaced", "{}"}, exitUsage, "--correlation-id has 129 characters; Service Bus accepts at most 128"},
	} {
		code, out, errOut := run(t, append([]string{"invoke", "--port", billing, "--endpoint", "Billing"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, want %d and %q\n%s%s", c.args, code, c.code, c.want, out, errOut)
		}
	}
}
