package app

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/funchost"
	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/outcome"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// failure carries the status for a delivery that must not complete.
type failure struct {
	status int
	err    error
}

func (f *failure) Error() string   { return f.err.Error() }
func (f *failure) Unwrap() error   { return f.err }
func (f *failure) HTTPStatus() int { return f.status }

// invokeSubscriber handles one Service Bus–triggered invocation and logs
// exactly one line for it. The outcome table (subscriber.Outcome.Spec)
// decides the status, the pause and the log line. The invocation's span
// continues the message's trace; the Cosmos request charge of everything
// it does is summed on ctx.
func (a *App) invokeSubscriber(ctx context.Context, inv *funchost.Invocation) error {
	return a.invokeDelivery(ctx, inv, a.pipeline.Process)
}

// invokeIngress handles one invocation of the CloudEvents ingress
// function: as invokeSubscriber, but only EventRequests are accepted (see
// subscriber.Pipeline.ProcessIngress).
func (a *App) invokeIngress(ctx context.Context, inv *funchost.Invocation) error {
	return a.invokeDelivery(ctx, inv, a.pipeline.ProcessIngress)
}

// invokeDelivery decodes a Service Bus invocation, runs it through run,
// and logs and answers its report (and the report of every parked message
// it replayed, each with its own share of the charge); a malformed envelope
// is answered without running anything.
func (a *App) invokeDelivery(ctx context.Context, inv *funchost.Invocation, run func(context.Context, *subscriber.Delivery) subscriber.Report) error {
	ctx, dl, m, err := a.beginDelivery(ctx, inv)
	defer dl.span.End()
	if err != nil {
		r := subscriber.Report{Outcome: subscriber.OutcomeMalformed, Inbox: subscriber.InboxNotReached, Err: err, Duration: a.now().Sub(dl.start)}
		a.finishInvocation(dl.span, inv, &r, 0, dl.charge, dl.hasParent)
		return &failure{status: r.Outcome.Spec().Status, err: err}
	}
	d := subscriber.Delivery{Broker: brokerOf(m), Properties: m.ApplicationProperties, Body: m.Body}
	r := run(ctx, &d)
	for i := range r.Replays {
		rr := &r.Replays[i]
		a.logInvocation(inv, boundReport(rr), rr.DeliveryCount, rr.Charge)
	}
	a.finishInvocation(dl.span, inv, &r, m.DeliveryCount, dl.charge, dl.hasParent)
	return a.answer(ctx, r.Outcome.Spec(), string(r.Outcome), r.Err, m.DeliveryCount)
}

// boundReport bounds every id of r that is logged (in up to three places)
// once.
func boundReport(r *subscriber.Report) *subscriber.Report {
	r.MessageID, r.SessionID = logsafe.Bound(r.MessageID), logsafe.Bound(r.SessionID)
	r.EventID, r.EventTypeID = logsafe.Bound(r.EventID), logsafe.Bound(r.EventTypeID)
	return r
}

var consumerSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}

// delivery is what both Service Bus functions (Subscriber and Resolver)
// carry through one invocation: its start, its span and the Cosmos request
// charge summed on its context.
type delivery struct {
	start     time.Time
	span      trace.Span
	charge    *telemetry.Charge
	hasParent bool
}

// beginDelivery decodes a Service Bus invocation and starts its span, which
// continues the message's trace (when the envelope could be decoded), with
// the Cosmos request charge summed on the returned context. The caller ends
// the span; a decode error is returned with everything else set.
func (a *App) beginDelivery(ctx context.Context, inv *funchost.Invocation) (context.Context, delivery, *funchost.ServiceBusMessage, error) {
	dl := delivery{start: a.now()}
	m, err := funchost.DecodeServiceBus(inv.Body, bindingMessage)
	if err == nil {
		ctx = telemetry.Extract(ctx, m.ApplicationProperties)
	}
	dl.hasParent = trace.SpanContextFromContext(ctx).IsValid()
	ctx, dl.span = a.tracer.Start(ctx, a.spanName, consumerSpan...)
	ctx, dl.charge = telemetry.WithCharge(ctx)
	return ctx, dl, m, err
}

// brokerOf is the broker properties NimBus reads of a delivered message.
func brokerOf(m *funchost.ServiceBusMessage) message.Broker {
	return message.Broker{
		MessageID:     m.MessageID,
		SessionID:     m.SessionID,
		CorrelationID: m.CorrelationID,
		EnqueuedTime:  m.EnqueuedTime,
		DeliveryCount: m.DeliveryCount,
		ContentType:   m.ContentType,
	}
}

