package nimbus

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

// App is an endpoint app: the handlers registered on it and the entry
// point that serves them. Create it with New.
type App struct {
	mu       sync.Mutex
	handlers map[string]registration
	started  bool
	// frontDoors are the registered front doors, in order; live is set
	// once the app has started.
	frontDoors []*FrontDoor
	live       atomic.Pointer[live]
	// httpFunctions are the HTTP functions, in registration order.
	httpFunctions []app.HTTPFunction
}

// registration is one event type's handler: plain (h) or transactional
// (tx).
type registration struct {
	h  HandlerFunc
	tx *txRegistration
}

// New returns an App with no handlers.
func New() *App { return &App{handlers: map[string]registration{}} }

// Handle registers h for the NimBus EventTypeId eventTypeID, matched
// exactly (case-sensitively). An event type with no handler is answered
// with an UnsupportedResponse. Register every handler before Main or Run.
//
// Handle panics on an empty id, a nil handler, a second registration for
// the same id, or a call after Main or Run started: those are programming
// errors, found at start-up.
func (a *App) Handle(eventTypeID string, h HandlerFunc) {
	checkRegistration("Handle", eventTypeID, h == nil)
	a.register(eventTypeID, registration{h: h})
}

// HandleEvent registers h for eventTypeID as Handle does, with the domain
// event decoded into a T before h runs: h receives it as payload. An event
// that does not decode fails permanently with Event.Decode's error (which
// quotes no payload value), and h does not run. It panics as Handle does.
//
// A method cannot have type parameters, so HandleEvent is a function
// taking the App:
//
//	nimbus.HandleEvent(app, "OrderPlaced", func(ctx context.Context, ev *nimbus.Event, o OrderPlaced) (nimbus.Result, error) {
//		...
//	})
func HandleEvent[T any](a *App, eventTypeID string, h func(ctx context.Context, ev *Event, payload T) (Result, error)) {
	checkRegistration("HandleEvent", eventTypeID, h == nil)
	a.register(eventTypeID, registration{h: func(ctx context.Context, ev *Event) (Result, error) {
		payload, err := decode[T](ev)
		if err != nil {
			return Result{}, err
		}
		return h(ctx, ev, payload)
	}})
}

// decode decodes ev's domain event into a new T.
func decode[T any](ev *Event) (T, error) {
	var v T
	err := ev.Decode(&v)
	return v, err
}

// checkRegistration panics, naming fn, on an empty event type id or a nil
// handler.
func checkRegistration(fn, eventTypeID string, nilHandler bool) {
	switch {
	case eventTypeID == "":
		panic("nimbus: " + fn + " with an empty event type id")
	case nilHandler:
		panic("nimbus: " + fn + " with a nil handler for " + eventTypeID)
	}
}

func (a *App) register(eventTypeID string, reg registration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		panic("nimbus: Handle for " + eventTypeID + " after the app started")
	}
	if _, dup := a.handlers[eventTypeID]; dup {
		panic("nimbus: a handler for " + eventTypeID + " is already registered")
	}
	a.handlers[eventTypeID] = reg
}

// settingNames returns the app setting names the registrations read.
func (a *App) settingNames() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, reg := range a.handlers {
		if reg.tx != nil {
			out = append(out, reg.tx.settings()...)
		}
	}
	for _, f := range a.frontDoors {
		out = append(out, (&txRegistration{c: f.c}).settings()...)
	}
	return out
}

// registry freezes the registrations and returns them as the pipeline's
// registry; setting returns an app setting's value ("" when unset). The
// registrations must have passed registrationProblems under the same
// settings.
func (a *App) registry(setting func(string) string) *subscriber.Registry {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.started = true
	r := subscriber.NewRegistry()
	for id, reg := range a.handlers {
		if reg.tx != nil {
			r.HandleTx(id, reg.tx.binding(setting), adaptTx(reg.tx.h))
			continue
		}
		r.Handle(id, adapt(reg.h))
	}
	for _, t := range a.bindFrontDoors(setting) {
		r.AddFrontDoor(t)
	}
	return r
}
