// Command handler is the Azure Functions custom handler for a NimBus
// subscriber endpoint. The Functions host starts it, tells it the port in
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

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func main() {
	os.Exit(run())
}

func run() int {
	zerolog.TimeFieldFormat = time.RFC3339Nano
	log := zerolog.New(os.Stdout).With().Timestamp().Logger()

	cfg, err := config.Load(os.LookupEnv)
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

	a, err := app.New(cfg, app.Deps{Handlers: handlers, Log: log, Version: buildVersion()})
	if err != nil {
		log.Error().Str("error", err.Error()).Msg("start-up failed")
		fmt.Fprintln(os.Stderr, err)
		return 2
	}

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Error().Str("error", err.Error()).Str("addr", addr).Msg("start-up failed: cannot listen")
		return 1
	}
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 30 * time.Second}
	log.Info().Str("addr", addr).Str("endpoint", cfg.Endpoint).Bool("inbox", cfg.Inbox.Enabled).
		Str("inboxStore", string(cfg.Inbox.Store)).Str("resolverSink", string(cfg.Resolver.Sink)).
		Strs("functions", a.Functions()).Strs("eventTypes", handlers.EventTypes()).
		Str("version", buildVersion()).Msg("custom handler listening")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	code := 0
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			log.Error().Str("error", err.Error()).Msg("server stopped")
			code = 1
		}
	case <-ctx.Done():
		log.Info().Msg("shutting down: finishing in-flight invocations")
	}
	a.BeginShutdown()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn().Str("error", err.Error()).Msg("shutdown did not finish cleanly")
	}
	if err := a.Close(sctx); err != nil {
		log.Warn().Str("error", err.Error()).Msg("closing Azure clients failed")
	}
	return code
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
