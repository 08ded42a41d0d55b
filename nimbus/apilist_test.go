package nimbus

import (
	"flag"
	"go/types"
	"slices"
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/dev/apilist"
)

var update = flag.Bool("update", false, "rewrite testdata/api.txt from the package's exported API")

// apiFile pins the exported API: one line per exported identifier, field
// and method, with its signature, as Go's own api/*.txt files list the
// standard library.
const apiFile = "testdata/api.txt"

// TestAPI compares the exported API with testdata/api.txt, so that it
// changes only on purpose: after a deliberate change, run
//
//	go test ./nimbus -run TestAPI -update
//
// and list the change in CHANGELOG.md.
func TestAPI(t *testing.T) {
	apilist.Golden(t, typeCheck(t, nil), apiFile, *update, "go test ./nimbus -run TestAPI -update")
}

// The listing names every kind of exported identifier, fields and methods
// included, without parameter names, and leaves unexported ones out.
func TestAPILinesListEveryKind(t *testing.T) {
	const src = `package nimbus

import (
	"context"
	"io"
)

const Untyped = 3

type Level int

const Typed Level = 2

var Var error

type S struct {
	Field  string
	Nested func(ctx context.Context, w io.Writer) (n int, err error)
	hidden int
	io.Reader
}

func (s *S) Method(a, b string, rest ...int) error { return nil }
func (S) Value() (int, bool)                      { return 0, false }
func (S) unexported()                               {}

type I interface {
	Get(key string) any
	unexported()
}

type G[T any, K comparable] struct{ V map[K]T }

func Generic[T any](s *S, f func(T) error) {}

type Alias = S

type Fn func(ctx context.Context) error

func hiddenFunc() {}
`
	got := apiLines(typeCheck(t, map[string]string{"kinds.go": src}))
	want := []string{
		"const Typed = 2",
		"const Typed Level",
		"const Untyped = 3",
		"const Untyped untyped int",
		"func Generic[T any](*S, func(T) error)",
		"type Alias = S",
		"type Fn func(context.Context) error",
		"type G[T any, K comparable] struct",
		"type G[T any, K comparable] struct, V map[K]T",
		"type I interface { Get(string) any }",
		"type I interface, Get(string) any",
		"type Level int",
		"type S struct",
		"type S struct, Field string",
		"type S struct, Nested func(context.Context, io.Writer) (int, error)",
		"type S struct, embedded io.Reader",
		"method (*S) Method(string, string, ...int) error",
		"method (S) Value() (int, bool)",
		"var Var error",
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("lines\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// apiLines lists pkg's exported API, sorted.
func apiLines(pkg *types.Package) []string { return apilist.Lines(pkg) }
