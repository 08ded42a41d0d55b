package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/dev/minihost"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv/handlerproc"
	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
)

// The helpers of the failure-semantics tests: a mini host for the
// DeferredProcessor function, the Manager's messages sent through the
// local Service Bus, and reading the Resolver's session and the parked
// copies.

// startDeferredHost starts a mini host for the DeferredProcessor function
// of the handler at base on the endpoint topic's DeferredProcessor
// subscription, which has no sessions
// (functions/DeferredProcessor/function.json).
func startDeferredHost(tb testing.TB, client *azservicebus.Client, base string) *minihost.Host {
	tb.Helper()
	return startMiniHost(tb, minihost.Config{
		Client:             client,
		Topic:              endpointID,
		Subscription:       testenv.DeferredProcessorSub,
		NoSessions:         true,
		MaxConcurrentCalls: 16, // host.json's maxConcurrentCalls
		Function:           "DeferredProcessor",
		Invoker:            &minihost.Invoker{BaseURL: base},
	})
}

// orderWith returns an OrderPlaced event whose JSON carries the sample
// handler's switches in fields (for example `"Fail":"failed"`).
func orderWith(messageID, session string, amount int, fields string) event {
	e := order(messageID, session, amount, 0)
	if fields != "" {
		e.EventJSON = strings.TrimSuffix(e.EventJSON, "}") + "," + fields + "}"
	}
	return e
}

// sendNimBus publishes m (a message as a NimBus component writes it) on
// the endpoint topic. A message without MessageId gets one from the broker.
func (s *stack) sendNimBus(m nimbusmsg.Message) {
	s.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.sender.SendMessage(ctx, sbMessage(m), nil); err != nil {
		s.tb.Fatalf("sending %s: %v", m.ApplicationProperties["MessageType"], err)
	}
}

// sbMessage is m as the Service Bus SDK sends it.
func sbMessage(m nimbusmsg.Message) *azservicebus.Message {
	sid := m.SessionID
	out := &azservicebus.Message{SessionID: &sid, CorrelationID: m.CorrelationID, Body: m.Body, ApplicationProperties: map[string]any{}}
	for k, v := range m.ApplicationProperties {
		if v == nil {
			continue // the SDK cannot send a null property; NimBus's readers treat absent as null
		}
		out.ApplicationProperties[k] = v
	}
	if m.MessageID != "" {
		id := m.MessageID
		out.MessageID = &id
	}
	return out
}

// responseTypes are the messages a subscriber sends to the Resolver; the
// Resolver topic also gets the audit copies of requests.
var responseTypes = map[string]bool{
	"ResolutionResponse": true, "ErrorResponse": true, "DeferralResponse": true, "SkipResponse": true,
	"UnsupportedResponse": true, "PendingHandoffResponse": true,
}

// replies returns the subscriber responses of one session, in the order
// the Resolver's session subscription delivered them.
func (c *collector) replies(sid string) []received {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []received
	for _, r := range c.bySession[sid] {
		if responseTypes[r.messageType()] {
			out = append(out, r)
		}
	}
	return out
}

// auditOf returns the audit copy of the request of type typ in session
// sid (the last one), or false.
func (c *collector) auditOf(sid, typ string) (received, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.bySession[sid]) - 1; i >= 0; i-- {
		if r := c.bySession[sid][i]; r.messageType() == typ {
			return r, true
		}
	}
	return received{}, false
}

func (r received) prop(k string) string {
	s, _ := r.msg.ApplicationProperties[k].(string)
	return s
}

// label names a response by its type and the event it answers (the
// OriginatingMessageId: the MessageId of the event as first published).
func (r received) label() string {
	return r.messageType() + ":" + r.prop("OriginatingMessageId")
}

func labels(rs []received) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.label()
	}
	return out
}

// errorResponseOf is what NimBus's Manager knows of a received
// ErrorResponse (the Resolver's stored message).
func errorResponseOf(r received) nimbusmsg.ErrorResponse {
	sid := ""
	if r.msg.SessionID != nil {
		sid = *r.msg.SessionID
	}
	return nimbusmsg.ErrorResponse{MessageID: r.msg.MessageID, CorrelationID: r.correlationID(), EventID: r.prop("EventId"),
		SessionID: sid, OriginatingMessageID: r.prop("OriginatingMessageId")}
}

