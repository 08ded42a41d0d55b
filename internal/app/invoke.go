package app

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/funchost"
	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// failure carries the status for a delivery that must not complete.
type failure struct {
	status int
	err    error
}

func (f *failure) Error() string   { return f.err.Error() }
func (f *failure) Unwrap() error   { return f.err }
func (f *failure) HTTPStatus() int { return f.status }

// invokeSubscriber handles one Service Bus–triggered invocation and logs
// exactly one line for it. The outcome table (subscriber.Outcome.Spec)
// decides the status, the pause and the log line.
func (a *App) invokeSubscriber(ctx context.Context, inv *funchost.Invocation) error {
	start := a.now()
	m, err := funchost.DecodeServiceBus(inv.Body, bindingMessage)
	if err != nil {
		r := subscriber.Report{Outcome: subscriber.OutcomeMalformed, Inbox: subscriber.InboxNotReached, Err: err, Duration: a.now().Sub(start)}
		a.logInvocation(inv, &r, 0)
		return &failure{status: r.Outcome.Spec().Status, err: err}
	}
	d := subscriber.Delivery{
		Broker: message.Broker{
			MessageID:     m.MessageID,
			SessionID:     m.SessionID,
			CorrelationID: m.CorrelationID,
			EnqueuedTime:  m.EnqueuedTime,
			DeliveryCount: m.DeliveryCount,
			ContentType:   m.ContentType,
		},
		Properties: m.ApplicationProperties,
		Body:       m.Body,
	}
	r := a.pipeline.Process(ctx, &d)
	a.logInvocation(inv, &r, m.DeliveryCount)
	spec := r.Outcome.Spec()
	if r.Outcome.Completes() {
		return nil
	}
	if spec.Pause {
		a.pauseUnlessStopping(ctx, a.cfg.Retry.Delay(m.DeliveryCount))
	}
	err = r.Err
	if err == nil {
		err = errors.New(string(r.Outcome))
	}
	return &failure{status: spec.Status, err: err}
}

// pauseUnlessStopping waits d before a transient failure is answered. The
// host cancelling the invocation, or the process shutting down, ends the
// wait at once: the invocation then answers at once and the broker
// redelivers the message.
func (a *App) pauseUnlessStopping(ctx context.Context, d time.Duration) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(a.stopping, cancel)
	defer stop()
	a.pause(ctx, d)
}

// sleepCtx waits d before a transient failure is answered, so the broker's
// immediate redelivery does not spend MaxDeliveryCount within moments of a
// short outage. ctx ending ends the wait.
func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// logInvocation writes the invocation's one line. Every string on it is
// bounded, and none comes from the message body.
func (a *App) logInvocation(inv *funchost.Invocation, r *subscriber.Report, deliveryCount int) {
	a.metrics.Inc(telemetry.Invocations, "outcome", string(r.Outcome))
	spec := r.Outcome.Spec()
	level, msg := spec.Level, spec.Message
	if r.Inbox == subscriber.InboxBypassed && level < zerolog.WarnLevel {
		level = zerolog.WarnLevel
		msg += " (inbox deduplication bypassed: MessageId or endpoint identity is missing, blank or too long)"
	}
	ev := a.log.WithLevel(level)
	if ev == nil {
		return
	}
	ev = ev.Str("function", logsafe.Bound(inv.Function)).
		Str("invocationId", logsafe.Bound(inv.InvocationID)).
		Str("endpoint", a.cfg.Endpoint).
		Str("messageId", logsafe.Bound(r.MessageID)).
		Str("sessionId", logsafe.Bound(r.SessionID)).
		Str("eventId", logsafe.Bound(r.EventID)).
		Str("eventTypeId", logsafe.Bound(r.EventTypeID)).
		Str("messageType", r.MessageType).
		Int("deliveryCount", deliveryCount).
		Str("outcome", string(r.Outcome)).
		Str("inbox", string(r.Inbox)).
		Bool("handlerRan", r.HandlerRan).
		Float64("durationMs", float64(r.Duration.Microseconds())/1000)
	if r.CloudEvent != "" {
		ev = ev.Str("cloudEvent", r.CloudEvent)
	}
	if r.EventTypeFromBody {
		ev = ev.Str("eventTypeSource", "body")
	}
	if r.BypassReason != "" {
		ev = ev.Str("bypassReason", r.BypassReason)
	}
	if r.StoreOp != "" {
		ev = ev.Str("operation", r.StoreOp)
	}
	if r.Err != nil {
		ev = ev.Str("error", logsafe.Bound(r.Err.Error()))
	}
	if len(r.Stack) > 0 {
		ev = ev.Str("stack", logsafe.Stack(r.Stack))
	}
	ev.Msg(msg)
}

// newSafeError renders a store failure for a log line without the
// provider's details.
func newSafeError(op string, err error) string {
	return logsafe.Bound(subscriber.NewStoreError(op, err).Error())
}
