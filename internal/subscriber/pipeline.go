package subscriber

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// Delivery is one delivered message as the transport saw it.
type Delivery struct {
	Broker     message.Broker
	Properties map[string]any
	Body       []byte
}

// DuplicateInfo is what the OnDuplicateDetected hook receives: identity and
// routing metadata, never the payload.
type DuplicateInfo struct {
	EndpointID    string
	MessageID     string
	EventID       string
	EventTypeID   string
	CorrelationID string
	SessionID     string
	MessageType   string
	EnqueuedTime  time.Time
}

// Options configures a Pipeline.
type Options struct {
	// EndpointID is the configured subscriber endpoint: the endpoint side
	// of every inbox key (never the message's To). Required.
	EndpointID string
	// Inbox is the deduplication store; nil turns the inbox off (nothing is
	// checked or recorded).
	Inbox inbox.Store
	// Publisher sends Resolver responses. Required.
	Publisher resolver.Publisher
	// Handlers maps event types to handlers. Required.
	Handlers *Registry
	// OnDuplicateDetected is called for every duplicate. Its error or panic
	// is logged and never changes the outcome.
	OnDuplicateDetected func(ctx context.Context, d DuplicateInfo) error
	// Metrics receives the counters; nil discards them.
	Metrics *telemetry.Metrics
	// Tracer starts the child spans of a delivery (inbox check, handler,
	// record) under the span in Process's ctx; nil means the global
	// provider's telemetry.TracerName tracer.
	Tracer oteltrace.Tracer
	// Log receives hook failures; the per-invocation line is the caller's.
	Log zerolog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
	// SettleTimeout bounds the record and response after a successful
	// handler, which run to the end even if the invocation is cancelled;
	// default 60s.
	SettleTimeout time.Duration
	// Version is reported in heartbeat responses.
	Version string
	// RecordAttempts is how often a failed inbox record is tried within the
	// invocation before it fails (the record is idempotent, and a failure
	// here means the handler runs again on redelivery); default 6, which with
	// the default backoff rides out about three seconds of store outage.
	RecordAttempts int
	// RecordBackoff is the wait before the second attempt, doubled after
	// each; default 100ms.
	RecordBackoff time.Duration
	// CloudEvents turns on CloudEvents detection and mapping; nil reads
	// every message as a native NimBus message.
	CloudEvents *message.CloudEventOptions
	// DeduplicateCloudEventsBySource keys the inbox check and record of a
	// CloudEvent on (source, id) within EndpointID (see
	// inbox.CloudEventMessageID) instead of the broker MessageId, so a
	// producer's re-send with a fresh broker MessageId is a duplicate.
	DeduplicateCloudEventsBySource bool
}

// Pipeline processes deliveries. It is safe for concurrent use.
type Pipeline struct {
	o Options
}

