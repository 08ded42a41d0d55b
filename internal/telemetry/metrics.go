// Package telemetry holds the process's OpenTelemetry instruments, the W3C
// trace context carried in Service Bus application properties, and the
// per-invocation Cosmos request charge. Every metric tag has a fixed,
// bounded set of values decided in code: never a message id, session id,
// event id or payload.
package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
)

// Meter names, as NimBus's (NimBusInstrumentation): an OpenTelemetry
// Collector or dashboard that selects NimBus's meters selects these too.
const (
	ConsumerMeter          = "NimBus.Consumer"
	DeferredProcessorMeter = "NimBus.DeferredProcessor"
	StoreMeter             = "NimBus.Store"
)

// Instrument names. NimBus's names where NimBus has the instrument; the
// others are this endpoint's own.
const (
	// DuplicateDetected counts deliveries skipped by the inbox (no tags).
	// NimBus's name.
	DuplicateDetected = "nimbus.inbox.duplicate_detected"
	// InboxOperationFailed counts failed store operations, tagged
	// TagStoreOperation = check|record|purge. NimBus's name and tag.
	InboxOperationFailed = "nimbus.inbox.operation.failed"
	// DeferredParked counts messages parked behind a blocked session.
	// NimBus's name.
	DeferredParked = "nimbus.deferred.parked"
	// DeferredReplayed counts parked messages replayed. NimBus's name.
	DeferredReplayed = "nimbus.deferred.replayed"
	// ProcessDuration is the time one delivery spent in the handler
	// process, in milliseconds, tagged TagOutcome. NimBus's name (NimBus tags
	// it completed|failed; here the outcome is the finer one below).
	ProcessDuration = "nimbus.message.process.duration"
	// InboxBypassed counts deliveries that could not be deduplicated,
	// tagged TagBypassReason = missing_or_blank|too_long.
	InboxBypassed = "nimbus.inbox.bypassed"
	// Invocations counts Subscriber invocations, tagged TagOutcome.
	Invocations = "nimbus.invocations"
	// Purged counts inbox records deleted by cleanup.
	Purged = "nimbus.inbox.purged"
	// RequestCharge is the Cosmos DB request charge (RU) of one delivery,
	// summed over every Cosmos request it made, tagged TagOutcome.
	RequestCharge = "nimbus.cosmos.request_charge"
	// TxnReruns counts the runs of transactional handlers after their
	// batch conflicted, within the invocation, tagged TagOutcome (the
	// outcome the delivery then had).
	TxnReruns = "nimbus.txn.reruns"
	// OutboxSwept counts the events of transactional deliveries that the
	// OutboxSweep timer sent, because no delivery of their message finished
	// sending them.
	OutboxSwept = "nimbus.outbox.swept"
	// OutboxLeft counts, per OutboxSweep run, the markers it found and left
	// with their events unsent (a failed send or mark, an unreadable
	// marker, a failed query, the time budget); the next run retries them.
	OutboxLeft = "nimbus.outbox.left"
	// HTTPRequests counts the requests the app's HTTP functions answered,
	// tagged TagOutcome: the status class (http_2xx, http_4xx, ...) or
	// panicked.
	HTTPRequests = "nimbus.http.requests"
	// HTTPDuration is the time an HTTP function took to answer, in
	// milliseconds, tagged TagOutcome as HTTPRequests.
	HTTPDuration = "nimbus.http.request.duration"
)

// Tag keys.
const (
	// TagOutcome is an outcome label (NimBus's attribute name).
	TagOutcome = "nimbus.outcome"
	// TagStoreOperation names a store operation (NimBus's attribute name).
	TagStoreOperation = "nimbus.store.operation"
	// TagBypassReason says why a delivery bypassed the inbox.
	TagBypassReason = "nimbus.inbox.bypass_reason"
)

type instrumentKind int

const (
	counter instrumentKind = iota
	histogram
)

type instrumentSpec struct {
	meter, unit, description string
	kind                     instrumentKind
	buckets                  []float64
}

