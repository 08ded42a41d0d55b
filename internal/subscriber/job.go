package subscriber

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/session"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// job is one delivery on its way through the pipeline: what was read of
// it, the inbox keys and session state it was checked against, and the
// report being filled.
type job struct {
	p     *Pipeline
	r     *Report
	d     *Delivery
	in    *message.Inbound
	start time.Time

	ce          *message.CloudEvent
	fromBody    bool
	eventTypeID string
	queueMs     int64
	attempt     Attempt

	// own is the inbox key of the delivery's own identity; nil when the
	// inbox is off or bypassed.
	own *inbox.Key
	// source is the MessageId the event's source delivery had: the
	// InboxMessageId a retry or replayed copy carries, else the delivery's
	// own MessageId. It becomes BlockedByMessageId and the InboxMessageId
	// of what this delivery parks or schedules.
	source string
	// sk is the session-state key; hasSession is false without a session
	// store or a SessionId.
	sk         session.Key
	hasSession bool
	st         session.State
	// replaying: the delivery is a parked copy being replayed by Drain,
	// which owns the replay of the copies behind it.
	replaying bool
}

func (j *job) setInbound(in *message.Inbound) {
	j.in = in
	r := j.r
	j.ce = in.CloudEvent
	// A structured CloudEvent's attributes were read from the body: payload,
	// never logged.
	j.fromBody = j.ce != nil && j.ce.Mode == message.ModeStructured
	r.MessageType = in.Type.String()
	j.eventTypeID = deref(in.EventTypeID)
	if v, ok := in.Property(message.PropEventTypeID); (ok && v != "") || (j.ce != nil && !j.fromBody) {
		r.EventTypeID = j.eventTypeID
	} else {
		// From the body: payload, never logged.
		r.EventTypeFromBody = j.eventTypeID != ""
	}
	if _, ok := in.Property(message.PropEventID); ok || !j.fromBody {
		r.EventID = deref(in.EventID)
	}
	if j.ce != nil {
		r.CloudEvent = string(j.ce.Mode)
	}
	j.queueMs = -1
	if !in.EnqueuedTime.IsZero() {
		j.queueMs = max(j.start.Sub(in.EnqueuedTime).Milliseconds(), 0)
	}
	j.source = deref(in.MessageID)
	if sid := deref(in.SessionID); sid != "" && j.p.o.Sessions != nil {
		j.sk = session.NewKey(j.p.o.EndpointID, sid)
		j.hasSession = j.sk.Check() == nil
	}
}

func (j *job) timings() message.Timings {
	return message.Timings{QueueTimeMs: j.queueMs, ProcessingTimeMs: j.p.o.Now().Sub(j.start).Milliseconds()}
}

func (j *job) eventID() string { return deref(j.in.EventID) }

// ownKey works out the inbox key of the delivery's own identity (the
// CloudEvents source rule included), or records why the inbox is bypassed.
func (j *job) ownKey() {
	p, r := j.p, j.r
	if p.o.Inbox == nil {
		r.Inbox = InboxOff
		return
	}
	id := j.in.MessageID
	if j.ce != nil && p.o.DeduplicateCloudEventsBySource {
		s, reason := inbox.CloudEventMessageID(j.ce.Source, j.ce.ID)
		if reason == inbox.BypassNone {
			reason = inbox.BypassReason(p.o.EndpointID, &s)
		}
		if reason != inbox.BypassNone {
			r.Inbox, r.BypassReason = InboxBypassed, reason
			p.o.Metrics.Inc(telemetry.InboxBypassed, telemetry.TagBypassReason, reason)
			return
		}
		id = &s
	}
	if reason := inbox.BypassReason(p.o.EndpointID, id); reason != inbox.BypassNone {
		r.Inbox, r.BypassReason = InboxBypassed, reason
		p.o.Metrics.Inc(telemetry.InboxBypassed, telemetry.TagBypassReason, reason)
		return
	}
	k := inbox.NewKey(p.o.EndpointID, *id)
	j.own = &k
}

// sourceKey is the inbox key of the stand-in's source MessageId
// (InboxMessageId), when it is usable and differs from the own key.
func (j *job) sourceKey() *inbox.Key {
	src := j.in.InboxMessageID
	if j.own == nil || src == nil || *src == j.own.MessageID ||
		inbox.BypassReason(j.p.o.EndpointID, src) != inbox.BypassNone {
		return nil
	}
	k := inbox.NewKey(j.p.o.EndpointID, *src)
	return &k
}

