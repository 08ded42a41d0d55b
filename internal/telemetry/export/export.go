// Package export sets up OpenTelemetry for the process: with the standard
// OTEL_EXPORTER_OTLP_* variables set, traces and metrics are exported over
// OTLP/HTTP (to an OpenTelemetry Collector, or to Azure Monitor's OTLP
// ingestion: there is no maintained Azure Monitor exporter for Go); without
// them nothing is exported and spans only carry the trace on (see
// telemetry.PropagatingTracerProvider). Only main calls Setup: the SDK's
// exporters read their standard variables when they are created. Setup
// also routes the SDK's own logging and error reports into the process log,
// redacted and bounded (see installSDKLog).
package export

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// The standard variables that turn export on.
const (
	EnvEndpoint        = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint  = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvMetricsEndpoint = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
	EnvProtocol        = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvSDKDisabled     = "OTEL_SDK_DISABLED"
)

// Config says what to export.
type Config struct {
	// Traces and Metrics turn the OTLP exporters on.
	Traces, Metrics bool
	// ServiceName is service.name unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES set it; ServiceVersion is service.version.
	ServiceName, ServiceVersion string
	// Log receives the SDK's own problem reports as JSON lines, redacted
	// and bounded; nil means standard output, where the process logs.
	Log io.Writer

	// secrets are the configured values that are credentials (header
	// values), redacted from every line the SDK writes.
	secrets []string
}

// FromEnv reads which exporters the standard variables ask for: traces
// when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is
// set, metrics when it or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is set,
// nothing when OTEL_SDK_DISABLED is true. Only OTLP over HTTP (protobuf) is
// built in; asking for grpc is an error.
func FromEnv(lookup func(string) (string, bool)) (Config, error) {
	get := func(k string) string {
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	var c Config
	for _, sig := range []string{"", "TRACES_", "METRICS_"} {
		if h := get("OTEL_EXPORTER_OTLP_" + sig + "HEADERS"); h != "" {
			c.secrets = append(c.secrets, headerSecrets(h)...)
		}
	}
	if strings.EqualFold(get(EnvSDKDisabled), "true") {
		return c, nil
	}
	c.Traces = get(EnvEndpoint) != "" || get(EnvTracesEndpoint) != ""
	c.Metrics = get(EnvEndpoint) != "" || get(EnvMetricsEndpoint) != ""
	for _, k := range []string{EnvProtocol, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"} {
		if p := get(k); p != "" && p != "http/protobuf" {
			return c, fmt.Errorf("%s=%q is not supported: this handler exports OTLP over HTTP (http/protobuf, the Collector's port 4318)", k, p)
		}
	}
	return c, nil
}

// Telemetry is what Setup built: the tracer provider every span is started
// from, and the metric readers to hand to telemetry.NewMetrics.
type Telemetry struct {
	TracerProvider trace.TracerProvider
	MetricReaders  []sdkmetric.Reader
	Resource       *resource.Resource
	exporting      bool
	secrets        []string
	shutdown       []func(context.Context) error
}

// Exporting reports whether anything is exported.
func (t *Telemetry) Exporting() bool { return t.exporting }

// Shutdown flushes the span exporter. Metric readers are shut down with the
// telemetry.Metrics they were handed to.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	return redactErr(errors.Join(errs...), t.secrets)
}

// Setup builds the providers for c. With nothing to export it creates no
// SDK pipeline at all.
func Setup(ctx context.Context, c Config) (*Telemetry, error) {
	t := &Telemetry{TracerProvider: telemetry.PropagatingTracerProvider(), secrets: c.secrets}
	w := c.Log
	if w == nil {
		w = os.Stdout
	}
	installSDKLog(w, c.secrets)
	if !c.Traces && !c.Metrics {
		return t, nil
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(c.ServiceName), semconv.ServiceVersion(c.ServiceVersion)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	t.Resource = res
	if c.Traces {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTLP trace exporter: %w", err)
		}
		// The sampler follows OTEL_TRACES_SAMPLER (default: parent-based,
		// always on), the batch processor OTEL_BSP_*.
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		t.TracerProvider = tp
		t.shutdown = append(t.shutdown, tp.Shutdown)
	}
	if c.Metrics {
		exp, err := otlpmetrichttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTLP metric exporter: %w", err)
		}
		// The interval follows OTEL_METRIC_EXPORT_INTERVAL (default 60 s).
		t.MetricReaders = append(t.MetricReaders, sdkmetric.NewPeriodicReader(exp))
	}
	t.exporting = true
	return t, nil
}
