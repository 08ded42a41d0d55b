package scaffold

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/app/apptest"
)

// invoke delivers an event, shows the host's answer, the invocation's log
// line and the messages sent; the same event again is a duplicate; a
// failing handler's invocation shows its ErrorResponse.
func TestInvokeShowsTheAnswerTheLogLineAndTheMessagesSent(t *testing.T) {
	port := strconv.Itoa(apptest.Serve(t, nil))
	steps := []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"OrderPlaced", `{"OrderId":"O-1"}`}, 0, []string{
			"Subscriber ← EventRequest OrderPlaced to BillingEndpoint from LocalPublisher (MessageId OrderPlaced-",
			"→ HTTP 200: the host completes the message; log: ", "outcome=completed inbox=new",
			"Resolver ← ResolutionResponse (SessionId OrderPlaced-",
		}},
		{[]string{"OrderPlaced", `{"OrderId":"O-1"}`}, 0, []string{
			"→ HTTP 200: the host completes the message; log: ", "outcome=duplicate",
			"Resolver ← SkipResponse",
		}},
		// A plain error fails the event: the Resolver gets its
		// ErrorResponse and the session is blocked.
		{[]string{"--session-id", "customer-9", "--message-id", "m-9", "OrderPlaced", `{"OrderId":"O-9","Fail":"failed"}`}, 0, []string{
			"(MessageId m-9, SessionId customer-9, DeliveryCount 1)", "outcome=event_failed",
			`Resolver ← ErrorResponse (SessionId customer-9, CorrelationId m-9,`, `ErrorText "the order cannot be billed"`,
		}},
		// The session's next event is parked behind it; flags may follow
		// the arguments.
		{[]string{"OrderPlaced", `{"OrderId":"O-10"}`, "--session-id", "customer-9", "--delivery-count", "3"}, 0, []string{
			"DeliveryCount 3)", "outcome=deferred", "Resolver ← DeferralResponse (SessionId customer-9", "topic ← EventRequest To=Deferred",
		}},
	}
	for _, s := range steps {
		args := append([]string{"invoke", "--port", port, "--endpoint", "BillingEndpoint"}, s.args...)
		code, out, errOut := run(t, args...)
		if code != s.code {
			t.Fatalf("%v: exit %d, want %d\n%s%s", s.args, code, s.code, out, errOut)
		}
		for _, w := range s.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: the output does not show %q:\n%s", s.args, w, out)
			}
		}
	}
}

// A failed invocation exits 1 and shows the line the host logs for it:
// the handler's stderr line, which the app keeps for local runs.
func TestInvokeOfAFailedInvocation(t *testing.T) {
	port := strconv.Itoa(apptest.Serve(t, nil))
	// An event whose JSON the handler cannot decode fails permanently.
	code, out, _ := run(t, "invoke", "--port", port, "--endpoint", "BillingEndpoint", "OrderPlaced", `"just a string"`)
	if code != exitFailed || !strings.Contains(out, "→ HTTP 422: the host abandons the message") ||
		!strings.Contains(out, "log: error: Subscriber invocation answered 422") || !strings.Contains(out, "nothing sent") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}

// Without --endpoint, invoke reads the endpoint from NimBus__Endpoint, else
// from the module's local settings; without --port, from
// FUNCTIONS_CUSTOMHANDLER_PORT.
func TestInvokeFindsTheEndpointAndPort(t *testing.T) {
	port := strconv.Itoa(apptest.Serve(t, nil))
	dir := initModule(t) // local.settings.sample.json names the endpoint Orders
	t.Setenv(portSetting, port)
	t.Setenv(endpointSetting, "")
	code, out, errOut := run(t, "invoke", "--dir", dir, "OrderPlaced", `{"OrderId":"O-1"}`)
	if code != 0 || !strings.Contains(out, "to Orders from LocalPublisher") {
		t.Errorf("exit %d, output:\n%s%s", code, out, errOut)
	}
	t.Setenv(endpointSetting, "FromTheEnvironment")
	if code, out, _ = run(t, "invoke", "--dir", dir, "OrderPlaced", `{"OrderId":"O-2"}`); !strings.Contains(out, "to FromTheEnvironment from") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}

func TestInvokeRefusesBadArgumentsAndNamesAMissingApp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"OrderPlaced"}, exitUsage, "want EVENT-TYPE and JSON, got 1 arguments\nusage: nimbus-func invoke [--port N]"},
		{[]string{"OrderPlaced", `{"OrderId":`}, exitUsage, "the event is not valid JSON"},
		{[]string{"--delivery-count", "0", "OrderPlaced", `{}`}, exitUsage, "--delivery-count must be at least 1"},
		{[]string{"--port", closed, "OrderPlaced", `{}`}, exitFailed, "no app answers on 127.0.0.1:" + closed},
	} {
		code, out, errOut := run(t, append([]string{"invoke", "--endpoint", "BillingEndpoint"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, want %d and %q\n%s%s", c.args, code, c.code, c.want, out, errOut)
		}
	}
}

// The function invoke delivers to is one init writes.
func TestInvokeDeliversToAFunctionInitWrites(t *testing.T) {
	files, err := Render("Orders", false)
	if err != nil {
		t.Fatal(err)
	}
	if !contains(functionNames(files, ""), subscriberFunction) {
		t.Errorf("init writes no %s function: %v", subscriberFunction, functionNames(files, ""))
	}
}
