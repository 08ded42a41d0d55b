package subscriber

import (
	"context"
	"fmt"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/session"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// respond sends the Resolver response out; the delivery ends with o once
// it is sent.
func (j *job) respond(ctx context.Context, out *message.Outgoing, o Outcome) result {
	if err := j.send(ctx, out); err != nil {
		return failure(err)
	}
	j.r.Published = true
	return result{outcome: o}
}

// resolved answers a ResolutionResponse; the delivery ends with o.
func (j *job) resolved(ctx context.Context, o Outcome) result {
	return j.respond(ctx, message.NewResponse(j.in, message.Resolution, j.timings(), nil), o)
}

// unsupported answers an UnsupportedResponse: no handler for the event.
func (j *job) unsupported(ctx context.Context) result {
	return j.respond(ctx, message.NewResponse(j.in, message.Unsupported, j.timings(), nil), OutcomeUnsupported)
}

// duplicate answers a recorded delivery: it is counted
// (telemetry.DuplicateDetected) and answered SkipResponse
// "DuplicateDetected".
func (j *job) duplicate(ctx context.Context) result {
	j.p.o.Metrics.Inc(telemetry.DuplicateDetected, "", "")
	return j.respond(ctx, message.NewResponse(j.in, message.Duplicate, j.timings(), nil), OutcomeDuplicate)
}

// handoff blocks the session by this event and reports the pending
// handoff. It is not recorded: a redelivery re-runs the handler so the
// pending state can be re-established.
func (j *job) handoff(ctx context.Context, ho *Handoff) result {
	if err := j.block(ctx, session.BlockHandoff); err != nil {
		return failure(err)
	}
	return j.respond(ctx, j.handoffResponse(ho), OutcomePendingHandoff)
}

func (j *job) handoffResponse(ho *Handoff) *message.Outgoing {
	h := &message.Handoff{Reason: ho.Reason, ExternalJobID: ho.ExternalJobID}
	if ho.ExpectedIn > 0 {
		h.ExpectedBy = j.p.o.Now().Add(ho.ExpectedIn)
	}
	return message.NewResponse(j.in, message.PendingHandoff, j.timings(), h)
}

// failed reports a failed event: ErrorResponse, and a RetryRequest when a
// policy applies and retry is true. The caller has blocked the session
// (or chose not to).
func (j *job) failed(ctx context.Context, err error, retry bool) result {
	r := j.r
	text, typ := errorText(err), ErrorType(err)
	errResp := message.NewErrorResponse(j.in, text, typ, j.timings())
	var at time.Time
	if retry && j.p.o.RetryPolicies != nil && j.p.o.Scheduler != nil {
		rc := 0
		if j.in.RetryCount != nil {
			rc = int(*j.in.RetryCount)
		}
		if d, ok := j.p.o.RetryPolicies.RetryDelay(j.eventTypeID, text, j.p.o.EndpointID, rc, j.p.o.Rand()); ok {
			at = j.p.o.Now().Add(d)
			r.RetryDelay = d
		}
	}
	if at.IsZero() {
		if sendErr := j.send(ctx, errResp); sendErr != nil {
			return failure(sendErr)
		}
		r.Published = true
		return result{outcome: OutcomeEventFailed, err: err}
	}
	// The ErrorResponse and the scheduled RetryRequest go at once.
	retryMsg := message.NewRetryRequest(j.in, j.d.Body, j.source)
	var schedErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		sctx, cancel := context.WithTimeout(ctx, j.p.o.SettleTimeout)
		defer cancel()
		schedErr = j.p.o.Scheduler.Schedule(sctx, retryMsg, at)
	}()
	sendErr := j.send(ctx, errResp)
	<-done
	if sendErr != nil {
		return failure(fmt.Errorf("%w (the event failed: %w)", sendErr, err))
	}
	r.Published = true
	if schedErr != nil {
		return result{outcome: OutcomePublishFailed, err: fmt.Errorf("schedule RetryRequest: %w", schedErr)}
	}
	r.RetryScheduled = true
	return result{outcome: OutcomeEventFailed, err: err}
}

// discarded reports a discarded event: a SkipResponse with NimBus's
// classifier text.
func (j *job) discarded(ctx context.Context, err error) result {
	out := message.NewDiscardResponse(j.in, ErrorType(err), errorText(err), discardClassifier, j.timings())
	if sendErr := j.send(ctx, out); sendErr != nil {
		return failure(sendErr)
	}
	j.r.Published = true
	return result{outcome: OutcomeDiscarded, err: err}
}

// discardClassifier names what classified a failure as Discard in the
// SkipResponse text ("… Classified as Discard by {classifier}.").
const discardClassifier = "subscriber.Discard"
