package app

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/funchost"
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
// exactly one line for it.
func (a *App) invokeSubscriber(ctx context.Context, inv *funchost.Invocation) error {
	start := a.now()
	m, err := funchost.DecodeServiceBus(inv.Body, bindingMessage)
	if err != nil {
		r := subscriber.Report{Outcome: subscriber.OutcomeMalformed, Inbox: subscriber.InboxNotReached, Err: err, Duration: a.now().Sub(start)}
		a.logInvocation(inv, &r, 0)
		return err
	}
	d := subscriber.Delivery{
		Broker: message.Broker{
			MessageID:     m.MessageID,
			SessionID:     m.SessionID,
			CorrelationID: m.CorrelationID,
			EnqueuedTime:  m.EnqueuedTime,
			DeliveryCount: m.DeliveryCount,
		},
		Properties: m.ApplicationProperties,
		Body:       m.Body,
	}
	r := a.pipeline.Process(ctx, &d)
	a.logInvocation(inv, &r, m.DeliveryCount)
	if r.Outcome.Completes() {
		return nil
	}
	if r.Outcome.Transient() {
		a.pause(ctx, a.cfg.Retry.Delay(m.DeliveryCount))
	}
	status := http.StatusServiceUnavailable
	if r.Outcome == subscriber.OutcomeInvalidMessage || r.Outcome == subscriber.OutcomeUnsupportedMessageType {
		status = http.StatusUnprocessableEntity
	}
	err = r.Err
	if err == nil {
		err = errors.New(string(r.Outcome))
	}
	return &failure{status: status, err: err}
}

// sleepCtx waits d before a transient failure is answered, so the broker's
// immediate redelivery does not spend MaxDeliveryCount within moments of a
// short outage. The host cancelling the invocation ends the wait.
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

// outcomeLog is the level and message of the invocation line per outcome.
var outcomeLog = map[subscriber.Outcome]struct {
	level zerolog.Level
	msg   string
}{
	subscriber.OutcomeCompleted:              {zerolog.InfoLevel, "invocation completed"},
	subscriber.OutcomeDuplicate:              {zerolog.InfoLevel, "inbox duplicate detected; handler skipped and SkipResponse sent"},
	subscriber.OutcomeUnsupported:            {zerolog.InfoLevel, "no handler for the event type; UnsupportedResponse sent"},
	subscriber.OutcomePendingHandoff:         {zerolog.InfoLevel, "handler handed the event off; PendingHandoffResponse sent, not recorded"},
	subscriber.OutcomeHeartbeat:              {zerolog.InfoLevel, "heartbeat answered"},
	subscriber.OutcomeTransientFailure:       {zerolog.ErrorLevel, "inbox store operation failed; the message will be retried"},
	subscriber.OutcomeHandlerFailed:          {zerolog.ErrorLevel, "handler failed; the message will be retried"},
	subscriber.OutcomePublishFailed:          {zerolog.ErrorLevel, "Resolver response could not be sent; the message will be retried"},
	subscriber.OutcomeInvalidMessage:         {zerolog.ErrorLevel, "message is not a valid NimBus message; failing so the broker redelivers and finally dead-letters it"},
	subscriber.OutcomeUnsupportedMessageType: {zerolog.ErrorLevel, "message type is not handled by this subscriber; failing so the broker redelivers and finally dead-letters it"},
	subscriber.OutcomeCanceled:               {zerolog.WarnLevel, "invocation cancelled; the message will be retried"},
	subscriber.OutcomeMalformed:              {zerolog.ErrorLevel, "malformed invocation envelope; failing so the broker redelivers and finally dead-letters it"},
}

func (a *App) logInvocation(inv *funchost.Invocation, r *subscriber.Report, deliveryCount int) {
	a.metrics.Inc(telemetry.Invocations, "outcome", string(r.Outcome))
	lm, ok := outcomeLog[r.Outcome]
	if !ok {
		lm.level, lm.msg = zerolog.ErrorLevel, "invocation ended"
	}
	if r.Inbox == subscriber.InboxBypassed && lm.level < zerolog.WarnLevel {
		lm.level = zerolog.WarnLevel
		lm.msg += " (inbox deduplication bypassed: MessageId or endpoint identity is missing, blank or too long)"
	}
	ev := a.log.WithLevel(lm.level)
	if ev == nil {
		return
	}
	ev = ev.Str("function", inv.Function).
		Str("invocationId", inv.InvocationID).
		Str("endpoint", a.cfg.Endpoint).
		Str("messageId", r.MessageID).
		Str("sessionId", r.SessionID).
		Str("eventId", r.EventID).
		Str("eventTypeId", r.EventTypeID).
		Str("messageType", r.MessageType).
		Int("deliveryCount", deliveryCount).
		Str("outcome", string(r.Outcome)).
		Str("inbox", string(r.Inbox)).
		Bool("handlerRan", r.HandlerRan).
		Float64("durationMs", float64(r.Duration.Microseconds())/1000)
	if r.BypassReason != "" {
		ev = ev.Str("bypassReason", r.BypassReason)
	}
	if r.StoreOp != "" {
		ev = ev.Str("operation", r.StoreOp)
	}
	if r.Err != nil {
		ev = ev.Str("error", r.Err.Error())
	}
	ev.Msg(lm.msg)
}

// newSafeError renders a store failure for a log line without the
// provider's details.
func newSafeError(op string, err error) string {
	return subscriber.NewStoreError(op, err).Error()
}
