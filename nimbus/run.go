package nimbus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/compose"
	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/gctune"
	"github.com/nimbus-go/functions-subscriber/internal/libversion"
	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry/export"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// Options are what Run reads and writes besides the network. The zero
// value means the process's own: its environment, stdout and stderr, and
// the port the Functions host gives.
type Options struct {
	// Environ holds the app settings (NimBus__*, ServiceBusConnection,
	// FUNCTIONS_CUSTOMHANDLER_PORT, ...) as "key=value" pairs, the form
	// os.Environ returns; nil means os.Environ(). Every name that starts
	// with NimBus__ must be a setting this version reads, spelt exactly.
	// The OTEL_* variables are always read from the process environment,
	// where the OpenTelemetry SDK reads them.
	Environ []string
	// Stdout receives the log, one JSON object per line. nil means
	// os.Stdout.
	Stdout io.Writer
	// Stderr receives start-up errors and one line per failing invocation,
	// worded so the Functions host logs it as an error or a warning. nil
	// means os.Stderr.
	Stderr io.Writer
	// Listener, when set, is where the app serves instead of
	// 127.0.0.1:FUNCTIONS_CUSTOMHANDLER_PORT. Run closes it.
	Listener net.Listener
	// Version is the version of this library reported in heartbeats (as
	// NimBus's SdkVersion), logs and telemetry. "" means the version of
	// module github.com/nimbus-go/functions-subscriber the binary was
	// built with, from its build information, or "dev" when it was built
	// from a local directory or without build information.
	Version string
}

// SettingsError is the error Run returns when the app cannot start because
// of its settings or its registrations. It lists every problem found, so
// all of them can be fixed at once; Main exits with code 2 on it.
type SettingsError struct {
	// Problems are the problems, one sentence each, naming the setting.
	Problems []string
}

// Error lists the problems, one per line.
func (e *SettingsError) Error() string { return (&config.Error{Problems: e.Problems}).Error() }

// Exit codes of Main.
const (
	exitClean    = 0
	exitFailed   = 1
	exitSettings = 2
)

// exitCode is Main's exit code for Run's error: 0 for nil, 2 for a
// *SettingsError, 1 for any other.
func exitCode(err error) int {
	var se *SettingsError
	switch {
	case err == nil:
		return exitClean
	case errors.As(err, &se):
		return exitSettings
	}
	return exitFailed
}

// shutdownGrace bounds how long in-flight invocations may take to finish
// once shutdown begins. It exceeds the pipeline's settle timeout, so a
// delivery whose handler already succeeded finishes its record and
// response.
const shutdownGrace = 75 * time.Second

// Main runs the app as the custom handler process, as Run does, and exits
// with a status code: 0 when Run returned nil, 2 for a *SettingsError, 1
// for any other error. The first SIGTERM or interrupt begins a graceful
// shutdown; a second one cuts off the invocations still running. Unless the
// GOGC environment variable is set, the garbage collector waits for the
// heap to grow by at least 64 MiB (or as much as is live, when that is
// more) before it runs.
func (a *App) Main() {
	gctune.Start(gctune.DefaultFloor)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancelCause(context.Background())
	second := make(chan os.Signal, 1)
	go func() {
		cancel(signalError{<-sigs})
		second <- <-sigs
	}()
	err := a.run(ctx, Options{}, second)
	signal.Stop(sigs)
	os.Exit(exitCode(err))
}

// signalError is the cause of Main's context: the signal that ended it.
type signalError struct{ sig os.Signal }

func (e signalError) Error() string { return "received " + e.sig.String() }

