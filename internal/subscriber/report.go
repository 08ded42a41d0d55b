package subscriber

import (
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// report is the one place a Report is filled, for a delivery, a replayed
// copy and a Drain alike: from the delivery d, the message read from it (in;
// nil when it could not be read), what its steps did (t) and how it ended.
// The counters of what the steps did are counted here too.
func (p *Pipeline) report(d *Delivery, in *message.Inbound, t *trail, end result) Report {
	r := Report{
		Outcome:          end.outcome,
		Inbox:            t.inbox,
		MessageID:        deref(d.Broker.MessageID),
		SessionID:        t.sessionID,
		BypassReason:     t.bypassReason,
		StoreOp:          end.storeOp,
		RecordRetries:    t.recordRetries,
		MarkRetries:      t.markRetries,
		HandlerRan:       t.handlerRan,
		TxnReruns:        t.txnReruns,
		Published:        t.responded,
		EventsPublished:  t.eventsPublished,
		EventsDropped:    t.eventsDropped,
		DeliveryCount:    d.Broker.DeliveryCount,
		Parked:           t.parked,
		DeferralSequence: t.deferralSequence,
		Blocked:          t.blocked,
		Unblocked:        t.unblocked,
		DrainRequested:   t.replayRequested,
		SourceIgnored:    t.sourceIgnored,
		RetryScheduled:   t.retryScheduled,
		RetryDelay:       t.retryDelay,
		DeadLetterNotice: t.notice,
		NoticeErr:        t.noticeErr,
		Charge:           t.charge,
		Replays:          t.replays,
		DrainStop:        t.drainStop,
		deadLetter:       end.deadLetter,
		Err:              end.err,
		Stack:            t.stack,
		Duration:         t.duration,
	}
	if r.Inbox == "" {
		r.Inbox = InboxNotReached
	}
	if r.Err == nil {
		r.Err = t.handlerErr
	}
	if in != nil {
		describe(&r, in)
	}

	m := p.o.Metrics
	if end.storeOp != "" {
		m.Inc(telemetry.InboxOperationFailed, telemetry.TagStoreOperation, end.storeOp)
	}
	if t.bypassReason != "" {
		m.Inc(telemetry.InboxBypassed, telemetry.TagBypassReason, t.bypassReason)
	}
	if t.duplicate {
		m.Inc(telemetry.DuplicateDetected, "", "")
	}
	if t.txnReruns > 0 {
		m.Add(telemetry.TxnReruns, telemetry.TagOutcome, string(end.outcome), int64(t.txnReruns))
	}
	if t.parked {
		m.Inc(telemetry.DeferredParked, "", "")
	}
	if t.replayed {
		m.Inc(telemetry.DeferredReplayed, "", "")
	}
	return r
}

// describe fills what r says of the message in: its type, and its event
// type, EventId and CloudEvent mode as far as they are not payload.
func describe(r *Report, in *message.Inbound) {
	r.MessageType = in.Type.String()
	ce := in.CloudEvent
	fromBody := readFromBody(ce)
	eventTypeID := deref(in.EventTypeID)
	if v, ok := in.Property(message.PropEventTypeID); (ok && v != "") || (ce != nil && !fromBody) {
		r.EventTypeID = eventTypeID
	} else {
		// From the body: payload, never logged.
		r.EventTypeFromBody = eventTypeID != ""
	}
	r.EventID = reportedEventID(in)
	if ce != nil {
		r.CloudEvent = string(ce.Mode)
	}
}

// reportedEventID is in's EventId as the report and the handler see it:
// none when it was read from a structured CloudEvent's body and no EventId
// property carries it (a value from the body is payload).
func reportedEventID(in *message.Inbound) string {
	if _, ok := in.Property(message.PropEventID); ok || !readFromBody(in.CloudEvent) {
		return deref(in.EventID)
	}
	return ""
}
