// Package app composes the custom handler: configuration, inbox store,
// Resolver publisher, subscriber pipeline and the function routes. main
// reads the environment and calls New; tests build the same App with
// in-process dependencies.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/funchost"
	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/resolverapp"
	"github.com/nimbus-go/functions-subscriber/internal/servicebus"
	sbdeferred "github.com/nimbus-go/functions-subscriber/internal/servicebus/deferred"
	"github.com/nimbus-go/functions-subscriber/internal/session"
	"github.com/nimbus-go/functions-subscriber/internal/sleep"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
	"github.com/nimbus-go/functions-subscriber/internal/tracking"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// Function names: each is a folder under functions/ and a route here.
const (
	FuncSubscriber   = "Subscriber"
	FuncInboxCleanup = "InboxCleanup"
	// FuncCloudEventsIngress drains the CloudEvents ingress topic's
	// subscription; it runs the same pipeline as FuncSubscriber.
	FuncCloudEventsIngress = "CloudEventsIngress"
)

// Binding names in the function.json files.
const (
	bindingMessage = "message"
	bindingTimer   = "timer"
)

// Deps are what the caller provides besides configuration.
type Deps struct {
	// Handlers are the application's event handlers. Required.
	Handlers *subscriber.Registry
	// Log is the process logger.
	Log zerolog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Store, when set, replaces the configured inbox store (tests).
	Store inbox.Store
	// Publisher, when set, replaces the configured Resolver sink (tests).
	Publisher resolver.Publisher
	// Sessions, when set, replaces the configured session-state store
	// (tests).
	Sessions session.Store
	// Txn, when set, replaces the store of the transactional handlers'
	// containers (tests).
	Txn txn.Store
	// Deferred, when set, replaces the Deferred subscription the
	// DeferredProcessor replays from (tests).
	Deferred subscriber.Deferred
	// OnDuplicateDetected is the application's duplicate hook.
	OnDuplicateDetected func(ctx context.Context, d subscriber.DuplicateInfo) error
	// Version is reported in heartbeats and logs.
	Version string
	// Pause, when set, replaces the wait before a transient failure is
	// answered (tests).
	Pause func(ctx context.Context, d time.Duration)
	// Resolver holds the Resolver app's replacements (tests).
	Resolver ResolverDeps
	// TracerProvider starts every span (the invocation's, its steps', the
	// sends' and azcosmos's); nil means the global provider.
	TracerProvider trace.TracerProvider
	// Metrics are the process's instruments; nil means a set of its own
	// that is not exported (still served at /_nimbus/metrics).
	Metrics *telemetry.Metrics
	// Stderr receives one line per failing invocation, worded so the
	// Functions host logs it at Error (or Warning) level: the host ignores
	// the Logs of a non-2xx answer. nil discards.
	Stderr io.Writer
}

// App is the composed custom handler.
type App struct {
	cfg      *config.Config
	log      zerolog.Logger
	now      func() time.Time
	server   *funchost.Server
	pipeline *subscriber.Pipeline
	store    inbox.Store
	metrics  *telemetry.Metrics
	memory   *resolver.Memory
	closers  []func(context.Context) error
	pause    func(ctx context.Context, d time.Duration)
	tracer   trace.Tracer
	// charged: the inbox (in the Resolver app, the tracking store) is on
	// Cosmos, whose request charges are summed per invocation.
	charged  bool
	tp       trace.TracerProvider
	spanName string
	// cleanupSpanName names the InboxCleanup invocation's span.
	cleanupSpanName string
	stderrMu        sync.Mutex
	stderr          io.Writer
	// stopping is cancelled when shutdown begins: background work such as a
	// cleanup run stops at once, while in-flight deliveries finish.
	stopping context.Context
	stop     context.CancelFunc
	// account is the inbox's Cosmos account, shared by the endpoint app's
	// stores; sbClient the Service Bus client of the Resolver publisher.
	account  *cosmos.Account
	sbClient *servicebus.Client
	// txnMemory is the in-memory store of the transactional handlers'
	// containers (nil when they are in Cosmos), and txnTargets those
	// containers.
	txnMemory  *txn.Memory
	txnTargets []txn.Target
	// The Resolver app (resolverapp.go).
	resolverSvc    *resolverapp.Service
	trackingReader tracking.Reader
}

