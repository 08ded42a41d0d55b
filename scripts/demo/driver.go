package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv/handlerproc"
	"github.com/nimbus-go/functions-subscriber/internal/devhost"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// script is one run of the demo: the transcript, the step counter and the
// expectations that were not met.
type script struct {
	out      io.Writer
	verbose  bool
	bin      string
	client   *http.Client
	step     int
	failures []string
}

// proc is one started handler process and what of its in-memory sink the
// transcript already showed.
type proc struct {
	s    *script
	proc *handlerproc.Proc
	host *devhost.Client
	errs *lineLog // the process's stderr
	seen int      // sent messages already printed
	seq  int64
}

// expect is what a step must produce.
type expect struct {
	// status is the HTTP status the handler answers the host.
	status int
	// outcome is the outcome label of the invocation's log line.
	outcome string
	// sends are the messages the endpoint sends, in any order: the
	// MessageType, followed by "→To" when not addressed to the Resolver.
	sends []string
	// flags are log fields that must be true (sessionBlocked, ...).
	flags []string
	// replays are "EventId outcome" of each replayed parked copy, in order.
	replays []string
}

// result is what a step produced.
type result struct {
	status int
	line   handlerproc.Line
	sent   []devhost.SentResponse
	// delivered is the message a step delivered, with its broker MessageId.
	delivered   nimbusmsg.Message
	deliveredID string
}

// ev describes one EventRequest as NimBus's publisher and forwarder put it
// on the endpoint subscription.
type ev struct {
	id, session, eventType, order string
	// delivery is the broker's delivery count; 0 means 1.
	delivery int
}

func (s *script) printf(format string, a ...any) { fmt.Fprintf(s.out, format, a...) }
func (s *script) println(a ...any)               { fmt.Fprintln(s.out, a...) }

func (s *script) section(title string) {
	s.printf("\n== %s ==\n", title)
}

// start starts the handler binary with settings and waits until it is ready.
func (s *script) start(ctx context.Context, settings map[string]string) (*proc, error) {
	if s.client == nil {
		s.client = &http.Client{Timeout: 30 * time.Second}
	}
	errs := newLineLog()
	p, err := handlerproc.Start(handlerproc.Options{Binary: s.bin, Settings: settings, Stderr: errs})
	if err != nil {
		return nil, err
	}
	readyCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := p.WaitReady(readyCtx); err != nil {
		stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, _ = p.Stop(stopCtx)
		return nil, err
	}
	return &proc{s: s, proc: p, host: &devhost.Client{BaseURL: p.BaseURL(), HTTP: s.client}, errs: errs}, nil
}

// stop stops the process, if it still runs, and prints what it wrote on
// stderr since the last step.
func (d *proc) stop(ctx context.Context) {
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, _ = d.proc.Stop(stopCtx)
	d.printStderr("")
}

func (d *proc) title(title string) {
	d.s.step++
	d.s.printf("\n%d. %s\n", d.s.step, title)
}

// event delivers e to the Subscriber function.
func (d *proc) event(title string, e ev, exp expect) (result, bool) {
	d.title(title)
	m, env := d.delivery(e)
	d.s.printf("   MessageId %s, SessionId %s, DeliveryCount %d, EventTypeId %s, event %s\n", e.shownID(), e.session, e.deliveryCount(), e.typ(), e.order)
	if d.s.verbose {
		d.s.printf("      the publisher's trace context: traceparent=%s, tracestate=%s\n", publisherTrace(e.shownID()), publisherTraceState)
	}
	r := d.invoke(app.FuncSubscriber, env, exp)
	r.delivered, r.deliveredID = m, e.id
	return r, d.s.check(r, exp)
}

// The trace context a publisher writes on the events it sends (W3C Trace
// Context, as NimBus writes it): the endpoint's invocation continues that
// trace, and its responses carry it with the send span as the parent and
// the tracestate kept.
const publisherTraceState = "shop=checkout"

// publisherTrace is the traceparent the publisher wrote on the event whose
// MessageId is id: one trace per message, the same on each redelivery.
func publisherTrace(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "00-" + hex.EncodeToString(sum[:16]) + "-00f067aa0ba902b7-01"
}

func (e ev) typ() string {
	if e.eventType == "" {
		return "OrderPlaced"
	}
	return e.eventType
}

func (e ev) shownID() string {
	if e.id == "" {
		return "(none)"
	}
	return e.id
}

func (e ev) deliveryCount() int { return max(e.delivery, 1) }