// answer turns an outcome's row into the answer to the host: nil (2xx) when
// it completes the message; otherwise, after the redelivery pause when the
// row asks for it, a failure with the row's status.
func (a *App) answer(ctx context.Context, spec outcome.Spec, label string, err error, deliveryCount int) error {
	if spec.Completes() {
		return nil
	}
	if spec.Pause {
		a.pauseUnlessStopping(ctx, a.cfg.Retry.Delay(deliveryCount))
	}
	if err == nil {
		err = errors.New(label)
	}
	return &failure{status: spec.Status, err: err}
}

// pauseUnlessStopping waits d before a transient failure is answered. The
// host cancelling the invocation, or the process shutting down, ends the
// wait at once: the invocation then answers at once and the broker
// redelivers the message.
func (a *App) pauseUnlessStopping(ctx context.Context, d time.Duration) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(a.stopping, cancel)
	defer stop()
	a.pause(ctx, d)
}

// finishInvocation records the invocation's metrics and span attributes
// and writes its lines: the JSON line on stdout; for an answer that
// completes the message, the summary and any warnings in the response's
// Logs; for one that fails it, a line on stderr.
func (a *App) finishInvocation(span trace.Span, inv *funchost.Invocation, r *subscriber.Report, deliveryCount int, charge *telemetry.Charge, hasParent bool) {
	boundReport(r)
	outcome := string(r.Outcome)
	a.recordInvocation(outcome, r.Duration, charge)
	endDeliverySpan(span, deliverySpan{
		destination: a.cfg.Endpoint, messageID: r.MessageID, sessionID: r.SessionID, deliveryCount: deliveryCount,
		hasParent: hasParent, outcome: outcome, completes: r.Outcome.Completes(), charge: charge,
	}, attribute.String("nimbus.inbox", string(r.Inbox)))
	a.logInvocation(inv, r, deliveryCount, charge)
	if r.Outcome.Completes() {
		a.invocationLogs(inv, r, deliveryCount, charge)
	} else {
		a.failureLine(inv, r, deliveryCount)
	}
}

// logInvocation writes the invocation's one line. Every string on it is
// bounded (the report's ids by finishInvocation), and none comes from the
// message body.
func (a *App) logInvocation(inv *funchost.Invocation, r *subscriber.Report, deliveryCount int, charge *telemetry.Charge) {
	spec := r.Outcome.Spec()
	level, msg := spec.Level, spec.Message
	if r.Inbox == subscriber.InboxBypassed && level < zerolog.WarnLevel {
		level = zerolog.WarnLevel
		msg += bypassNote
	}
	ev := a.log.WithLevel(level)
	if ev == nil {
		return
	}
	ev = ev.Str("function", logsafe.Bound(inv.Function)).
		Str("invocationId", logsafe.Bound(inv.InvocationID)).
		Str("endpoint", a.cfg.Endpoint).
		Str("messageId", r.MessageID).
		Str("sessionId", r.SessionID).
		Str("eventId", r.EventID).
		Str("eventTypeId", r.EventTypeID).
		Str("messageType", r.MessageType).
		Int("deliveryCount", deliveryCount).
		Str("outcome", string(r.Outcome)).
		Str("inbox", string(r.Inbox)).
		Bool("handlerRan", r.HandlerRan).
		Float64("durationMs", float64(r.Duration.Microseconds())/1000)
	if r.CloudEvent != "" {
		ev = ev.Str("cloudEvent", r.CloudEvent)
	}
	if a.charged {
		ev = ev.Float64("requestCharge", charge.RequestUnits()).Int64("cosmosRequests", charge.Requests())
	}
	if r.EventTypeFromBody {
		ev = ev.Str("eventTypeSource", "body")
	}
	if r.BypassReason != "" {
		ev = ev.Str("bypassReason", r.BypassReason)
	}
	if r.StoreOp != "" {
		ev = ev.Str("operation", r.StoreOp)
	}
	if r.Parked {
		ev = ev.Int64("deferralSequence", r.DeferralSequence)
	}
	if r.Blocked {
		ev = ev.Bool("sessionBlocked", true)
	}
	if r.Unblocked {
		ev = ev.Bool("sessionUnblocked", true)
	}
	if r.DrainRequested {
		ev = ev.Bool("replayRequested", true)
	}
	if r.SourceIgnored {
		ev = ev.Bool("inboxMessageIdIgnored", true)
	}
	if r.RetryScheduled {
		ev = ev.Float64("retryDelayMs", float64(r.RetryDelay.Microseconds())/1000)
	}
	if r.DeadLetterNotice {
		ev = ev.Bool("deadLetterReported", true)
	}
	if r.NoticeErr != nil {
		ev = ev.Str("deadLetterReportError", logsafe.Bound(r.NoticeErr.Error()))
	}
	if r.DrainStop != "" {
		ev = ev.Str("replayStop", r.DrainStop).Int("replayed", len(r.Replays))
	}
	if r.Err != nil {
		ev = ev.Str("error", logsafe.Bound(r.Err.Error()))
	}
	if len(r.Stack) > 0 {
		ev = ev.Str("stack", logsafe.Stack(r.Stack))
	}
	ev.Msg(msg)
}