// lookup runs the inbox checks of keys and, when withState and the
// delivery has a session, the session-state read, all at once: one
// sequential round trip. It returns the first key found recorded, or a
// failure report.
func (j *job) lookup(ctx context.Context, keys []*inbox.Key, withState bool) (dup *inbox.Key, failed bool) {
	p, r := j.p, j.r
	readState := withState && j.hasSession
	n := 0
	for _, k := range keys {
		if k != nil {
			n++
		}
	}
	if n == 0 && !readState {
		return nil, false
	}
	r.RoundTrips++
	type result struct {
		k    *inbox.Key
		seen bool
		err  error
	}
	res := make([]result, len(keys))
	var stErr error
	var wg sync.WaitGroup
	for i, k := range keys {
		if k == nil {
			continue
		}
		r.Checks++
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, span := p.o.Tracer.Start(ctx, spanInboxCheck)
			seen, err := p.o.Inbox.HasProcessed(cctx, *k)
			if err != nil {
				// The span says only what the report says: provider
				// details may carry account names or keys.
				endSpan(span, NewStoreError(inbox.OpCheck, err))
			} else {
				if span.IsRecording() {
					span.SetAttributes(attribute.Bool("nimbus.inbox.duplicate", seen))
				}
				span.End()
			}
			res[i] = result{k: k, seen: seen, err: err}
		}()
	}
	if readState {
		r.StateReads++
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, span := p.o.Tracer.Start(ctx, spanSessionRead)
			j.st, stErr = p.o.Sessions.Read(sctx, j.sk)
			if stErr != nil {
				endSpan(span, &StoreError{Op: "session state read", Class: storeClass(stErr)})
			} else {
				span.End()
			}
		}()
	}
	wg.Wait()
	for _, x := range res {
		if x.k == nil {
			continue
		}
		if x.err != nil {
			p.storeFailed(r, inbox.OpCheck, x.err)
			return nil, true
		}
		if x.seen && dup == nil {
			dup = x.k
		}
	}
	if dup != nil {
		r.Inbox = InboxDuplicate
	} else if n > 0 {
		r.Inbox = InboxNew
	}
	if stErr != nil && (dup == nil || j.attempt != AttemptOriginal) {
		j.sessionFailed(session.OpRead, stErr)
		return nil, true
	}
	return dup, false
}

// readState reads the session state alone (control requests that do not
// touch the inbox).
func (j *job) readState(ctx context.Context) bool {
	_, failed := j.lookup(ctx, nil, true)
	return !failed
}

// sessionFailed reports a session-state store failure: transient, never a
// skip and never a park.
func (j *job) sessionFailed(op string, err error) {
	p, r := j.p, j.r
	p.o.Metrics.Inc(telemetry.InboxOperationFailed, telemetry.TagStoreOperation, "session_"+op)
	r.StoreOp = "session_" + op
	r.Outcome = OutcomeTransientFailure
	if errors.Is(err, context.Canceled) {
		r.Outcome = OutcomeCanceled
	}
	r.Err = &StoreError{Op: "session state " + op, Class: storeClass(err), cause: err}
}

// change applies one transition to the session state (ETag-conditioned,
// re-read on a lost race). It reports false after recording a failure.
func (j *job) change(ctx context.Context, what string, c session.Change) bool {
	if !j.hasSession {
		return true
	}
	p, r := j.p, j.r
	r.RoundTrips++
	wctx, span := p.o.Tracer.Start(ctx, spanSessionWrite)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("nimbus.session.change", what))
	}
	st, wrote, err := session.Apply(wctx, &countingStore{Store: p.o.Sessions, r: r}, j.sk, j.st, 0, c)
	if err != nil && !errors.Is(err, errNotGated) {
		endSpan(span, &StoreError{Op: "session state write", Class: storeClass(err)})
	} else {
		span.End()
	}
	if err != nil {
		if errors.Is(err, errNotGated) {
			j.st = st
			return true
		}
		j.sessionFailed(session.OpWrite, err)
		return false
	}
	if wrote {
		j.st = st
	}
	return true
}

// countingStore counts the reads and writes Apply makes.
type countingStore struct {
	session.Store
	r *Report
}

func (c *countingStore) Read(ctx context.Context, k session.Key) (session.State, error) {
	c.r.StateReads++
	c.r.RoundTrips++
	return c.Store.Read(ctx, k)
}

func (c *countingStore) Write(ctx context.Context, k session.Key, s session.State) (session.State, error) {
	c.r.StateWrites++
	return c.Store.Write(ctx, k, s)
}

// errNotGated stops a park whose fresh state no longer gates the session.
var errNotGated = errors.New("the session is no longer blocked and nothing waits in it")

