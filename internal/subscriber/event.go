package subscriber

import (
	"context"
	"fmt"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/session"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// eventRequest handles an EventRequest (and an inbound
// UnsupportedResponse), as NimBus's StrictMessageHandler.HandleEventRequest:
// heartbeat; inbox check (with the session-state read at the same time);
// the session guard (park when blocked, or when parked copies still wait);
// dispatch; the handler; then record and ResolutionResponse, or block and
// ErrorResponse, or the other outcomes.
func (j *job) eventRequest(ctx context.Context) {
	if j.in.IsHeartbeat() {
		out := message.NewHeartbeatResponse(j.in, j.timings(), j.p.o.Now(), j.p.o.Version)
		j.respond(ctx, out, OutcomeHeartbeat)
		return
	}
	j.ownKey()
	if j.own != nil {
		// The id the inbox knows the event by (for a CloudEvent
		// deduplicated by source and id, that pair's key).
		j.source = j.own.MessageID
	}
	// The inbox check runs before anything else looks at the event, so a
	// recorded redelivery is skipped whatever the session's state.
	dup, failed := j.lookup(ctx, []*inbox.Key{j.own}, true)
	if failed {
		return
	}
	if dup != nil {
		j.duplicate(ctx, *dup)
		return
	}
	if j.gated() {
		if !j.park(ctx) || j.r.Parked {
			return
		}
	}
	j.handleEvent(ctx, []*inbox.Key{j.own})
}

// gated reports whether this delivery must wait behind the session's
// block or its parked copies. The delivery that blocked the session (its
// own redelivery, after a failure that was not answered) is not: it is
// handled again.
func (j *job) gated() bool {
	if !j.hasSession || !j.st.Gated() {
		return false
	}
	return !j.blockedBySelf()
}

func (j *job) blockedBySelf() bool { return j.blockerIn(j.st) }

// blockerIn reports whether this delivery is the one that blocked the
// session in state s: same EventId, and its source MessageId is the
// recorded BlockedByMessageId.
func (j *job) blockerIn(s session.State) bool {
	return s.BlockedBy(j.eventID()) && s.BlockedByMessageID != "" && s.BlockedByMessageID == j.source
}

// handleEvent dispatches the event, runs its handler and settles the
// outcome of an original delivery or a replayed copy. recordKeys are
// recorded in order after a success.
func (j *job) handleEvent(ctx context.Context, recordKeys []*inbox.Key) {
	out, sctx, cancel, ok := j.dispatchAndRun(ctx)
	if !ok {
		return
	}
	defer cancel()
	switch {
	case out.err != nil && out.kind == KindDiscard:
		j.discarded(sctx, out.err)
	case out.err != nil:
		// A failed event blocks its session first, so nothing of the
		// session overtakes it even if the answer below is lost.
		if j.block(sctx) {
			j.failed(sctx, out.err, true)
		}
	case out.res.handoff != nil:
		j.handoff(sctx, out.res.handoff)
	default:
		if !j.record(sctx, recordKeys...) {
			return
		}
		// The blocker's own redelivery succeeded: lift its block.
		if !j.unblockAndDrain(sctx) {
			return
		}
		j.respond(sctx, message.NewResponse(j.in, message.Resolution, j.timings(), nil), OutcomeCompleted)
	}
}

// handoff blocks the session by this event and reports the pending
// handoff. It is not recorded: a redelivery re-runs the handler so the
// pending state can be re-established.
func (j *job) handoff(ctx context.Context, ho *Handoff) {
	if !j.block(ctx) {
		return
	}
	j.respond(ctx, j.handoffResponse(ho), OutcomePendingHandoff)
}

func (j *job) handoffResponse(ho *Handoff) *message.Outgoing {
	h := &message.Handoff{Reason: ho.Reason, ExternalJobID: ho.ExternalJobID}
	if ho.ExpectedIn > 0 {
		h.ExpectedBy = j.p.o.Now().Add(ho.ExpectedIn)
	}
	return message.NewResponse(j.in, message.PendingHandoff, j.timings(), h)
}

// duplicate answers a recorded delivery: the OnDuplicateDetected hook and a
// SkipResponse "DuplicateDetected".
func (j *job) duplicate(ctx context.Context, k inbox.Key) {
	j.p.duplicate(ctx, j.in, k)
	j.respond(ctx, message.NewResponse(j.in, message.Duplicate, j.timings(), nil), OutcomeDuplicate)
}

// park sends this delivery behind the session's block: the state gives
// the copy its DeferralSequence (a redelivery of the same message gets the
// same one), then the copy goes to the Deferred subscription and the
// DeferralResponse to the Resolver at once. When the session is not
// blocked but copies still wait (a replay is running), a replay request
// follows the copy, so the copy is never left behind. It returns false
// when the delivery failed; r.Parked is false when the fresh state no
// longer gates the delivery (the caller then handles it).
func (j *job) park(ctx context.Context) bool {
	r := j.r
	src := j.source
	var seq int64
	ok := j.change(ctx, "park", func(s session.State) (session.State, bool, error) {
		if !s.Gated() || j.blockerIn(s) {
			return s, false, errNotGated
		}
		next, n, changed := s.Park(src)
		seq = n
		if !changed {
			// A redelivery of the last park: same sequence, no write.
			return s, false, nil
		}
		return next, true, nil
	})
	if !ok {
		return false
	}
	if !j.gated() {
		return true
	}
	if seq > int64(^uint32(0)>>1) {
		r.Outcome = OutcomeTransientFailure
		r.Err = fmt.Errorf("the session's DeferralSequence %d does not fit NimBus's int32", seq)
		return false
	}
	r.DeferralSequence = seq
	body := j.d.Body
	if j.ce != nil && j.in.Content != nil {
		// NimBus parks a MessageContent: the copy is a native message.
		body = j.in.Content.AppendJSON(nil)
	}
	copyMsg := message.NewParkedCopy(j.in, body, int32(seq), src)
	var resp *message.Outgoing
	if j.st.Blocked() {
		resp = message.NewDeferralResponse(j.in, j.st.BlockedByEventID, j.timings())
	} else {
		resp = message.NewDeferralResponse(j.in, fmt.Sprintf("%d parked messages still being replayed", j.st.DeferredCount), j.timings())
	}
	if !j.sendAll(ctx, copyMsg, resp) {
		return false
	}
	r.Published = true
	if !j.st.Blocked() && !j.send(ctx, message.NewProcessDeferredRequest(j.in), func() { r.DrainRequested = true }) {
		return false
	}
	r.Parked = true
	r.Outcome = OutcomeDeferred
	j.p.o.Metrics.Inc(telemetry.DeferredParked, "", "")
	return true
}