// delivery builds e as NimBus's publisher and forwarder put it on the
// endpoint subscription, with the publisher's trace context, and the
// Subscriber invocation envelope of it.
func (d *proc) delivery(e ev) (nimbusmsg.Message, []byte) {
	m := nimbusmsg.EventRequest(nimbusmsg.Event{
		Publisher: "ShopEndpoint", Endpoint: endpoint, EventTypeID: e.typ(), EventJSON: e.order,
		SessionID: e.session, MessageID: e.id, CorrelationID: "checkout-42", EventID: "evt-" + strings.ToLower(e.shownID()),
	})
	m.ApplicationProperties[telemetry.PropTraceParent] = publisherTrace(e.shownID())
	m.ApplicationProperties[telemetry.PropTraceState] = publisherTraceState
	d.seq++
	sb := m.Delivery(app.FuncSubscriber, "", e.deliveryCount(), time.Now().UTC().Add(-2*time.Second))
	sb.MessageID = e.id
	return m, d.envelope(sb)
}

// control delivers a control message a NimBus component (the Manager,
// the handoff client, the retry rule) sends to the endpoint, through the
// Subscriber function.
func (d *proc) control(title string, m nimbusmsg.Message, exp expect) (result, bool) {
	return d.controlOn(app.FuncSubscriber, title, m, exp)
}

// controlOn delivers control message m through function fn.
func (d *proc) controlOn(fn, title string, m nimbusmsg.Message, exp expect) (result, bool) {
	d.title(title)
	d.seq++
	id := m.MessageID
	if id == "" {
		id = fmt.Sprintf("c41d7e90-6a2b-4f3e-8d15-%012d", d.seq) // the broker assigns it
	}
	p := m.ApplicationProperties
	corr := "(none)"
	if m.CorrelationID != nil {
		corr = *m.CorrelationID
	}
	d.s.printf("   %v from %v, MessageId %s, SessionId %s, CorrelationId %s, ParentMessageId %v\n",
		p[message.PropMessageType], p[message.PropFrom], id, m.SessionID, corr, p[message.PropParentMessageID])
	sb := m.Delivery(fn, id, 1, time.Now().UTC().Add(-time.Second))
	r := d.invoke(fn, d.envelope(sb), exp)
	r.delivered, r.deliveredID = m, id
	return r, d.s.check(r, exp)
}

// replay hands the ProcessDeferredRequest among sent to the
// DeferredProcessor function, as the host does for the DeferredProcessor
// subscription (no sessions).
func (d *proc) replay(title string, sent []devhost.SentResponse, exp expect) (result, bool) {
	d.title(title)
	var req *devhost.SentResponse
	for i := range sent {
		if sent[i].Properties[message.PropMessageType].Value == message.ProcessDeferredRequest.String() {
			req = &sent[i]
		}
	}
	if req == nil {
		d.s.fail("no ProcessDeferredRequest was sent")
		return result{}, false
	}
	d.seq++
	m := nimbusmsg.FromOutgoing(toOutgoing(*req))
	id := fmt.Sprintf("a9e3c5b1-2f4d-4e6a-8b7c-%012d", d.seq)
	sb := m.Delivery(app.FuncDeferredProcessor, id, 1, time.Now().UTC().Add(-time.Second))
	sb.SessionLockedUntil = time.Time{} // the DeferredProcessor subscription has no sessions
	d.s.printf("   ProcessDeferredRequest, MessageId %s, SessionId %s, on the DeferredProcessor subscription (no sessions)\n", id, m.SessionID)
	r := d.invoke(app.FuncDeferredProcessor, d.envelope(sb), exp)
	return r, d.s.check(r, exp)
}

// cloudEvent delivers a binary-mode CloudEvent (as a partner's CRM sends
// it, with no NimBus properties) to the CloudEventsIngress function.
func (d *proc) cloudEvent(title, brokerMessageID, eventJSON string, exp expect) {
	d.title(title)
	d.seq++
	now := time.Now().UTC()
	sb := hostwire.ServiceBusMessage{
		FunctionName:       app.FuncCloudEventsIngress,
		Body:               []byte(eventJSON),
		MessageID:          brokerMessageID,
		SessionID:          hostwire.S("lead-42"),
		ContentType:        hostwire.S("application/json"),
		DeliveryCount:      1,
		EnqueuedTime:       now.Add(-2 * time.Second),
		SessionLockedUntil: now.Add(time.Minute),
		Properties: hostwire.Props(
			"ce-specversion", "1.0", "ce-id", "lead-42-converted", "ce-source", "/partner/crm",
			"ce-type", "com.partner.crm.OrderPlaced", "ce-subject", "lead/42"),
	}
	d.s.printf("   MessageId %s, ce-source /partner/crm, ce-id lead-42-converted, ce-type com.partner.crm.OrderPlaced\n", brokerMessageID)
	d.s.check(d.invoke(app.FuncCloudEventsIngress, d.envelope(sb), exp), exp)
}

