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
// dispatch; the handler; then record and ResolutionResponse, or block and
// ErrorResponse, or the other outcomes.
func (j *job) eventRequest(ctx context.Context) result {
	if j.in.IsHeartbeat() {
		out := message.NewHeartbeatResponse(j.in, j.timings(), j.p.o.Now(), j.p.o.Version)
		return j.respond(ctx, out, OutcomeHeartbeat)
	}
	j.ownKey()
	if j.own != nil {
		// The id the inbox knows the event by (for a CloudEvent
		// deduplicated by source and id, that pair's key).
		j.source = j.own.MessageID
	}
	// The inbox check runs before anything else looks at the event, so a
	// recorded redelivery is skipped whatever the session's state.
	dup, err := j.lookup(ctx, []*inbox.Key{j.own}, true)
	if err != nil {
		return failure(err)
	}
	if dup {
		return j.duplicate(ctx)
	}
	if j.mustWait() {
		parked, err := j.park(ctx)
		if err != nil {
			return failure(err)
		}
		if parked {
			return result{outcome: OutcomeDeferred}
		}
	}
	return j.handleEvent(ctx, []*inbox.Key{j.own})
}

// handleEvent dispatches the event, runs its handler and settles the
// outcome of an original delivery or a replayed copy. recordKeys are
// recorded in order after a success.
func (j *job) handleEvent(ctx context.Context, recordKeys []*inbox.Key) result {
	a, end, done := j.dispatchAndRun(ctx)
	if done {
		return end
	}
	sctx, cancel := j.settleCtx(ctx)
	defer cancel()
	switch {
	case a.err != nil && a.kind == KindDiscard:
		return j.discarded(sctx, a.err)
	case a.err != nil:
		// A failed event blocks its session first, so nothing of the
		// session overtakes it even if the answer below is lost.
		if err := j.block(sctx, session.BlockFailure); err != nil {
			return failure(err)
		}
		return j.failed(sctx, a.err, true)
	case a.res.handoff != nil:
		return j.handoff(sctx, a.res.handoff)
	}
	if end, done := j.save(sctx, recordKeys, func() result { return j.duplicate(sctx) }); done {
		return end
	}
	// The blocker's own redelivery succeeded: lift its block.
	if err := j.unblockAndDrain(sctx); err != nil {
		return failure(err)
	}
	return j.resolved(sctx, OutcomeCompleted)
}
