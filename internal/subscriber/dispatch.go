package subscriber

import (
	"context"
	"errors"
	"runtime/debug"

	"go.opentelemetry.io/otel/attribute"

	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// handlerAnswer is what the handler answered.
type handlerAnswer struct {
	res  Result
	kind FailureKind
	err  error
	// canceled: the invocation ended while the handler ran.
	canceled bool
}

// dispatchAndRun finds the handler and runs it. done is true when the
// delivery ends here, with end: Unsupported, an invalid message, or a
// handler failure every entry point treats alike (see stops). Otherwise
// the caller settles the handler's answer.
func (j *job) dispatchAndRun(ctx context.Context) (a handlerAnswer, end result, done bool) {
	h, end, done := j.dispatch(ctx)
	if done {
		return a, end, true
	}
	a = j.run(ctx, h)
	end, done = a.stops()
	return a, end, done
}

// dispatch finds the handler as NimBus's EventHandlerProvider does: no
// type or no handler is Unsupported (answered here); an unreadable body or
// a body that names another type is a permanent failure. A CloudEvent is
// validated first. done is true when the delivery ends here, with end.
func (j *job) dispatch(ctx context.Context) (h registered, end result, done bool) {
	h, ok := j.p.o.Handlers.lookup(j.eventTypeID)
	if j.ce != nil {
		err := j.ce.Validate(j.fromBody)
		if err == nil && (j.eventTypeID == "" || !ok) {
			err = j.ce.NoHandlerError(j.fromBody)
		}
		if err != nil {
			return h, result{outcome: OutcomeInvalidCloudEvent, err: Permanent(err)}, true
		}
	}
	if j.eventTypeID == "" {
		return h, j.unsupported(ctx), true
	}
	// A body that is not a MessageContent is unreadable; a readable one
	// whose EventContent is null reaches the handler (NimBus's dispatch),
	// with empty JSON.
	if j.in.Content == nil {
		dl := message.NewUnreadableBodyDeadLetter()
		return h, result{outcome: OutcomeInvalidMessage, err: Permanent(errors.New("message body has no readable EventContent")), deadLetter: &dl}, true
	}
	if ec := j.in.Content.EventContent; ec != nil && ec.EventTypeID != nil && *ec.EventTypeID != "" && *ec.EventTypeID != j.eventTypeID {
		// The body's value is payload: say only that it differs (the
		// Resolver's notice carries NimBus's text, which quotes it).
		dl := message.NewTypeMismatchDeadLetter(j.eventTypeID, *ec.EventTypeID)
		err := Permanent(errors.New("message EventTypeId mismatch: the body's EventContent.EventTypeId differs from the EventTypeId property"))
		return h, result{outcome: OutcomeInvalidMessage, err: err, deadLetter: &dl}, true
	}
	if !ok {
		return h, j.unsupported(ctx), true
	}
	return h, result{}, false
}

// event is the handler's view of the delivery.
func (j *job) event() *Event {
	in, r := j.in, j.r
	ev := &Event{
		EventTypeID:   j.eventTypeID,
		JSON:          eventJSON(in.Content),
		MessageID:     r.MessageID,
		SessionID:     deref(in.SessionID),
		CorrelationID: deref(in.CorrelationID),
		EventID:       r.EventID,
		From:          in.From,
		DeliveryCount: in.DeliveryCount,
		EnqueuedTime:  in.EnqueuedTime,
		CloudEvent:    cloudEventAttributes(j.ce),
		Attempt:       j.attempt,
	}
	if in.RetryCount != nil {
		ev.RetryCount = int(*in.RetryCount)
	}
	return ev
}

// run invokes h for the event (a transactional handler in a new
// transaction on its partition). A panic is a failed event with the
// panic's text.
func (j *job) run(ctx context.Context, h registered) handlerAnswer {
	r := j.r
	ev := j.event()
	call := h.h
	if h.txh != nil {
		j.prepareTx()
		if j.tx.pkErr != nil {
			// The handler cannot run without its partition.
			return handlerAnswer{err: Permanent(j.tx.pkErr), kind: KindPermanent}
		}
		call = j.runTx
	}
	hctx, span := j.p.o.Tracer.Start(ctx, spanHandler)
	if span.IsRecording() {
		span.SetAttributes(attribute.String(attrEventType, logsafe.Bound(j.eventTypeID)),
			attribute.String("nimbus.attempt", string(j.attempt)))
	}
	res, err := invoke(hctx, call, ev, r)
	endSpan(span, err)
	r.HandlerRan = true
	a := handlerAnswer{res: res, err: err}
	if err != nil {
		a.kind = KindOf(err)
		a.canceled = ctx.Err() != nil && errors.Is(err, ctx.Err())
	}
	return a
}

// invoke calls h, turning a panic into a *PanicError (its stack goes to
// the report).
func invoke(ctx context.Context, h HandlerFunc, ev *Event, r *Report) (res Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			r.Stack = debug.Stack()
			err = &PanicError{Value: v}
		}
	}()
	return h(ctx, ev)
}

// stops reports how the delivery ends when the handler failed in a way
// every entry point treats alike: cancelled, Transient or Permanent.
// Success, a plain failure and Discard are for the entry point to settle.
func (a handlerAnswer) stops() (end result, done bool) {
	switch {
	case a.err == nil:
		return result{}, false
	case a.canceled:
		return result{outcome: OutcomeCanceled, err: a.err}, true
	case a.kind == KindTransient:
		return result{outcome: OutcomeHandlerFailed, err: a.err}, true
	case a.kind == KindPermanent:
		return result{outcome: OutcomePermanentFailure, err: a.err}, true
	}
	return result{}, false
}

// eventJSON is the domain event's JSON: "" when the body's EventContent or
// its EventJson is null.
func eventJSON(c *message.Content) string {
	if c == nil || c.EventContent == nil {
		return ""
	}
	return deref(c.EventContent.EventJSON)
}
