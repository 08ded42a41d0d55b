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
// failure report it, keep the block and schedule the next retry
// (entryRetry).
func (j *job) retryRequest(ctx context.Context) (Outcome, error) {
	j.ownKey()
	switch dup, err := j.lookup(ctx, []*inbox.Key{j.own}, true); {
	case err != nil:
		return "", err
	case dup:
		return j.duplicateRequest(ctx)
	}
	if j.hasSession && !j.st.BlockedBy(j.eventID()) {
		return OutcomeRetryObsolete, j.resolve(ctx)
	}
	srcKey, source := j.retrySource()
	h, err := j.handle(ctx, []*inbox.Key{srcKey, j.own})
	if err != nil {
		return "", err
	}
	return j.answer(ctx, h, entryRetry, source)
}

// retrySource is a RetryRequest's source identity, and the inbox key of
// the source MessageId it may record besides its own. The key is that of
// its InboxMessageId only when that is the id of the delivery that blocked
// the session by this event (the session's BlockedByMessageId, which a
// retry of a retry or a replayed copy parked again carries on unchanged),
// and the identity is then that id. Any other id, or one that cannot be
// checked (no session state, or a block stored without its MessageId), is
// not recorded, and the identity is the id the session's block holds, else
// the request's own MessageId. Called after the state was read.
func (j *job) retrySource() (key *inbox.Key, source string) {
	src := j.in.InboxMessageID
	if src == nil || *src == "" {
		return nil, deref(j.in.MessageID)
	}
	blocker := ""
	if j.hasSession && j.st.BlockedBy(j.eventID()) {
		blocker = j.st.BlockedByMessageID
	}
	if blocker != "" && blocker == *src {
		return j.sourceKey(), *src
	}
	j.did.sourceIgnored = true
	if blocker == "" {
		return nil, deref(j.in.MessageID)
	}
	return nil, blocker
}

// resubmission handles an operator's ResubmissionRequest, as NimBus's
// HandleResubmissionRequest: only from the Manager; inbox check on its own
// MessageId; the handler runs whatever the session's state; on success it
// records the MessageId of the delivery that blocked the session (when it
// resolves that block) and its own, unblocks and replays what waits; a
// failure gets an ErrorResponse only (entryResubmission). Its source
// identity is the blocking delivery's MessageId when this event blocks the
// session, else its own.
func (j *job) resubmission(ctx context.Context) (Outcome, error) {
	if err := j.denied(); err != nil {
		return "", err
	}
	j.ownKey()
	switch dup, err := j.lookup(ctx, []*inbox.Key{j.own}, true); {
	case err != nil:
		return "", err
	case dup:
		return j.duplicateRequest(ctx)
	}
	source := j.blockedSource()
	h, err := j.handle(ctx, []*inbox.Key{j.blockedKey(source), j.own})
	if err != nil {
		return "", err
	}
	return j.answer(ctx, h, entryResubmission, source)
}

// blockedKey is the inbox key of src, the delivery that blocked the
// session by this event, which a successful resubmission records besides
// its own; nil when it is the resubmission's own, or unusable.
func (j *job) blockedKey(src string) *inbox.Key {
	if j.own == nil || src == "" || src == j.own.MessageID || inbox.BypassReason(j.p.o.EndpointID, &src) != inbox.BypassNone {
		return nil
	}
	k := inbox.NewKey(j.p.o.EndpointID, src)
	return &k
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
func (j *job) skipRequest(ctx context.Context) (Outcome, error) {
	if err := j.denied(); err != nil {
		return "", err
	}
	if err := j.readState(ctx); err != nil {
		return "", err
	}
	return j.unblockThen(ctx, func(ctx context.Context) (Outcome, error) {
		o := OutcomeSkipped
		if !j.did.unblocked {
			// The event named does not block this session: it is reported
			// skipped (as NimBus answers), and nothing else changes.
			o = OutcomeSkippedNotBlocking
		}
		return o, j.respond(ctx, message.NewSkipResponse(j.in, j.timings()))
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
func (j *job) handoffCompleted(ctx context.Context) (Outcome, error) {
	if err := j.denied(); err != nil {
		return "", err
	}
	if err := j.readState(ctx); err != nil {
		return "", err
	}
	if j.hasSession {
		blocker := j.st.BlockedBy(j.eventID())
		switch {
		case blocker && j.st.BlockKind == session.BlockFailure:
			return OutcomeHandoffNotPending, nil
		case !blocker && j.st.DeferredCount > 0:
			// With nothing blocking the session this may be the redelivery
			// of a settlement whose replay request was not sent: ask for the
			// replay again (a replay already running ignores it).
			return OutcomeHandoffNotPending, j.drainIfWaiting(ctx)
		}
	}
	if err := j.resolve(ctx); err != nil {
		return "", err
	}
	return OutcomeHandoffCompleted, j.unblockAndDrain(ctx)
}

// handoffFailed handles a HandoffFailedRequest: the handed-off work failed.
// When this event blocks the session, report an ErrorResponse with the
// operator's error text; the session stays blocked. Otherwise there is no
// matching event to fail, and the request is completed without a response.
func (j *job) handoffFailed(ctx context.Context) (Outcome, error) {
	if err := j.denied(); err != nil {
		return "", err
	}
	if err := j.readState(ctx); err != nil {
		return "", err
	}
	if j.hasSession && !j.st.BlockedBy(j.eventID()) {
		return OutcomeHandoffUnmatched, nil
	}
	text, typ := message.HandoffError(j.in)
	return OutcomeHandoffFailed, j.respond(ctx, message.NewErrorResponse(j.in, text, typ, j.timings()))
}

// denied refuses a Manager request that does not come from the Manager
// (compared case-insensitively): it takes the dead-letter path.
func (j *job) denied() error {
	if strings.EqualFold(j.in.From, message.ManagerID) {
		return nil
	}
	return &UnauthorizedError{Type: j.in.Type.String()}
}
