package subscriber

import (
	"context"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/session"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// job is one delivery on its way through the pipeline: what was read of
// it, the inbox keys and session state it was checked against, and the
// report of what it did.
type job struct {
	p     *Pipeline
	r     *Report
	d     *Delivery
	in    *message.Inbound
	start time.Time

	ce          *message.CloudEvent
	fromBody    bool
	eventTypeID string
	queueMs     int64
	attempt     Attempt

	// own is the inbox key of the delivery's own identity; nil when the
	// inbox is off or bypassed.
	own *inbox.Key
	// source is the MessageId the event's source delivery had: the
	// InboxMessageId a retry or replayed copy carries, else the delivery's
	// own MessageId. It becomes BlockedByMessageId and the InboxMessageId
	// of what this delivery parks or schedules.
	source string
	// sk is the session-state key; hasSession is false without a session
	// store or a SessionId.
	sk         session.Key
	hasSession bool
	st         session.State
	// tx is set for an event of a transactional handler (prepareTx, which
	// sets txPrepared).
	tx         *txState
	txPrepared bool
	// replaying: the delivery is a parked copy being replayed by Drain,
	// which owns the replay of the copies behind it.
	replaying bool
}

// result is how a delivery ends: its outcome, the error behind it (a
// failure, or the handler's error of a failed or discarded event), NimBus's
// dead-letter case when the place that failed knows it, and the store
// operation that failed.
type result struct {
	outcome    Outcome
	err        error
	deadLetter *message.DeadLetter
	storeOp    string
}

// finish is the one place a delivery's result becomes its report's
// outcome.
func (p *Pipeline) finish(r *Report, res result) {
	r.Outcome, r.Err = res.outcome, res.err
	if res.deadLetter != nil {
		r.deadLetter = res.deadLetter
	}
	if res.storeOp != "" {
		p.o.Metrics.Inc(telemetry.InboxOperationFailed, telemetry.TagStoreOperation, res.storeOp)
		r.StoreOp = res.storeOp
	}
}

func (j *job) setInbound(in *message.Inbound) {
	j.in = in
	r := j.r
	j.ce = in.CloudEvent
	// A structured CloudEvent's attributes were read from the body: payload,
	// never logged.
	j.fromBody = j.ce != nil && j.ce.Mode == message.ModeStructured
	r.MessageType = in.Type.String()
	j.eventTypeID = deref(in.EventTypeID)
	if v, ok := in.Property(message.PropEventTypeID); (ok && v != "") || (j.ce != nil && !j.fromBody) {
		r.EventTypeID = j.eventTypeID
	} else {
		// From the body: payload, never logged.
		r.EventTypeFromBody = j.eventTypeID != ""
	}
	if _, ok := in.Property(message.PropEventID); ok || !j.fromBody {
		r.EventID = deref(in.EventID)
	}
	if j.ce != nil {
		r.CloudEvent = string(j.ce.Mode)
	}
	j.queueMs = -1
	if !in.EnqueuedTime.IsZero() {
		j.queueMs = max(j.start.Sub(in.EnqueuedTime).Milliseconds(), 0)
	}
	j.source = deref(in.MessageID)
	if sid := deref(in.SessionID); sid != "" && j.p.o.Sessions != nil {
		j.sk = session.NewKey(j.p.o.EndpointID, sid)
		j.hasSession = j.sk.Check() == nil
	}
}

func (j *job) timings() message.Timings {
	return message.Timings{QueueTimeMs: j.queueMs, ProcessingTimeMs: j.p.o.Now().Sub(j.start).Milliseconds()}
}

func (j *job) eventID() string { return deref(j.in.EventID) }

// settleCtx is the context of everything after a successful handler: it
// runs to the end even if the invocation is cancelled meanwhile.
func (j *job) settleCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), j.p.o.SettleTimeout)
}
