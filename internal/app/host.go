package app

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/funchost"
	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/outcome"
	"github.com/nimbus-go/functions-subscriber/internal/sleep"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// host is what the endpoint app and the Resolver app share: the funchost
// server with its health and /_nimbus/metrics routes, the clock, the
// instruments and tracer, the stderr lines, shutdown and the clients to
// close; and the steps of every Service Bus invocation (its span, its
// request charge, its log lines and its answer).
type host struct {
	cfg     *config.Config
	log     zerolog.Logger
	now     func() time.Time
	server  *funchost.Server
	metrics *telemetry.Metrics
	closers []func(context.Context) error
	pause   func(ctx context.Context, d time.Duration)
	// rand jitters the redelivery pause (config.Retry.Pause).
	rand   func() float64
	tracer trace.Tracer
	tp     trace.TracerProvider
	// charged: the app's store (the inbox, or the tracking store) is on
	// Cosmos, whose request charges are summed per invocation.
	charged bool
	// spanName names the span of a Service Bus invocation.
	spanName string
	stderrMu sync.Mutex
	stderr   io.Writer
	// recent keeps the latest invocations' lines in a local run; nil
	// otherwise.
	recent *recentInvocations
	// stopping is cancelled when shutdown begins: background work such as a
	// cleanup run stops at once, while in-flight deliveries finish.
	stopping context.Context
	stop     context.CancelFunc
}

// newHost builds the shared part of an app: clock, pause, instruments,
// tracer and stderr. The caller opens the server with serve once its
// dependencies are built.
func newHost(cfg *config.Config, d Deps, spanName string, charged bool) *host {
	h := &host{cfg: cfg, log: d.Log, now: d.Now, metrics: d.Metrics, pause: d.Pause, rand: d.Rand, tp: d.TracerProvider, stderr: d.Stderr,
		spanName: spanName, charged: charged}
	if h.now == nil {
		h.now = time.Now
	}
	if h.pause == nil {
		h.pause = sleep.For
	}
	if h.rand == nil {
		h.rand = rand.Float64
	}
	if h.metrics == nil {
		h.metrics = telemetry.NewMetrics(telemetry.MetricsOptions{})
	}
	if h.tp == nil {
		h.tp = otel.GetTracerProvider()
	}
	if h.stderr == nil {
		h.stderr = io.Discard
	}
	h.tracer = h.tp.Tracer(telemetry.TracerName)
	h.stopping, h.stop = context.WithCancel(context.Background())
	return h
}

// serve creates the server every app runs: the host's health probe, the
// in-flight byte limit (an invocation over it is answered with the
// overloaded outcome's row, counted and written on stderr) and the
// /_nimbus/metrics and /_nimbus/runtime routes. The app adds its function routes.
func (h *host) serve(overloaded string, spec outcome.Spec) {
	h.server = funchost.NewServer(h.log, funchost.Options{
		MaxBytesInFlight: h.cfg.Host.MaxBodyBytesInFlight,
		Stopping:         h.stopping,
		OnOverload: func(function string) {
			h.metrics.Inc(telemetry.Invocations, telemetry.TagOutcome, overloaded)
			h.stderrLine("warning: " + logsafe.Bound(function) + " invocation answered 503: " + spec.Message)
		},
	})
	h.server.HandleGet("/_nimbus/metrics", h.metrics)
	h.server.HandleGet("/_nimbus/runtime", http.HandlerFunc(serveRuntime))
}

// Handler is the HTTP handler the host talks to.
func (h *host) Handler() http.Handler { return h.server }

// Functions lists the function routes.
func (h *host) Functions() []string { return h.server.Functions() }

// Metrics returns the process counters.
func (h *host) Metrics() *telemetry.Metrics { return h.metrics }

// BeginShutdown stops work that need not finish: a running cleanup is
// cancelled at once (the next tick resumes it). In-flight deliveries are not
// interrupted; the HTTP server's graceful shutdown waits for them.
func (h *host) BeginShutdown() { h.stop() }

// Close releases Azure clients.
func (h *host) Close(ctx context.Context) error {
	h.stop()
	var errs []error
	for i := len(h.closers) - 1; i >= 0; i-- {
		errs = append(errs, h.closers[i](ctx))
	}
	return errors.Join(errs...)
}

// failure carries the status for a delivery that must not complete.
type failure struct {
	status int
	err    error
}

func (f *failure) Error() string   { return f.err.Error() }
func (f *failure) Unwrap() error   { return f.err }
func (f *failure) HTTPStatus() int { return f.status }

var consumerSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}

