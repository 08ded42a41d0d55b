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
// it, the handler its event type resolved to, the inbox keys and session
// state it was checked against, and what its steps did.
type job struct {
	p     *Pipeline
	d     *Delivery
	in    *message.Inbound
	start time.Time

	ce          *message.CloudEvent
	fromBody    bool
	eventTypeID string
	queueMs     int64
	attempt     Attempt
	// h is the handler registered for eventTypeID, resolved once when the
	// message is read; hasHandler is false when there is none.
	h          registered
	hasHandler bool

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
	// which owns the replay of the copies behind it; behindBlock: the copy
	// waits behind another event's block and was left parked.
	replaying, behindBlock bool
	// ingress: the delivery came through the CloudEvents ingress
	// function, which takes EventRequests only.
	ingress bool

	// out is the outbox of the handler's last run.
	out *outbox
	// outboxSent: a transactional outbox's events and its
	// ResolutionResponse were sent (the delivery's answer is sent).
	outboxSent bool

	// settle is the context of the steps after the handler (see settling),
	// and settleCancel releases it (endSettle).
	settle       context.Context
	settleCancel context.CancelFunc

	// did is what the steps did, for the report.
	did trail
}

// newJob starts the job of d at start.
func (p *Pipeline) newJob(d *Delivery, start time.Time) *job {
	return &job{p: p, d: d, start: start, did: trail{sessionID: deref(d.Broker.SessionID)}}
}

// read keeps what the pipeline uses of in, the message read from the
// delivery, and resolves its event type's handler.
func (j *job) read(in *message.Inbound) {
	j.in = in
	j.ce = in.CloudEvent
	j.fromBody = readFromBody(j.ce)
	j.eventTypeID = deref(in.EventTypeID)
	j.h, j.hasHandler = j.p.o.Handlers.lookup(j.eventTypeID)
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

// readFromBody reports whether the attributes of ce (nil for a native
// message) were read from the body, as a structured CloudEvent's are: they
// are payload, never logged.
func readFromBody(ce *message.CloudEvent) bool {
	return ce != nil && ce.Mode == message.ModeStructured
}

func (j *job) timings() message.Timings {
	return message.Timings{QueueTimeMs: j.queueMs, ProcessingTimeMs: j.p.o.Now().Sub(j.start).Milliseconds()}
}

func (j *job) eventID() string { return deref(j.in.EventID) }

// settling is the context of everything after the handler returned (the
// record or batch, the session changes and the responses): one
// SettleTimeout from its first use, which runs to the end even if the
// invocation is cancelled meanwhile.
func (j *job) settling(ctx context.Context) context.Context {
	if j.settle == nil {
		j.settle, j.settleCancel = j.p.settleCtx(ctx)
	}
	return j.settle
}

// endSettle releases the settle context, if there is one; the next use of
// settling starts a new one. The job's owner defers it.
func (j *job) endSettle() {
	if j.settleCancel != nil {
		j.settleCancel()
	}
	j.settle, j.settleCancel = nil, nil
}

// settleCtx is a context of SettleTimeout that ctx's cancellation does not
// end: for work that must finish once begun.
func (p *Pipeline) settleCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), p.o.SettleTimeout)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// trail is what a delivery's steps did, each fact recorded by the step that
// did it. With the delivery, the message read from it and how it ended, it
// is what report makes the delivery's Report of.
type trail struct {
	sessionID string

	inbox         InboxState
	bypassReason  string
	recordRetries int
	// markRetries counts dispatched-mark attempts after a failed one.
	markRetries int
	// duplicate: the delivery was answered as a duplicate.
	duplicate bool

	handlerRan bool
	// txnReruns counts the runs of a transactional handler after its batch
	// conflicted (rerunTx).
	txnReruns int
	// stack is the goroutine stack of a handler panic.
	stack []byte
	// handlerErr is the handler's failure the delivery answered (an
	// ErrorResponse or a SkipResponse) and completed.
	handlerErr error

	// eventsPublished counts the published events this delivery sent (a
	// stored outbox's re-sent included); eventsDropped those its handler
	// published and the delivery dropped because the handler did not
	// return Completed.
	eventsPublished, eventsDropped int

	// responded: a Resolver response was sent.
	responded        bool
	parked           bool
	deferralSequence int64
	blocked          bool
	unblocked        bool
	replayRequested  bool
	sourceIgnored    bool
	retryDelay       time.Duration
	retryScheduled   bool
	notice           bool
	noticeErr        error

	// A replayed copy's: charge is its request charge, and replayed says
	// that Drain settled it as replayed (its cursor moved past it).
	charge   *telemetry.Charge
	replayed bool
	// A Drain's: the copies it replayed, each with its own report, and why
	// it stopped.
	replays   []Report
	drainStop string

	duration time.Duration
}