// New builds the app. It performs no network I/O: Azure clients are
// created lazily on first use, so the host's readiness probe is answered at
// once.
func New(cfg *config.Config, d Deps) (*App, error) {
	if d.Now == nil {
		d.Now = time.Now
	}
	if cfg.App == config.AppResolver {
		return newResolverApp(cfg, d)
	}
	if d.Handlers == nil {
		return nil, errors.New("app: no handler registry")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	a := newBase(cfg, d)
	a.spanName = "process " + cfg.Endpoint
	a.cleanupSpanName = "nimbus.inbox.cleanup " + cfg.Endpoint
	a.charged = cfg.Inbox.Enabled && cfg.Inbox.Store == config.StoreCosmos
	a.stopping, a.stop = context.WithCancel(context.Background())

	var err error
	a.store = d.Store
	if a.store == nil && cfg.Inbox.Enabled {
		if a.store, err = a.buildStore(); err != nil {
			return nil, err
		}
	}
	if !cfg.Inbox.Enabled {
		a.store = nil
	}
	pub := d.Publisher
	if pub == nil {
		if pub, err = a.buildPublisher(); err != nil {
			return nil, err
		}
	}
	if m, ok := pub.(*resolver.Memory); ok {
		a.memory = m
	}
	sessions := d.Sessions
	if sessions == nil {
		if sessions, err = a.buildSessions(); err != nil {
			return nil, err
		}
	}
	deferred := d.Deferred
	switch {
	case deferred != nil:
	case a.memory != nil:
		deferred = newMemDeferred(a.memory)
	case a.sbClient != nil:
		deferred = sbdeferred.New(a.sbClient, cfg.Endpoint)
	}
	txStore := d.Txn
	if txStore == nil {
		if txStore, err = a.buildTxn(d.Handlers); err != nil {
			return nil, err
		}
	}
	if m, ok := txStore.(*txn.Memory); ok {
		a.txnMemory = m
	}
	a.txnTargets = d.Handlers.Targets()
	scheduler, _ := pub.(subscriber.Scheduler)
	var policies subscriber.RetryPolicies
	if cfg.RetryPolicies != nil && !cfg.RetryPolicies.Empty() {
		policies = retryPolicies{set: cfg.RetryPolicies}
	}
	a.pipeline, err = subscriber.New(subscriber.Options{
		EndpointID:          cfg.Endpoint,
		Inbox:               a.store,
		Txn:                 txStore,
		MarkerRetention:     cfg.Inbox.Retention,
		Publisher:           pub,
		Scheduler:           scheduler,
		RetryPolicies:       policies,
		Sessions:            sessions,
		Deferred:            deferred,
		MaxDeliveryCount:    cfg.Session.MaxDeliveryCount,
		ReplayBudget:        cfg.Session.ReplayBudget,
		Handlers:            d.Handlers,
		OnDuplicateDetected: d.OnDuplicateDetected,
		Metrics:             a.metrics,
		Tracer:              a.tracer,
		Log:                 d.Log,
		Now:                 d.Now,
		Version:             d.Version,

		CloudEvents:                    cloudEventOptions(cfg.CloudEvents),
		DeduplicateCloudEventsBySource: cfg.CloudEvents.Enabled && cfg.CloudEvents.Deduplication == config.DedupSourceAndID,
	})
	if err != nil {
		return nil, err
	}

	a.server = funchost.NewServer(d.Log, funchost.Options{
		MaxBytesInFlight: cfg.Host.MaxBodyBytesInFlight,
		Stopping:         a.stopping,
		OnOverload: func(function string) {
			a.metrics.Inc(telemetry.Invocations, telemetry.TagOutcome, string(subscriber.OutcomeOverloaded))
			a.stderrLine("warning: " + logsafe.Bound(function) + " invocation answered 503: " + subscriber.OutcomeOverloaded.Spec().Message)
		},
	})
	a.server.Handle(FuncSubscriber, a.invokeSubscriber)
	a.server.Handle(FuncInboxCleanup, a.invokeCleanup)
	a.server.Handle(FuncCloudEventsIngress, a.invokeSubscriber)
	a.server.Handle(FuncDeferredProcessor, a.invokeDeferredProcessor)
	a.server.HandleGet("/_nimbus/metrics", a.metrics)
	if a.memory != nil {
		a.server.HandleGet("/_nimbus/resolver", http.HandlerFunc(a.serveMemorySink))
	}
	if a.txnMemory != nil {
		a.server.HandleGet("/_nimbus/txn", http.HandlerFunc(a.serveTxnDocuments))
	}
	return a, nil
}

// newBase builds what both apps share: clock, pause, instruments, tracer
// and stderr.
func newBase(cfg *config.Config, d Deps) *App {
	a := &App{cfg: cfg, log: d.Log, now: d.Now, metrics: d.Metrics, pause: d.Pause, tp: d.TracerProvider, stderr: d.Stderr}
	if a.pause == nil {
		a.pause = sleep.For
	}
	if a.metrics == nil {
		a.metrics = telemetry.NewMetrics(telemetry.MetricsOptions{})
	}
	if a.tp == nil {
		a.tp = otel.GetTracerProvider()
	}
	if a.stderr == nil {
		a.stderr = io.Discard
	}
	a.tracer = a.tp.Tracer(telemetry.TracerName)
	return a
}

// Handler is the HTTP handler the host talks to.
func (a *App) Handler() http.Handler { return a.server }

// Functions lists the function routes.
func (a *App) Functions() []string { return a.server.Functions() }

// Metrics returns the process counters.
func (a *App) Metrics() *telemetry.Metrics { return a.metrics }

// BeginShutdown stops work that need not finish: a running cleanup is
// cancelled at once (the next tick resumes it). In-flight deliveries are not
// interrupted; the HTTP server's graceful shutdown waits for them.
func (a *App) BeginShutdown() { a.stop() }

// Close releases Azure clients.
func (a *App) Close(ctx context.Context) error {
	a.stop()
	var errs []error
	for i := len(a.closers) - 1; i >= 0; i-- {
		errs = append(errs, a.closers[i](ctx))
	}
	return errors.Join(errs...)
}

// cloudEventOptions turns the CloudEvents settings into the pipeline's
// options; nil (native NimBus only) when CloudEvents are off.
func cloudEventOptions(c config.CloudEvents) *message.CloudEventOptions {
	if !c.Enabled {
		return nil
	}
	return &message.CloudEventOptions{
		Prefixes:               c.Prefixes,
		TypeMap:                c.TypeMap,
		SessionIDAttribute:     c.SessionIDAttribute,
		CorrelationIDAttribute: c.CorrelationIDAttribute,
	}
}

func (a *App) buildStore() (inbox.Store, error) {
	switch a.cfg.Inbox.Store {
	case config.StoreInMemory:
		return inbox.NewMemoryStore(inbox.MemoryOptions{Now: a.now, PurgeBatchSize: a.cfg.Inbox.PurgeBatchSize})
	case config.StoreCosmos:
		return a.buildCosmosStore()
	}
	return nil, fmt.Errorf("app: inbox store %q is not available", a.cfg.Inbox.Store)
}

func (a *App) buildPublisher() (resolver.Publisher, error) {
	switch a.cfg.Resolver.Sink {
	case config.SinkInMemory:
		return &resolver.Memory{}, nil
	case config.SinkServiceBus:
		return a.buildServiceBusPublisher()
	}
	return nil, fmt.Errorf("app: Resolver sink %q is not available", a.cfg.Resolver.Sink)
}