// waitReplies waits until the session's responses satisfy cond.
func (s *stack) waitReplies(sid string, timeout time.Duration, what string, cond func([]received) bool) []received {
	s.tb.Helper()
	var got []received
	testenv.WaitUntil(s.tb, timeout, func() bool {
		got = s.resolver.replies(sid)
		return cond(got)
	}, func() string {
		return fmt.Sprintf("%s; session %s has %v (host stats %+v, DeferredProcessor stats %+v, collector: %s)",
			what, sid, labels(s.resolver.replies(sid)), s.host.Stats(), s.deferredStats(), s.resolver.problems())
	})
	return got
}

func (s *stack) deferredStats() minihost.Stats {
	if s.deferredHost == nil {
		return minihost.Stats{}
	}
	return s.deferredHost.Stats()
}

// countLabel counts the responses labelled l.
func countLabel(rs []received, l string) int {
	n := 0
	for _, r := range rs {
		if r.label() == l {
			n++
		}
	}
	return n
}

// parked is a copy on the Deferred subscription.
type parked struct {
	MessageID   string
	Sequence    int32
	InboxID     string
	Properties  map[string]any
	Body        string
	Correlation string
}

// peekDeferred locks the session on the Deferred subscription, peeks its
// parked copies and releases it.
func (s *stack) peekDeferred(sid string) []parked {
	s.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := s.client.AcceptSessionForSubscription(ctx, endpointID, testenv.DeferredSubscription, sid, nil)
	if err != nil {
		s.tb.Fatalf("accepting session %s on the Deferred subscription: %v", sid, err)
	}
	defer r.Close(ctx)
	ms, err := r.PeekMessages(ctx, 100, nil)
	if err != nil {
		s.tb.Fatalf("peeking the Deferred subscription: %v", err)
	}
	out := make([]parked, 0, len(ms))
	for _, m := range ms {
		p := parked{MessageID: m.MessageID, Properties: m.ApplicationProperties, Body: string(m.Body)}
		p.Sequence, _ = m.ApplicationProperties["DeferralSequence"].(int32)
		p.InboxID, _ = m.ApplicationProperties["InboxMessageId"].(string)
		if m.CorrelationID != nil {
			p.Correlation = *m.CorrelationID
		}
		out = append(out, p)
	}
	return out
}

// lines returns the handler's invocation lines of function (any function
// when ""), in stdout order.
func (h *handlerProc) lines(function string) []handlerproc.Line {
	var out []handlerproc.Line
	for _, l := range h.Lines() {
		if l.Fields == nil || l.Str("outcome") == "" {
			continue
		}
		if function == "" || l.Str("function") == function {
			out = append(out, l)
		}
	}
	return out
}

// metrics reads the handler's /_nimbus/metrics.
func (h *handlerProc) metrics(tb testing.TB) map[string]float64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.base+"/_nimbus/metrics", nil)
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("GET /_nimbus/metrics: %v", err)
	}
	defer resp.Body.Close()
	var out map[string]float64
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		tb.Fatalf("decoding /_nimbus/metrics: %v", err)
	}
	return out
}

// errorBody is the body of the ErrorResponse (or DeferralResponse) NimBus
// writes for e: the inbound EventContent and the error content.
func (e event) errorBody(text, typ string) string {
	return `{"EventContent":{"EventTypeId":` + jsonString(e.EventTypeID) + `,"EventJson":` + jsonString(e.EventJSON) + `},` +
		`"ErrorContent":{"ErrorText":` + jsonString(text) + `,"ErrorType":` + jsonString(typ) +
		`,"ExceptionStackTrace":null,"ExceptionSource":null}}`
}

// The sample handler's failure texts (handler/handlers.go).
const (
	sampleFailedText    = "billing rejected the order (the sample fails it: Fail=failed)"
	samplePermanentText = "the order cannot be billed (the sample fails it: Fail=permanent)"
)

// blockedText is NimBus's SessionBlockedException message.
func blockedText(sid, eventID string) string { return "Session " + sid + " is blocked by " + eventID }