func (d *proc) malformed(title string, exp expect) {
	d.title(title)
	d.seq++
	d.s.check(d.invoke(app.FuncSubscriber, []byte(`{"Data":{"message":"%%% not base64 %%%"},"Metadata":{"DeliveryCount":"1"}}`), exp), exp)
}

func (d *proc) cleanup(title string, exp expect) {
	d.title(title)
	d.seq++
	now := time.Now().UTC()
	env := hostwire.BuildTimer(hostwire.Timer{
		FunctionName: app.FuncInboxCleanup, Last: now.Add(-time.Hour), Next: now, LastUpdated: now.Add(-time.Hour),
		UtcNow: now, RandGUID: fmt.Sprintf("b3c2a1d4-5e6f-4a7b-8c9d-%012d", d.seq),
	})
	d.s.check(d.invoke(app.FuncInboxCleanup, env, exp), exp)
}

// envelope completes sb with the host's fields and builds the envelope.
func (d *proc) envelope(sb hostwire.ServiceBusMessage) []byte {
	devhost.HostFields(&sb, d.seq, time.Now())
	return hostwire.ServiceBus(sb)
}

// invoke POSTs env to function as the host does and prints the answer, the
// invocation's log line (and those of replayed copies) and what the
// endpoint sent.
func (d *proc) invoke(function string, env []byte, exp expect) result {
	var r result
	id := fmt.Sprintf("demo-invocation-%04d", d.s.step)
	status, err := d.post(function, env, id)
	if err != nil {
		d.s.fail("%v", err)
		return r
	}
	r.status = status
	timer := function == app.FuncInboxCleanup

	final := func(l handlerproc.Line) bool {
		if l.Str("invocationId") != id {
			return false
		}
		// A replay logs one line per replayed copy, then its own.
		return function != app.FuncDeferredProcessor || l.Str("messageType") == message.ProcessDeferredRequest.String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	line, err := d.proc.WaitLine(ctx, final)
	cancel()
	if err != nil {
		devhost.WriteAnswer(d.s.out, "   ", r.status, timer)
		d.s.fail("no log line for invocation %s: %v", id, err)
	} else {
		r.line = line
		devhost.WriteAnswer(d.s.out, "   ", r.status, timer, logSummary(line))
	}
	// A failing invocation writes one line on stderr (the host logs only
	// that for it); a step shows it under itself.
	if r.status/100 != 2 {
		if !d.printStderr("invocationId=" + id) {
			d.s.fail("no stderr line for invocation %s", id)
		}
	} else {
		d.printStderr("")
	}
	if function == app.FuncDeferredProcessor {
		for _, l := range d.proc.Lines() {
			if l.Str("invocationId") == id && l.Str("messageType") != message.ProcessDeferredRequest.String() {
				d.s.printf("   replayed parked copy of %s → %s (inbox=%s)\n", l.Str("eventId"), l.Str("outcome"), l.Str("inbox"))
				r.line.Fields = withReplay(r.line.Fields, l.Str("eventId")+" "+l.Str("outcome"))
			}
		}
	}
	r.sent = d.printSent()
	return r
}

// post POSTs env to function as the host does, with invocation id, and
// returns the HTTP status.
func (d *proc) post(function string, env []byte, id string) (int, error) {
	a, err := d.host.Invoke(context.Background(), function, id, env)
	if err != nil {
		return 0, fmt.Errorf("request failed: %w", err)
	}
	return a.Status, nil
}

// withReplay records a replayed copy in the final line's fields.
func withReplay(f map[string]any, s string) map[string]any {
	if f == nil {
		f = map[string]any{}
	}
	prev, _ := f["demo.replays"].([]string)
	f["demo.replays"] = append(prev, s)
	return f
}

// logSummary is the log line's outcome, labels and flags.
func logSummary(l handlerproc.Line) string {
	var parts []string
	for _, k := range []string{"outcome", "inbox", "cloudEvent", "bypassReason", "operation", "eventsPublished", "eventsDropped", "purged", "batches", "deferralSequence",
		"sessionBlocked", "sessionUnblocked", "replayRequested", "retryDelayMs", "deadLetterReported", "replayStop", "replayed", "error"} {
		v, ok := l.Fields[k]
		if !ok {
			continue
		}
		if b, ok := v.(bool); ok && b {
			parts = append(parts, k)
			continue
		}
		if s, ok := v.(string); ok && strings.ContainsAny(s, " =") {
			v = fmt.Sprintf("%q", s)
		}
		parts = append(parts, fmt.Sprintf("%s=%v", k, v))
	}
	return strings.Join(parts, " ")
}

// printSent prints what the endpoint sent since the last step.
func (d *proc) printSent() []devhost.SentResponse {
	fresh, ok := d.sentSince()
	if !ok {
		return nil
	}
	devhost.WriteSent(d.s.out, "   ", fresh, d.s.verbose)
	return fresh
}

// check compares r with exp, records and prints every difference, and
// reports whether r met exp.
func (s *script) check(r result, exp expect) bool {
	n := len(s.failures)
	if r.status != exp.status {
		s.fail("HTTP status %d, expected %d", r.status, exp.status)
	}
	if got := r.line.Str("outcome"); got != exp.outcome {
		s.fail("outcome %q, expected %q", got, exp.outcome)
	}
	got := make([]string, 0, len(r.sent))
	for _, m := range r.sent {
		got = append(got, devhost.Label(m))
	}
	want := append([]string(nil), exp.sends...)
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		s.fail("sent [%s], expected [%s]", strings.Join(got, ", "), strings.Join(want, ", "))
	}
	for _, f := range exp.flags {
		if v, _ := r.line.Fields[f].(bool); !v {
			s.fail("log field %s is not true", f)
		}
	}
	replays, _ := r.line.Fields["demo.replays"].([]string)
	if strings.Join(replays, ",") != strings.Join(exp.replays, ",") {
		s.fail("replayed [%s], expected [%s]", strings.Join(replays, ", "), strings.Join(exp.replays, ", "))
	}
	return len(s.failures) == n
}

