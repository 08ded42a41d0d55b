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

// lastDeliveryNotice sends the dead-letter ErrorResponse when this is the
// delivery after which the broker dead-letters the message.
func (p *Pipeline) lastDeliveryNotice(ctx context.Context, j *job) {
	r := j.r
	if r.Outcome == "" || r.Outcome.Completes() || j.d.Broker.DeliveryCount < p.o.MaxDeliveryCount {
		return
	}
	in := j.in
	if in == nil {
		in = message.ReadLenient(j.d.Broker, j.d.Properties, j.d.Body)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.o.SettleTimeout)
	defer cancel()
	p.sendNotice(sctx, r, in)
}

// sendNotice publishes the dead-letter ErrorResponse for r. Its failure is
// recorded in r.NoticeErr and changes nothing else: the message is
// dead-lettered either way.
func (p *Pipeline) sendNotice(ctx context.Context, r *Report, in *message.Inbound) {
	out := message.NewDeadLetterResponse(in, deadLetterOf(r), message.Timings{QueueTimeMs: -1})
	if err := p.o.Publisher.Publish(ctx, out); err != nil {
		r.NoticeErr = err
		return
	}
	r.DeadLetterNotice = true
}

// deadLetterTexts are the DeadLetterReason and DeadLetterErrorDescription
// of r's outcome (the broker's dead-letter call takes the same texts).
func deadLetterTexts(r *Report) (reason, description string) {
	dl := deadLetterOf(r)
	return dl.Reason, dl.Description
}

// deadLetterOf is what NimBus reports when it dead-letters a message for
// r's outcome: the case recorded where the delivery failed (an invalid
// message, an unsupported type, an unauthorized request, an unreadable body
// or a type mismatch, with NimBus's exception texts), a permanent handler
// failure ("Permanent failure: {type}: {message}"), and, beyond NimBus, a
// transient failure on its last delivery with the broker's own reason,
// MaxDeliveryCountExceeded.
func deadLetterOf(r *Report) message.DeadLetter {
	if r.deadLetter != nil {
		return *r.deadLetter
	}
	var ute *UnsupportedTypeError
	var ue *UnauthorizedError
	switch {
	case r.Err == nil:
		return message.DeadLetter{Reason: "MaxDeliveryCountExceeded", Description: string(r.Outcome)}
	case errors.As(r.Err, &ute):
		return message.NewUnexpectedDeadLetter(message.TypeUnsupportedMessageTypeException, r.Err.Error())
	case errors.As(r.Err, &ue):
		return message.NewUnexpectedDeadLetter(message.TypeUnauthorizedAccessException, r.Err.Error())
	case r.Outcome == OutcomeInvalidMessage && !IsPermanent(r.Err):
		return message.NewInvalidMessageDeadLetter(r.Err.Error())
	case IsPermanent(r.Err):
		return message.NewPermanentDeadLetter(ErrorType(r.Err), errorText(r.Err))
	}
	text, typ := errorText(r.Err), ErrorType(r.Err)
	return message.DeadLetter{
		Reason:      "MaxDeliveryCountExceeded",
		Description: "the message failed on its last delivery (" + string(r.Outcome) + "): " + message.ExceptionString(typ, text),
		ErrText:     text,
		ErrType:     typ,
	}
}
