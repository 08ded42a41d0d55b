package nimbus

import (
	"go/types"
	"slices"
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/dev/apilist"
)

// typeCheck type-checks the package's non-test files, or extra in their
// place.
func typeCheck(t *testing.T, extra map[string]string) *types.Package {
	return apilist.TypeCheck(t, extra)
}

// internalMentions lists the internal types pkg's exported API mentions.
func internalMentions(pkg *types.Package) []string { return apilist.InternalMentions(pkg) }

func TestExportedAPIMentionsNoInternalType(t *testing.T) {
	for _, m := range internalMentions(typeCheck(t, nil)) {
		t.Errorf("the public API leaks an internal type: %s", m)
	}
}

// The check finds internal types wherever the exported API can carry them,
// and ignores unexported places.
func TestInternalMentionsFindsEveryPlace(t *testing.T) {
	const src = `package nimbus

import "github.com/nimbus-go/functions-subscriber/internal/subscriber"

type Field struct {
	Ev     *subscriber.Event
	hidden subscriber.Event
}
type Embeds struct{ subscriber.Registry }
type Alias = subscriber.Result
type Defined subscriber.Attempt
type Iface interface{ Get() map[string][]subscriber.Handoff }
type Method struct{}

func (Method) Do(subscriber.HandlerFunc) {}
func (Method) hidden() subscriber.Result { return subscriber.Result{} }

func Func(n int) (subscriber.FailureKind, error) { return 0, nil }
func hiddenFunc() subscriber.Event           { return subscriber.Event{} }

var Var = subscriber.NewRegistry()

const Const = subscriber.KindDiscard

type unexported struct{ X subscriber.Event }
`
	got := internalMentions(typeCheck(t, map[string]string{"leak.go": src}))
	const sub = "github.com/nimbus-go/functions-subscriber/internal/subscriber."
	want := []string{
		"nimbus.Alias mentions " + sub + "Result",
		"nimbus.Const mentions " + sub + "FailureKind",
		"nimbus.Embeds.Registry mentions " + sub + "Registry",
		"nimbus.Field.Ev mentions " + sub + "Event",
		"nimbus.Func mentions " + sub + "FailureKind",
		"nimbus.Iface.Get mentions " + sub + "Handoff",
		"nimbus.Method.Do mentions " + sub + "HandlerFunc",
		"nimbus.Var mentions " + sub + "Registry",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("found\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}
