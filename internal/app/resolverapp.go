package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/funchost"
	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/resolverapp"
	"github.com/nimbus-go/functions-subscriber/internal/servicebus"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
	"github.com/nimbus-go/functions-subscriber/internal/tracking"
	"github.com/nimbus-go/functions-subscriber/internal/tracking/cosmostracking"
)

// FuncResolver is the Resolver app's one function.
const FuncResolver = "Resolver"

// ResolverDeps are what the Resolver app takes besides configuration; tests
// set them to replace the configured store and scheduler.
type ResolverDeps struct {
	// Tracking, when set, replaces the configured tracking store.
	Tracking tracking.Writer
	// Scheduler, when set, replaces the Service Bus scheduler of re-sends.
	Scheduler resolverapp.Scheduler
}

// newResolverApp builds the Resolver app: one route, Resolver, handled by
// resolverapp.Service over the tracking store. No request is sent here.
func newResolverApp(cfg *config.Config, d Deps) (*App, error) {
	a := newBase(cfg, d)
	a.spanName = "process " + resolverapp.Topic
	a.charged = cfg.Tracking.Store == config.TrackingCosmos
	a.stopping, a.stop = context.WithCancel(context.Background())

	store := d.Resolver.Tracking
	if store == nil {
		var err error
		if store, err = a.buildTracking(); err != nil {
			return nil, err
		}
	}
	if r, ok := store.(tracking.Reader); ok && cfg.Tracking.Store == config.TrackingInMemory {
		a.trackingReader = r
	}
	sched := d.Resolver.Scheduler
	if sched == nil {
		var err error
		if sched, err = a.buildScheduler(); err != nil {
			return nil, err
		}
	}
	svc, err := resolverapp.NewService(resolverapp.Options{Store: store, Scheduler: sched, Now: d.Now, Tracer: a.tracer})
	if err != nil {
		return nil, err
	}
	a.resolverSvc = svc

	a.server = funchost.NewServer(d.Log, funchost.Options{
		MaxBytesInFlight: cfg.Host.MaxBodyBytesInFlight,
		Stopping:         a.stopping,
		OnOverload: func(function string) {
			a.metrics.Inc(telemetry.Invocations, telemetry.TagOutcome, string(resolverapp.OutcomeOverloaded))
			a.stderrLine("warning: " + logsafe.Bound(function) + " invocation answered 503: " + resolverapp.OutcomeOverloaded.Spec().Message)
		},
	})
	a.server.Handle(FuncResolver, a.invokeResolver)
	a.server.HandleGet("/_nimbus/metrics", a.metrics)
	if a.trackingReader != nil {
		a.server.HandleGet("/_nimbus/tracking", http.HandlerFunc(a.serveTracking))
	}
	return a, nil
}

func (a *App) buildTracking() (tracking.Writer, error) {
	switch a.cfg.Tracking.Store {
	case config.TrackingInMemory:
		return &tracking.Memory{}, nil
	case config.TrackingCosmos:
		return a.buildCosmosTracking()
	}
	return nil, fmt.Errorf("app: tracking store %q is not available", a.cfg.Tracking.Store)
}

// buildScheduler creates the Service Bus client of scheduled re-sends on
// the connection the Resolver trigger uses. No connection is made here.
func (a *App) buildScheduler() (resolverapp.Scheduler, error) {
	c, err := a.serviceBusClient()
	if err != nil {
		return nil, err
	}
	s, err := servicebus.NewResolverScheduler(c)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, c.Close)
	return s, nil
}

// invokeResolver handles one Resolver invocation and logs exactly one line
// for it; the Resolver's outcome table decides the status, the pause and
// the line. As for the endpoint, the invocation's span continues the
// message's trace and the Cosmos request charge of its store work is
// summed on ctx.
func (a *App) invokeResolver(ctx context.Context, inv *funchost.Invocation) error {
	ctx, dl, m, err := a.beginDelivery(ctx, inv)
	defer dl.span.End()
	if err != nil {
		r := resolverapp.Report{Outcome: resolverapp.OutcomeMalformed, Err: err, Duration: a.now().Sub(dl.start)}
		a.finishResolver(dl.span, inv, &r, 0, dl.charge, dl.hasParent)
		return &failure{status: r.Outcome.Spec().Status, err: err}
	}
	d := resolverapp.Delivery{
		Broker:      brokerOf(m),
		ContentType: m.ContentType,
		Subject:     m.Subject,
		Properties:  m.ApplicationProperties,
		Body:        m.Body,
	}
	r := a.resolverSvc.Handle(ctx, &d)
	a.finishResolver(dl.span, inv, &r, m.DeliveryCount, dl.charge, dl.hasParent)
	return a.answer(ctx, r.Outcome.Spec(), string(r.Outcome), r.Err, m.DeliveryCount)
}