// New validates o and returns a pipeline.
func New(o Options) (*Pipeline, error) {
	var errs []error
	if o.EndpointID == "" {
		errs = append(errs, errors.New("subscriber: EndpointID is required"))
	}
	if o.Publisher == nil {
		errs = append(errs, errors.New("subscriber: Publisher is required"))
	}
	if o.Handlers == nil {
		errs = append(errs, errors.New("subscriber: Handlers is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.SettleTimeout <= 0 {
		o.SettleTimeout = 60 * time.Second
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.Tracer == nil {
		o.Tracer = otel.GetTracerProvider().Tracer(telemetry.TracerName)
	}
	if o.RecordAttempts <= 0 {
		o.RecordAttempts = 6
	}
	if o.RecordBackoff <= 0 {
		o.RecordBackoff = 100 * time.Millisecond
	}
	return &Pipeline{o: o}, nil
}

// InboxEnabled reports whether deliveries are deduplicated.
func (p *Pipeline) InboxEnabled() bool { return p.o.Inbox != nil }

// Process runs the subscriber contract for d and reports what happened.
// r.Outcome.Completes() tells the caller how to answer the host.
func (p *Pipeline) Process(ctx context.Context, d *Delivery) (r Report) {
	start := p.o.Now()
	defer func() { r.Duration = p.o.Now().Sub(start) }()
	r.Inbox = InboxNotReached
	r.MessageID = deref(d.Broker.MessageID)
	r.SessionID = deref(d.Broker.SessionID)

	in, err := message.ReadWith(d.Broker, d.Properties, d.Body, p.o.CloudEvents)
	if err != nil {
		r.Outcome, r.Err = OutcomeInvalidMessage, err
		return r
	}
	ce := in.CloudEvent
	// A structured CloudEvent's attributes were read from the body: payload,
	// never logged.
	fromBody := ce != nil && ce.Mode == message.ModeStructured
	r.MessageType = in.Type.String()
	eventTypeID := deref(in.EventTypeID)
	if _, ok := in.Property(message.PropEventTypeID); ok || (ce != nil && !fromBody) {
		r.EventTypeID = eventTypeID
	} else {
		// From the body: payload, never logged.
		r.EventTypeFromBody = eventTypeID != ""
	}
	if _, ok := in.Property(message.PropEventID); ok || !fromBody {
		r.EventID = deref(in.EventID)
	}
	if ce != nil {
		r.CloudEvent = string(ce.Mode)
	}

	switch in.Type {
	case message.EventRequest, message.UnsupportedResponse:
	default:
		r.Outcome = OutcomeUnsupportedMessageType
		r.Err = fmt.Errorf("message type %s is not handled by this subscriber", in.Type)
		return r
	}

	queueMs := int64(-1)
	if !in.EnqueuedTime.IsZero() {
		queueMs = max(start.Sub(in.EnqueuedTime).Milliseconds(), 0)
	}
	timings := func() message.Timings {
		return message.Timings{QueueTimeMs: queueMs, ProcessingTimeMs: p.o.Now().Sub(start).Milliseconds()}
	}

	if in.IsHeartbeat() {
		out := message.NewHeartbeatResponse(in, timings(), p.o.Now(), p.o.Version)
		return p.respond(ctx, &r, out, OutcomeHeartbeat)
	}

	// The inbox check runs before anything else looks at the event, so a
	// recorded redelivery is skipped whatever else has changed since.
	var keys []inbox.Key
	switch {
	case p.o.Inbox == nil:
		r.Inbox = InboxOff
	default:
		id := in.MessageID
		if ce != nil && p.o.DeduplicateCloudEventsBySource {
			s, reason := inbox.CloudEventMessageID(ce.Source, ce.ID)
			if reason == inbox.BypassNone {
				reason = inbox.BypassReason(p.o.EndpointID, &s)
			}
			if reason != inbox.BypassNone {
				r.Inbox, r.BypassReason = InboxBypassed, reason
				p.o.Metrics.Inc(telemetry.InboxBypassed, "reason", reason)
				break
			}
			id = &s
		}
		if reason := inbox.BypassReason(p.o.EndpointID, id); reason != inbox.BypassNone {
			r.Inbox, r.BypassReason = InboxBypassed, reason
			p.o.Metrics.Inc(telemetry.InboxBypassed, telemetry.TagBypassReason, reason)
			break
		}
		keys = append(keys, inbox.NewKey(p.o.EndpointID, *id))
		// A stand-in (a replayed parked copy or a retry) also carries the
		// MessageId the source delivered the event with.
		if src := in.InboxMessageID; src != nil && *src != *id &&
			inbox.BypassReason(p.o.EndpointID, src) == inbox.BypassNone {
			keys = append(keys, inbox.NewKey(p.o.EndpointID, *src))
		}
		for _, k := range keys {
			r.Checks++
			cctx, span := p.o.Tracer.Start(ctx, spanInboxCheck)
			seen, err := p.o.Inbox.HasProcessed(cctx, k)
			if err != nil {
				failed := p.storeFailed(&r, inbox.OpCheck, err)
				endSpan(span, failed.Err)
				return failed
			}
			if span.IsRecording() {
				span.SetAttributes(attribute.Bool("nimbus.inbox.duplicate", seen))
			}
			span.End()
			if seen {
				r.Inbox = InboxDuplicate
				p.duplicate(ctx, in, k)
				out := message.NewResponse(in, message.Duplicate, timings(), nil)
				return p.respond(ctx, &r, out, OutcomeDuplicate)
			}
		}
		r.Inbox = InboxNew
	}

	// A CloudEvent is validated after the inbox, as NimBus's validating
	// handler sits below its inbox middleware: a missing attribute, another
	// specversion or a type with no handler fail at once (the broker
	// dead-letters the message), never an UnsupportedResponse.
	h, ok := p.o.Handlers.lookup(eventTypeID)
	if ce != nil {
		err := ce.Validate(fromBody)
		if err == nil && (eventTypeID == "" || !ok) {
			err = ce.NoHandlerError(fromBody)
		}
		if err != nil {
			r.Outcome, r.Err = OutcomeInvalidCloudEvent, Permanent(err)
			return r
		}
	}

	// Dispatch, as NimBus's EventHandlerProvider: no type or no handler is
	// Unsupported; an unreadable body or a body that names another type is
	// a permanent failure.
	if eventTypeID == "" || !ok {
		out := message.NewResponse(in, message.Unsupported, timings(), nil)
		return p.respond(ctx, &r, out, OutcomeUnsupported)
	}
	if in.Content == nil || in.Content.EventContent == nil {
		r.Outcome = OutcomeInvalidMessage
		r.Err = Permanent(errors.New("message body has no readable EventContent"))
		return r
	}
	if bt := in.Content.EventContent.EventTypeID; bt != nil && *bt != "" && *bt != eventTypeID {
		r.Outcome = OutcomeInvalidMessage
		// The body's value is payload: say only that it differs.
		r.Err = Permanent(errors.New("message EventTypeId mismatch: the body's EventContent.EventTypeId differs from the EventTypeId property"))
		return r
	}

	ev := &Event{
		EventTypeID:   eventTypeID,
		JSON:          deref(in.Content.EventContent.EventJSON),
		MessageID:     r.MessageID,
		SessionID:     deref(in.SessionID),
		CorrelationID: deref(in.CorrelationID),
		EventID:       r.EventID,
		From:          in.From,
		DeliveryCount: in.DeliveryCount,
		EnqueuedTime:  in.EnqueuedTime,
		CloudEvent:    cloudEventAttributes(ce),
	}
	if in.RetryCount != nil {
		ev.RetryCount = int(*in.RetryCount)
	}
	hctx, span := p.o.Tracer.Start(ctx, spanHandler)
	if span.IsRecording() {
		span.SetAttributes(attribute.String(attrEventType, logsafe.Bound(eventTypeID)))
	}
	res, err := p.invoke(hctx, h, ev, &r)
	endSpan(span, err)
	r.HandlerRan = true
	if err != nil {
		r.Outcome = OutcomeHandlerFailed
		switch {
		case ctx.Err() != nil && errors.Is(err, ctx.Err()):
			r.Outcome = OutcomeCanceled
		case IsPermanent(err):
			r.Outcome = OutcomePermanentFailure
		}
		r.Err = err
		return r
	}

	// The handler succeeded: the record and the response run to the end
	// even if the invocation is cancelled meanwhile.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.o.SettleTimeout)
	defer cancel()

	if res.handoff != nil {
		h := &message.Handoff{Reason: res.handoff.Reason, ExternalJobID: res.handoff.ExternalJobID}
		if res.handoff.ExpectedIn > 0 {
			h.ExpectedBy = p.o.Now().Add(res.handoff.ExpectedIn)
		}
		out := message.NewResponse(in, message.PendingHandoff, timings(), h)
		return p.respond(sctx, &r, out, OutcomePendingHandoff)
	}

	// Record the source id of a stand-in first, then its own.
	for i := len(keys) - 1; i >= 0; i-- {
		rctx, span := p.o.Tracer.Start(sctx, spanInboxRecord)
		if err := p.record(rctx, &r, keys[i]); err != nil {
			failed := p.storeFailed(&r, inbox.OpRecord, err)
			endSpan(span, failed.Err)
			return failed
		}
		span.End()
	}
	out := message.NewResponse(in, message.Resolution, timings(), nil)
	return p.respond(sctx, &r, out, OutcomeCompleted)
}

// record writes k, retrying a failure a few times: once the handler has
// succeeded, a failed record means it runs again on redelivery.
func (p *Pipeline) record(ctx context.Context, r *Report, k inbox.Key) error {
	wait := p.o.RecordBackoff
	for attempt := 1; ; attempt++ {
		r.Records++
		if attempt > 1 {
			r.RecordRetries++
		}
		err := p.o.Inbox.RecordProcessed(ctx, k)
		if err == nil || attempt == p.o.RecordAttempts || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait *= 2
	}
}

func (p *Pipeline) invoke(ctx context.Context, h HandlerFunc, ev *Event, r *Report) (res Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			r.Stack = debug.Stack()
			err = Transient(fmt.Errorf("handler panicked: %v", v))
		}
	}()
	res, err = h(ctx, ev)
	return res, err
}

// respond publishes out, bounded by the settle timeout on every path (the
// Service Bus SDK has no per-try timeout of its own).
func (p *Pipeline) respond(ctx context.Context, r *Report, out *message.Outgoing, o Outcome) Report {
	ctx, cancel := context.WithTimeout(ctx, p.o.SettleTimeout)
	defer cancel()
	if err := p.o.Publisher.Publish(ctx, out); err != nil {
		r.Outcome = OutcomePublishFailed
		if ctx.Err() != nil {
			r.Outcome = OutcomeCanceled
		}
		r.Err = fmt.Errorf("publish %s to the Resolver: %w", out.Type(), err)
		return *r
	}
	r.Published = true
	r.Outcome = o
	return *r
}

func (p *Pipeline) storeFailed(r *Report, op string, err error) Report {
	p.o.Metrics.Inc(telemetry.InboxOperationFailed, telemetry.TagStoreOperation, op)
	r.StoreOp = op
	r.Outcome = OutcomeTransientFailure
	if errors.Is(err, context.Canceled) {
		r.Outcome = OutcomeCanceled
	}
	r.Err = NewStoreError(op, err)
	return *r
}

func (p *Pipeline) duplicate(ctx context.Context, in *message.Inbound, k inbox.Key) {
	p.o.Metrics.Inc(telemetry.DuplicateDetected, "", "")
	if p.o.OnDuplicateDetected == nil {
		return
	}
	info := DuplicateInfo{
		EndpointID:    k.EndpointID,
		MessageID:     deref(in.MessageID),
		EventID:       deref(in.EventID),
		EventTypeID:   deref(in.EventTypeID),
		CorrelationID: deref(in.CorrelationID),
		SessionID:     deref(in.SessionID),
		MessageType:   in.Type.String(),
		EnqueuedTime:  in.EnqueuedTime,
	}
	// Only the property is logged: a type read from the body is payload.
	loggedType, _ := in.Property(message.PropEventTypeID)
	defer func() {
		if v := recover(); v != nil {
			p.o.Log.Warn().Str("endpoint", k.EndpointID).Str("eventTypeId", logsafe.Bound(loggedType)).
				Str("panic", logsafe.Bound(fmt.Sprint(v))).Str("stack", logsafe.Stack(debug.Stack())).
				Msg("a duplicate lifecycle observer panicked; duplicate processing continues")
		}
	}()
	if err := p.o.OnDuplicateDetected(ctx, info); err != nil {
		p.o.Log.Warn().Str("endpoint", k.EndpointID).Str("eventTypeId", logsafe.Bound(loggedType)).
			Str("error", logsafe.Bound(err.Error())).Msg("a duplicate lifecycle observer failed; duplicate processing continues")
	}
}

// Span names of the steps of a delivery.
const (
	spanInboxCheck  = "nimbus.inbox.check"
	spanHandler     = "nimbus.handler"
	spanInboxRecord = "nimbus.inbox.record"
	attrEventType   = "nimbus.event_type"
)

// endSpan ends span, marking it failed with err's text (bounded; store
// errors are already free of provider details) when err is not nil.
func endSpan(span oteltrace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, logsafe.Bound(err.Error()))
	}
	span.End()
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
