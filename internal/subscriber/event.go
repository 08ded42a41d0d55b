package subscriber

import (
	"context"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// eventRequest handles an EventRequest (and an inbound
// UnsupportedResponse), as NimBus's StrictMessageHandler.HandleEventRequest:
// heartbeat; inbox check (with the session-state read at the same time);
// the session guard (park when blocked, or when parked copies still wait);
// then the event's handler and its answer (see handleEvent). Its source
// identity is the id the inbox knows the event by (for a CloudEvent
// deduplicated by source and id, that pair's key), else its MessageId.
func (j *job) eventRequest(ctx context.Context) (Outcome, error) {
	if j.in.IsHeartbeat() {
		return OutcomeHeartbeat, j.respond(ctx, message.NewHeartbeatResponse(j.in, j.timings(), j.p.o.Now(), j.p.o.Version))
	}
	j.ownKey()
	source := deref(j.in.MessageID)
	if j.own != nil {
		source = j.own.MessageID
	}
	// The inbox check runs before anything else looks at the event, so a
	// recorded redelivery is skipped whatever the session's state.
	switch dup, err := j.lookup(ctx, []*inbox.Key{j.own}, true); {
	case err != nil:
		return "", err
	case dup:
		return j.duplicate(ctx)
	}
	if j.mustWait(source) {
		switch parked, err := j.park(ctx, source); {
		case err != nil:
			return "", err
		case parked:
			return OutcomeDeferred, nil
		}
	}
	return j.handleEvent(ctx, []*inbox.Key{j.own}, source)
}

// handleEvent runs the event's handler and answers it (entryEvent), for an
// original delivery or a replayed copy of source identity source: after a
// success, recorded under keys (in order), the block this delivery held is
// lifted and a ResolutionResponse sent; a failure blocks the session and is
// answered with an ErrorResponse (and a RetryRequest when a policy
// applies); a discard, a handoff, a duplicate found by the batch or an
// unsupported type get their own answers.
func (j *job) handleEvent(ctx context.Context, keys []*inbox.Key, source string) (Outcome, error) {
	h, err := j.handle(ctx, keys)
	if err != nil {
		return "", err
	}
	return j.answer(ctx, h, entryEvent, source)
}