// Run serves the app until ctx is done, then shuts down gracefully. It
// reads the settings through
// opts.Environ, sets up telemetry from the OTEL_* variables (installing
// the tracer provider and the W3C propagator globally, so a handler's own
// OpenTelemetry instrumentation joins the delivery's trace), and serves the
// Functions host's invocations.
//
// When ctx is done, waits for a redelivery pause and a running inbox
// cleanup end at once (those invocations answer 503 and the broker
// redelivers), and in-flight invocations get up to 75 seconds to finish.
//
// Run returns nil when every invocation was answered and the clients
// closed cleanly. When a setting is wrong, or the registrations cannot run
// under the settings, it returns a *SettingsError listing every problem
// (also written to Stderr and the log) without serving. Otherwise it
// returns an error when the app could not listen, the server failed, or
// shutdown cut invocations off.
func (a *App) Run(ctx context.Context, opts Options) error {
	return a.run(ctx, opts, nil)
}

// run is Run; a signal on second cuts off the invocations that a graceful
// shutdown still waits for.
func (a *App) run(ctx context.Context, opts Options, second <-chan os.Signal) error {
	opts = opts.withDefaults()
	if environLookup(opts.Environ)(describeEnv) != "" {
		return a.describe(opts)
	}
	st, err := a.start(opts, app.Deps{})
	if err != nil {
		if opts.Listener != nil {
			_ = opts.Listener.Close()
		}
		return err
	}
	defer st.flush()
	return st.serve(ctx, opts, second)
}