// durationBuckets are the bucket bounds of the duration histograms, in
// milliseconds.
var durationBuckets = []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000}

var instrumentSpecs = map[string]instrumentSpec{
	DuplicateDetected:    {ConsumerMeter, "{messages}", "Messages skipped because their inbox record already exists.", counter, nil},
	InboxOperationFailed: {ConsumerMeter, "{operations}", "Inbox store operations that failed.", counter, nil},
	DeferredParked:       {DeferredProcessorMeter, "{messages}", "Messages parked by the session-block deferred path.", counter, nil},
	DeferredReplayed:     {DeferredProcessorMeter, "{messages}", "Messages replayed from the deferred subscription on session unblock.", counter, nil},
	ProcessDuration: {ConsumerMeter, "ms", "Time spent processing a delivery, from the decoded envelope to the answer.", histogram,
		durationBuckets},
	InboxBypassed: {ConsumerMeter, "{messages}", "Deliveries that could not be deduplicated (MessageId missing, blank or too long).", counter, nil},
	Invocations:   {ConsumerMeter, "{invocations}", "Subscriber invocations by outcome.", counter, nil},
	Purged:        {StoreMeter, "{records}", "Inbox records deleted by cleanup.", counter, nil},
	RequestCharge: {StoreMeter, "{RU}", "Cosmos DB request units charged for one delivery.", histogram,
		[]float64{0, 1, 2, 5, 10, 15, 20, 30, 50, 100, 200, 500}},
	TxnReruns:    {ConsumerMeter, "{runs}", "Runs of a transactional handler after its batch conflicted, within the invocation.", counter, nil},
	OutboxSwept:  {StoreMeter, "{events}", "Events of committed transactional deliveries sent by the OutboxSweep timer.", counter, nil},
	OutboxLeft:   {StoreMeter, "{markers}", "Markers an OutboxSweep run left with their events unsent, counted per run.", counter, nil},
	HTTPRequests: {ConsumerMeter, "{requests}", "Requests answered by the app's HTTP functions, by status class.", counter, nil},
	HTTPDuration: {ConsumerMeter, "ms", "Time an HTTP function took to answer a request.", histogram,
		durationBuckets},
}

