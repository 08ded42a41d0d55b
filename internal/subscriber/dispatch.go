package subscriber

import (
	"context"
	"errors"
	"runtime/debug"

	"go.opentelemetry.io/otel/attribute"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// answer is how the handler step left the event, for its entry point to
// answer.
type answer struct {
	kind answerKind
	// err is the handler's failure (answerFailed, answerDiscarded).
	err     error
	handoff *Handoff
}

type answerKind int

const (
	// answerCompleted: the handler succeeded, and the delivery is recorded
	// as processed.
	answerCompleted answerKind = iota
	// answerUnsupported: no handler takes the event type; the
	// UnsupportedResponse is sent.
	answerUnsupported
	// answerHandoff: the handler handed the event off (not recorded).
	answerHandoff
	// answerFailed: the handler failed with a plain error or a panic.
	answerFailed
	// answerDiscarded: the handler discarded the event.
	answerDiscarded
	// answerDuplicate: the transactional handler's batch found another
	// copy's marker; nothing was applied.
	answerDuplicate
)

// handle dispatches the event to its handler and runs it. A success
// without a handoff is then recorded as processed under keys, in order
// (nil keys are skipped): the inbox records of a plain handler, or one
// marker per key in a transactional handler's batch. A failure every entry
// point treats alike is the error: an event that cannot reach its handler,
// a cancelled, Transient or Permanent handler failure, a failed record or
// batch.
func (j *job) handle(ctx context.Context, keys []*inbox.Key) (answer, error) {
	switch supported, err := j.dispatch(); {
	case err != nil:
		return answer{}, err
	case !supported:
		return answer{kind: answerUnsupported}, j.respond(ctx, message.NewResponse(j.in, message.Unsupported, j.timings(), nil))
	}
	if j.h.tx != nil {
		return j.runTx(ctx, keys)
	}
	a, err := j.run(ctx, j.h.h, nil)
	if err != nil || a.kind != answerCompleted {
		return a, err
	}
	// The events go out before the record: a failure between the two runs
	// the handler again on redelivery, which publishes the same ids.
	sctx := j.settling(ctx)
	if err := j.sendEvents(sctx); err != nil {
		return answer{}, err
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

// event is the handler's view of the delivery.
func (j *job) event() *Event {
	in := j.in
	ev := &Event{
		EventTypeID:   j.eventTypeID,
		JSON:          eventJSON(in.Content),
		MessageID:     deref(j.d.Broker.MessageID),
		SessionID:     deref(in.SessionID),
		CorrelationID: deref(in.CorrelationID),
		EventID:       reportedEventID(in),
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

// run invokes call for the event in the handler's span. A panic is a
// failed event with the panic's text. The answer's kind follows the
// handler's result; a failure that ends the delivery whatever the entry
// point (the invocation was cancelled, or the error is Transient or
// Permanent) is the error, a *handlerStop.
//
// What the handler publishes goes to the run's outbox, sealed when the
// handler returns: queue, when not nil, hands each event to a
// transactional unit of work. The events are dropped (and counted) unless
// the handler returns Completed; a refused publication then fails the
// delivery permanently, even when the handler ignored its error.
func (j *job) run(ctx context.Context, call HandlerFunc, queue func(*message.Outgoing) error) (answer, error) {
	ev := j.event()
	hctx, span := j.p.o.Tracer.Start(ctx, spanHandler)
	if span.IsRecording() {
		span.SetAttributes(attribute.String(attrEventType, logsafe.Bound(j.eventTypeID)),
			attribute.String("nimbus.attempt", string(j.attempt)))
	}
	j.out = j.newOutbox(hctx)
	j.out.queue = queue
	ev.out = j.out
	res, err := j.invoke(hctx, call, ev)
	queued, refused := j.out.seal()
	if err == nil && res.handoff == nil && refused != nil {
		err = refused
	}
	endSpan(span, err)
	j.did.handlerRan = true
	if err != nil || res.handoff != nil {
		j.did.eventsDropped += queued
		j.out.msgs = nil
	}
	if err == nil {
		if res.handoff != nil {
			return answer{kind: answerHandoff, handoff: res.handoff}, nil
		}
		return answer{kind: answerCompleted}, nil
	}
	switch kind := KindOf(err); {
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return answer{}, &handlerStop{err: err, canceled: true}
	case kind == KindTransient, kind == KindPermanent:
		return answer{}, &handlerStop{err: err}
	case kind == KindDiscard:
		return answer{kind: answerDiscarded, err: err}, nil
	}
	return answer{kind: answerFailed, err: err}, nil
}

// invoke calls h, turning a panic into a *PanicError (its stack goes to
// the report).
func (j *job) invoke(ctx context.Context, h HandlerFunc, ev *Event) (res Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			j.did.stack = debug.Stack()
			err = &PanicError{Value: v}
		}
	}()
	return h(ctx, ev)
}

// eventJSON is the domain event's JSON: "" when the body's EventContent or
// its EventJson is null.
func eventJSON(c *message.Content) string {
	if c == nil || c.EventContent == nil {
		return ""
	}
	return deref(c.EventContent.EventJSON)
}