// block blocks the session by this event (and its source MessageId).
func (j *job) block(ctx context.Context) bool {
	ev, src := j.eventID(), j.source
	if ev == "" || !j.hasSession {
		return true
	}
	ok := j.change(ctx, "block", func(s session.State) (session.State, bool, error) { return s.Block(ev, src) })
	if ok && j.st.BlockedBy(ev) {
		j.r.Blocked = true
	}
	return ok
}

// unblockAndDrain removes this event's block, when it is the one blocking
// the session, and then asks for the replay of whatever waits behind it.
// With onlyIfBlockedByThis false it only asks for the replay (when the
// session is not blocked at all).
func (j *job) unblockAndDrain(ctx context.Context) bool {
	if !j.hasSession {
		return true
	}
	ev := j.eventID()
	if j.st.BlockedBy(ev) {
		now := j.p.o.Now()
		if !j.change(ctx, "unblock", func(s session.State) (session.State, bool, error) {
			if !s.BlockedBy(ev) {
				return s, false, nil
			}
			s, _ = s.Unblock()
			s, _ = s.RequestDrain(now)
			return s, true, nil
		}) {
			return false
		}
		j.r.Unblocked = !j.st.Blocked()
	}
	return j.drainIfWaiting(ctx)
}

// drainIfWaiting sends a replay request when the session is not blocked
// and parked copies wait.
func (j *job) drainIfWaiting(ctx context.Context) bool {
	if !j.hasSession || j.replaying || j.st.Blocked() || j.st.DeferredCount == 0 {
		return true
	}
	return j.send(ctx, message.NewProcessDeferredRequest(j.in), func() { j.r.DrainRequested = true })
}

// send publishes one message to the endpoint topic as its own round trip.
func (j *job) send(ctx context.Context, m *message.Outgoing, onOK func()) bool {
	j.r.RoundTrips++
	return j.sendNoTrip(ctx, m, onOK)
}

func (j *job) sendNoTrip(ctx context.Context, m *message.Outgoing, onOK func()) bool {
	p, r := j.p, j.r
	sctx, cancel := context.WithTimeout(ctx, p.o.SettleTimeout)
	defer cancel()
	r.Sends++
	if err := p.o.Publisher.Publish(sctx, m); err != nil {
		r.Outcome = OutcomePublishFailed
		if sctx.Err() != nil {
			r.Outcome = OutcomeCanceled
		}
		r.Err = fmt.Errorf("send %s: %w", m.Type(), err)
		return false
	}
	if onOK != nil {
		onOK()
	}
	return true
}

// sendAll sends ms concurrently: one round trip. It fails if any send
// fails.
func (j *job) sendAll(ctx context.Context, ms ...*message.Outgoing) bool {
	if len(ms) == 1 {
		return j.send(ctx, ms[0], nil)
	}
	j.r.RoundTrips++
	p, r := j.p, j.r
	sctx, cancel := context.WithTimeout(ctx, p.o.SettleTimeout)
	defer cancel()
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		r.Sends++
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.o.Publisher.Publish(sctx, m)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			r.Outcome = OutcomePublishFailed
			if sctx.Err() != nil {
				r.Outcome = OutcomeCanceled
			}
			r.Err = fmt.Errorf("send %s: %w", ms[i].Type(), err)
			return false
		}
	}
	return true
}

// respond sends the Resolver response and ends the delivery with o.
func (j *job) respond(ctx context.Context, out *message.Outgoing, o Outcome) {
	if j.send(ctx, out, func() { j.r.Published = true }) {
		j.r.Outcome = o
	}
}

