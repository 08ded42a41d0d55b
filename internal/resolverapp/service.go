package resolverapp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/sleep"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
	"github.com/nimbus-go/functions-subscriber/internal/tracking"
)

// Topic is the Resolver's topic and session subscription; scheduled
// re-sends go to this topic.
const Topic = message.ResolverID

// The store-failure budget, as NimBus's Resolver spends it: a message whose
// store write failed transiently is re-sent on the Resolver topic with the
// same MessageId after 5 s·2^(attempt−1), at most 300 s (or the store's
// retry-after when longer), counting attempts as ThrottleRetryCount +
// DeliveryCount, at most MaxAttempts.
const (
	MaxAttempts    = 10
	BackoffBase    = 5 * time.Second
	BackoffMax     = 300 * time.Second
	SettleTimeout  = 60 * time.Second
	auditorManager = "Manager"
	auditorSelf    = "Resolver"
)

// Backoff returns the wait before logical attempt number attempt+1.
func Backoff(attempt int) time.Duration {
	d := BackoffBase
	for i := 1; i < attempt && d < BackoffMax; i++ {
		d *= 2
	}
	return min(d, BackoffMax)
}

// Options configure a [Service].
type Options struct {
	// Store is the tracking store. Required.
	Store tracking.Writer
	// Scheduler re-sends a message after a store failure. Required.
	Scheduler Scheduler
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Pause waits between the quick retries of a failed store write (see
	// QuickRetries); default a timer that ctx ends.
	Pause func(ctx context.Context, d time.Duration)
	// Tracer starts the child spans of a message's store work (history
	// write, history read, status upload, audit); default the global
	// provider's telemetry.TracerName tracer.
	Tracer trace.Tracer
}

// QuickRetries are the pauses before retrying a store write that failed
// transiently, within the invocation, before the message is re-sent with
// the budget's backoff. NimBus re-sends at once (5 s later); retrying a
// blip here first costs 0.1–0.5 s instead of a Service Bus re-send and 5 s
// of delay. Every write is safe to repeat: the history write is an upsert
// by MessageId, the guarded upload is decided again against the stored row,
// and terminal uploads replace.
var QuickRetries = []time.Duration{100 * time.Millisecond, 400 * time.Millisecond}

// Service is the NimBus Resolver's handling of one message: NimBus's
// ResolverService. It is safe for concurrent use.
type Service struct {
	store  tracking.Writer
	sched  Scheduler
	now    func() time.Time
	pause  func(ctx context.Context, d time.Duration)
	tracer trace.Tracer
}

// NewService checks o and returns the service.
func NewService(o Options) (*Service, error) {
	if o.Store == nil || o.Scheduler == nil {
		return nil, errors.New("resolver: a Service needs a Store and a Scheduler")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Pause == nil {
		o.Pause = sleep.For
	}
	if o.Tracer == nil {
		o.Tracer = otel.GetTracerProvider().Tracer(telemetry.TracerName)
	}
	return &Service{store: o.Store, sched: o.Scheduler, now: o.Now, pause: o.Pause, tracer: o.Tracer}, nil
}

// Report describes one handled message for the invocation log line. Every
// string comes from broker or application properties (the caller bounds
// them); none comes from the body.
type Report struct {
	Outcome     Outcome
	MessageID   string
	SessionID   string
	EventID     string
	MessageType string
	EndpointID  string
	// Status is the tracking status written or refused ("" before it is
	// known).
	Status string
	// Attempt is the logical attempt (ThrottleRetryCount + DeliveryCount).
	Attempt            int
	ThrottleRetryCount int
	// StoreOp names the store call that failed.
	StoreOp string
	// StoreReason is throttled or transient on the store-failure path.
	StoreReason string
	// RetryIn is the delay of a scheduled re-send; RetryAfterUsed says it
	// came from the store's retry-after rather than the backoff.
	RetryIn        time.Duration
	RetryAfterUsed bool
	// QuickRetries counts the store write's retries within the invocation.
	QuickRetries int
	// WallClockOverride is set when the handoff wall-clock override
	// replaced ProcessingTimeMs.
	WallClockOverride bool
	// AuditErr is a failed best-effort Comment audit of a stale copy.
	AuditErr error
	// Err is why the message did not complete, or the store failure that
	// led to a re-send.
	Err      error
	Duration time.Duration
}

// Handle runs NimBus's Resolver steps for one message:
//
//  1. a heartbeat is completed before any tracking write (no heartbeat
//     store here: nothing is recorded);
//  2. the history document is written first, for stale copies too;
//  3. the status comes from the message type (DeadLettered when the
//     message carries a DeadLetterErrorDescription, even empty), the
//     handoff wall-clock override applies to a ResolutionResponse or
//     ErrorResponse, and the tracking row is uploaded through the
//     stale-write guard;
//  4. a RetryRequest gets its Retry audit;
//  5. a refused (stale) write is completed, with a best-effort Comment
//     audit.
//
// A transient store failure schedules a same-MessageId copy on the
// Resolver topic and completes this one, until the budget is spent.
func (s *Service) Handle(ctx context.Context, d *Delivery) (rep Report) {
	start := s.now()
	defer func() { rep.Duration = s.now().Sub(start) }()
	if d.Broker.MessageID != nil {
		rep.MessageID = *d.Broker.MessageID
	}
	if d.Broker.SessionID != nil {
		rep.SessionID = *d.Broker.SessionID
	}
	r, heartbeat, err := read(d)
	if heartbeat {
		rep.Outcome = OutcomeHeartbeat
		return rep
	}
	if err != nil {
		rep.Outcome, rep.Err = OutcomeInvalidMessage, err
		if s, ok := message.PropertyString(d.Properties, message.PropMessageType); ok && len(s) <= 64 {
			rep.MessageType = s
		}
		return rep
	}
	rep.EventID, rep.MessageType, rep.EndpointID = r.eventID, r.typ.String(), r.endpoint()
	rep.ThrottleRetryCount = r.throttleRetr
	rep.Attempt = attemptOf(r.throttleRetr, d.Broker.DeliveryCount)
	if rep.Attempt > MaxAttempts {
		// The previous delivery was the last attempt and failed: do not
		// touch the store again; fail at once toward the dead-letter queue.
		rep.Outcome, rep.Err = OutcomeBudgetSpent, fmt.Errorf("resolver: attempt %d of at most %d", rep.Attempt, MaxAttempts)
		return rep
	}

	wctx, cancel := context.WithTimeout(ctx, SettleTimeout)
	defer cancel()
	applied, op, err := s.write(wctx, r, &rep)
	for i := 0; err != nil && i < len(QuickRetries) && retryable(err) && wctx.Err() == nil; i++ {
		s.pause(wctx, QuickRetries[i])
		rep.QuickRetries++
		applied, op, err = s.write(wctx, r, &rep)
	}
	if errors.Is(err, errNoProjection) {
		rep.Outcome, rep.Err = OutcomeNoProjection, err
		return rep
	}
	if err != nil {
		rep.StoreOp = op
		return s.storeFailure(ctx, r, err, rep)
	}
	if applied {
		rep.Outcome = OutcomeWritten
		return rep
	}
	rep.Outcome = OutcomeStale
	audit := tracking.MessageAudit{
		AuditorName:    tracking.Str(auditorSelf),
		AuditTimestamp: tracking.NormalizeTime(s.now()),
		AuditType:      tracking.AuditComment,
		EventID:        tracking.Str(r.eventID),
		EndpointID:     tracking.Str(r.endpoint()),
		Data:           tracking.Str(fmt.Sprintf("Ignored stale %s %s: the audit row already holds a later outcome.", r.typ, r.messageID)),
	}
	if err := s.step(wctx, spanAudit, r.typ, func(ctx context.Context) error {
		return s.store.StoreMessageAudit(ctx, r.key().Event(), audit, deref(r.eventTypeID))
	}); err != nil {
		if ctx.Err() != nil {
			rep.Outcome, rep.Err = OutcomeCanceled, ctx.Err()
			return rep
		}
		rep.AuditErr = err // best effort: a stale copy never becomes a redelivery
	}
	return rep
}

// write runs steps 2–4 (the status is looked up after the history write,
// so a type without a status is still in the history) and returns whether the row was applied, and on
// failure the store call that failed.
func (s *Service) write(ctx context.Context, r *received, rep *Report) (bool, string, error) {
	entity := s.entity(r)
	if err := s.step(ctx, spanHistory, r.typ, func(ctx context.Context) error { return s.store.StoreMessage(ctx, entity) }); err != nil {
		return false, "StoreMessage", err
	}
	status, ok := resultingStatus(r)
	if !ok {
		return false, "", fmt.Errorf("%w: %s", errNoProjection, r.typ)
	}
	rep.Status = status.String()
	row := s.row(r, &entity, status)
	if r.typ == message.ResolutionResponse || r.typ == message.ErrorResponse {
		var ms *int64
		err := s.step(ctx, spanReadHistory, r.typ, func(ctx context.Context) (err error) {
			ms, err = s.handoffWallClock(ctx, r.eventID)
			return err
		})
		if err != nil {
			return false, "GetEventHistory", err
		}
		if ms != nil {
			row.ProcessingTimeMs = ms
			rep.WallClockOverride = true
		}
	}
	var applied bool
	err := s.step(ctx, spanUpload, r.typ, func(ctx context.Context) (err error) {
		applied, err = s.store.Upload(ctx, r.key(), status, row)
		return err
	})
	if err != nil {
		return false, "Upload" + status.String() + "Message", err
	}
	if r.typ == message.RetryRequest {
		audit := tracking.MessageAudit{AuditorName: tracking.Str(auditorManager), AuditTimestamp: tracking.NormalizeTime(s.now()), AuditType: tracking.AuditRetry}
		if err := s.step(ctx, spanAudit, r.typ, func(ctx context.Context) error {
			return s.store.StoreMessageAudit(ctx, tracking.EventKey{EventID: r.eventID}, audit, "")
		}); err != nil {
			return false, "StoreMessageAudit", err
		}
	}
	return applied, "", nil
}

// Child spans of a Resolver invocation's store work.
const (
	spanHistory     = "nimbus.tracking.history"
	spanReadHistory = "nimbus.tracking.history.read"
	spanUpload      = "nimbus.tracking.upload"
	spanAudit       = "nimbus.tracking.audit"
)

// step runs one store call in its own child span, marked failed with the
// error's text (bounded; store errors carry no payload).
func (s *Service) step(ctx context.Context, name string, typ message.Type, call func(context.Context) error) error {
	ctx, span := s.tracer.Start(ctx, name)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("nimbus.message.type", typ.String()))
	}
	err := call(ctx)
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, logsafe.Bound(err.Error()))
	}
	span.End()
	return err
}