// delivery is what both Service Bus functions (Subscriber and Resolver)
// carry through one invocation: its start, its span and the Cosmos request
// charge summed on its context.
type delivery struct {
	start     time.Time
	span      trace.Span
	charge    *telemetry.Charge
	hasParent bool
}

// beginDelivery decodes a Service Bus invocation and starts its span, which
// continues the message's trace (when the envelope could be decoded), with
// the Cosmos request charge summed on the returned context. The caller ends
// the span; a decode error is returned with everything else set.
func (h *host) beginDelivery(ctx context.Context, inv *funchost.Invocation) (context.Context, delivery, *funchost.ServiceBusMessage, error) {
	dl := delivery{start: h.now()}
	m, err := funchost.DecodeServiceBus(inv.Body, bindingMessage)
	if err == nil {
		ctx = telemetry.Extract(ctx, m.ApplicationProperties)
	}
	dl.hasParent = trace.SpanContextFromContext(ctx).IsValid()
	ctx, dl.span = h.tracer.Start(ctx, h.spanName, consumerSpan...)
	ctx, dl.charge = telemetry.WithCharge(ctx)
	return ctx, dl, m, err
}

// answer turns an outcome's row into the answer to the host: nil (2xx) when
// it completes the message; otherwise, after the redelivery pause when the
// row asks for it (jittered: config.Retry.Pause), a failure with the row's
// status.
func (h *host) answer(ctx context.Context, spec outcome.Spec, label string, err error, deliveryCount int) error {
	if spec.Completes() {
		return nil
	}
	if spec.Pause {
		h.pauseUnlessStopping(ctx, h.cfg.Retry.Pause(deliveryCount, h.rand()))
	}
	if err == nil {
		err = errors.New(label)
	}
	return &failure{status: spec.Status, err: err}
}

// pauseUnlessStopping waits d before a transient failure is answered. The
// host cancelling the invocation, or the process shutting down, ends the
// wait at once: the invocation then answers at once and the broker
// redelivers the message.
func (h *host) pauseUnlessStopping(ctx context.Context, d time.Duration) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(h.stopping, cancel)
	defer stop()
	h.pause(ctx, d)
}

// recordInvocation records an invocation's outcome, duration and, when the
// app's store is on Cosmos, its request charge.
func (h *host) recordInvocation(outcome string, d time.Duration, charge *telemetry.Charge) {
	h.metrics.Inc(telemetry.Invocations, telemetry.TagOutcome, outcome)
	h.metrics.Record(telemetry.ProcessDuration, telemetry.TagOutcome, outcome, float64(d.Microseconds())/1000)
	if h.charged {
		h.metrics.Record(telemetry.RequestCharge, telemetry.TagOutcome, outcome, charge.RequestUnits())
	}
}

// invocationLine starts an invocation's one JSON line at level with the
// function and the invocation id, bounded; nil when the level is off.
func (h *host) invocationLine(level zerolog.Level, inv *funchost.Invocation) *zerolog.Event {
	ev := h.log.WithLevel(level)
	if ev == nil {
		return nil
	}
	return ev.Str("function", logsafe.Bound(inv.Function)).Str("invocationId", logsafe.Bound(inv.InvocationID))
}

// withCharge adds the request charge and request count to ev when the
// app's store is on Cosmos.
func (h *host) withCharge(ev *zerolog.Event, charge *telemetry.Charge) *zerolog.Event {
	if !h.charged {
		return ev
	}
	return ev.Float64("requestCharge", charge.RequestUnits()).Int64("cosmosRequests", charge.Requests())
}

// field is one " key=value" of a summary line.
type field struct{ key, value string }

// logSummary puts the summary of a completed invocation in the response's
// Logs, one line: the outcome's message, a colon, fields in order, the
// duration and, when the app's store is on Cosmos, the request charge.
// Every value is bounded by the caller and none comes from the message
// body. The app adds its warnings as lines of their own.
func (h *host) logSummary(inv *funchost.Invocation, message string, d time.Duration, charge *telemetry.Charge, fields ...field) {
	b := make([]byte, 0, 512)
	b = append(b, message...)
	b = append(b, ':')
	for _, f := range fields {
		b = appendField(b, f.key, f.value)
	}
	b = append(b, " durationMs="...)
	b = appendMillis(b, d.Microseconds())
	b = h.appendCharge(b, charge)
	inv.Log(string(b))
}

// appendCharge appends the request charge and request count when the
// app's store is on Cosmos.
func (h *host) appendCharge(b []byte, charge *telemetry.Charge) []byte {
	if !h.charged {
		return b
	}
	b = append(b, " requestCharge="...)
	b = strconv.AppendFloat(b, charge.RequestUnits(), 'f', -1, 64)
	b = append(b, " cosmosRequests="...)
	return strconv.AppendInt(b, charge.Requests(), 10)
}

