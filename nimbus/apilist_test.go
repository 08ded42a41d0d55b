package nimbus

import (
	"flag"
	"fmt"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
	got := strings.Join(apiLines(typeCheck(t, nil)), "\n") + "\n"
	if *update {
		if err := os.MkdirAll(filepath.Dir(filepath.FromSlash(apiFile)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.FromSlash(apiFile), []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(filepath.FromSlash(apiFile))
	if err != nil {
		t.Fatalf("%v (create it with go test ./nimbus -run TestAPI -update)", err)
	}
	want := string(b)
	if got == want {
		return
	}
	gotLines, wantLines := strings.Split(got, "\n"), strings.Split(want, "\n")
	for _, l := range gotLines {
		if !slices.Contains(wantLines, l) {
			t.Errorf("+ %s", l)
		}
	}
	for _, l := range wantLines {
		if !slices.Contains(gotLines, l) {
			t.Errorf("- %s", l)
		}
	}
	t.Errorf("the exported API differs from %s (+ added, - removed); if the change is meant, run go test ./nimbus -run TestAPI -update and list it in CHANGELOG.md", apiFile)
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
func apiLines(pkg *types.Package) []string {
	p := apiPrinter{pkg: pkg}
	var out []string
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Const:
			out = append(out, "const "+name+" "+p.typ(obj.Type()), "const "+name+" = "+obj.Val().ExactString())
		case *types.Var:
			out = append(out, "var "+name+" "+p.typ(obj.Type()))
		case *types.Func:
			sig := obj.Type().(*types.Signature)
			out = append(out, "func "+name+p.typeParams(sig.TypeParams())+p.sig(sig))
		case *types.TypeName:
			out = append(out, p.typeName(obj)...)
		}
	}
	slices.Sort(out)
	return out
}

// apiPrinter prints types as they are written in pkg, without parameter
// names.
type apiPrinter struct{ pkg *types.Package }

func (p apiPrinter) typeName(obj *types.TypeName) []string {
	name := obj.Name()
	if obj.IsAlias() {
		return []string{"type " + name + " = " + p.typ(types.Unalias(obj.Type()))}
	}
	named := obj.Type().(*types.Named)
	head := "type " + name + p.typeParams(named.TypeParams())
	var out []string
	switch u := named.Underlying().(type) {
	case *types.Struct:
		out = append(out, head+" struct")
		for f := range u.Fields() {
			switch {
			case f.Embedded():
				out = append(out, head+" struct, embedded "+p.typ(f.Type()))
			case f.Exported():
				out = append(out, head+" struct, "+f.Name()+" "+p.typ(f.Type()))
			}
		}
	case *types.Interface:
		out = append(out, head+" "+p.typ(u))
		for m := range u.Methods() {
			if m.Exported() {
				out = append(out, head+" interface, "+m.Name()+p.sig(m.Type().(*types.Signature)))
			}
		}
	default:
		out = append(out, head+" "+p.typ(u))
	}
	for m := range named.Methods() {
		if !m.Exported() {
			continue
		}
		sig := m.Type().(*types.Signature)
		recv := name
		if _, ptr := sig.Recv().Type().(*types.Pointer); ptr {
			recv = "*" + name
		}
		out = append(out, "method ("+recv+") "+m.Name()+p.sig(sig))
	}
	return out
}

func (p apiPrinter) typeParams(tps *types.TypeParamList) string {
	if tps.Len() == 0 {
		return ""
	}
	var s []string
	for tp := range tps.TypeParams() {
		s = append(s, tp.Obj().Name()+" "+p.typ(tp.Constraint()))
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// sig prints a signature's parameters and results, without names.
func (p apiPrinter) sig(sig *types.Signature) string {
	var params []string
	for i, v := range slices.Collect(sig.Params().Variables()) {
		if sig.Variadic() && i == sig.Params().Len()-1 {
			params = append(params, "..."+p.typ(v.Type().(*types.Slice).Elem()))
			continue
		}
		params = append(params, p.typ(v.Type()))
	}
	s := "(" + strings.Join(params, ", ") + ")"
	var results []string
	for v := range sig.Results().Variables() {
		results = append(results, p.typ(v.Type()))
	}
	switch len(results) {
	case 0:
	case 1:
		s += " " + results[0]
	default:
		s += " (" + strings.Join(results, ", ") + ")"
	}
	return s
}

func (p apiPrinter) typ(t types.Type) string {
	switch t := t.(type) {
	case *types.Named:
		s := p.qualified(t.Obj())
		if args := t.TypeArgs(); args.Len() > 0 {
			var a []string
			for at := range args.Types() {
				a = append(a, p.typ(at))
			}
			s += "[" + strings.Join(a, ", ") + "]"
		}
		return s
	case *types.Alias:
		return p.qualified(t.Obj())
	case *types.Pointer:
		return "*" + p.typ(t.Elem())
	case *types.Slice:
		return "[]" + p.typ(t.Elem())
	case *types.Array:
		return fmt.Sprintf("[%d]%s", t.Len(), p.typ(t.Elem()))
	case *types.Map:
		return "map[" + p.typ(t.Key()) + "]" + p.typ(t.Elem())
	case *types.Chan:
		return map[types.ChanDir]string{types.SendRecv: "chan ", types.SendOnly: "chan<- ", types.RecvOnly: "<-chan "}[t.Dir()] + p.typ(t.Elem())
	case *types.Signature:
		return "func" + p.sig(t)
	case *types.Interface:
		var ms []string
		for m := range t.Methods() {
			if m.Exported() {
				ms = append(ms, m.Name()+p.sig(m.Type().(*types.Signature)))
			}
		}
		for e := range t.EmbeddedTypes() {
			ms = append(ms, p.typ(e))
		}
		if len(ms) == 0 {
			return "interface {}"
		}
		return "interface { " + strings.Join(ms, "; ") + " }"
	case *types.Struct:
		var fs []string
		for f := range t.Fields() {
			if f.Embedded() {
				fs = append(fs, p.typ(f.Type()))
			} else {
				fs = append(fs, f.Name()+" "+p.typ(f.Type()))
			}
		}
		return "struct { " + strings.Join(fs, "; ") + " }"
	}
	return types.TypeString(t, p.qualifier)
}

func (p apiPrinter) qualified(obj *types.TypeName) string {
	if obj.Pkg() == nil || obj.Pkg() == p.pkg {
		return obj.Name()
	}
	return obj.Pkg().Name() + "." + obj.Name()
}

func (p apiPrinter) qualifier(pkg *types.Package) string {
	if pkg == p.pkg {
		return ""
	}
	return pkg.Name()
}