// dispatch finds the handler as NimBus's EventHandlerProvider does: no
// type or no handler is Unsupported (answered here); an unreadable body or
// a body that names another type is a permanent failure. A CloudEvent is
// validated first. It returns nil when the delivery has already ended.
func (j *job) dispatch(ctx context.Context) HandlerFunc {
	r := j.r
	h, ok := j.p.o.Handlers.lookup(j.eventTypeID)
	if j.ce != nil {
		err := j.ce.Validate(j.fromBody)
		if err == nil && (j.eventTypeID == "" || !ok) {
			err = j.ce.NoHandlerError(j.fromBody)
		}
		if err != nil {
			r.Outcome, r.Err = OutcomeInvalidCloudEvent, Permanent(err)
			return nil
		}
	}
	if j.eventTypeID == "" {
		j.respond(ctx, message.NewResponse(j.in, message.Unsupported, j.timings(), nil), OutcomeUnsupported)
		return nil
	}
	// A body that is not a MessageContent is unreadable; a readable one
	// whose EventContent is null reaches the handler (NimBus's dispatch),
	// with empty JSON.
	if j.in.Content == nil {
		r.Outcome = OutcomeInvalidMessage
		r.Err = Permanent(errors.New("message body has no readable EventContent"))
		dl := message.NewUnreadableBodyDeadLetter()
		r.deadLetter = &dl
		return nil
	}
	if ec := j.in.Content.EventContent; ec != nil && ec.EventTypeID != nil && *ec.EventTypeID != "" && *ec.EventTypeID != j.eventTypeID {
		bt := ec.EventTypeID
		r.Outcome = OutcomeInvalidMessage
		// The body's value is payload: say only that it differs (the
		// Resolver's notice carries NimBus's text, which quotes it).
		r.Err = Permanent(errors.New("message EventTypeId mismatch: the body's EventContent.EventTypeId differs from the EventTypeId property"))
		dl := message.NewTypeMismatchDeadLetter(j.eventTypeID, *bt)
		r.deadLetter = &dl
		return nil
	}
	if !ok {
		j.respond(ctx, message.NewResponse(j.in, message.Unsupported, j.timings(), nil), OutcomeUnsupported)
		return nil
	}
	return h
}

// ran is what the handler did.
type ran struct {
	res  Result
	kind FailureKind
	err  error
	// canceled: the invocation ended while the handler ran.
	canceled bool
}

// run invokes h for the event. A panic is a failed event with the panic's
// text.
func (j *job) run(ctx context.Context, h HandlerFunc) ran {
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
	hctx, span := j.p.o.Tracer.Start(ctx, spanHandler)
	if span.IsRecording() {
		span.SetAttributes(attribute.String(attrEventType, logsafe.Bound(j.eventTypeID)),
			attribute.String("nimbus.attempt", string(j.attempt)))
	}
	res, err := j.p.invoke(hctx, h, ev, r)
	endSpan(span, err)
	r.HandlerRan = true
	out := ran{res: res, err: err}
	if err != nil {
		out.kind = KindOf(err)
		out.canceled = ctx.Err() != nil && errors.Is(err, ctx.Err())
	}
	return out
}

// settleCtx is the context of everything after a successful handler: it
// runs to the end even if the invocation is cancelled meanwhile.
func (j *job) settleCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), j.p.o.SettleTimeout)
}

// record writes keys in order (a stand-in's source first, its own last).
func (j *job) record(ctx context.Context, keys ...*inbox.Key) bool {
	for _, k := range keys {
		if k == nil {
			continue
		}
		j.r.RoundTrips++
		rctx, span := j.p.o.Tracer.Start(ctx, spanInboxRecord)
		if err := j.p.record(rctx, j.r, *k); err != nil {
			j.p.storeFailed(j.r, inbox.OpRecord, err)
			endSpan(span, j.r.Err)
			return false
		}
		span.End()
	}
	return true
}

// ended handles the handler failures every entry point treats alike:
// cancellation, Transient and Permanent. It returns true when the delivery
// ended here.
func (j *job) ended(h ran) bool {
	r := j.r
	switch {
	case h.err == nil:
		return false
	case h.canceled:
		r.Outcome, r.Err = OutcomeCanceled, h.err
	case h.kind == KindTransient:
		r.Outcome, r.Err = OutcomeHandlerFailed, h.err
	case h.kind == KindPermanent:
		r.Outcome, r.Err = OutcomePermanentFailure, h.err
	default:
		return false
	}
	return true
}

// failed reports a failed event: ErrorResponse, and a RetryRequest when a
// policy applies and retry is true. The caller has blocked the session
// (or chose not to).
func (j *job) failed(ctx context.Context, err error, retry bool) {
	r := j.r
	text, typ := errorText(err), ErrorType(err)
	r.Err = err
	msgs := []*message.Outgoing{message.NewErrorResponse(j.in, text, typ, j.timings())}
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
		if j.send(ctx, msgs[0], func() { r.Published = true }) {
			r.Outcome = OutcomeEventFailed
		}
		return
	}
	// The ErrorResponse and the scheduled RetryRequest go at once.
	retryMsg := message.NewRetryRequest(j.in, j.d.Body, j.source)
	r.RoundTrips++
	var wg sync.WaitGroup
	var schedErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		sctx, cancel := context.WithTimeout(ctx, j.p.o.SettleTimeout)
		defer cancel()
		schedErr = j.p.o.Scheduler.Schedule(sctx, retryMsg, at)
	}()
	ok := j.sendNoTrip(ctx, msgs[0], func() { r.Published = true })
	wg.Wait()
	r.Sends++
	if !ok {
		r.Err = fmt.Errorf("%w (the event failed: %w)", r.Err, err)
		return
	}
	if schedErr != nil {
		r.Outcome = OutcomePublishFailed
		r.Err = fmt.Errorf("schedule RetryRequest: %w", schedErr)
		return
	}
	r.RetryScheduled = true
	r.Outcome = OutcomeEventFailed
}

