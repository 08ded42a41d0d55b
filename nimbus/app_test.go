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