// failedInvocation is what a stderr failure line says; every string is
// bounded by the caller.
type failedInvocation struct {
	status                                                    int
	level                                                     zerolog.Level
	message, outcome, endpoint, messageID, sessionID, storeOp string
	deliveryCount                                             int
	// eventsDropped counts the events the handler published that the
	// delivery dropped.
	eventsDropped int
	err           error
}

// writeFailureLine writes one line for a failing invocation on stderr. The
// host ignores the Logs of a non-2xx answer and guesses a stderr line's
// level from its words: an error outcome's line starts with "error:", a
// warning outcome's (a cancellation) with "warning:" and carries no error
// text, so it is not raised to Error. Newlines are flattened: one line per
// failure.
func (h *host) writeFailureLine(inv *funchost.Invocation, f failedInvocation) {
	prefix := "error: "
	if f.level < zerolog.ErrorLevel {
		prefix = "warning: "
	}
	b := make([]byte, 0, 512)
	b = append(b, prefix...)
	b = append(b, logsafe.Bound(inv.Function)...)
	b = append(b, " invocation answered "...)
	b = strconv.AppendInt(b, int64(f.status), 10)
	b = append(b, ": "...)
	b = append(b, f.message...)
	b = append(b, ':')
	b = appendField(b, "invocationId", logsafe.Bound(inv.InvocationID))
	b = appendField(b, "endpoint", f.endpoint)
	b = appendField(b, "outcome", f.outcome)
	b = appendField(b, "messageId", f.messageID)
	b = appendField(b, "sessionId", f.sessionID)
	b = append(b, " deliveryCount="...)
	b = strconv.AppendInt(b, int64(f.deliveryCount), 10)
	if f.storeOp != "" {
		b = appendField(b, "operation", f.storeOp)
	}
	if f.eventsDropped > 0 {
		b = append(b, " eventsDropped="...)
		b = strconv.AppendInt(b, int64(f.eventsDropped), 10)
	}
	if f.err != nil && prefix == "error: " {
		b = appendField(b, "error", logsafe.Bound(f.err.Error()))
	}
	h.recent.add(inv.InvocationID, h.stderrLine(string(b)))
}

// stderrLine writes line, bounded and flattened to one line, to stderr,
// and returns what it wrote (without the newline).
func (h *host) stderrLine(line string) string {
	line = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, logsafe.BoundTo(line, funchost.MaxLogUnits))
	h.stderrMu.Lock()
	defer h.stderrMu.Unlock()
	_, _ = io.WriteString(h.stderr, line+"\n")
	return line
}

// appendMillis appends us microseconds as milliseconds with three
// decimals, without float formatting.
func appendMillis(b []byte, us int64) []byte {
	if us < 0 {
		b = append(b, '-')
		us = -us
	}
	b = strconv.AppendInt(b, us/1000, 10)
	frac := us % 1000
	return append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
}

// appendField appends " key=value", quoting a value that is empty or holds
// a space or a quote.
func appendField(b []byte, key, value string) []byte {
	b = append(b, ' ')
	b = append(b, key...)
	b = append(b, '=')
	if needsQuote(value) {
		return strconv.AppendQuote(b, value)
	}
	return append(b, value...)
}

// needsQuote reports whether value is empty or holds a space, a quote, an
// equals sign or a control character.
func needsQuote(value string) bool {
	if value == "" {
		return true
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; c <= ' ' || c == '"' || c == '=' || c == 0x7f {
			return true
		}
	}
	return false
}

// deliverySpan is what the span of every Service Bus invocation (endpoint
// and Resolver) records.
type deliverySpan struct {
	destination, messageID, sessionID string
	deliveryCount                     int
	hasParent                         bool
	outcome                           string
	completes                         bool
	charge                            *telemetry.Charge
}

// endDeliverySpan sets d's attributes, and extra, on span and marks it
// failed when the answer fails the message. The caller ends the span.
func endDeliverySpan(span trace.Span, d deliverySpan, extra ...attribute.KeyValue) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(append([]attribute.KeyValue{
		attribute.String("messaging.system", "servicebus"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", d.destination),
		attribute.String("messaging.message.id", d.messageID),
		attribute.String("nimbus.session.key", d.sessionID),
		attribute.Int("nimbus.delivery_count", d.deliveryCount),
		attribute.Bool("nimbus.has_parent_trace", d.hasParent),
		attribute.String(telemetry.TagOutcome, d.outcome),
		attribute.Float64("nimbus.cosmos.request_charge", d.charge.RequestUnits()),
	}, extra...)...)
	if !d.completes {
		span.SetStatus(codes.Error, d.outcome)
	}
}
