package subscriber

import (
	"context"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// handle dispatches the event to its handler and runs it. A success
// without a handoff is then recorded as processed under keys, in order
// (nil keys are skipped): the inbox records of a plain handler, or one
// marker per key in a transactional handler's batch. A failure every entry
// point treats alike is the error: an event that cannot reach its handler,
// a cancelled, Transient or Permanent handler failure, a failed record or
// batch.
func (j *job) handle(ctx context.Context, keys []*inbox.Key) (handled, error) {
	switch supported, err := j.dispatch(); {
	case err != nil:
		return handled{}, err
	case !supported:
		return handled{kind: handledUnsupported}, j.respond(ctx, message.NewResponse(j.in, message.Unsupported, j.timings(), nil))
	}
	if j.h.tx != nil {
		return j.runTx(ctx, keys)
	}
	a, err := j.run(ctx, j.h.h, nil)
	if err != nil || a.kind != handledCompleted {
		return a, err
	}
	// The events go out before the record: a failure between the two runs
	// the handler again on redelivery, which publishes the same ids.
	sctx := j.settling(ctx)
	if err := j.sendEvents(sctx); err != nil {
		return handled{}, err
	}
	return a, j.record(sctx, keys...)
}

// dispatch checks the event as NimBus's EventHandlerProvider does before
// its handler runs: no type or no handler is unsupported (supported is
// false); an unreadable body or a body that names another type is a
// permanent failure. A CloudEvent is validated first.
func (j *job) dispatch() (supported bool, err error) {
	if j.ce != nil {
		err := j.ce.Validate(j.fromBody)
		if err == nil && (j.eventTypeID == "" || !j.hasHandler) {
			err = j.ce.NoHandlerError(j.fromBody)
		}
		if err != nil {
			return false, Permanent(err)
		}
	}
	if j.eventTypeID == "" {
		return false, nil
	}
	// A body that is not a MessageContent is unreadable; a readable one
	// whose EventContent is null reaches the handler (NimBus's dispatch),
	// with empty JSON.
	if j.in.Content == nil {
		return false, Permanent(&invalidEventError{text: "message body has no readable EventContent",
			deadLetter: message.NewUnreadableBodyDeadLetter()})
	}
	if ec := j.in.Content.EventContent; ec != nil && ec.EventTypeID != nil && *ec.EventTypeID != "" && *ec.EventTypeID != j.eventTypeID {
		// The body's value is payload: say only that it differs (the
		// Resolver's notice carries NimBus's text, which quotes it).
		return false, Permanent(&invalidEventError{text: "message EventTypeId mismatch: the body's EventContent.EventTypeId differs from the EventTypeId property",
			deadLetter: message.NewTypeMismatchDeadLetter(j.eventTypeID, *ec.EventTypeID)})
	}
	return j.hasHandler, nil
}
