package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/funchost"
	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/servicebus"
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
	Scheduler resolver.Scheduler
}

// newResolverApp builds the Resolver app: one route, Resolver, handled by
// resolver.Service over the tracking store. No request is sent here.
func newResolverApp(cfg *config.Config, d Deps) (*App, error) {
	a := &App{cfg: cfg, log: d.Log, now: d.Now, metrics: &telemetry.Metrics{}, pause: d.Pause}
	if a.pause == nil {
		a.pause = sleepCtx
	}
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
	svc, err := resolver.NewService(resolver.Options{Store: store, Scheduler: sched, Now: d.Now})
	if err != nil {
		return nil, err
	}
	a.resolverSvc = svc

	a.server = funchost.NewServer(d.Log, funchost.Options{
		MaxBytesInFlight: cfg.Host.MaxBodyBytesInFlight,
		Stopping:         a.stopping,
		OnOverload: func(string) {
			a.metrics.Inc(telemetry.Invocations, "outcome", string(resolver.OutcomeOverloaded))
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
func (a *App) buildScheduler() (resolver.Scheduler, error) {
	r := a.cfg.Resolver
	c, err := servicebus.New(servicebus.Options{
		ConnectionString:        r.ConnectionString,
		FullyQualifiedNamespace: r.FullyQualifiedNamespace,
		ManagedIdentityClientID: r.ClientID,
		Retry:                   servicebus.DefaultRetry,
	})
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
// the line.
func (a *App) invokeResolver(ctx context.Context, inv *funchost.Invocation) error {
	start := a.now()
	m, err := funchost.DecodeServiceBus(inv.Body, bindingMessage)
	if err != nil {
		r := resolver.Report{Outcome: resolver.OutcomeMalformed, Err: err, Duration: a.now().Sub(start)}
		a.logResolver(inv, &r, 0)
		return &failure{status: r.Outcome.Spec().Status, err: err}
	}
	d := resolver.Delivery{
		Broker: message.Broker{
			MessageID:     m.MessageID,
			SessionID:     m.SessionID,
			CorrelationID: m.CorrelationID,
			EnqueuedTime:  m.EnqueuedTime,
			DeliveryCount: m.DeliveryCount,
		},
		ContentType: m.ContentType,
		Subject:     m.Subject,
		Properties:  m.ApplicationProperties,
		Body:        m.Body,
	}
	r := a.resolverSvc.Handle(ctx, &d)
	a.logResolver(inv, &r, m.DeliveryCount)
	if r.Outcome.Completes() {
		return nil
	}
	spec := r.Outcome.Spec()
	if spec.Pause {
		a.pauseUnlessStopping(ctx, a.cfg.Retry.Delay(m.DeliveryCount))
	}
	err = r.Err
	if err == nil {
		err = errors.New(string(r.Outcome))
	}
	return &failure{status: spec.Status, err: err}
}

// logResolver writes the invocation's one line: bounded strings, none from
// the message body.
func (a *App) logResolver(inv *funchost.Invocation, r *resolver.Report, deliveryCount int) {
	a.metrics.Inc(telemetry.Invocations, "outcome", string(r.Outcome))
	spec := r.Outcome.Spec()
	ev := a.log.WithLevel(spec.Level)
	if ev == nil {
		return
	}
	ev = ev.Str("function", logsafe.Bound(inv.Function)).
		Str("invocationId", logsafe.Bound(inv.InvocationID)).
		Str("messageId", logsafe.Bound(r.MessageID)).
		Str("sessionId", logsafe.Bound(r.SessionID)).
		Str("eventId", logsafe.Bound(r.EventID)).
		Str("messageType", logsafe.Bound(r.MessageType)).
		Str("endpoint", logsafe.Bound(r.EndpointID)).
		Int("deliveryCount", deliveryCount).
		Int("throttleRetryCount", r.ThrottleRetryCount).
		Str("outcome", string(r.Outcome)).
		Float64("durationMs", float64(r.Duration.Microseconds())/1000)
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
		ev = ev.Str("auditError", logsafe.Bound(r.AuditErr.Error()))
	}
	if r.Err != nil {
		ev = ev.Str("error", logsafe.Bound(r.Err.Error()))
	}
	ev.Msg(spec.Message)
}

// serveTracking shows one tracking row of the in-memory store (local demos
// only): GET /_nimbus/tracking?endpoint=E&event=ID, the most recently
// updated row of the event across sessions; 404 when there is none.
func (a *App) serveTracking(w http.ResponseWriter, r *http.Request) {
	endpoint, event := r.URL.Query().Get("endpoint"), r.URL.Query().Get("event")
	row, err := a.trackingReader.GetEvent(r.Context(), endpoint, event)
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
	account, err := cosmos.NewAccount(cosmos.Config{
		ConnectionString:        c.ConnectionString,
		Endpoint:                c.AccountEndpoint,
		ManagedIdentityClientID: c.ClientID,
		Retry:                   cosmos.DefaultRetry,
	})
	if err != nil {
		return nil, err
	}
	auto := c.AutoCreateContainer
	return cosmostracking.New(account, cosmostracking.Options{
		DatabaseID:              c.DatabaseID,
		AutoCreateContainers:    &auto,
		AllowRelaxedConsistency: c.AllowRelaxedConsistency,
		RelaxAs:                 config.KeyTrackingRelaxed,
		UnresolvedRetentionDays: a.cfg.Tracking.UnresolvedRetentionDays,
		Now:                     a.now,
	})
}
