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
	reason, desc := deadLetterTexts(r)
	text, typ := noticeError(r)
	out := message.NewDeadLetterResponse(in, reason, desc, text, typ, message.Timings{QueueTimeMs: -1})
	r.Sends++
	if err := p.o.Publisher.Publish(ctx, out); err != nil {
		r.NoticeErr = err
		return
	}
	r.DeadLetterNotice = true
}

// deadLetterTexts are NimBus's DeadLetterReason and
// DeadLetterErrorDescription for r's outcome: "Permanent failure: {type}:
// {message}" for a permanent failure, "Failed to handle message." for a
// message NimBus rejects with an exception (invalid, unsupported type,
// unauthorized), and the broker's own reason, MaxDeliveryCountExceeded, for
// a transient failure on its last delivery.
func deadLetterTexts(r *Report) (reason, description string) {
	text, typ := noticeError(r)
	switch {
	case r.Outcome == OutcomePermanentFailure || r.Outcome == OutcomeInvalidCloudEvent ||
		(r.Outcome == OutcomeInvalidMessage && IsPermanent(r.Err)):
		return message.DeadLetterReasonPermanent(typ, text), typ + ": " + text
	case r.Outcome == OutcomeInvalidMessage || r.Outcome == OutcomeUnsupportedMessageType || r.Outcome == OutcomeUnauthorized:
		return message.DeadLetterReasonUnexpected, typ + ": " + text
	}
	return "MaxDeliveryCountExceeded", "the message failed on its last delivery (" + string(r.Outcome) + "): " + text
}

// noticeError is the ErrorText and ErrorType of the notice's ErrorContent.
func noticeError(r *Report) (text, typ string) {
	if r.Err == nil {
		return string(r.Outcome), ""
	}
	text = errorText(r.Err)
	var ute *UnsupportedTypeError
	var ue *UnauthorizedError
	var ime *message.InvalidMessageError
	switch {
	case errors.As(r.Err, &ute):
		typ = "UnsupportedMessageTypeException"
	case errors.As(r.Err, &ue):
		typ = "UnauthorizedAccessException"
	case errors.As(r.Err, &ime) || r.Outcome == OutcomeInvalidMessage:
		typ = "InvalidMessageException"
	default:
		typ = ErrorType(r.Err)
	}
	return text, typ
}
