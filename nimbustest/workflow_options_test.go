package nimbustest

import (
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/nimbus"
)

// Options the topology could not have are refused with the reason, and a
// settings problem of one app names the app.
func TestWorkflowRefusesBadOptions(t *testing.T) {
	cases := []struct {
		name string
		o    func() Options
		want string
	}{
		{"no endpoint", func() Options { return Options{} }, "at least one endpoint"},
		{"no name", func() Options { return Options{Endpoints: []Endpoint{{App: nimbus.New()}}} }, `name ""`},
		{"the Resolver's name", func() Options { return Options{Endpoints: []Endpoint{{Name: "Resolver", App: nimbus.New()}}} }, "Resolver"},
		{"no app", func() Options { return Options{Endpoints: []Endpoint{{Name: "A"}}} }, "A has no app"},
		{"twice", func() Options {
			return Options{Endpoints: []Endpoint{{Name: "A", App: nimbus.New()}, {Name: "A", App: nimbus.New()}}}
		}, "A is given twice"},
		{"a forward to a missing topic", func() Options {
			return Options{Endpoints: []Endpoint{{Name: "A", App: nimbus.New(), Publishes: map[string][]string{"T": {"B"}}}}}
		}, "goes to B, which is not an endpoint"},
		{"a bad max delivery count", func() Options {
			return Options{Endpoints: []Endpoint{{Name: "A", App: nimbus.New(), Settings: []string{"NimBus__Session__MaxDeliveryCount=0"}}}}
		}, "NimBus__Session__MaxDeliveryCount"},
		{"a bad setting", func() Options {
			return Options{Endpoints: []Endpoint{{Name: "A", App: nimbus.New(), Settings: []string{"NimBus__Inbox__Enabled=maybe"}}}}
		}, "endpoint A"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := newWorkflow(t, c.o())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one naming %q", err, c.want)
			}
		})
	}
}