// withDefaults fills the process's own environment, stdout and stderr in.
func (o Options) withDefaults() Options {
	if o.Environ == nil {
		o.Environ = os.Environ()
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	return o
}

var timeFormatOnce sync.Once

// started is an app composed from its settings and registrations, not yet
// serving.
type started struct {
	svc      *app.App
	cfg      *config.Config
	log      zerolog.Logger
	handlers []string
	http     []string
	// txnContainers name the transactional handlers' containers, and
	// txnStore their store ("" without them).
	txnContainers []string
	txnStore      string
	version       string
	// tel is the OpenTelemetry export; nil when deps brought a tracer
	// provider of their own.
	tel     *export.Telemetry
	metrics *telemetry.Metrics
}

// start reads the settings in opts.Environ, checks them with the
// registrations, and composes the app with the replacements deps holds
// (none in production; package nimbustest brings in-memory stores it
// controls). Its logs go to opts.Stdout. A problem is a *SettingsError,
// also logged and written to opts.Stderr.
func (a *App) start(opts Options, deps app.Deps) (*started, error) {
	version := buildVersion(opts.Version)
	timeFormatOnce.Do(func() { zerolog.TimeFieldFormat = time.RFC3339Nano })
	log := zerolog.New(opts.Stdout).With().Timestamp().Logger()
	// fail logs err under msg, writes stderrLine to opts.Stderr and
	// returns err as a *SettingsError.
	fail := func(msg string, err error, stderrLine ...any) (*started, error) {
		log.Error().Str("error", err.Error()).Msg(msg)
		fmt.Fprintln(opts.Stderr, stderrLine...)
		var serr *SettingsError
		if !errors.As(err, &serr) {
			serr = &SettingsError{Problems: []string{err.Error()}}
		}
		return nil, serr
	}

	setting := environLookup(opts.Environ)
	cfg, problems := a.loadConfig(opts.Environ)
	problems = append(problems, a.registrationProblems(cfg, setting, problems)...)
	if len(problems) > 0 {
		serr := &SettingsError{Problems: problems}
		return fail("start-up failed: fix the app settings", serr, serr)
	}
	log = log.Level(cfg.LogLevel)
	for _, w := range cfg.Warnings {
		log.Warn().Msg(w)
	}

	registry := a.registry(setting)
	st := &started{cfg: cfg, log: log, version: version, handlers: registry.EventTypes(), http: httpFunctionNames(a.httpFunctionsList())}
	if cfg.App == config.AppEndpoint {
		st.txnContainers = targetNames(registry.Targets())
	}
	if len(st.txnContainers) > 0 {
		st.txnStore = string(cfg.Inbox.Store)
		if cfg.Inbox.Store == config.StoreInMemory {
			log.Warn().Strs("txnContainers", st.txnContainers).Msg(config.KeyInboxStore + "=" + string(config.StoreInMemory) +
				" keeps the transactional handlers' containers in this process only: their documents and markers are lost on restart and not shared between instances; use it for local runs and tests")
		}
	}
	var err error
	if deps.TracerProvider == nil {
		service := cfg.Endpoint
		if cfg.App == config.AppResolver {
			service = "Resolver"
		}
		if st.tel, err = setupTelemetry(service, version); err != nil {
			return fail("start-up failed: fix the OpenTelemetry settings", err, "error: start-up failed:", err)
		}
		deps.TracerProvider = st.tel.TracerProvider
	}
	if deps.Metrics == nil {
		var mo telemetry.MetricsOptions
		if st.tel != nil {
			mo = telemetry.MetricsOptions{Readers: st.tel.MetricReaders, Resource: st.tel.Resource}
		}
		deps.Metrics = telemetry.NewMetrics(mo)
	}
	st.metrics = deps.Metrics
	deps.Handlers, deps.HTTP, deps.Log, deps.Version, deps.Stderr = registry, a.httpFunctionsList(), log, version, opts.Stderr
	if st.svc, err = app.New(cfg, deps); err != nil {
		st.flush()
		return fail("start-up failed", err, err)
	}
	if d := st.svc.FrontDoor(); d != nil {
		a.live.Store(&live{door: d, app: st.svc})
	}
	return st, nil
}

// loadConfig reads the settings in environ, the names the registrations
// read included, and returns the problems found (none: cfg is complete).
func (a *App) loadConfig(environ []string) (*config.Config, []string) {
	cfg, err := config.LoadEnviron(environ, a.settingNames()...)
	if ce := (*config.Error)(nil); errors.As(err, &ce) {
		return cfg, ce.Problems
	} else if err != nil {
		return cfg, []string{err.Error()}
	}
	return cfg, nil
}

// flush exports the telemetry left at the end.
func (st *started) flush() {
	if st.tel != nil {
		flushTelemetry(st.log, st.tel, st.metrics)
	}
}

// serve serves the started app on opts.Listener (or 127.0.0.1 on the
// configured port) until ctx is done, then shuts down.
func (st *started) serve(ctx context.Context, opts Options, second <-chan os.Signal) error {
	log, svc, cfg := st.log, st.svc, st.cfg
	ln := opts.Listener
	if ln == nil {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.Port))
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			log.Error().Str("error", err.Error()).Str("addr", addr).Msg("start-up failed: cannot listen")
			fmt.Fprintf(opts.Stderr, "start-up failed: cannot listen on %s: %v\n", addr, err)
			_ = svc.Close(context.Background())
			return fmt.Errorf("nimbus: cannot listen on %s: %w", addr, err)
		}
	}
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 30 * time.Second}
	log.Info().Str("addr", ln.Addr().String()).Str("app", string(cfg.App)).Str("endpoint", cfg.Endpoint).Bool("inbox", cfg.Inbox.Enabled).
		Str("inboxStore", string(cfg.Inbox.Store)).Str("resolverSink", string(cfg.Resolver.Sink)).
		Bool("cloudEvents", cfg.CloudEvents.Enabled).Str("cloudEventsDeduplication", string(cfg.CloudEvents.Deduplication)).
		Strs("functions", svc.Functions()).Strs("httpFunctions", st.http).Strs("eventTypes", st.handlers).
		Strs("txnContainers", st.txnContainers).Str("txnStore", st.txnStore).
		Str("version", st.version).Bool("otlpExport", st.tel != nil && st.tel.Exporting()).Msg("custom handler listening")

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	select {
	case err := <-errc:
		log.Error().Str("error", err.Error()).Msg("server stopped")
		fmt.Fprintf(opts.Stderr, "server stopped: %v\n", err)
		svc.BeginShutdown()
		_ = svc.Close(context.Background())
		return fmt.Errorf("nimbus: server stopped: %w", err)
	case <-ctx.Done():
		ev := log.Info()
		var sig signalError
		if errors.As(context.Cause(ctx), &sig) {
			ev = ev.Str("signal", sig.sig.String())
		} else {
			ev = ev.Str("reason", logsafe.Bound(context.Cause(ctx).Error()))
		}
		ev.Msg("shutting down: pauses end and answer 503; deliveries whose handler succeeded finish their record and response")
	}
	return shutdown(log, opts.Stderr, svc, srv, second)
}

