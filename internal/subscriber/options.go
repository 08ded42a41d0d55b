package subscriber

import (
	"errors"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/otel"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/session"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// Options configures a Pipeline.
type Options struct {
	// EndpointID is the configured subscriber endpoint: the endpoint side
	// of every inbox key (never the message's To). Required.
	EndpointID string
	// Inbox is the deduplication store; nil turns the inbox off (nothing is
	// checked or recorded).
	Inbox inbox.Store
	// Txn executes the batches of transactional handlers (and reads their
	// markers). Required when Handlers holds a transactional handler.
	Txn txn.Store
	// MarkerRetention is how long a transactional handler's inbox markers
	// live (their item ttl): the inbox's retention period. Default 7 days.
	MarkerRetention time.Duration
	// Publisher sends everything this endpoint sends to its own topic: the
	// Resolver responses, parked copies (To=Deferred) and replay requests
	// (To=DeferredProcessor). Required.
	Publisher resolver.Publisher
	// Scheduler schedules RetryRequests on the endpoint topic; nil means no
	// RetryRequest is ever scheduled.
	Scheduler Scheduler
	// Sessions keeps the per-session state (the block, parked copies);
	// nil turns session blocking off: a failed event is reported but
	// blocks nothing, and nothing is parked.
	Sessions session.Store
	// RetryPolicies decides whether and when a failed event is retried with
	// a RetryRequest; nil means never (NimBus without a policy).
	RetryPolicies RetryPolicies
	// Deferred reaches the parked copies for Drain; nil makes Drain fail.
	Deferred Deferred
	// MaxDeliveryCount is the subscriptions' maximum delivery count: a
	// delivery that does not complete on this delivery is dead-lettered by
	// the broker, so the Resolver is told then; default 10 (NimBus's
	// topology).
	MaxDeliveryCount int
	// ReplayBudget bounds the time one Drain spends replaying; what is left
	// is handed to a new replay request. Default 4 minutes.
	ReplayBudget time.Duration
	// ReplayWait is how long Drain waits for the next parked copy before it
	// decides that nothing more has arrived; default 2s.
	ReplayWait time.Duration
	// Rand returns a number in [0,1) for the jitter of RetryRequest delays
	// and of the re-runs' backoff; default math/rand.
	Rand func() float64
	// Handlers maps event types to handlers. Required.
	Handlers *Registry
	// Metrics receives the counters (duplicates are observed through
	// telemetry.DuplicateDetected); nil discards them.
	Metrics *telemetry.Metrics
	// Tracer starts the child spans of a delivery (inbox check, session
	// state, handler, record) under the span in Process's ctx; nil means
	// the global provider's telemetry.TracerName tracer.
	Tracer oteltrace.Tracer
	// Now is the clock; default time.Now.
	Now func() time.Time
	// SettleTimeout bounds the record and response after a successful
	// handler, which run to the end even if the invocation is cancelled;
	// default 60s.
	SettleTimeout time.Duration
	// MaxEventBytes bounds the message of each event a handler publishes
	// (message.Outgoing.SizeBound): a larger one is refused when published,
	// before anything is committed or sent. Default
	// message.DefaultMaxMessageBytes (a Standard namespace's limit).
	MaxEventBytes int
	// Version is reported in heartbeat responses.
	Version string
	// RecordAttempts is how often a failed inbox record, or a failed
	// dispatched mark of a transactional delivery's events, is tried within
	// the invocation before it fails (both are idempotent; a failed record
	// means the handler runs again on redelivery, a failed mark that the
	// redelivery sends the events again); default 6, which with the default
	// backoff rides out about three seconds of store outage. A mark the
	// store refused for good is not tried again.
	RecordAttempts int
	// RecordBackoff is the wait before the second attempt, doubled after
	// each; default 100ms.
	RecordBackoff time.Duration
	// TxnConflictReruns is how often a transactional handler whose batch
	// conflicted (outcome txn_conflict: another writer changed the
	// partition between the handler's reads and its batch) is run again
	// within the invocation, each time in a new unit of work on fresh
	// reads, before the conflict is answered (503 after the redelivery
	// pause). Default 5; negative means never.
	TxnConflictReruns int
	// TxnRerunBackoff is the longest wait before the first re-run, doubled
	// before each next one up to TxnRerunMaxBackoff; each wait is drawn
	// uniformly from zero to that bound (full jitter), so deliveries that
	// conflicted together do not meet again. Defaults 20ms and 1s.
	TxnRerunBackoff    time.Duration
	TxnRerunMaxBackoff time.Duration
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
	if o.Handlers != nil && o.Txn == nil && len(o.Handlers.Targets()) > 0 {
		errs = append(errs, errors.New("subscriber: a transactional handler is registered and Txn is not set"))
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
	switch {
	case o.TxnConflictReruns == 0:
		o.TxnConflictReruns = 5
	case o.TxnConflictReruns < 0:
		o.TxnConflictReruns = 0
	}
	if o.TxnRerunBackoff <= 0 {
		o.TxnRerunBackoff = 20 * time.Millisecond
	}
	if o.TxnRerunMaxBackoff <= 0 {
		o.TxnRerunMaxBackoff = time.Second
	}
	o.TxnRerunMaxBackoff = max(o.TxnRerunMaxBackoff, o.TxnRerunBackoff)
	if o.MarkerRetention <= 0 {
		o.MarkerRetention = 7 * 24 * time.Hour
	}
	if o.MaxDeliveryCount <= 0 {
		o.MaxDeliveryCount = 10
	}
	if o.ReplayBudget <= 0 {
		o.ReplayBudget = 4 * time.Minute
	}
	if o.ReplayWait <= 0 {
		o.ReplayWait = 2 * time.Second
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	return &Pipeline{o: o}, nil
}

// InboxEnabled reports whether deliveries are deduplicated.
func (p *Pipeline) InboxEnabled() bool { return p.o.Inbox != nil }
