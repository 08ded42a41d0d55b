package app

import (
	"context"
	"strconv"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/funchost"
	"github.com/nimbus-go/functions-subscriber/internal/handlerlog"
	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// invokeSubscriber handles one Service Bus–triggered invocation and logs
// exactly one line for it. The outcome table (subscriber.Outcome.Spec)
// decides the status, the pause and the log line. The invocation's span
// continues the message's trace; the Cosmos request charge of everything
// it does is summed on ctx.
func (a *endpointApp) invokeSubscriber(ctx context.Context, inv *funchost.Invocation) error {
	return a.invokeDelivery(ctx, inv, a.pipeline.Process)
}

// invokeIngress handles one invocation of the CloudEvents ingress
// function: as invokeSubscriber, but only EventRequests are accepted (see
// subscriber.Pipeline.ProcessIngress).
func (a *endpointApp) invokeIngress(ctx context.Context, inv *funchost.Invocation) error {
	return a.invokeDelivery(ctx, inv, a.pipeline.ProcessIngress)
}

// invokeDelivery decodes a Service Bus invocation, runs it through run,
// and logs and answers its report (and the report of every parked message
// it replayed, each with its own share of the charge); a malformed envelope
// is answered without running anything.
func (a *endpointApp) invokeDelivery(ctx context.Context, inv *funchost.Invocation, run func(context.Context, *subscriber.Delivery) subscriber.Report) error {
	ctx, dl, m, err := a.beginDelivery(ctx, inv)
	defer dl.span.End()
	if err != nil {
		r := subscriber.Report{Outcome: subscriber.OutcomeMalformed, Inbox: subscriber.InboxNotReached, Err: err, Duration: a.now().Sub(dl.start)}
		a.finishInvocation(dl.span, inv, &r, 0, dl.charge, dl.hasParent, nil)
		return &failure{status: r.Outcome.Spec().Status, err: err}
	}
	// The handlers' logger: the invocation's JSON lines, and its warnings
	// and errors kept for the host's lines of the answer.
	logged := &handlerlog.Sink{}
	ctx = handlerlog.WithContext(ctx, handlerlog.New(a.log, inv.Function, inv.InvocationID, logged))
	d := subscriber.Delivery{Broker: brokerOf(m), Properties: m.ApplicationProperties, Body: m.Body}
	r := run(ctx, &d)
	for i := range r.Replays {
		rr := &r.Replays[i]
		a.logInvocation(inv, boundReport(rr), rr.DeliveryCount, rr.Charge)
	}
	a.finishInvocation(dl.span, inv, &r, m.DeliveryCount, dl.charge, dl.hasParent, logged)
	return a.answer(ctx, r.Outcome.Spec(), string(r.Outcome), r.Err, m.DeliveryCount)
}

// boundReport bounds every id of r that is logged (in up to three places)
// once.
func boundReport(r *subscriber.Report) *subscriber.Report {
	r.MessageID, r.SessionID = logsafe.Bound(r.MessageID), logsafe.Bound(r.SessionID)
	r.EventID, r.EventTypeID = logsafe.Bound(r.EventID), logsafe.Bound(r.EventTypeID)
	return r
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

// finishInvocation records the invocation's metrics and span attributes
// and writes its lines: the JSON line on stdout; for an answer that
// completes the message, the summary and any warnings in the response's
// Logs; for one that fails it, a line on stderr. The warnings and errors
// the handlers logged (kept in logged) follow the summary in the Logs, or
// precede the failure line on stderr.
func (a *endpointApp) finishInvocation(span trace.Span, inv *funchost.Invocation, r *subscriber.Report, deliveryCount int, charge *telemetry.Charge, hasParent bool, logged *handlerlog.Sink) {
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
		for _, line := range handlerLines(logged) {
			inv.Log(line)
		}
		a.recent.add(inv.InvocationID, inv.Logs()...)
	} else {
		for _, line := range handlerLines(logged) {
			a.recent.add(inv.InvocationID, a.stderrLine(line))
		}
		a.failureLine(inv, r, deliveryCount)
	}
}

// handlerLines words the warnings and errors a handler logged as the
// host's lines: "warning: " or "error: ", "handler logged: ", the
// message, a colon and the fields (the ids, then the record's
// attributes), every value bounded by the handler's logger; and a line
// counting those not kept.
func handlerLines(logged *handlerlog.Sink) []string {
	entries, dropped := logged.Entries()
	if len(entries) == 0 {
		return nil
	}
	lines := make([]string, 0, len(entries)+1)
	for _, e := range entries {
		b := make([]byte, 0, 256)
		if e.Error {
			b = append(b, "error: handler logged: "...)
		} else {
			b = append(b, "warning: handler logged: "...)
		}
		b = append(b, e.Message...)
		b = append(b, ':')
		for _, f := range e.Fields {
			b = appendField(b, f.Key, f.Value)
		}
		lines = append(lines, string(b))
	}
	if dropped > 0 {
		lines = append(lines, "warning: the handler logged "+strconv.Itoa(dropped)+" more warning(s) or error(s) in this invocation; see its JSON lines on stdout")
	}
	return lines
}

// logInvocation writes the invocation's one line. Every string on it is
// bounded (the report's ids by finishInvocation), and none comes from the
// message body.
func (a *endpointApp) logInvocation(inv *funchost.Invocation, r *subscriber.Report, deliveryCount int, charge *telemetry.Charge) {
	spec := r.Outcome.Spec()
	level, msg := spec.Level, spec.Message
	if r.Inbox == subscriber.InboxBypassed && level < zerolog.WarnLevel {
		level = zerolog.WarnLevel
		msg += bypassNote
	}
	ev := a.invocationLine(level, inv)
	if ev == nil {
		return
	}
	ev = ev.Str("endpoint", a.cfg.Endpoint).
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
	ev = a.withCharge(ev, charge)
	if r.EventTypeFromBody {
		ev = ev.Str("eventTypeSource", "body")
	}
	if r.BypassReason != "" {
		ev = ev.Str("bypassReason", r.BypassReason)
	}
	if r.StoreOp != "" {
		ev = ev.Str("operation", r.StoreOp)
	}
	if r.EventsPublished > 0 {
		ev = ev.Int("eventsPublished", r.EventsPublished)
	}
	if r.EventsDropped > 0 {
		ev = ev.Int("eventsDropped", r.EventsDropped)
	}
	if r.TxnReruns > 0 {
		ev = ev.Int("txnReruns", r.TxnReruns)
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
func (a *endpointApp) invocationLogs(inv *funchost.Invocation, r *subscriber.Report, deliveryCount int, charge *telemetry.Charge) {
	fields := make([]field, 0, 9)
	fields = append(fields, field{"outcome", string(r.Outcome)}, field{"inbox", string(r.Inbox)},
		field{"messageId", r.MessageID}, field{"sessionId", r.SessionID}, field{"eventId", r.EventID})
	if r.EventTypeID != "" {
		fields = append(fields, field{"eventTypeId", r.EventTypeID})
	}
	fields = append(fields, field{"deliveryCount", strconv.Itoa(deliveryCount)}, field{"handlerRan", strconv.FormatBool(r.HandlerRan)})
	if r.EventsPublished > 0 {
		fields = append(fields, field{"eventsPublished", strconv.Itoa(r.EventsPublished)})
	}
	if r.EventsDropped > 0 {
		fields = append(fields, field{"eventsDropped", strconv.Itoa(r.EventsDropped)})
	}
	if r.TxnReruns > 0 {
		fields = append(fields, field{"txnReruns", strconv.Itoa(r.TxnReruns)})
	}
	a.logSummary(inv, r.Outcome.Spec().Message, r.Duration, charge, fields...)
	switch r.Inbox {
	case subscriber.InboxBypassed:
		inv.Log("warning: inbox deduplication bypassed (bypassReason=" + r.BypassReason + "): MessageId or endpoint identity is missing, blank or too long, so a redelivery runs the handler again")
	case subscriber.InboxDuplicate:
		inv.Log("warning: duplicate delivery of messageId=" + r.MessageID + ": already recorded in the inbox; the handler was skipped")
	}
	if r.RecordRetries > 0 {
		inv.Log("warning: the inbox record was retried " + strconv.Itoa(r.RecordRetries) + " time(s) before it succeeded; the store was failing")
	}
	if r.MarkRetries > 0 {
		inv.Log("warning: the dispatched mark of the published events was retried " + strconv.Itoa(r.MarkRetries) + " time(s) before it succeeded; the store was failing")
	}
}

// failureLine writes one line for a failing invocation on stderr.
func (a *endpointApp) failureLine(inv *funchost.Invocation, r *subscriber.Report, deliveryCount int) {
	spec := r.Outcome.Spec()
	a.writeFailureLine(inv, failedInvocation{
		status: spec.Status, level: spec.Level, message: spec.Message, outcome: string(r.Outcome),
		endpoint: a.cfg.Endpoint, messageID: r.MessageID, sessionID: r.SessionID,
		deliveryCount: deliveryCount, storeOp: r.StoreOp, eventsDropped: r.EventsDropped, err: r.Err,
	})
}

// newSafeError renders a store failure for a log line without the
// provider's details.
func newSafeError(op string, err error) string {
	return logsafe.Bound(subscriber.NewStoreError(op, err).Error())
}