// shutdown stops the server: waits, paced failures and a running cleanup
// end at once (they answer 503 and the broker redelivers), in-flight
// invocations finish. A signal on second, or the grace period running out,
// closes the remaining connections at once. It returns nil when every
// invocation was answered and the clients closed cleanly.
func shutdown(log zerolog.Logger, stderr io.Writer, svc *app.App, srv *http.Server, second <-chan os.Signal) error {
	svc.BeginShutdown()
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	var failed error
	select {
	case err := <-done:
		if err != nil {
			failed = fmt.Errorf("nimbus: shutdown did not finish within %v: in-flight invocations were cut off: %w", shutdownGrace, err)
			log.Error().Str("error", err.Error()).Dur("grace", shutdownGrace).
				Msg("shutdown did not finish cleanly: in-flight invocations were cut off without an answer; the broker redelivers them")
		}
	case sig := <-second:
		failed = fmt.Errorf("nimbus: %w: in-flight invocations were cut off", signalError{sig})
		cancel()
		<-done
		log.Error().Str("signal", sig.String()).
			Msg("second signal: in-flight invocations were cut off without an answer; the broker redelivers them")
	}
	if failed != nil {
		_ = srv.Close()
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if err := svc.Close(cctx); err != nil {
		failed = errors.Join(failed, fmt.Errorf("nimbus: closing Azure clients failed: %w", err))
		log.Error().Str("error", logsafe.Bound(err.Error())).Msg("closing Azure clients failed")
	}
	if failed != nil {
		fmt.Fprintln(stderr, "shutdown did not finish cleanly; see the log")
	}
	log.Info().Int("exitCode", exitCode(failed)).Msg("stopped")
	return failed
}

// targetNames names the containers as database/container.
func targetNames(ts []txn.Target) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.String()
	}
	slices.Sort(out)
	return out
}

// setupTelemetry reads the standard OTEL_* variables and builds the tracer
// provider and metric readers; it installs the provider and the W3C
// propagator globally, so a handler's own OpenTelemetry instrumentation
// joins the trace the handler's ctx carries.
func setupTelemetry(service, version string) (*export.Telemetry, error) {
	c, err := export.FromEnv(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	c.ServiceName, c.ServiceVersion = service, version
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

// environLookup returns the value of a name in environ ("" when unset),
// as the settings are read (config.EnvironValue).
func environLookup(environ []string) func(string) string {
	return func(name string) string { return config.EnvironValue(environ, name) }
}

// buildVersion returns v, else this library's version from the build
// information (see libversion.Of).
func buildVersion(v string) string {
	if v != "" {
		return v
	}
	return libversion.Get()
}

func init() {
	compose.App = func(x any, o compose.Options) (*app.App, error) {
		a, ok := x.(*App)
		if !ok || a == nil {
			return nil, fmt.Errorf("nimbus: compose wants a *nimbus.App, not %T", x)
		}
		if o.Environ == nil {
			o.Environ = []string{}
		}
		if o.Stdout == nil {
			o.Stdout = io.Discard
		}
		if o.Stderr == nil {
			o.Stderr = io.Discard
		}
		if o.Version == "" {
			o.Version = "test"
		}
		st, err := a.start(Options{Environ: o.Environ, Stdout: o.Stdout, Stderr: o.Stderr, Version: o.Version}, o.Deps)
		if err != nil {
			return nil, err
		}
		return st.svc, nil
	}
}