// finishResolver is finishInvocation for the Resolver: metrics, span
// attributes, the JSON line, and the Logs summary (2xx) or the stderr line
// (failure). Nothing on them comes from the message body or content.
func (a *App) finishResolver(span trace.Span, inv *funchost.Invocation, r *resolverapp.Report, deliveryCount int, charge *telemetry.Charge, hasParent bool) {
	// Every id below is logged, in up to three places: bound them once.
	r.MessageID, r.SessionID = logsafe.Bound(r.MessageID), logsafe.Bound(r.SessionID)
	r.EventID, r.EndpointID = logsafe.Bound(r.EventID), logsafe.Bound(r.EndpointID)
	r.MessageType = logsafe.Bound(r.MessageType)
	outcome := string(r.Outcome)
	a.recordInvocation(outcome, r.Duration, charge)
	endDeliverySpan(span, deliverySpan{
		destination: resolverapp.Topic, messageID: r.MessageID, sessionID: r.SessionID, deliveryCount: deliveryCount,
		hasParent: hasParent, outcome: outcome, completes: r.Outcome.Completes(), charge: charge,
	},
		attribute.String("nimbus.event.id", r.EventID),
		attribute.String("nimbus.message.type", r.MessageType),
		attribute.String("nimbus.endpoint", r.EndpointID))
	a.logResolver(inv, r, deliveryCount, charge)
	if r.Outcome.Completes() {
		a.resolverLogs(inv, r, deliveryCount, charge)
		return
	}
	spec := r.Outcome.Spec()
	a.writeFailureLine(inv, failedInvocation{
		status: spec.Status, level: spec.Level, message: spec.Message, outcome: outcome,
		endpoint: r.EndpointID, messageID: r.MessageID, sessionID: r.SessionID,
		deliveryCount: deliveryCount, storeOp: r.StoreOp, err: safeTrackingError(r),
	})
}

// safeTrackingError is r.Err for every log line: a store failure is named
// by its operation and kind only (plus an operator's guidance, such as a
// relaxed account's fix), never by the provider's text, which names the
// account and may echo ids.
func safeTrackingError(r *resolverapp.Report) error {
	if r.StoreOp == "" || r.Err == nil {
		return r.Err
	}
	kind := "unclassified"
	var se *tracking.StoreError
	var oe subscriber.OperatorError
	switch {
	case errors.Is(r.Err, context.Canceled):
		kind = "canceled"
	case errors.Is(r.Err, context.DeadlineExceeded):
		kind = "timeout"
	case errors.As(r.Err, &oe):
		kind = "misconfigured: " + oe.OperatorMessage()
	case errors.As(r.Err, &se):
		kind = se.Kind.String()
	}
	msg := "tracking store operation " + r.StoreOp + " failed (" + kind + ")"
	if r.Outcome == resolverapp.OutcomeRescheduleFailed {
		msg += " and scheduling the re-send failed"
	}
	return errors.New(msg)
}

// logResolver writes the invocation's one line: bounded strings (the ids
// by finishResolver), none from the message body.
func (a *App) logResolver(inv *funchost.Invocation, r *resolverapp.Report, deliveryCount int, charge *telemetry.Charge) {
	spec := r.Outcome.Spec()
	ev := a.log.WithLevel(spec.Level)
	if ev == nil {
		return
	}
	ev = ev.Str("function", logsafe.Bound(inv.Function)).
		Str("invocationId", logsafe.Bound(inv.InvocationID)).
		Str("messageId", r.MessageID).
		Str("sessionId", r.SessionID).
		Str("eventId", r.EventID).
		Str("messageType", r.MessageType).
		Str("endpoint", r.EndpointID).
		Int("deliveryCount", deliveryCount).
		Int("throttleRetryCount", r.ThrottleRetryCount).
		Str("outcome", string(r.Outcome)).
		Float64("durationMs", float64(r.Duration.Microseconds())/1000)
	if a.charged {
		ev = ev.Float64("requestCharge", charge.RequestUnits()).Int64("cosmosRequests", charge.Requests())
	}
	if r.Status != "" {
		ev = ev.Str("status", r.Status)
	}
	if r.StoreOp != "" {
		ev = ev.Str("operation", r.StoreOp)
	}
	if r.StoreReason != "" {
		ev = ev.Str("storeReason", r.StoreReason).Int("attempt", r.Attempt)
	}
	if r.RetryIn > 0 {
		ev = ev.Dur("retryIn", r.RetryIn).Bool("retryAfterFromStore", r.RetryAfterUsed)
	}
	if r.QuickRetries > 0 {
		ev = ev.Int("quickRetries", r.QuickRetries)
	}
	if r.WallClockOverride {
		ev = ev.Bool("handoffWallClock", true)
	}
	if r.AuditErr != nil {
		ev = ev.Str("auditError", logsafe.Bound(safeTrackingError(&resolverapp.Report{StoreOp: "StoreMessageAudit", Err: r.AuditErr}).Error()))
	}
	if err := safeTrackingError(r); err != nil {
		ev = ev.Str("error", logsafe.Bound(err.Error()))
	}
	ev.Msg(spec.Message)
}