const bypassNote = " (inbox deduplication bypassed: MessageId or endpoint identity is missing, blank or too long)"

// invocationLogs puts the summary of a completed invocation, and its
// warnings, in the response's Logs: ids, labels and figures only, each
// bounded, never payload.
func (a *App) invocationLogs(inv *funchost.Invocation, r *subscriber.Report, deliveryCount int, charge *telemetry.Charge) {
	b := make([]byte, 0, 512)
	b = append(b, r.Outcome.Spec().Message...)
	b = append(b, ':')
	b = appendField(b, "outcome", string(r.Outcome))
	b = appendField(b, "inbox", string(r.Inbox))
	b = appendField(b, "messageId", r.MessageID)
	b = appendField(b, "sessionId", r.SessionID)
	b = appendField(b, "eventId", r.EventID)
	if r.EventTypeID != "" {
		b = appendField(b, "eventTypeId", r.EventTypeID)
	}
	b = append(b, " deliveryCount="...)
	b = strconv.AppendInt(b, int64(deliveryCount), 10)
	b = append(b, " handlerRan="...)
	b = strconv.AppendBool(b, r.HandlerRan)
	b = append(b, " durationMs="...)
	b = appendMillis(b, r.Duration.Microseconds())
	b = a.appendCharge(b, charge)
	inv.Log(string(b))
	switch r.Inbox {
	case subscriber.InboxBypassed:
		inv.Log("warning: inbox deduplication bypassed (bypassReason=" + r.BypassReason + "): MessageId or endpoint identity is missing, blank or too long, so a redelivery runs the handler again")
	case subscriber.InboxDuplicate:
		inv.Log("warning: duplicate delivery of messageId=" + r.MessageID + ": already recorded in the inbox; the handler was skipped")
	}
	if r.RecordRetries > 0 {
		inv.Log("warning: the inbox record was retried " + strconv.Itoa(r.RecordRetries) + " time(s) before it succeeded; the store was failing")
	}
}

// failureLine writes one line for a failing invocation on stderr.
func (a *App) failureLine(inv *funchost.Invocation, r *subscriber.Report, deliveryCount int) {
	spec := r.Outcome.Spec()
	a.writeFailureLine(inv, failedInvocation{
		status: spec.Status, level: spec.Level, message: spec.Message, outcome: string(r.Outcome),
		endpoint: a.cfg.Endpoint, messageID: r.MessageID, sessionID: r.SessionID,
		deliveryCount: deliveryCount, storeOp: r.StoreOp, err: r.Err,
	})
}

// failedInvocation is what a stderr failure line says; every string is
// bounded by the caller.
type failedInvocation struct {
	status                                                    int
	level                                                     zerolog.Level
	message, outcome, endpoint, messageID, sessionID, storeOp string
	deliveryCount                                             int
	err                                                       error
}

