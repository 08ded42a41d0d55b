package subscriber

import (
	"context"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/session"
)

// eventRequest handles an EventRequest (and an inbound
// UnsupportedResponse), as NimBus's StrictMessageHandler.HandleEventRequest:
// heartbeat; inbox check (with the session-state read at the same time);
// the session guard (park when blocked, or when parked copies still wait);
// then the event's handler and its answer (see handleEvent).
func (j *job) eventRequest(ctx context.Context) (Outcome, error) {
	if j.in.IsHeartbeat() {
		return OutcomeHeartbeat, j.respond(ctx, message.NewHeartbeatResponse(j.in, j.timings(), j.p.o.Now(), j.p.o.Version))
	}
	j.ownKey()
	if j.own != nil {
		// The id the inbox knows the event by (for a CloudEvent
		// deduplicated by source and id, that pair's key).
		j.source = j.own.MessageID
	}
	// The inbox check runs before anything else looks at the event, so a
	// recorded redelivery is skipped whatever the session's state.
	switch dup, err := j.lookup(ctx, []*inbox.Key{j.own}, true); {
	case err != nil:
		return "", err
	case dup:
		return j.duplicate(ctx)
	}
	if j.mustWait() {
		switch parked, err := j.park(ctx); {
		case err != nil:
			return "", err
		case parked:
			return OutcomeDeferred, nil
		}
	}
	return j.handleEvent(ctx, []*inbox.Key{j.own})
}

// handleEvent runs the event's handler and answers it, for an original
// delivery or a replayed copy: after a success, recorded under keys (in
// order), the block this delivery held is lifted and a ResolutionResponse
// sent; a failure blocks the session and is answered with an
// ErrorResponse; a discard, a handoff, a duplicate found by the batch or
// an unsupported type get their own answers.
func (j *job) handleEvent(ctx context.Context, keys []*inbox.Key) (Outcome, error) {
	a, err := j.handle(ctx, keys)
	if err != nil {
		return "", err
	}
	// What follows the handler runs to the end even if the invocation is
	// cancelled meanwhile.
	ctx = j.settling(ctx)
	switch a.kind {
	case answerUnsupported:
		return OutcomeUnsupported, nil
	case answerDuplicate:
		return j.duplicate(ctx)
	case answerDiscarded:
		return j.discarded(ctx, a.err)
	case answerFailed:
		// A failed event blocks its session first, so nothing of the
		// session overtakes it even if the answer below is lost.
		if err := j.block(ctx, session.BlockFailure); err != nil {
			return "", err
		}
		return j.failed(ctx, a.err, true)
	case answerHandoff:
		return j.handoff(ctx, a.handoff)
	}
	// The blocker's own redelivery succeeded: lift its block.
	return j.unblockThen(ctx, j.completed)
}
