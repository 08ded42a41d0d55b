package subscriber

import (
	"context"
	"strings"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/session"
)

// retryRequest handles a RetryRequest the endpoint scheduled after a
// failure, as NimBus's HandleRetryRequest: inbox check on its own
// MessageId (with the state read); on a duplicate, lift this event's block
// or, when nothing blocks the session, replay what waits; run the handler
// only while the session is blocked by this event (otherwise the event was
// settled another way: ResolutionResponse); on success record the source
// MessageId it stands in for and its own, unblock, replay, and resolve; on
// failure report it, keep the block and schedule the next retry.
func (j *job) retryRequest(ctx context.Context) result {
	j.ownKey()
	if src := j.in.InboxMessageID; src != nil && *src != "" {
		j.source = *src
	}
	if end, done := j.checkRequest(ctx); done {
		return end
	}
	if j.hasSession && !j.st.BlockedBy(j.eventID()) {
		return j.resolved(ctx, OutcomeRetryObsolete)
	}
	srcKey := j.retrySourceKey()
	a, end, done := j.dispatchAndRun(ctx)
	if done {
		return end
	}
	sctx, cancel := j.settleCtx(ctx)
	defer cancel()
	switch {
	case a.err != nil && a.kind == KindDiscard:
		return j.unblockThen(sctx, func() result { return j.discarded(sctx, a.err) })
	case a.err != nil:
		// Still blocked by this event.
		return j.failed(sctx, a.err, true)
	case a.res.handoff != nil:
		return j.handoff(sctx, a.res.handoff)
	}
	if end, done := j.save(sctx, []*inbox.Key{srcKey, j.own}, j.duplicateRequest(sctx)); done {
		return end
	}
	return j.unblockThen(sctx, func() result { return j.resolved(sctx, OutcomeCompleted) })
}

// retrySourceKey is the inbox key of the source MessageId a RetryRequest
// may record besides its own: its InboxMessageId only when that is the id
// of the delivery that blocked the session by this event (the session's
// BlockedByMessageId, which a retry of a retry or a replayed copy parked
// again carries on unchanged). Any other id, or one that cannot be checked
// (no session state, or a block stored without its MessageId), is not
// recorded, and the session's block keeps the id it holds. Called after the
// state was read.
func (j *job) retrySourceKey() *inbox.Key {
	src := j.in.InboxMessageID
	if src == nil || *src == "" {
		return nil
	}
	blocker := ""
	if j.hasSession && j.st.BlockedBy(j.eventID()) {
		blocker = j.st.BlockedByMessageID
	}
	if blocker != "" && blocker == *src {
		return j.sourceKey()
	}
	j.r.SourceIgnored = true
	j.source = blocker
	if j.source == "" {
		j.source = deref(j.in.MessageID)
	}
	return nil
}