// discarded reports a discarded event: a SkipResponse with NimBus's
// classifier text.
func (j *job) discarded(ctx context.Context, err error) {
	out := message.NewDiscardResponse(j.in, ErrorType(err), errorText(err), discardClassifier, j.timings())
	j.r.Err = err
	j.respond(ctx, out, OutcomeDiscarded)
}

// discardClassifier names what classified a failure as Discard in the
// SkipResponse text ("… Classified as Discard by {classifier}.").
const discardClassifier = "subscriber.Discard"

// errorText is the ErrorText NimBus reports for a failure: the message of
// the handler's own error (without the kind marker).
func errorText(err error) string {
	var he *HandlerError
	if errors.As(err, &he) {
		err = he.Err
	}
	return err.Error()
}

// ErrorType is the ErrorType reported for a failure: the error's own
// ErrorType() string when it has one, "Panic" for a handler panic, "Error"
// for the standard library's plain and wrapping errors, and otherwise the
// name of its Go type (without package or pointer), like NimBus's
// exception type name.
func ErrorType(err error) string {
	var named interface{ ErrorType() string }
	if errors.As(err, &named) {
		if s := named.ErrorType(); s != "" {
			return s
		}
	}
	var he *HandlerError
	if errors.As(err, &he) {
		err = he.Err
	}
	var pe *PanicError
	if errors.As(err, &pe) {
		return "Panic"
	}
	name := reflect.TypeOf(err).String()
	switch name {
	case "*errors.errorString", "*fmt.wrapError", "*fmt.wrapErrors", "*errors.joinError":
		return "Error"
	}
	name = strings.TrimLeft(name, "*")
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	return name
}

// PanicError is a handler panic, reported as a failed event.
type PanicError struct {
	Value any
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// UnsupportedTypeError is a message type this subscriber does not handle on
// its subscription (a response, ProcessDeferredRequest, a legacy
// ContinuationRequest): it is dead-lettered, as NimBus's HandleDefault does.
type UnsupportedTypeError struct{ Type string }

func (e *UnsupportedTypeError) Error() string {
	return fmt.Sprintf("Unsupported MessageType: '%s'.", e.Type)
}

// UnauthorizedError is a Manager request (resubmission, skip, handoff
// settlement) whose From is not the Manager: dead-lettered, as NimBus does.
type UnauthorizedError struct{ Type string }

func (e *UnauthorizedError) Error() string {
	return fmt.Sprintf("Only %s is authorized to send %s messages.", message.ManagerID, e.Type)
}

// authorized checks that a Manager request comes from the Manager
// (case-insensitively); otherwise the delivery takes the dead-letter path.
func (j *job) authorized() bool {
	if strings.EqualFold(j.in.From, message.ManagerID) {
		return true
	}
	j.r.Outcome = OutcomeUnauthorized
	j.r.Err = &UnauthorizedError{Type: j.in.Type.String()}
	dl := message.NewUnauthorizedDeadLetter(j.in.Type)
	j.r.deadLetter = &dl
	return false
}

func storeClass(err error) string {
	var oe OperatorError
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(err, &oe):
		return "misconfigured: " + oe.OperatorMessage()
	case session.IsConflict(err):
		return "lost every race for the session state"
	}
	return "unavailable"
}

// eventJSON is the domain event's JSON: "" when the body's EventContent or
// its EventJson is null.
func eventJSON(c *message.Content) string {
	if c == nil || c.EventContent == nil {
		return ""
	}
	return deref(c.EventContent.EventJSON)
}

// dispatchAndRun finds the handler and runs it. ok is false when the
// delivery already ended (Unsupported, invalid, or a cancellation,
// Transient or Permanent failure); otherwise the caller settles the
// outcome under sctx (see settleCtx) and calls cancel.
func (j *job) dispatchAndRun(ctx context.Context) (out ran, sctx context.Context, cancel context.CancelFunc, ok bool) {
	h := j.dispatch(ctx)
	if h == nil {
		return ran{}, nil, nil, false
	}
	out = j.run(ctx, h)
	if j.ended(out) {
		return out, nil, nil, false
	}
	sctx, cancel = j.settleCtx(ctx)
	return out, sctx, cancel, true
}
