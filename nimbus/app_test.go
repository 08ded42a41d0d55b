package nimbus

import (
	"context"
	"slices"
	"strings"
	"testing"
)

func nopHandler(context.Context, *Event) (Result, error) { return Completed(), nil }

func TestHandlePanicsOnProgrammingErrors(t *testing.T) {
	cases := []struct {
		name  string
		setup func(a *App)
		id    string
		h     HandlerFunc
		want  string
	}{
		{"empty id", nil, "", nopHandler, "empty event type id"},
		{"nil handler", nil, "OrderPlaced", nil, "nil handler for OrderPlaced"},
		{"second registration", func(a *App) { a.Handle("OrderPlaced", nopHandler) }, "OrderPlaced", nopHandler, "OrderPlaced is already registered"},
		{"after start", func(a *App) { a.registry(func(string) string { return "" }) }, "OrderPlaced", nopHandler, "OrderPlaced after the app started"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := New()
			if c.setup != nil {
				c.setup(a)
			}
			wantPanic(t, c.want, func() { a.Handle(c.id, c.h) })
		})
	}
}

// wantPanic calls f and fails t unless it panics with a "nimbus: " text
// containing want.
func wantPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		r := recover()
		if s, _ := r.(string); !strings.HasPrefix(s, "nimbus: ") || !strings.Contains(s, want) {
			t.Fatalf("panic %v, want one saying %q", r, want)
		}
	}()
	f()
}

// Ids match exactly: ids that differ in case are two registrations.
func TestRegistryHoldsEveryRegistration(t *testing.T) {
	a := New()
	for _, id := range []string{"OrderPlaced", "orderplaced", "OrderCancelled"} {
		a.Handle(id, nopHandler)
	}
	got := a.registry(func(string) string { return "" }).EventTypes()
	slices.Sort(got)
	if want := []string{"OrderCancelled", "OrderPlaced", "orderplaced"}; !slices.Equal(got, want) {
		t.Fatalf("registered %v, want %v", got, want)
	}
}

// HandleEvent decodes the event into the handler's type; an event that
// does not decode fails permanently with Decode's error (no payload value
// in it), and the handler does not run.
func TestHandleEvent(t *testing.T) {
	type order struct {
		OrderID string `json:"OrderId"`
		Amount  float64
	}
	var got []order
	a := New()
	HandleEvent(a, "OrderPlaced", func(ctx context.Context, ev *Event, o order) (Result, error) {
		got = append(got, o)
		return PendingHandoff(Handoff{Reason: ev.EventTypeID}), nil
	})
	var ptrs []*order
	HandleEvent(a, "OrderPointer", func(ctx context.Context, ev *Event, o *order) (Result, error) {
		ptrs = append(ptrs, o)
		return Completed(), nil
	})
	h := a.handlers["OrderPlaced"].h
	res, err := h(t.Context(), &Event{EventTypeID: "OrderPlaced", JSON: `{"OrderId":"O-1","Amount":2.5}`})
	if ho, pending := res.Handoff(); err != nil || !pending || ho.Reason != "OrderPlaced" || len(got) != 1 || got[0] != (order{"O-1", 2.5}) {
		t.Fatalf("handler got %+v; result %+v, %v", got, res, err)
	}
	bad := &Event{EventTypeID: "OrderPlaced", JSON: `{"OrderId":"O-secret","Amount":"lots"}`}
	_, err = h(t.Context(), bad)
	if want := bad.Decode(&order{}).Error(); KindOf(err) != KindPermanent || err.Error() != want || len(got) != 1 {
		t.Fatalf("undecodable event: %v (kind %v, handler ran %d times), want Decode's %q", err, KindOf(err), len(got), want)
	}
	if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "lots") {
		t.Fatalf("error text %q quotes the payload", err)
	}
	if _, err := a.handlers["OrderPointer"].h(t.Context(), &Event{JSON: `{"OrderId":"O-2"}`}); err != nil || len(ptrs) != 1 || ptrs[0] == nil || ptrs[0].OrderID != "O-2" {
		t.Fatalf("pointer payload %v, %v", ptrs, err)
	}
	wantPanic(t, "HandleEvent with an empty event type id", func() {
		HandleEvent(New(), "", func(context.Context, *Event, order) (Result, error) { return Completed(), nil })
	})
	wantPanic(t, "HandleEvent with a nil handler for X", func() { HandleEvent[order](New(), "X", nil) })
	wantPanic(t, "OrderPlaced is already registered", func() { a.Handle("OrderPlaced", nopHandler) })
}
