package subscriber

import (
	"context"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// retryRequest handles a RetryRequest the endpoint scheduled after a
// failure, as NimBus's HandleRetryRequest: inbox check on its own
// MessageId (with the state read); on a duplicate, lift this event's block
// or, when nothing blocks the session, replay what waits; run the handler
// only while the session is blocked by this event (otherwise the event was
// settled another way: ResolutionResponse); on success record the source
// MessageId it stands in for and its own, unblock, replay, and resolve; on
// failure report it, keep the block and schedule the next retry.
func (j *job) retryRequest(ctx context.Context) {
	j.ownKey()
	if src := j.in.InboxMessageID; src != nil && *src != "" {
		j.source = *src
	}
	if !j.checkRequest(ctx) {
		return
	}
	if j.hasSession && !j.st.BlockedBy(j.eventID()) {
		j.r.Outcome = OutcomeRetryObsolete
		j.respond(ctx, message.NewResponse(j.in, message.Resolution, j.timings(), nil), OutcomeRetryObsolete)
		return
	}
	out, sctx, cancel, ok := j.dispatchAndRun(ctx)
	if !ok {
		return
	}
	defer cancel()
	switch {
	case out.err != nil && out.kind == KindDiscard:
		if j.unblockAndDrain(sctx) {
			j.discarded(sctx, out.err)
		}
	case out.err != nil:
		// Still blocked by this event.
		j.failed(sctx, out.err, true)
	case out.res.handoff != nil:
		j.handoff(sctx, out.res.handoff)
	default:
		if !j.record(sctx, j.sourceKey(), j.own) || !j.unblockAndDrain(sctx) {
			return
		}
		j.respond(sctx, message.NewResponse(j.in, message.Resolution, j.timings(), nil), OutcomeCompleted)
	}
}

// resubmission handles an operator's ResubmissionRequest, as NimBus's
// HandleResubmissionRequest: only from the Manager; inbox check on its own
// MessageId; the handler runs whatever the session's state; on success it
// records the MessageId of the delivery that blocked the session (when it
// resolves that block) and its own, unblocks and replays what waits.
func (j *job) resubmission(ctx context.Context) {
	if !j.authorized() {
		return
	}
	j.ownKey()
	if !j.checkRequest(ctx) {
		return
	}
	out, sctx, cancel, ok := j.dispatchAndRun(ctx)
	if !ok {
		return
	}
	defer cancel()
	ev := j.eventID()
	switch {
	case out.err != nil && out.kind == KindDiscard:
		if j.unblockAndDrain(sctx) {
			j.discarded(sctx, out.err)
		}
	case out.err != nil:
		// NimBus: an ErrorResponse only; no retry, the block unchanged.
		j.failed(sctx, out.err, false)
	case out.res.handoff != nil:
		if j.hasSession && j.st.Blocked() && !j.st.BlockedBy(ev) {
			// The session is owned by another event: leave its block.
			j.respond(sctx, j.handoffResponse(out.res.handoff), OutcomePendingHandoff)
			return
		}
		j.source = j.blockedSource()
		j.handoff(sctx, out.res.handoff)
	default:
		var blocked *inbox.Key
		if src := j.blockedSource(); j.own != nil && src != "" && src != j.own.MessageID &&
			inbox.BypassReason(j.p.o.EndpointID, &src) == inbox.BypassNone {
			k := inbox.NewKey(j.p.o.EndpointID, src)
			blocked = &k
		}
		if !j.record(sctx, blocked, j.own) || !j.unblockAndDrain(sctx) {
			return
		}
		j.respond(sctx, message.NewResponse(j.in, message.Resolution, j.timings(), nil), OutcomeCompleted)
	}
}

// blockedSource is the session's BlockedByMessageId when this event blocks
// the session, else the delivery's own MessageId.
func (j *job) blockedSource() string {
	if j.hasSession && j.st.BlockedBy(j.eventID()) && j.st.BlockedByMessageID != "" {
		return j.st.BlockedByMessageID
	}
	return deref(j.in.MessageID)
}

// skipRequest handles the Manager's SkipRequest: when the session is
// blocked by this event, unblock it and replay what waits; answer a
// SkipResponse either way.
func (j *job) skipRequest(ctx context.Context) {
	if !j.authorized() || !j.readState(ctx) || !j.unblockAndDrain(ctx) {
		return
	}
	j.respond(ctx, message.NewSkipResponse(j.in, j.timings()), OutcomeSkipped)
}

// handoffCompleted handles a HandoffCompletedRequest: the handed-off work
// finished. Unblock and replay when this event blocks the session; answer a
// ResolutionResponse either way. No handler runs and nothing is recorded.
func (j *job) handoffCompleted(ctx context.Context) {
	if !j.authorized() || !j.readState(ctx) || !j.unblockAndDrain(ctx) {
		return
	}
	j.respond(ctx, message.NewResponse(j.in, message.Resolution, j.timings(), nil), OutcomeHandoffCompleted)
}

// handoffFailed handles a HandoffFailedRequest: the handed-off work failed.
// When this event blocks the session, report an ErrorResponse with the
// operator's error text; the session stays blocked. Otherwise there is no
// matching event to fail, and the request is completed without a response.
func (j *job) handoffFailed(ctx context.Context) {
	if !j.authorized() || !j.readState(ctx) {
		return
	}
	if j.hasSession && !j.st.BlockedBy(j.eventID()) {
		j.r.Outcome = OutcomeHandoffUnmatched
		return
	}
	text, typ := message.HandoffError(j.in)
	out := message.NewErrorResponse(j.in, text, typ, j.timings())
	j.respond(ctx, out, OutcomeHandoffFailed)
}

// checkRequest runs the inbox check of a RetryRequest or resubmission on
// its own MessageId, with the session-state read. A recorded one (a
// redelivery after its success) lifts this event's block if it still
// holds, or replays what waits when nothing blocks the session, and is
// answered SkipResponse "DuplicateDetected", as NimBus does. It returns
// false when the delivery has ended.
func (j *job) checkRequest(ctx context.Context) bool {
	dup, failed := j.lookup(ctx, []*inbox.Key{j.own}, true)
	if failed {
		return false
	}
	if dup != nil {
		if j.unblockAndDrain(ctx) {
			j.duplicate(ctx, *dup)
		}
		return false
	}
	return true
}
