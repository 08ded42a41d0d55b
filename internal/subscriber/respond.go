package subscriber

import (
	"context"
	"fmt"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/session"
)

// entry is what differs, between the entry points that run the event's
// handler, in how the handled delivery is answered (answer).
type entry struct {
	// standsIn: the delivery stands in for an event that already blocks
	// its session (a RetryRequest, a resubmission): its duplicate, and its
	// discard, lift the event's block.
	standsIn bool
	// blocksOnFailure: a failure blocks the session by the event before it
	// is answered (a stand-in's event blocks it already).
	blocksOnFailure bool
	// retries: a failure schedules the next RetryRequest when a policy
	// applies.
	retries bool
	// yieldsHandoff: a handoff while another event blocks the session
	// leaves that block and is only answered.
	yieldsHandoff bool
}

// The entry points that run the event's handler.
var (
	// entryEvent: an EventRequest, or a parked copy replayed.
	entryEvent = entry{blocksOnFailure: true, retries: true}
	// entryRetry: a RetryRequest; its failure keeps the event's block.
	entryRetry = entry{standsIn: true, retries: true}
	// entryResubmission: an operator's ResubmissionRequest; NimBus answers
	// its failure with an ErrorResponse only, the block unchanged.
	entryResubmission = entry{standsIn: true, yieldsHandoff: true}
)

// answer answers the delivery the handler step left as h, the way entry e
// answers, for the source identity source (what a block or a RetryRequest
// of this delivery carries). What follows the handler runs to the end
// even if the invocation is cancelled meanwhile.
func (j *job) answer(ctx context.Context, h handled, e entry, source string) (Outcome, error) {
	ctx = j.settling(ctx)
	switch h.kind {
	case handledUnsupported:
		return OutcomeUnsupported, nil
	case handledDuplicate:
		if e.standsIn {
			return j.duplicateRequest(ctx)
		}
		return j.duplicate(ctx)
	case handledDiscarded:
		if e.standsIn {
			return j.unblockThen(ctx, func(ctx context.Context) (Outcome, error) { return j.discarded(ctx, h.err) })
		}
		return j.discarded(ctx, h.err)
	case handledFailed:
		if e.blocksOnFailure {
			// A failed event blocks its session first, so nothing of the
			// session overtakes it even if the answer below is lost.
			if err := j.block(ctx, session.BlockFailure, source); err != nil {
				return "", err
			}
		}
		return j.failed(ctx, h.err, e.retries, source)
	case handledHandoff:
		if e.yieldsHandoff && j.hasSession && j.st.Blocked() && !j.st.BlockedBy(j.eventID()) {
			// The session is owned by another event: leave its block.
			return OutcomePendingHandoff, j.respond(ctx, j.handoffResponse(h.handoff))
		}
		return j.handoff(ctx, h.handoff, source)
	}
	// A success lifts the event's block (the blocker's own redelivery
	// succeeded, or its stand-in did).
	return j.unblockThen(ctx, j.completed)
}

// resolve answers a ResolutionResponse.
func (j *job) resolve(ctx context.Context) error {
	return j.respond(ctx, message.NewResponse(j.in, message.Resolution, j.timings(), nil))
}

// completed answers a handled event: a ResolutionResponse, unless it
// went out already with the transactional handler's events.
func (j *job) completed(ctx context.Context) (Outcome, error) {
	if j.tx.outboxSent() {
		return OutcomeCompleted, nil
	}
	return OutcomeCompleted, j.resolve(ctx)
}

// duplicate answers a recorded delivery: SkipResponse "DuplicateDetected".
// When the copy that committed it left its published events undispatched
// (its send failed, or it stopped after its commit), they are sent instead,
// with the ResolutionResponse that copy stored, and marked dispatched: the
// answer the delivery that committed would have given. A redelivery that
// finds a transactional marker holding no events answers the
// ResolutionResponse instead (see resolvesAgain).
func (j *job) duplicate(ctx context.Context) (Outcome, error) {
	j.did.duplicate = true
	if err := j.finishOutbox(ctx); err != nil || j.tx.outboxSent() {
		return OutcomeOutboxDispatched, err
	}
	if j.resolvesAgain() {
		return OutcomeDuplicateResolved, j.resolve(ctx)
	}
	return OutcomeDuplicate, j.respond(ctx, message.NewResponse(j.in, message.Duplicate, j.timings(), nil))
}

// resolvesAgain reports a redelivery (DeliveryCount above 1) that found a
// transactional marker holding no events. Such a marker is committed with
// the handler's effect, before the ResolutionResponse is sent, and records
// nothing after it: an earlier delivery of this message may have committed
// it and then stopped, lost the batch's answer, or failed to send, each of
// which the broker answers by redelivering. The redelivery sends the
// ResolutionResponse, so every committed delivery's outcome reaches the
// Resolver at least once (a second ResolutionResponse for a completed
// event is harmless: the Resolver's status stays Completed). A marker
// whose events were dispatched records that the response went with them,
// and a first delivery that finds a marker is another copy of the message,
// whose committing delivery answers for it: both stay duplicates.
func (j *job) resolvesAgain() bool {
	return j.tx != nil && j.d.Broker.DeliveryCount > 1 && j.tx.foundBare()
}

