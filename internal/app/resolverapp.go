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
	"github.com/nimbus-go/functions-subscriber/internal/storeerr"
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

// resolverApp is the Resolver's custom handler: one route, Resolver,
// handled by resolverapp.Service over the tracking store.
type resolverApp struct {
	*host
	svc *resolverapp.Service
	// trackingReader serves /_nimbus/tracking when the tracking store is in
	// memory.
	trackingReader tracking.Reader
}

// newResolverApp builds the Resolver app. No request is sent here.
func newResolverApp(cfg *config.Config, d Deps) (*resolverApp, error) {
	a := &resolverApp{host: newHost(cfg, d, "process "+resolverapp.Topic, cfg.Tracking.Store == config.TrackingCosmos)}

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
	svc, err := resolverapp.NewService(resolverapp.Options{Store: store, Scheduler: sched, Now: a.now, Pause: a.pause, Tracer: a.tracer})
	if err != nil {
		return nil, err
	}
	a.svc = svc

	a.serve(string(resolverapp.OutcomeOverloaded), resolverapp.OutcomeOverloaded.Spec())
	a.server.Handle(FuncResolver, a.invokeResolver)
	if a.trackingReader != nil {
		a.server.HandleGet("/_nimbus/tracking", http.HandlerFunc(a.serveTracking))
	}
	return a, nil
}

func (a *resolverApp) buildTracking() (tracking.Writer, error) {
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
func (a *resolverApp) buildScheduler() (resolverapp.Scheduler, error) {
	c, err := a.serviceBusClient()
	if err != nil {
		return nil, err
	}
	s, err := servicebus.NewResolverScheduler(c, a.tp)
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
func (a *resolverApp) invokeResolver(ctx context.Context, inv *funchost.Invocation) error {
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
	r := a.svc.Handle(ctx, &d)
	a.finishResolver(dl.span, inv, &r, m.DeliveryCount, dl.charge, dl.hasParent)
	return a.answer(ctx, r.Outcome.Spec(), string(r.Outcome), r.Err, m.DeliveryCount)
}

// finishResolver is finishInvocation for the Resolver: metrics, span
// attributes, the JSON line, and the Logs summary (2xx) or the stderr line
// (failure). Nothing on them comes from the message body or content.
func (a *resolverApp) finishResolver(span trace.Span, inv *funchost.Invocation, r *resolverapp.Report, deliveryCount int, charge *telemetry.Charge, hasParent bool) {
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
	kind := storeerr.Class(r.Err, trackingKind)
	msg := "tracking store operation " + r.StoreOp + " failed (" + kind + ")"
	if r.Outcome == resolverapp.OutcomeRescheduleFailed {
		msg += " and scheduling the re-send failed"
	}
	return errors.New(msg)
}

// trackingKind is the class of a tracking-store failure that is not a
// cancellation or misconfiguration: the store's failure kind, when it gave
// one.
func trackingKind(err error) string {
	var se *tracking.StoreError
	if errors.As(err, &se) {
		return se.Kind.String()
	}
	return "unclassified"
}

// logResolver writes the invocation's one line: bounded strings (the ids
// by finishResolver), none from the message body.
func (a *resolverApp) logResolver(inv *funchost.Invocation, r *resolverapp.Report, deliveryCount int, charge *telemetry.Charge) {
	spec := r.Outcome.Spec()
	ev := a.invocationLine(spec.Level, inv)
	if ev == nil {
		return
	}
	ev = ev.Str("messageId", r.MessageID).
		Str("sessionId", r.SessionID).
		Str("eventId", r.EventID).
		Str("messageType", r.MessageType).
		Str("endpoint", r.EndpointID).
		Int("deliveryCount", deliveryCount).
		Int("throttleRetryCount", r.ThrottleRetryCount).
		Str("outcome", string(r.Outcome)).
		Float64("durationMs", float64(r.Duration.Microseconds())/1000)
	ev = a.withCharge(ev, charge)
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
func (a *resolverApp) resolverLogs(inv *funchost.Invocation, r *resolverapp.Report, deliveryCount int, charge *telemetry.Charge) {
	fields := make([]field, 0, 9)
	fields = append(fields, field{"outcome", string(r.Outcome)}, field{"messageId", r.MessageID}, field{"sessionId", r.SessionID})
	if r.Outcome != resolverapp.OutcomeHeartbeat {
		fields = append(fields, field{"eventId", r.EventID}, field{"messageType", r.MessageType}, field{"endpoint", r.EndpointID})
	}
	if r.Status != "" {
		fields = append(fields, field{"status", r.Status})
	}
	fields = append(fields, field{"deliveryCount", strconv.Itoa(deliveryCount)}, field{"throttleRetryCount", strconv.Itoa(r.ThrottleRetryCount)})
	a.logSummary(inv, r.Outcome.Spec().Message, r.Duration, charge, fields...)
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
func (a *resolverApp) serveTracking(w http.ResponseWriter, r *http.Request) {
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
func (a *resolverApp) buildCosmosTracking() (tracking.Writer, error) {
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
