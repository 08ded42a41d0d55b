package subscriber

import (
	"context"
	"errors"
	"runtime/debug"

	"go.opentelemetry.io/otel/attribute"

	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// handled is how the handler step left the event, for its entry point to
// answer.
type handled struct {
	kind handledKind
	// err is the handler's failure (handledFailed, handledDiscarded).
	err     error
	handoff *Handoff
}

type handledKind int

const (
	// handledCompleted: the handler succeeded, and the delivery is recorded
	// as processed.
	handledCompleted handledKind = iota
	// handledUnsupported: no handler takes the event type; the
	// UnsupportedResponse is sent.
	handledUnsupported
	// handledHandoff: the handler handed the event off (not recorded).
	handledHandoff
	// handledFailed: the handler failed with a plain error or a panic.
	handledFailed
	// handledDiscarded: the handler discarded the event.
	handledDiscarded
	// handledDuplicate: the transactional handler's batch found another
	// copy's marker; nothing was applied.
	handledDuplicate
)

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
// failed event with the panic's text. What it returns (handled) follows the
// handler's result; a failure that ends the delivery whatever the entry
// point (the invocation was cancelled, or the error is Transient or
// Permanent) is the error, a *handlerStop.
//
// What the handler publishes goes to the run's outbox, sealed when the
// handler returns: queue, when not nil, hands each event to a
// transactional unit of work. The events are dropped (and counted) unless
// the handler returns Completed; a refused publication then fails the
// delivery permanently, even when the handler ignored its error.
func (j *job) run(ctx context.Context, call HandlerFunc, queue func(*message.Outgoing) error) (handled, error) {
	ev := j.event()
	hctx, span := j.p.o.Tracer.Start(ctx, spanHandler)
	if span.IsRecording() {
		span.SetAttributes(attribute.String(attrEventType, logsafe.Bound(j.eventTypeID)),
			attribute.String("nimbus.attempt", string(j.attempt)))
	}
	j.out = j.newOutbox(hctx, queue)
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
		j.out.drop()
	}
	if err == nil {
		if res.handoff != nil {
			return handled{kind: handledHandoff, handoff: res.handoff}, nil
		}
		return handled{kind: handledCompleted}, nil
	}
	switch kind := KindOf(err); {
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return handled{}, &handlerStop{err: err, canceled: true}
	case kind == KindTransient, kind == KindPermanent:
		return handled{}, &handlerStop{err: err}
	case kind == KindDiscard:
		return handled{kind: handledDiscarded, err: err}, nil
	}
	return handled{kind: handledFailed, err: err}, nil
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

func cloudEventAttributes(ce *message.CloudEvent) *CloudEventAttributes {
	if ce == nil {
		return nil
	}
	return &CloudEventAttributes{
		ID: deref(ce.ID), Source: deref(ce.Source), Type: deref(ce.Type), SpecVersion: deref(ce.SpecVersion),
		Subject: deref(ce.Subject), Time: deref(ce.Time), DataSchema: deref(ce.DataSchema),
		DataContentType: deref(ce.DataContentType), Extensions: ce.Extensions,
	}
}