// finishOutbox dispatches the undispatched outbox a marker read found, if
// any (see dispatchOutbox).
func (j *job) finishOutbox(ctx context.Context) error {
	if j.tx == nil {
		return nil
	}
	return j.dispatchOutbox(ctx)
}

// handoff blocks the session by this event and source and reports the
// pending handoff. It is not recorded: a redelivery re-runs the handler so
// the pending state can be re-established.
func (j *job) handoff(ctx context.Context, ho *Handoff, source string) (Outcome, error) {
	if err := j.block(ctx, session.BlockHandoff, source); err != nil {
		return "", err
	}
	return OutcomePendingHandoff, j.respond(ctx, j.handoffResponse(ho))
}

func (j *job) handoffResponse(ho *Handoff) *message.Outgoing {
	h := &message.Handoff{Reason: ho.Reason, ExternalJobID: ho.ExternalJobID}
	if ho.ExpectedIn > 0 {
		h.ExpectedBy = j.p.o.Now().Add(ho.ExpectedIn)
	}
	return message.NewResponse(j.in, message.PendingHandoff, j.timings(), h)
}

// failed answers the handler's failure err: an ErrorResponse, and a
// RetryRequest carrying source when a policy applies and retry is true.
// The caller has blocked the session (or chose not to).
func (j *job) failed(ctx context.Context, err error, retry bool, source string) (Outcome, error) {
	j.did.handlerErr = err
	text, typ := errorText(err), ErrorType(err)
	errResp := message.NewErrorResponse(j.in, text, typ, j.timings())
	var at time.Time
	if retry && j.p.o.RetryPolicies != nil && j.p.o.Scheduler != nil {
		rc := 0
		if j.in.RetryCount != nil {
			rc = int(*j.in.RetryCount)
		}
		if d, ok := j.p.o.RetryPolicies.RetryDelay(j.eventTypeID, text, j.p.o.EndpointID, rc, j.p.o.Rand()); ok {
			at = j.p.o.Now().Add(d)
			j.did.retryDelay = d
		}
	}
	if at.IsZero() {
		return OutcomeEventFailed, j.respond(ctx, errResp)
	}
	// The ErrorResponse and the scheduled RetryRequest go at once.
	retryMsg := message.NewRetryRequest(j.in, j.d.Body, source)
	var schedErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		sctx, cancel := context.WithTimeout(ctx, j.p.o.SettleTimeout)
		defer cancel()
		schedErr = j.p.o.Scheduler.Schedule(sctx, retryMsg, at)
	}()
	sendErr := j.respond(ctx, errResp)
	<-done
	if sendErr != nil {
		return "", fmt.Errorf("%w (the event failed: %w)", sendErr, err)
	}
	if schedErr != nil {
		return "", &sendError{verb: "schedule", messageType: retryMsg.Type(), err: schedErr}
	}
	j.did.retryScheduled = true
	return OutcomeEventFailed, nil
}

// discarded answers a discarded event: a SkipResponse with NimBus's
// classifier text.
func (j *job) discarded(ctx context.Context, err error) (Outcome, error) {
	j.did.handlerErr = err
	out := message.NewDiscardResponse(j.in, ErrorType(err), errorText(err), discardClassifier, j.timings())
	return OutcomeDiscarded, j.respond(ctx, out)
}

// discardClassifier names what classified a failure as Discard in the
// SkipResponse text ("… Classified as Discard by {classifier}.").
const discardClassifier = "subscriber.Discard"

// duplicateRequest answers a RetryRequest or resubmission found recorded (a
// redelivery after its success), as NimBus does: it lifts this event's
// block if it still holds, or asks for the replay of what waits when
// nothing blocks the session, and answers SkipResponse "DuplicateDetected".
//
// An undispatched outbox of the copy that committed it goes out first,
// before the block is lifted, so nothing parked behind this event is
// replayed before its events are sent.
func (j *job) duplicateRequest(ctx context.Context) (Outcome, error) {
	if err := j.finishOutbox(ctx); err != nil {
		return "", err
	}
	return j.unblockThen(ctx, j.duplicate)
}

// unblockThen lifts this event's block and asks for the replay of what
// waits (see unblockAndDrain), then answers.
func (j *job) unblockThen(ctx context.Context, answer func(context.Context) (Outcome, error)) (Outcome, error) {
	if err := j.unblockAndDrain(ctx); err != nil {
		return "", err
	}
	return answer(ctx)
}