// resolverLogs puts the summary of a completed Resolver invocation, and its
// warnings, in the response's Logs: ids, labels and figures only, each
// bounded, never the message body or content (tracking rows carry it).
func (a *App) resolverLogs(inv *funchost.Invocation, r *resolverapp.Report, deliveryCount int, charge *telemetry.Charge) {
	b := make([]byte, 0, 512)
	b = append(b, r.Outcome.Spec().Message...)
	b = append(b, ':')
	b = appendField(b, "outcome", string(r.Outcome))
	b = appendField(b, "messageId", r.MessageID)
	b = appendField(b, "sessionId", r.SessionID)
	if r.Outcome != resolverapp.OutcomeHeartbeat {
		b = appendField(b, "eventId", r.EventID)
		b = appendField(b, "messageType", r.MessageType)
		b = appendField(b, "endpoint", r.EndpointID)
	}
	if r.Status != "" {
		b = appendField(b, "status", r.Status)
	}
	b = append(b, " deliveryCount="...)
	b = strconv.AppendInt(b, int64(deliveryCount), 10)
	b = append(b, " throttleRetryCount="...)
	b = strconv.AppendInt(b, int64(r.ThrottleRetryCount), 10)
	b = append(b, " durationMs="...)
	b = appendMillis(b, r.Duration.Microseconds())
	b = a.appendCharge(b, charge)
	inv.Log(string(b))
	switch r.Outcome {
	case resolverapp.OutcomeStale:
		inv.Log("warning: stale copy of messageId=" + r.MessageID + " refused: the tracking row of eventId=" + r.EventID + " already holds a later state; its history was written")
	case resolverapp.OutcomeRescheduled:
		inv.Log("warning: the tracking store failed (" + r.StoreReason + ", operation=" + r.StoreOp + ", attempt=" + strconv.Itoa(r.Attempt) +
			"): a copy of messageId=" + r.MessageID + " is scheduled on the Resolver topic in " + r.RetryIn.String() + ": " + safeTrackingError(r).Error())
	}
	if r.QuickRetries > 0 {
		inv.Log("warning: the tracking store write was retried " + strconv.Itoa(r.QuickRetries) + " time(s) within the invocation; the store was failing")
	}
	if r.AuditErr != nil {
		inv.Log("warning: the Comment audit of the stale copy failed (best effort; the message completed): " +
			safeTrackingError(&resolverapp.Report{StoreOp: "StoreMessageAudit", Err: r.AuditErr}).Error())
	}
}

// serveTracking shows one tracking row of the in-memory store (local demos
// only): GET /_nimbus/tracking?endpoint=E&event=ID, the most recently
// updated row of the event across sessions; 404 when there is none.
func (a *App) serveTracking(w http.ResponseWriter, r *http.Request) {
	endpoint, event := r.URL.Query().Get("endpoint"), r.URL.Query().Get("event")
	row, err := a.trackingReader.GetEvent(r.Context(), tracking.EventKey{EndpointID: endpoint, EventID: event})
	switch {
	case err != nil:
		http.Error(w, logsafe.Bound(err.Error()), http.StatusBadRequest)
		return
	case row == nil:
		http.Error(w, "no tracking row", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(row)
}

// buildCosmosTracking creates the Cosmos tracking store. No request is sent
// here: the consistency check and the containers' get-or-create run on
// first use.
func (a *App) buildCosmosTracking() (tracking.Writer, error) {
	c := a.cfg.Tracking.Cosmos
	account, err := a.cosmosAccount(c)
	if err != nil {
		return nil, err
	}
	auto := c.AutoCreateContainer
	return cosmostracking.New(account, cosmostracking.Options{
		StoreOptions: cosmos.StoreOptions{
			DatabaseID:              c.DatabaseID,
			AutoCreateContainer:     &auto,
			AllowRelaxedConsistency: c.AllowRelaxedConsistency,
			RelaxAs:                 config.KeyTrackingRelaxed,
			Now:                     a.now,
		},
		UnresolvedRetentionDays: a.cfg.Tracking.UnresolvedRetentionDays,
	})
}