// errNoProjection: the message type has no tracking status (Unknown,
// ProcessDeferredRequest, an undefined ordinal). Its history is written
// first, as NimBus writes it.
var errNoProjection = errors.New("resolver: the message type has no tracking status")

// storeFailure decides what a failed store call leads to: cancellation
// answers at once; a permanent refusal fails toward the dead-letter queue;
// a transient failure or throttling schedules a same-MessageId copy after
// the backoff and completes this message, unless this was the last
// attempt.
func (s *Service) storeFailure(ctx context.Context, r *received, err error, rep Report) Report {
	rep.Err = err
	switch {
	case ctx.Err() != nil:
		rep.Outcome = OutcomeCanceled
		return rep
	case errors.Is(err, tracking.ErrInvalidArgument) || isPermanent(err):
		rep.Outcome = OutcomeStoreRejected
		return rep
	}
	rep.StoreReason = "transient"
	if tracking.IsThrottled(err) {
		rep.StoreReason = "throttled"
	}
	if rep.Attempt >= MaxAttempts {
		rep.Outcome = OutcomeBudgetSpent
		return rep
	}
	delay := Backoff(rep.Attempt)
	if ra := tracking.RetryAfter(err); ra > delay {
		delay, rep.RetryAfterUsed = ra, true
	}
	rep.RetryIn = delay
	// The copy is scheduled even when the store call ran out of the settle
	// timeout; the host's own cancellation is handled above.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), SettleTimeout)
	defer cancel()
	if serr := s.sched.ScheduleRedelivery(sctx, redelivery(r, rep.Attempt), s.now().Add(delay)); serr != nil {
		rep.Outcome, rep.Err = OutcomeRescheduleFailed, fmt.Errorf("%w; scheduling the re-send failed: %w", err, serr)
		return rep
	}
	rep.Outcome = OutcomeRescheduled
	return rep
}

