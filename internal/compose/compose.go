// Package compose is the seam through which package nimbustest builds a
// team's *nimbus.App as Run would, on stores and a sink the test controls,
// without serving it on a port. Package nimbus fills App in when it is
// initialised; nothing else sets it.
package compose

import (
	"io"

	"github.com/nimbus-go/functions-subscriber/internal/app"
)

// Options are the settings and replacements of one composition.
type Options struct {
	// Environ holds the app settings as "key=value" pairs. Required: the
	// process's environment is never read.
	Environ []string
	// Stdout receives the app's JSON log lines; Stderr its start-up errors
	// and failing invocations' lines. nil discards.
	Stdout, Stderr io.Writer
	// Version is reported in heartbeats and logs; "" means "test".
	Version string
	// Deps are the replacements (stores, sink, clock, pause, tracer
	// provider, metrics). The handlers, HTTP functions, logger, version
	// and stderr are the app's own and are overwritten.
	Deps app.Deps
}

// App composes nimbusApp, a *nimbus.App whose registrations are done, from
// o: it reads and checks the settings as Run does (a *nimbus.SettingsError
// lists the problems), freezes the registrations and makes the app's
// Publish and front doors live. The returned app serves the Functions
// host's routes through its Handler; the caller closes it.
var App func(nimbusApp any, o Options) (*app.App, error)