// writeFailureLine writes one line for a failing invocation on stderr. The
// host ignores the Logs of a non-2xx answer and guesses a stderr line's
// level from its words: an error outcome's line starts with "error:", a
// warning outcome's (a cancellation) with "warning:" and carries no error
// text, so it is not raised to Error. Newlines are flattened: one line per
// failure.
func (a *App) writeFailureLine(inv *funchost.Invocation, f failedInvocation) {
	prefix := "error: "
	if f.level < zerolog.ErrorLevel {
		prefix = "warning: "
	}
	b := make([]byte, 0, 512)
	b = append(b, prefix...)
	b = append(b, logsafe.Bound(inv.Function)...)
	b = append(b, " invocation answered "...)
	b = strconv.AppendInt(b, int64(f.status), 10)
	b = append(b, ": "...)
	b = append(b, f.message...)
	b = append(b, ':')
	b = appendField(b, "invocationId", logsafe.Bound(inv.InvocationID))
	b = appendField(b, "endpoint", f.endpoint)
	b = appendField(b, "outcome", f.outcome)
	b = appendField(b, "messageId", f.messageID)
	b = appendField(b, "sessionId", f.sessionID)
	b = append(b, " deliveryCount="...)
	b = strconv.AppendInt(b, int64(f.deliveryCount), 10)
	if f.storeOp != "" {
		b = appendField(b, "operation", f.storeOp)
	}
	if f.err != nil && prefix == "error: " {
		b = appendField(b, "error", logsafe.Bound(f.err.Error()))
	}
	a.stderrLine(string(b))
}

// recordInvocation records an invocation's outcome, duration and, when the
// app's store is on Cosmos, its request charge.
func (a *App) recordInvocation(outcome string, d time.Duration, charge *telemetry.Charge) {
	a.metrics.Inc(telemetry.Invocations, telemetry.TagOutcome, outcome)
	a.metrics.Record(telemetry.ProcessDuration, telemetry.TagOutcome, outcome, float64(d.Microseconds())/1000)
	if a.charged {
		a.metrics.Record(telemetry.RequestCharge, telemetry.TagOutcome, outcome, charge.RequestUnits())
	}
}

// appendCharge appends the request charge and request count when the
// app's store is on Cosmos.
func (a *App) appendCharge(b []byte, charge *telemetry.Charge) []byte {
	if !a.charged {
		return b
	}
	b = append(b, " requestCharge="...)
	b = strconv.AppendFloat(b, charge.RequestUnits(), 'f', -1, 64)
	b = append(b, " cosmosRequests="...)
	return strconv.AppendInt(b, charge.Requests(), 10)
}

// stderrLine writes line, bounded and flattened to one line, to stderr.
func (a *App) stderrLine(line string) {
	line = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, logsafe.BoundTo(line, funchost.MaxLogUnits))
	a.stderrMu.Lock()
	defer a.stderrMu.Unlock()
	_, _ = io.WriteString(a.stderr, line+"\n")
}

// appendMillis appends us microseconds as milliseconds with three
// decimals, without float formatting.
func appendMillis(b []byte, us int64) []byte {
	if us < 0 {
		b = append(b, '-')
		us = -us
	}
	b = strconv.AppendInt(b, us/1000, 10)
	frac := us % 1000
	return append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
}

// appendField appends " key=value", quoting a value that is empty or holds
// a space or a quote.
func appendField(b []byte, key, value string) []byte {
	b = append(b, ' ')
	b = append(b, key...)
	b = append(b, '=')
	if needsQuote(value) {
		return strconv.AppendQuote(b, value)
	}
	return append(b, value...)
}

// needsQuote reports whether value is empty or holds a space, a quote, an
// equals sign or a control character.
func needsQuote(value string) bool {
	if value == "" {
		return true
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; c <= ' ' || c == '"' || c == '=' || c == 0x7f {
			return true
		}
	}
	return false
}

// newSafeError renders a store failure for a log line without the
// provider's details.
func newSafeError(op string, err error) string {
	return logsafe.Bound(subscriber.NewStoreError(op, err).Error())
}

// deliverySpan is what the span of every Service Bus invocation (endpoint
// and Resolver) records.
type deliverySpan struct {
	destination, messageID, sessionID string
	deliveryCount                     int
	hasParent                         bool
	outcome                           string
	completes                         bool
	charge                            *telemetry.Charge
}

// endDeliverySpan sets d's attributes, and extra, on span and marks it
// failed when the answer fails the message. The caller ends the span.
func endDeliverySpan(span trace.Span, d deliverySpan, extra ...attribute.KeyValue) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(append([]attribute.KeyValue{
		attribute.String("messaging.system", "servicebus"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", d.destination),
		attribute.String("messaging.message.id", d.messageID),
		attribute.String("nimbus.session.key", d.sessionID),
		attribute.Int("nimbus.delivery_count", d.deliveryCount),
		attribute.Bool("nimbus.has_parent_trace", d.hasParent),
		attribute.String(telemetry.TagOutcome, d.outcome),
		attribute.Float64("nimbus.cosmos.request_charge", d.charge.RequestUnits()),
	}, extra...)...)
	if !d.completes {
		span.SetStatus(codes.Error, d.outcome)
	}
}
