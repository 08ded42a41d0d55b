package nimbus

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/config"
)

// Service is a NimBus endpoint's publisher and front doors in a Go
// service that does not run on Azure Functions (an API on a container
// platform, a job): it reads the app's settings (NimBus__Endpoint, the
// Service Bus connection or identity, the inbox's Cosmos DB settings;
// see docs/configuration.md), publishes events with NimBus's Publish wire
// (Publish) and commits requests through its front doors (FrontDoor), as
// the app does. It handles no deliveries and serves no
// HTTP.
//
// Without the Functions host there is no OutboxSweep timer: the service
// calls Sweep itself, on a ticker (every few minutes, as the timer's
// schedule), so that the events of a request whose send failed go out
// even when the client never retries.
//
//	svc := nimbus.NewService()
//	orders := svc.FrontDoor(nimbus.Container{…})
//	if err := svc.Start(ctx, nimbus.Options{}); err != nil { … }
//	defer svc.Close(context.Background())
//	go func() {
//		for range time.Tick(5 * time.Minute) {
//			_, _ = svc.Sweep(ctx)
//		}
//	}()
type Service struct {
	a   *App
	app *app.App
}

// NewService returns a Service with no front doors.
func NewService() *Service { return &Service{a: New()} }

// FrontDoor registers the container c as a front door of the service, as
// App.FrontDoor does; call it before Start.
func (s *Service) FrontDoor(c Container) *FrontDoor { return s.a.FrontDoor(c) }

// Start reads the settings through opts.Environ (os.Environ() when nil)
// and builds the Service Bus and Cosmos DB clients (they connect on first
// use). It returns a *SettingsError listing every problem of the
// settings, as Run does. Logs go to opts.Stdout (os.Stdout when nil).
// Start runs once.
func (s *Service) Start(ctx context.Context, opts Options) error {
	if s.app != nil {
		return errors.New("nimbus: the service has started already")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if opts.Environ == nil {
		opts.Environ = os.Environ()
	}
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	setting := environLookup(opts.Environ)
	cfg, problems := s.a.loadConfig(opts.Environ)
	if cfg != nil && cfg.App != config.AppEndpoint {
		problems = append(problems, fmt.Sprintf("%s is %s: a Service publishes as an endpoint", config.KeyApp, cfg.App))
	}
	problems = append(problems, s.a.registrationProblems(cfg, setting, problems)...)
	if len(problems) > 0 {
		return &SettingsError{Problems: problems}
	}
	log := zerolog.New(opts.Stdout).With().Timestamp().Logger().Level(cfg.LogLevel)
	svc, err := app.New(cfg, app.Deps{Handlers: s.a.registry(setting), Log: log, Version: buildVersion(opts.Version), Stderr: opts.Stderr})
	if err != nil {
		return &SettingsError{Problems: []string{err.Error()}}
	}
	s.app = svc
	s.a.live.Store(&live{door: svc.FrontDoor(), app: svc})
	return nil
}

// Publish sends one event now, as App.Publish does.
func (s *Service) Publish(ctx context.Context, p Publication) error { return s.a.Publish(ctx, p) }

// SweepReport counts what one Sweep did.
type SweepReport struct {
	// Found is the number of records (and transactional markers) found
	// with events not yet dispatched; Dispatched how many of them this
	// sweep sent and marked; Events how many events it sent.
	Found, Dispatched, Events int
	// Left is how many it left pending for a failure: the next sweep
	// retries them (after the others), except the unreadable ones, which
	// wait for an operator.
	Left int
	// Gone is how many it sent whose record was gone when it came to
	// mark it dispatched (deleted, or expired, since the sweep found it):
	// their events went out, and no record says so.
	Gone int
}

// Sweep sends, once, the events that requests committed through the
// service's front doors left undispatched for longer than
// NimBus__Outbox__MinimumAge (a send that failed, a process that
// stopped after its commit), and marks their records dispatched, as the
// app's OutboxSweep timer does. It returns an error when it left records
// pending (the next call retries them) or found some gone. Call it on a
// ticker, on the same Service: it sends the records that failed in one
// call only after the others in the next.
func (s *Service) Sweep(ctx context.Context) (SweepReport, error) {
	if s.app == nil {
		return SweepReport{}, ErrNotStarted
	}
	rep, err := s.app.Sweep(ctx)
	return SweepReport{Found: rep.Found, Dispatched: rep.Dispatched, Events: rep.Events, Left: rep.Left, Gone: rep.Gone}, err
}

// Close closes the service's clients, within ctx. Publishing and
// committing fail after it.
func (s *Service) Close(ctx context.Context) error {
	if s.app == nil {
		return nil
	}
	s.a.live.Store(nil)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	return s.app.Close(ctx)
}
