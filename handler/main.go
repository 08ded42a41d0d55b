// Command handler is the Azure Functions custom handler for a NimBus
// subscriber endpoint, and, with NimBus__App=Resolver, for the NimBus
// Resolver. The Functions host starts it, tells it the port in
// FUNCTIONS_CUSTOMHANDLER_PORT, and POSTs each Service Bus and timer
// invocation to it. Register event handlers in handlers.go.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry/export"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func main() {
	os.Exit(run())
}

func run() int {
	zerolog.TimeFieldFormat = time.RFC3339Nano
	log := zerolog.New(os.Stdout).With().Timestamp().Logger()

	cfg, err := config.LoadEnviron(os.Environ())
	if err != nil {
		log.Error().Str("error", err.Error()).Msg("start-up failed: fix the app settings")
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	log = log.Level(cfg.LogLevel)
	for _, w := range cfg.Warnings {
		log.Warn().Msg(w)
	}

	handlers := subscriber.NewRegistry()
	registerHandlers(handlers)

	service := cfg.Endpoint
	if cfg.App == config.AppResolver {
		service = "Resolver"
	}
	tel, err := setupTelemetry(service)
	if err != nil {
		log.Error().Str("error", err.Error()).Msg("start-up failed: fix the OpenTelemetry settings")
		fmt.Fprintln(os.Stderr, "error: start-up failed:", err)
		return 2
	}
	metrics := telemetry.NewMetrics(telemetry.MetricsOptions{Readers: tel.MetricReaders, Resource: tel.Resource})
	defer flushTelemetry(log, tel, metrics)
	a, err := app.New(cfg, app.Deps{Handlers: handlers, Log: log, Version: buildVersion(),
		TracerProvider: tel.TracerProvider, Metrics: metrics, Stderr: os.Stderr})
	if err != nil {
		log.Error().Str("error", err.Error()).Msg("start-up failed")
		fmt.Fprintln(os.Stderr, err)
		return 2
	}

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Error().Str("error", err.Error()).Str("addr", addr).Msg("start-up failed: cannot listen")
		fmt.Fprintf(os.Stderr, "start-up failed: cannot listen on %s: %v\n", addr, err)
		return 1
	}
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 30 * time.Second}
	log.Info().Str("addr", addr).Str("app", string(cfg.App)).Str("endpoint", cfg.Endpoint).Bool("inbox", cfg.Inbox.Enabled).
		Str("inboxStore", string(cfg.Inbox.Store)).Str("resolverSink", string(cfg.Resolver.Sink)).
		Bool("cloudEvents", cfg.CloudEvents.Enabled).Str("cloudEventsDeduplication", string(cfg.CloudEvents.Deduplication)).
		Strs("functions", a.Functions()).Strs("eventTypes", handlers.EventTypes()).
		Str("version", buildVersion()).Bool("otlpExport", tel.Exporting()).Msg("custom handler listening")

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	select {
	case err := <-errc:
		log.Error().Str("error", err.Error()).Msg("server stopped")
		fmt.Fprintf(os.Stderr, "server stopped: %v\n", err)
		a.BeginShutdown()
		_ = a.Close(context.Background())
		return 1
	case sig := <-sigs:
		log.Info().Str("signal", sig.String()).Msg("shutting down: pauses end and answer 503; deliveries whose handler succeeded finish their record and response")
	}
	return shutdown(log, a, srv, sigs)
}

// shutdownGrace bounds how long in-flight invocations may take to finish
// after SIGTERM. It exceeds the pipeline's settle timeout, so a delivery
// whose handler already succeeded finishes its record and response.
const shutdownGrace = 75 * time.Second

// shutdown stops the server: waits, paced failures and a running cleanup
// end at once (they answer 503 and the broker redelivers), in-flight
// invocations finish. A second signal, or the grace period running out,
// closes the remaining connections at once. It returns the exit code: 0 when
// every invocation was answered and the clients closed cleanly, 1 otherwise.
func shutdown(log zerolog.Logger, a *app.App, srv *http.Server, sigs <-chan os.Signal) int {
	a.BeginShutdown()
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	code := 0
	select {
	case err := <-done:
		if err != nil {
			code = 1
			log.Error().Str("error", err.Error()).Dur("grace", shutdownGrace).
				Msg("shutdown did not finish cleanly: in-flight invocations were cut off without an answer; the broker redelivers them")
		}
	case sig := <-sigs:
		code = 1
		cancel()
		<-done
		log.Error().Str("signal", sig.String()).
			Msg("second signal: in-flight invocations were cut off without an answer; the broker redelivers them")
	}
	if code != 0 {
		_ = srv.Close()
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if err := a.Close(cctx); err != nil {
		code = 1
		log.Error().Str("error", logsafe.Bound(err.Error())).Msg("closing Azure clients failed")
	}
	if code != 0 {
		fmt.Fprintln(os.Stderr, "shutdown did not finish cleanly; see the log")
	}
	log.Info().Int("exitCode", code).Msg("stopped")
	return code
}

// setupTelemetry reads the standard OTEL_* variables (the only environment
// read outside config.Load) and builds the tracer provider and metric
// readers; it installs the provider and the W3C propagator globally, so an
// application handler's own OpenTelemetry instrumentation joins the trace
// the handler's ctx carries.
func setupTelemetry(endpoint string) (*export.Telemetry, error) {
	c, err := export.FromEnv(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	c.ServiceName, c.ServiceVersion = endpoint, buildVersion()
	tel, err := export.Setup(context.Background(), c)
	if err != nil {
		return nil, err
	}
	otel.SetTracerProvider(tel.TracerProvider)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return tel, nil
}

// flushTelemetry exports what is left, within a few seconds.
func flushTelemetry(log zerolog.Logger, tel *export.Telemetry, m *telemetry.Metrics) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := errors.Join(tel.Shutdown(ctx), m.Shutdown(ctx)); err != nil && tel.Exporting() {
		log.Warn().Str("error", logsafe.Bound(err.Error())).Msg("telemetry export did not flush at shutdown")
	}
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