// fail records an expectation that was not met and prints it.
func (s *script) fail(format string, a ...any) {
	msg := fmt.Sprintf("step %d: %s", s.step, fmt.Sprintf(format, a...))
	s.failures = append(s.failures, msg)
	s.printf("   UNEXPECTED: %s\n", fmt.Sprintf(format, a...))
}

func (d *proc) getJSON(path string, v any) error {
	resp, err := d.s.client.Get(d.host.BaseURL + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d", path, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// toOutgoing turns a message the in-memory sink shows back into what was
// sent, with the AMQP types of its properties.
func toOutgoing(r devhost.SentResponse) *message.Outgoing {
	props := make(map[string]any, len(r.Properties))
	for k, v := range r.Properties {
		val := v.Value
		if n, ok := val.(float64); ok {
			switch v.Type {
			case "int":
				val = int32(n)
			case "long":
				val = int64(n)
			}
		}
		props[k] = val
	}
	return &message.Outgoing{MessageID: r.MessageID, SessionID: r.SessionID, CorrelationID: r.CorrelationID, ApplicationProperties: props, Body: []byte(r.Body)}
}

// errorResponseOf is what the Resolver stores of an ErrorResponse the
// broker gave messageID.
func errorResponseOf(r devhost.SentResponse, messageID string) nimbusmsg.ErrorResponse {
	return nimbusmsg.ErrorResponseOf(toOutgoing(r), messageID)
}

// skipRequest is the Manager's SkipRequest for er.
func skipRequest(er nimbusmsg.ErrorResponse) nimbusmsg.Message {
	return nimbusmsg.Skip(er, endpoint, "OrderPlaced")
}

// resubmission is the Manager's ResubmissionRequest for er, carrying the
// event content of the failed message (the ErrorResponse's body).
func resubmission(er nimbusmsg.ErrorResponse, failed devhost.SentResponse) (nimbusmsg.Message, error) {
	var c struct {
		EventContent *struct {
			EventTypeID string `json:"EventTypeId"`
			EventJSON   string `json:"EventJson"`
		}
	}
	if err := json.Unmarshal([]byte(failed.Body), &c); err != nil || c.EventContent == nil {
		return nimbusmsg.Message{}, fmt.Errorf("the ErrorResponse carries no event content (%v)", err)
	}
	return nimbusmsg.Resubmission(er, endpoint, c.EventContent.EventTypeID, c.EventContent.EventJSON), nil
}

// handoffCompleted is the HandoffCompletedRequest for the delivery whose
// handler handed off, addressed as the handoff client does.
func handoffCompleted(r result) (nimbusmsg.Message, error) {
	m := r.delivered
	id, sid := r.deliveredID, m.SessionID
	in, err := message.Read(message.Broker{MessageID: &id, SessionID: &sid, CorrelationID: m.CorrelationID}, m.ApplicationProperties, m.Body)
	if err != nil {
		return nimbusmsg.Message{}, fmt.Errorf("read the handed-off message: %w", err)
	}
	return nimbusmsg.HandoffCompleted(nimbusmsg.SettlementOf(in), `{"ApprovedBy":"ops"}`), nil
}
