package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestTraceContinuesThroughTheEndpoint sends requests carrying a W3C
// traceparent and tracestate (as a NimBus publisher writes them), and one
// carrying only an older Diagnostic-Id in the W3C form, through the local
// Service Bus, the mini host and the real handler binary. Each Resolver
// response carries the same trace id, a new parent span id (the endpoint's
// own span), the sampled flag and the tracestate; no response carries a
// Diagnostic-Id.
func TestTraceContinuesThroughTheEndpoint(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackConfig{})
	const (
		traceID   = "4bf92f3577b34da6a3ce929d0e0e4736"
		parentID  = "00f067aa0ba902b7"
		diagTrace = "0af7651916cd43dd8448eb211c80319c"
		diagSpan  = "b7ad6b7169203331"
	)
	withTP := order("OrderPlaced-trace-1", "customer-trace", 10, 0)
	withDiag := order("OrderPlaced-trace-2", "customer-trace", 11, 0)
	m1 := withTP.message()
	m1.ApplicationProperties["traceparent"] = "00-" + traceID + "-" + parentID + "-01"
	m1.ApplicationProperties["tracestate"] = "congo=t61rcWkgMzE"
	m2 := withDiag.message()
	m2.ApplicationProperties["Diagnostic-Id"] = "00-" + diagTrace + "-" + diagSpan + "-01"
	s.sendRaw(withTP.MessageID, m1)
	s.sendRaw(withDiag.MessageID, m2)
	s.waitResponses(2, 60*time.Second)
	s.settle(2, 2, 30*time.Second)

	rs := s.resolver.responsesByRequest()
	for _, c := range []struct {
		e                    event
		trace, parent, state string
	}{
		{withTP, traceID, parentID, "congo=t61rcWkgMzE"},
		{withDiag, diagTrace, diagSpan, ""},
	} {
		got := rs[c.e.MessageID]
		if len(got) != 1 {
			t.Fatalf("%s: %d responses, want 1", c.e.MessageID, len(got))
		}
		extra := map[string]any{}
		if c.state != "" {
			extra["tracestate"] = c.state
		}
		checkResponse(t, got[0], c.e, "ResolutionResponse", c.e.body(), extra, s.firstSent(c.e.MessageID))
		tp, _ := got[0].msg.ApplicationProperties["traceparent"].(string)
		parts := strings.Split(tp, "-")
		if len(parts) != 4 || parts[1] != c.trace || parts[2] == c.parent || parts[2] == strings.Repeat("0", 16) || parts[3] != "01" {
			t.Errorf("%s: response traceparent %q, want trace %s, a new parent span id (not %s), sampled", c.e.MessageID, tp, c.trace, c.parent)
		}
		if _, ok := got[0].msg.ApplicationProperties["Diagnostic-Id"]; ok {
			t.Errorf("%s: the response carries a Diagnostic-Id, which NimBus neither writes nor reads", c.e.MessageID)
		}
	}
}
