// Package app composes the custom handler the settings choose: the
// endpoint app (inbox store, Resolver publisher, session state, subscriber
// pipeline and its function routes) or the Resolver app (tracking store and
// its one route), both served by one host (host.go). main reads the
// environment and calls New; tests build the same App with in-process
// dependencies.
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
	"go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/devhost"
	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/outbox"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/servicebus"
	sbdeferred "github.com/nimbus-go/functions-subscriber/internal/servicebus/deferred"
	"github.com/nimbus-go/functions-subscriber/internal/session"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
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

// EndpointFunctions are the names of the endpoint app's own functions.
var EndpointFunctions = []string{FuncSubscriber, FuncInboxCleanup, FuncOutboxSweep, FuncCloudEventsIngress, FuncDeferredProcessor}

// Binding names in the function.json files.
const (
	bindingMessage = "message"
	bindingTimer   = "timer"
)

// Deps are what the caller provides besides configuration.
type Deps struct {
	// Handlers are the application's event handlers. Required.
	Handlers *subscriber.Registry
	// HTTP are the application's HTTP functions, served by the endpoint
	// app (the Resolver app serves none).
	HTTP []HTTPFunction
	// Log is the process logger.
	Log zerolog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Store, when set, replaces the configured inbox store (tests).
	Store inbox.Store
	// Publisher, when set, replaces the configured Resolver sink (tests).
	// Like the configured one, it is wrapped in resolver.Traced: what it is
	// given carries the send span's trace context.
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
	// Version is reported in heartbeats and logs.
	Version string
	// Pause, when set, replaces the wait before a transient failure is
	// answered and the Resolver app's waits between the quick retries of a
	// failed store write (tests).
	Pause func(ctx context.Context, d time.Duration)
	// Rand, when set, replaces the source of the numbers in [0,1) that
	// jitter the redelivery pause and the pipeline's waits (tests); default
	// math/rand.
	Rand func() float64
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

// App is the composed custom handler: the endpoint app or the Resolver
// app, as the settings choose. Both run on the same host (host.go), which
// serves the routes and shuts down.
type App struct {
	*host
	endpoint *endpointApp // nil in the Resolver app
	resolver *resolverApp // nil in the endpoint app
}

// endpointApp is the endpoint's custom handler: the subscriber pipeline
// behind the Subscriber, CloudEventsIngress and DeferredProcessor
// functions, and the InboxCleanup and OutboxSweep timers.
type endpointApp struct {
	*host
	pipeline *subscriber.Pipeline
	store    inbox.Store
	memory   *resolver.Memory
	// refusals make the in-memory sink refuse sends on request.
	refusals *sinkRefusals
	// publisher sends to the endpoint's topic (traced), as the pipeline's
	// responses go.
	publisher resolver.Publisher
	// cleanupSpanName and sweepSpanName name the InboxCleanup and
	// OutboxSweep invocations' spans.
	cleanupSpanName string
	sweepSpanName   string
	// account is the inbox's Cosmos account, shared by the endpoint app's
	// stores; sbClient the Service Bus client of the Resolver publisher.
	account  *cosmos.Account
	sbClient *servicebus.Client
	// txnMemory is the in-memory store of the transactional handlers'
	// containers (nil when they are in Cosmos), and txnTargets those
	// containers.
	txnMemory  *txn.Memory
	txnTargets []txn.Target
	// txnStore is the store of those containers (nil without
	// transactional handlers).
	txnStore txn.Store
	// sweep is the OutboxSweep's sweeper, kept across runs (it
	// remembers the markers a run failed on); made on first use.
	sweepOnce sync.Once
	sweep     *outbox.Sweeper
}

// New builds the app the settings choose. It performs no network I/O:
// Azure clients are created lazily on first use, so the host's readiness
// probe is answered at once.
func New(cfg *config.Config, d Deps) (*App, error) {
	if cfg.App == config.AppResolver {
		r, err := newResolverApp(cfg, d)
		if err != nil {
			return nil, err
		}
		return &App{host: r.host, resolver: r}, nil
	}
	e, err := newEndpointApp(cfg, d)
	if err != nil {
		return nil, err
	}
	return &App{host: e.host, endpoint: e}, nil
}

// newEndpointApp builds the endpoint app: its inbox, Resolver publisher,
// session-state store and Deferred subscription, the pipeline over them and
// the function routes.
func newEndpointApp(cfg *config.Config, d Deps) (*endpointApp, error) {
	if d.Handlers == nil {
		return nil, errors.New("app: no handler registry")
	}
	a := &endpointApp{host: newHost(cfg, d, "process "+cfg.Endpoint, cfg.Inbox.Enabled && cfg.Inbox.Store == config.StoreCosmos)}
	a.cleanupSpanName = "nimbus.inbox.cleanup " + cfg.Endpoint
	a.sweepSpanName = "nimbus.outbox.sweep " + cfg.Endpoint

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
		a.refusals = &sinkRefusals{next: m.Fail}
		m.Fail = a.refusals.fail
	}
	pub = resolver.Traced(pub, a.tracer, cfg.Endpoint)
	a.publisher = pub
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
	a.txnStore = txStore
	a.txnTargets = d.Handlers.Targets()
	scheduler, _ := pub.(subscriber.Scheduler)
	var policies subscriber.RetryPolicies
	if cfg.RetryPolicies != nil && !cfg.RetryPolicies.Empty() {
		policies = retryPolicies{set: cfg.RetryPolicies}
	}
	a.pipeline, err = subscriber.New(subscriber.Options{
		EndpointID:       cfg.Endpoint,
		Inbox:            a.store,
		Txn:              txStore,
		MarkerRetention:  cfg.Inbox.Retention,
		Publisher:        pub,
		Scheduler:        scheduler,
		RetryPolicies:    policies,
		Sessions:         sessions,
		Deferred:         deferred,
		MaxDeliveryCount: cfg.Session.MaxDeliveryCount,
		ReplayBudget:     cfg.Session.ReplayBudget,
		MaxEventBytes:    cfg.Outbox.MaxMessageBytes,
		Handlers:         d.Handlers,
		Metrics:          a.metrics,
		Tracer:           a.tracer,
		Now:              a.now,
		Rand:             a.rand,
		Version:          d.Version,

		CloudEvents:                    cloudEventOptions(cfg.CloudEvents),
		DeduplicateCloudEventsBySource: cfg.CloudEvents.Enabled && cfg.CloudEvents.Deduplication == config.DedupSourceAndID,
	})
	if err != nil {
		return nil, err
	}

	a.serve(string(subscriber.OutcomeOverloaded), subscriber.OutcomeOverloaded.Spec())
	a.server.Handle(FuncSubscriber, a.invokeSubscriber)
	a.server.Handle(FuncInboxCleanup, a.invokeCleanup)
	a.server.Handle(FuncOutboxSweep, a.invokeSweep)
	a.server.Handle(FuncCloudEventsIngress, a.invokeIngress)
	a.server.Handle(FuncDeferredProcessor, a.invokeDeferredProcessor)
	a.serveHTTPFunctions(d.HTTP)
	if a.memory != nil {
		a.server.HandleGet(devhost.SentPath, http.HandlerFunc(a.serveMemorySink))
		a.server.HandlePost(devhost.RefusePath, a.refusals)
		a.recent = newRecentInvocations()
		a.server.HandleGet(devhost.InvocationsPath, a.recent)
	}
	if a.txnMemory != nil {
		a.server.HandleGet("/_nimbus/txn", http.HandlerFunc(a.serveTxnDocuments))
	}
	return a, nil
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

func (a *endpointApp) buildStore() (inbox.Store, error) {
	switch a.cfg.Inbox.Store {
	case config.StoreInMemory:
		return inbox.NewMemoryStore(inbox.MemoryOptions{Now: a.now, PurgeBatchSize: a.cfg.Inbox.PurgeBatchSize})
	case config.StoreCosmos:
		return a.buildCosmosStore()
	}
	return nil, fmt.Errorf("app: inbox store %q is not available", a.cfg.Inbox.Store)
}

func (a *endpointApp) buildPublisher() (resolver.Publisher, error) {
	switch a.cfg.Resolver.Sink {
	case config.SinkInMemory:
		return &resolver.Memory{}, nil
	case config.SinkServiceBus:
		return a.buildServiceBusPublisher()
	}
	return nil, fmt.Errorf("app: Resolver sink %q is not available", a.cfg.Resolver.Sink)
}