// resubmission handles an operator's ResubmissionRequest, as NimBus's
// HandleResubmissionRequest: only from the Manager; inbox check on its own
// MessageId; the handler runs whatever the session's state; on success it
// records the MessageId of the delivery that blocked the session (when it
// resolves that block) and its own, unblocks and replays what waits.
func (j *job) resubmission(ctx context.Context) result {
	if end, denied := j.denied(); denied {
		return end
	}
	j.ownKey()
	if end, done := j.checkRequest(ctx); done {
		return end
	}
	a, end, done := j.dispatchAndRun(ctx)
	if done {
		return end
	}
	sctx, cancel := j.settleCtx(ctx)
	defer cancel()
	switch {
	case a.err != nil && a.kind == KindDiscard:
		return j.unblockThen(sctx, func() result { return j.discarded(sctx, a.err) })
	case a.err != nil:
		// NimBus: an ErrorResponse only; no retry, the block unchanged.
		return j.failed(sctx, a.err, false)
	case a.res.handoff != nil:
		if j.hasSession && j.st.Blocked() && !j.st.BlockedBy(j.eventID()) {
			// The session is owned by another event: leave its block.
			return j.respond(sctx, j.handoffResponse(a.res.handoff), OutcomePendingHandoff)
		}
		j.source = j.blockedSource()
		return j.handoff(sctx, a.res.handoff)
	}
	var blocked *inbox.Key
	if src := j.blockedSource(); j.own != nil && src != "" && src != j.own.MessageID &&
		inbox.BypassReason(j.p.o.EndpointID, &src) == inbox.BypassNone {
		k := inbox.NewKey(j.p.o.EndpointID, src)
		blocked = &k
	}
	if end, done := j.save(sctx, []*inbox.Key{blocked, j.own}, j.duplicateRequest(sctx)); done {
		return end
	}
	return j.unblockThen(sctx, func() result { return j.resolved(sctx, OutcomeCompleted) })
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
func (j *job) skipRequest(ctx context.Context) result {
	return j.managerSettlement(ctx, func() result {
		o := OutcomeSkipped
		if !j.r.Unblocked {
			// The event named does not block this session: it is reported
			// skipped (as NimBus answers), and nothing else changes.
			o = OutcomeSkippedNotBlocking
		}
		return j.respond(ctx, message.NewSkipResponse(j.in, j.timings()), o)
	})
}

// handoffCompleted handles a HandoffCompletedRequest: the handed-off work
// finished. When this event blocks the session pending a handoff, answer a
// ResolutionResponse, then unblock and replay, as NimBus does. When it
// blocks the session because it failed (it was never handed off), or when
// copies parked behind a block wait in the session (the event named may be
// one of them, its handler never run), nothing changes and no response is
// sent: reporting the event Completed would be false. Otherwise (the
// session is blocked by another event with nothing parked, or not blocked
// at all: a settlement redelivered after its block was lifted) the
// ResolutionResponse is sent again, as NimBus does. No handler runs and
// nothing is recorded.
//
// The response goes before the block is lifted: a delivery that fails
// after sending it finds the block on redelivery and sends it again, where
// one that had lifted the block and then failed to send would find only
// parked copies and send nothing, and the Resolver would never hear that
// the event completed.
func (j *job) handoffCompleted(ctx context.Context) result {
	if end, denied := j.denied(); denied {
		return end
	}
	if err := j.readState(ctx); err != nil {
		return failure(err)
	}
	if j.hasSession {
		blocker := j.st.BlockedBy(j.eventID())
		switch {
		case blocker && j.st.BlockKind == session.BlockFailure:
			return result{outcome: OutcomeHandoffNotPending}
		case !blocker && j.st.DeferredCount > 0:
			// With nothing blocking the session this may be the redelivery
			// of a settlement whose replay request was not sent: ask for the
			// replay again (a replay already running ignores it).
			if err := j.drainIfWaiting(ctx); err != nil {
				return failure(err)
			}
			return result{outcome: OutcomeHandoffNotPending}
		}
	}
	if r := j.resolved(ctx, OutcomeHandoffCompleted); r.err != nil {
		return r
	}
	if err := j.unblockAndDrain(ctx); err != nil {
		return failure(err)
	}
	return result{outcome: OutcomeHandoffCompleted}
}

// managerSettlement lifts this event's block for a Manager request that
// settles the event without running the handler, and then answers.
func (j *job) managerSettlement(ctx context.Context, answer func() result) result {
	if end, denied := j.denied(); denied {
		return end
	}
	if err := j.readState(ctx); err != nil {
		return failure(err)
	}
	return j.unblockThen(ctx, answer)
}

// handoffFailed handles a HandoffFailedRequest: the handed-off work failed.
// When this event blocks the session, report an ErrorResponse with the
// operator's error text; the session stays blocked. Otherwise there is no
// matching event to fail, and the request is completed without a response.
func (j *job) handoffFailed(ctx context.Context) result {
	if end, denied := j.denied(); denied {
		return end
	}
	if err := j.readState(ctx); err != nil {
		return failure(err)
	}
	if j.hasSession && !j.st.BlockedBy(j.eventID()) {
		return result{outcome: OutcomeHandoffUnmatched}
	}
	text, typ := message.HandoffError(j.in)
	return j.respond(ctx, message.NewErrorResponse(j.in, text, typ, j.timings()), OutcomeHandoffFailed)
}

// checkRequest runs the inbox check of a RetryRequest or resubmission on
// its own MessageId, with the session-state read. A recorded one (a
// redelivery after its success) lifts this event's block if it still
// holds, or replays what waits when nothing blocks the session, and is
// answered SkipResponse "DuplicateDetected", as NimBus does. done is true
// when the delivery ends here, with end.
func (j *job) checkRequest(ctx context.Context) (end result, done bool) {
	dup, err := j.lookup(ctx, []*inbox.Key{j.own}, true)
	switch {
	case err != nil:
		return failure(err), true
	case dup:
		return j.duplicateRequest(ctx)(), true
	}
	return result{}, false
}

// duplicateRequest answers a RetryRequest or resubmission found recorded:
// lift this event's block (or replay what waits), then
// SkipResponse "DuplicateDetected".
func (j *job) duplicateRequest(ctx context.Context) func() result {
	return func() result {
		return j.unblockThen(ctx, func() result { return j.duplicate(ctx) })
	}
}

// unblockThen lifts this event's block and asks for the replay of what
// waits (see unblockAndDrain), then answers.
func (j *job) unblockThen(ctx context.Context, answer func() result) result {
	if err := j.unblockAndDrain(ctx); err != nil {
		return failure(err)
	}
	return answer()
}

// denied ends a Manager request that does not come from the Manager
// (compared case-insensitively): it takes the dead-letter path.
func (j *job) denied() (end result, denied bool) {
	if strings.EqualFold(j.in.From, message.ManagerID) {
		return result{}, false
	}
	dl := message.NewUnauthorizedDeadLetter(j.in.Type)
	return result{outcome: OutcomeUnauthorized, err: &UnauthorizedError{Type: j.in.Type.String()}, deadLetter: &dl}, true
}
