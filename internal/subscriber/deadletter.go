package subscriber

import (
	"context"
	"errors"

	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// The custom handler cannot dead-letter a message: the Functions host
// settles it. A message that must be dead-lettered (a permanent failure,
// an invalid message) fails at once without the redelivery pause, and the
// broker dead-letters it after the subscription's MaxDeliveryCount
// deliveries, within about a second. The Resolver is told once, on the last
// delivery, with the ErrorResponse NimBus sends before its own dead-letter
// call. A transient failure that reaches its last delivery is reported the
// same way, so no message is dead-lettered without the Resolver knowing.

// lastDeliveryNotice sends the dead-letter ErrorResponse when j's delivery,
// which ended with end, is the one after which the broker dead-letters the
// message.
func (p *Pipeline) lastDeliveryNotice(ctx context.Context, j *job, end result) {
	if end.outcome.Completes() || j.d.Broker.DeliveryCount < p.o.MaxDeliveryCount {
		return
	}
	in := j.in
	if in == nil {
		in = readLenient(j.d)
	}
	sctx, cancel := p.settleCtx(ctx)
	defer cancel()
	p.notice(sctx, &j.did, in, end)
}

// notice publishes the dead-letter ErrorResponse of a delivery of in that
// ended with end. Its failure is recorded in t and changes nothing else:
// the message is dead-lettered either way.
func (p *Pipeline) notice(ctx context.Context, t *trail, in *message.Inbound, end result) {
	out := message.NewDeadLetterResponse(in, deadLetterOf(end), message.Timings{QueueTimeMs: -1})
	if err := p.o.Publisher.Publish(ctx, out); err != nil {
		t.noticeErr = err
		return
	}
	t.notice = true
}

// readLenient reads d as far as it can, for a notice about it.
func readLenient(d *Delivery) *message.Inbound {
	return message.ReadLenient(d.Broker, d.Properties, d.Body)
}

// deadLetterTexts are the DeadLetterReason and DeadLetterErrorDescription
// of r's outcome (the broker's dead-letter call takes the same texts).
func deadLetterTexts(r *Report) (reason, description string) {
	dl := deadLetterOf(result{outcome: r.Outcome, err: r.Err, deadLetter: r.deadLetter})
	return dl.Reason, dl.Description
}

// deadLetterOf is what NimBus reports when it dead-letters a message that
// ended with end: the case the failure named (an invalid message or event,
// with NimBus's exception texts), an unsupported type or an unauthorized
// request, a permanent handler failure ("Permanent failure: {type}:
// {message}"), and, beyond NimBus, a transient failure on its last
// delivery with the broker's own reason, MaxDeliveryCountExceeded.
func deadLetterOf(end result) message.DeadLetter {
	if end.deadLetter != nil {
		return *end.deadLetter
	}
	var ute *UnsupportedTypeError
	var ue *UnauthorizedError
	switch {
	case end.err == nil:
		return message.DeadLetter{Reason: "MaxDeliveryCountExceeded", Description: string(end.outcome)}
	case errors.As(end.err, &ute):
		return message.NewUnexpectedDeadLetter(message.TypeUnsupportedMessageTypeException, end.err.Error())
	case errors.As(end.err, &ue):
		return message.NewUnexpectedDeadLetter(message.TypeUnauthorizedAccessException, end.err.Error())
	case end.outcome == OutcomeInvalidMessage && !IsPermanent(end.err):
		return message.NewInvalidMessageDeadLetter(end.err.Error())
	case IsPermanent(end.err):
		return message.NewPermanentDeadLetter(ErrorType(end.err), errorText(end.err))
	}
	text, typ := errorText(end.err), ErrorType(end.err)
	return message.DeadLetter{
		Reason:      "MaxDeliveryCountExceeded",
		Description: "the message failed on its last delivery (" + string(end.outcome) + "): " + message.ExceptionString(typ, text),
		ErrText:     text,
		ErrType:     typ,
	}
}
