package subscriber

import (
	"context"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/session"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// view is the read-only view of a delivery: the message read from it and
// what follows from it alone. It is built once, where the delivery is read
// (job.read), and nothing writes it afterwards.
type view struct {
	in          *message.Inbound
	ce          *message.CloudEvent
	fromBody    bool
	eventTypeID string
	queueMs     int64
	// h is the handler registered for eventTypeID; hasHandler is false
	// when there is none.
	h          registered
	hasHandler bool
	// sk is the session-state key; hasSession is false without a session
	// store or a SessionId.
	sk         session.Key
	hasSession bool
	// ingress: the delivery came through the CloudEvents ingress
	// function, which takes EventRequests only.
	ingress bool
	// attempt is how the event reaches its handler.
	attempt Attempt
	// replaying: the delivery is a parked copy being replayed by Drain,
	// which owns the replay of the copies behind it.
	replaying bool
}

// readAs is how a delivery is read: through the CloudEvents ingress
// function, or as a parked copy Drain replays.
type readAs struct{ ingress, replaying bool }

// job is one delivery on its way through the pipeline: its read-only view,
// and the state its steps keep, each field written by the one file that
// owns it.
type job struct {
	p     *Pipeline
	d     *Delivery
	start time.Time
	view

	// own is the inbox key of the delivery's own identity; nil when the
	// inbox is off or bypassed (inbox.go).
	own *inbox.Key
	// st is the session state as the delivery last saw it (sessionstate.go).
	st session.State
	// tx is the partition and outbox of an event of a transactional
	// handler; nil for any other (tx.go).
	tx *txState
	// behindBlock: a replayed copy waits behind another event's block and
	// was left parked (drain.go).
	behindBlock bool
	// out is the outbox of the handler's last run (run.go).
	out *outbox

	// settle is the context of the steps after the handler (see settling),
	// and settleCancel releases it (endSettle).
	settle       context.Context
	settleCancel context.CancelFunc

	// did is what the steps did, for the report; each step records its own
	// facts.
	did trail
}

// newJob starts the job of d at start.
func (p *Pipeline) newJob(d *Delivery, start time.Time) *job {
	return &job{p: p, d: d, start: start, did: trail{sessionID: deref(d.Broker.SessionID)}}
}

// read reads the delivery, read as as says, and builds its view, resolving
// its event type's handler; it is the only writer of the view.
func (j *job) read(as readAs) (*message.Inbound, error) {
	d := j.d
	in, err := message.ReadWith(d.Broker, d.Properties, d.Body, j.p.o.CloudEvents)
	if err != nil {
		return nil, err
	}
	v := view{in: in, ce: in.CloudEvent, eventTypeID: deref(in.EventTypeID), queueMs: -1, ingress: as.ingress, replaying: as.replaying}
	v.fromBody = readFromBody(v.ce)
	v.h, v.hasHandler = j.p.o.Handlers.lookup(v.eventTypeID)
	if !in.EnqueuedTime.IsZero() {
		v.queueMs = max(j.start.Sub(in.EnqueuedTime).Milliseconds(), 0)
	}
	if sid := deref(in.SessionID); sid != "" && j.p.o.Sessions != nil {
		v.sk = session.NewKey(j.p.o.EndpointID, sid)
		v.hasSession = v.sk.Check() == nil
	}
	switch {
	case as.replaying:
		v.attempt = AttemptReplay
	case in.Type == message.EventRequest, in.Type == message.UnsupportedResponse:
		v.attempt = AttemptOriginal
	case in.Type == message.RetryRequest:
		v.attempt = AttemptRetry
	case in.Type == message.ResubmissionRequest:
		v.attempt = AttemptResubmission
	}
	j.view = v
	return in, nil
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
