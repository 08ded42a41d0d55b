package nimbus

import (
	"sync"

	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

// App is an endpoint app: the handlers registered on it and the entry
// point that serves them. Create it with New.
type App struct {
	mu       sync.Mutex
	handlers map[string]HandlerFunc
	started  bool
}

// New returns an App with no handlers.
func New() *App { return &App{handlers: map[string]HandlerFunc{}} }

// Handle registers h for the NimBus EventTypeId eventTypeID, matched
// exactly (case-sensitively). An event type with no handler is answered
// with an UnsupportedResponse. Register every handler before Main or Run.
//
// Handle panics on an empty id, a nil handler, a second registration for
// the same id, or a call after Main or Run started: those are programming
// errors, found at start-up.
func (a *App) Handle(eventTypeID string, h HandlerFunc) {
	switch {
	case eventTypeID == "":
		panic("nimbus: Handle with an empty event type id")
	case h == nil:
		panic("nimbus: Handle with a nil handler for " + eventTypeID)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		panic("nimbus: Handle for " + eventTypeID + " after the app started")
	}
	if _, dup := a.handlers[eventTypeID]; dup {
		panic("nimbus: a handler for " + eventTypeID + " is already registered")
	}
	a.handlers[eventTypeID] = h
}

// registry freezes the registrations and returns them as the pipeline's
// registry.
func (a *App) registry() *subscriber.Registry {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.started = true
	r := subscriber.NewRegistry()
	for id, h := range a.handlers {
		r.Handle(id, adapt(h))
	}
	return r
}