// Names returns every instrument name, sorted.
func Names() []string {
	names := make([]string, 0, len(instrumentSpecs))
	for n := range instrumentSpecs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// MetricsOptions configure a [Metrics].
type MetricsOptions struct {
	// Readers receive the instruments besides the in-process view (an
	// OTLP periodic reader when export is on; an SDK ManualReader in tests).
	Readers []sdkmetric.Reader
	// Resource describes the process; nil means the SDK default.
	Resource *resource.Resource
}

// Metrics is the process's set of OpenTelemetry instruments. The in-process
// view (Snapshot, ServeHTTP for /_nimbus/metrics) is one more reader of the
// same instruments, so it shows exactly what is exported. The zero value is
// ready to use (with no exporting reader) and every method is safe for
// concurrent use; a nil *Metrics discards everything.
type Metrics struct {
	opts     MetricsOptions
	once     sync.Once
	provider *sdkmetric.MeterProvider
	view     *sdkmetric.ManualReader
	counters map[string]metric.Int64Counter
	hists    map[string]metric.Float64Histogram
	// attrs caches one measurement option per (tag key, tag value): tag
	// values come from bounded sets, so the cache is bounded too.
	attrs sync.Map // tag → metric.MeasurementOption
}

type tag struct{ key, value string }

// NewMetrics returns a set of instruments that also reports to o.Readers.
func NewMetrics(o MetricsOptions) *Metrics { return &Metrics{opts: o} }

func (m *Metrics) init() {
	m.once.Do(func() {
		m.view = sdkmetric.NewManualReader()
		opts := []sdkmetric.Option{sdkmetric.WithReader(m.view)}
		for _, r := range m.opts.Readers {
			opts = append(opts, sdkmetric.WithReader(r))
		}
		if m.opts.Resource != nil {
			opts = append(opts, sdkmetric.WithResource(m.opts.Resource))
		}
		m.provider = sdkmetric.NewMeterProvider(opts...)
		m.counters = map[string]metric.Int64Counter{}
		m.hists = map[string]metric.Float64Histogram{}
		for name, s := range instrumentSpecs {
			meter := m.provider.Meter(s.meter)
			switch s.kind {
			case counter:
				// The SDK returns a usable no-op instrument with its error.
				c, _ := meter.Int64Counter(name, metric.WithUnit(s.unit), metric.WithDescription(s.description))
				m.counters[name] = c
			case histogram:
				h, _ := meter.Float64Histogram(name, metric.WithUnit(s.unit), metric.WithDescription(s.description),
					metric.WithExplicitBucketBoundaries(s.buckets...))
				m.hists[name] = h
			}
		}
	})
}

func (m *Metrics) option(key, value string) metric.MeasurementOption {
	t := tag{key, value}
	if o, ok := m.attrs.Load(t); ok {
		return o.(metric.MeasurementOption)
	}
	o := metric.WithAttributeSet(attribute.NewSet(attribute.String(key, value)))
	m.attrs.Store(t, o)
	return o
}

// Add adds n to the counter name, tagged tagKey=tagValue (tagKey "" means
// no tag). An unknown name is ignored.
func (m *Metrics) Add(name, tagKey, tagValue string, n int64) {
	if m == nil {
		return
	}
	m.init()
	c, ok := m.counters[name]
	if !ok {
		return
	}
	if tagKey == "" {
		c.Add(context.Background(), n)
		return
	}
	c.Add(context.Background(), n, m.option(tagKey, tagValue))
}

// Inc adds one.
func (m *Metrics) Inc(name, tagKey, tagValue string) { m.Add(name, tagKey, tagValue, 1) }

// Record records v in the histogram name, tagged tagKey=tagValue. An unknown
// name is ignored.
func (m *Metrics) Record(name, tagKey, tagValue string, v float64) {
	if m == nil {
		return
	}
	m.init()
	h, ok := m.hists[name]
	if !ok {
		return
	}
	if tagKey == "" {
		h.Record(context.Background(), v)
		return
	}
	h.Record(context.Background(), v, m.option(tagKey, tagValue))
}

// Shutdown flushes and stops every reader (the exporting ones export what
// is left). An exporter's error may quote its endpoint: the error returned
// has credentials redacted (logsafe.Redact).
func (m *Metrics) Shutdown(ctx context.Context) error {
	if m == nil {
		return nil
	}
	m.init()
	if err := m.provider.Shutdown(ctx); err != nil {
		return errors.New(logsafe.Redact(err.Error()))
	}
	return nil
}

// Snapshot returns every series by its key: "name" or "name{key=value}" for
// a counter (its cumulative value), and "name.count{…}", "name.sum{…}" for
// a histogram.
func (m *Metrics) Snapshot() map[string]float64 {
	out := map[string]float64{}
	if m == nil {
		return out
	}
	m.init()
	var rm metricdata.ResourceMetrics
	if err := m.view.Collect(context.Background(), &rm); err != nil {
		return out
	}
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			switch d := md.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					out[md.Name+tagSuffix(dp.Attributes)] = float64(dp.Value)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					s := tagSuffix(dp.Attributes)
					out[md.Name+".count"+s] = float64(dp.Count)
					out[md.Name+".sum"+s] = dp.Sum
				}
			}
		}
	}
	return out
}

func tagSuffix(set attribute.Set) string {
	if set.Len() == 0 {
		return ""
	}
	parts := make([]string, 0, set.Len())
	for _, kv := range set.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// Get returns the value of the series name{tag}, where tag is "" or
// "key=value" (0 when it has none).
func (m *Metrics) Get(name, tag string) float64 {
	key := name
	if tag != "" {
		key += "{" + tag + "}"
	}
	return m.Snapshot()[key]
}

// Keys returns the series keys in sorted order.
func (m *Metrics) Keys() []string {
	s := m.Snapshot()
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ServeHTTP writes the series as a JSON object.
func (m *Metrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(m.Snapshot())
}