// retryable reports a store failure worth retrying within the invocation.
func retryable(err error) bool {
	return !errors.Is(err, errNoProjection) && !errors.Is(err, tracking.ErrInvalidArgument) && !isPermanent(err) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// isPermanent reports a store failure that retrying cannot fix. An error
// the store did not classify counts as transient: retrying it spends the
// budget and then dead-letters, where a wrong "permanent" would dead-letter
// a response during an outage.
func isPermanent(err error) bool {
	var se *tracking.StoreError
	return errors.As(err, &se) && se.Kind == tracking.FailurePermanent
}

// statusOf maps a message type to the status it projects (NimBus's
// MessageTypeToStatusMap).
var statusOf = map[message.Type]tracking.ResolutionStatus{
	message.EventRequest:            tracking.Pending,
	message.ResubmissionRequest:     tracking.Pending,
	message.RetryRequest:            tracking.Pending,
	message.SkipRequest:             tracking.Pending,
	message.ContinuationRequest:     tracking.Pending,
	message.PendingHandoffResponse:  tracking.Pending,
	message.HandoffCompletedRequest: tracking.Pending,
	message.HandoffFailedRequest:    tracking.Pending,
	message.ErrorResponse:           tracking.Failed,
	message.ResolutionResponse:      tracking.Completed,
	message.DeferralResponse:        tracking.Deferred,
	message.SkipResponse:            tracking.Skipped,
	message.UnsupportedResponse:     tracking.Unsupported,
}

// resultingStatus is NimBus's GetResultingStatus: DeadLettered whenever
// DeadLetterErrorDescription is present (an empty string counts), else the
// map; Unknown, ProcessDeferredRequest and undefined types have none.
func resultingStatus(r *received) (tracking.ResolutionStatus, bool) {
	if r.prop(message.PropDeadLetterErrorDesc) != nil {
		return tracking.DeadLettered, true
	}
	s, ok := statusOf[r.typ]
	return s, ok
}

// entity builds the history document (NimBus's MessageEntity). RetryCount,
// RetryLimit, OriginalSessionId and DeferralSequence stay nil, as NimBus's
// Resolver leaves them.
func (s *Service) entity(r *received) tracking.MessageEntity {
	from := r.from
	if isRequest(r.typ) && from == nil {
		if from = r.prop(message.PropOriginatingFrom); from == nil {
			from = tracking.Str(message.Self)
		}
	}
	e := tracking.MessageEntity{
		EventID:                    r.eventID,
		MessageID:                  r.messageID,
		EventTypeID:                r.eventTypeID,
		OriginatingMessageID:       orSelf(r.prop(message.PropOriginatingMessageID)),
		ParentMessageID:            orSelf(r.prop(message.PropParentMessageID)),
		From:                       from,
		To:                         r.to,
		OriginatingFrom:            r.prop(message.PropOriginatingFrom),
		SessionID:                  tracking.Str(r.sessionID),
		CorrelationID:              r.d.Broker.CorrelationID,
		EnqueuedTimeUtc:            tracking.NormalizeTime(r.d.Broker.EnqueuedTime),
		MessageContent:             r.content,
		MessageType:                r.typ,
		EndpointRole:               tracking.Subscriber,
		EndpointID:                 r.endpoint(),
		DeadLetterReason:           r.prop(message.PropDeadLetterReason),
		DeadLetterErrorDescription: r.prop(message.PropDeadLetterErrorDesc),
		QueueTimeMs:                r.int64Prop(message.PropQueueTimeMs),
		ProcessingTimeMs:           r.int64Prop(message.PropProcessingTimeMs),
		HandoffReason:              r.prop(message.PropHandoffReason),
		ExternalJobID:              r.prop(message.PropExternalJobID),
		ExpectedBy:                 r.timeProp(message.PropExpectedBy),
		CloudEventID:               r.prop(message.PropCloudEventID),
		CloudEventSource:           r.prop(message.PropCloudEventSource),
		CloudEventType:             r.prop(message.PropCloudEventType),
		CloudEventSubject:          r.prop(message.PropCloudEventSubject),
	}
	if r.typ == message.PendingHandoffResponse {
		e.PendingSubStatus = tracking.Str(tracking.PendingSubStatusHandoff)
	}
	return e
}

// row builds the tracking row (NimBus's CreateUnresolvedEvent).
func (s *Service) row(r *received, e *tracking.MessageEntity, status tracking.ResolutionStatus) tracking.UnresolvedEvent {
	reason := e.DeadLetterErrorDescription
	if r.typ == message.SkipResponse {
		reason = nil
		if r.content.ErrorContent != nil {
			reason = r.content.ErrorContent.ErrorText
		}
	}
	return tracking.UnresolvedEvent{
		UpdatedAt:                  tracking.NormalizeTime(s.now()),
		EnqueuedTimeUtc:            e.EnqueuedTimeUtc,
		EventID:                    r.eventID,
		SessionID:                  r.sessionID,
		CorrelationID:              e.CorrelationID,
		ResolutionStatus:           status,
		EndpointRole:               e.EndpointRole,
		EndpointID:                 e.EndpointID,
		MessageType:                r.typ,
		DeadLetterReason:           e.DeadLetterReason,
		DeadLetterErrorDescription: e.DeadLetterErrorDescription,
		LastMessageID:              tracking.Str(r.messageID),
		OriginatingMessageID:       e.OriginatingMessageID,
		ParentMessageID:            e.ParentMessageID,
		Reason:                     reason,
		OriginatingFrom:            e.OriginatingFrom,
		EventTypeID:                e.EventTypeID,
		To:                         e.To,
		From:                       e.From,
		MessageContent:             e.MessageContent,
		QueueTimeMs:                e.QueueTimeMs,
		ProcessingTimeMs:           e.ProcessingTimeMs,
		PendingSubStatus:           e.PendingSubStatus,
		HandoffReason:              e.HandoffReason,
		ExternalJobID:              e.ExternalJobID,
		ExpectedBy:                 e.ExpectedBy,
		CloudEventID:               e.CloudEventID,
		CloudEventSource:           e.CloudEventSource,
		CloudEventType:             e.CloudEventType,
		CloudEventSubject:          e.CloudEventSubject,
	}
}

// handoffWallClock is NimBus's handoff wall-clock override: when the
// event's history holds a PendingHandoffResponse and an EventRequest, the
// terminal response's ProcessingTimeMs becomes the time from the
// EventRequest's enqueue to now (at least 0). NimBus takes an arbitrary
// EventRequest when there are several; this takes the earliest, so the
// figure covers the whole handoff. nil keeps the handler's own figure.
func (s *Service) handoffWallClock(ctx context.Context, eventID string) (*int64, error) {
	history, err := s.store.GetEventHistory(ctx, eventID)
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(history, func(m tracking.MessageEntity) bool { return m.MessageType == message.PendingHandoffResponse }) {
		return nil, nil
	}
	var first *tracking.MessageEntity
	for i := range history {
		if m := &history[i]; m.MessageType == message.EventRequest && (first == nil || m.EnqueuedTimeUtc.Before(first.EnqueuedTimeUtc)) {
			first = m
		}
	}
	if first == nil {
		return nil, nil
	}
	ms := max(0, s.now().Sub(first.EnqueuedTimeUtc).Milliseconds())
	return &ms, nil
}

// redelivery copies r for a scheduled re-send after attempt.
func redelivery(r *received, attempt int) *Redelivery {
	props := restoreTypes(r.d.Properties)
	props[PropThrottleRetryCount] = int32(attempt)
	return &Redelivery{
		Body:          r.d.Body,
		MessageID:     r.messageID,
		SessionID:     r.sessionID,
		CorrelationID: r.d.Broker.CorrelationID,
		ContentType:   r.d.ContentType,
		Subject:       r.d.Subject,
		Properties:    props,
	}
}

func orSelf(s *string) *string {
	if s == nil {
		return tracking.Str(message.Self)
	}
	return s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// attemptOf is the logical attempt: throttleRetries (not negative) plus the
// delivery count (at least 1). Either beyond MaxAttempts makes it
// MaxAttempts+1, the first attempt past the budget, so a huge
// ThrottleRetryCount or DeliveryCount can never wrap the sum into a small
// or negative number that passes the budget check.
func attemptOf(throttleRetries, deliveryCount int) int {
	d := max(1, deliveryCount)
	if throttleRetries > MaxAttempts || d > MaxAttempts {
		return MaxAttempts + 1
	}
	return max(0, throttleRetries) + d
}
