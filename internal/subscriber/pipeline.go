package subscriber

import (
	"context"
	"strings"

	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// Process runs the subscriber contract for d and reports what happened.
// r.Outcome.Completes() tells the caller how to answer the host.
func (p *Pipeline) Process(ctx context.Context, d *Delivery) Report {
	return p.process(ctx, d, false)
}

func (p *Pipeline) process(ctx context.Context, d *Delivery, ingress bool) Report {
	j := p.newJob(d, p.o.Now())
	defer j.endSettle()
	o, err := j.process(ctx, readAs{ingress: ingress})
	end := ending(o, err, d.Properties)
	p.lastDeliveryNotice(ctx, j, end)
	j.did.duration = p.o.Now().Sub(j.start)
	return p.report(d, j.in, &j.did, end)
}

// ProcessIngress runs the subscriber contract for a delivery on the
// CloudEvents ingress topic, where external producers publish: only an
// EventRequest (native, or a CloudEvent read as one) is accepted. Any other
// MessageType (a Manager, control or retry request, a response) takes the
// dead-letter path as a type the subscription does not take, so a producer
// cannot settle, retry or resubmit the endpoint's events.
func (p *Pipeline) ProcessIngress(ctx context.Context, d *Delivery) Report {
	return p.process(ctx, d, true)
}

// process reads the delivery and runs it through the entry point of its
// MessageType. Like every entry point, it returns the outcome it answered,
// or the error that failed the delivery, whose outcome outcomeOf decides.
func (j *job) process(ctx context.Context, as readAs) (Outcome, error) {
	in, err := j.read(as)
	if err != nil {
		return "", err
	}
	if j.ingress && in.Type != message.EventRequest {
		return "", &UnsupportedTypeError{Type: in.Type.String()}
	}
	if in.EventID == nil {
		// NimBus reads EventId with its throwing accessor: a null value is as
		// absent as a missing property, and the session guard keys on it.
		return "", &message.InvalidMessageError{Property: message.PropEventID, Reason: "is null"}
	}
	if err := namedEvent(in.Type, j.d.Properties); err != nil {
		return "", err
	}
	switch in.Type {
	case message.EventRequest, message.UnsupportedResponse:
		return j.eventRequest(ctx)
	case message.RetryRequest:
		return j.retryRequest(ctx)
	case message.ResubmissionRequest:
		return j.resubmission(ctx)
	case message.SkipRequest:
		return j.skipRequest(ctx)
	case message.HandoffCompletedRequest:
		return j.handoffCompleted(ctx)
	case message.HandoffFailedRequest:
		return j.handoffFailed(ctx)
	}
	// NimBus's HandleDefault: the dead-letter path.
	return "", &UnsupportedTypeError{Type: in.Type.String()}
}

// namedEvent checks the EventId of a Manager settlement (SkipRequest,
// HandoffCompletedRequest, HandoffFailedRequest), which acts on the event
// it names: an empty or non-string EventId names none and is as invalid as
// a null one.
func namedEvent(t message.Type, props map[string]any) error {
	switch t {
	case message.SkipRequest, message.HandoffCompletedRequest, message.HandoffFailedRequest:
	default:
		return nil
	}
	reason := ""
	switch v, _ := props[message.PropEventID]; v := v.(type) {
	case string:
		if strings.TrimSpace(v) == "" {
			reason = "is empty"
		}
	default:
		reason = "is not a string"
	}
	if reason == "" {
		return nil
	}
	return &message.InvalidMessageError{Property: message.PropEventID, Reason: reason}
}
