package nimbus

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// listed is what `go list -export -deps -json` says of a package.
type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Export     string
}

// listing is the package in the working directory and the export data of
// its dependencies by import path.
type listing struct {
	self    listed
	exports map[string]string
}

// listExports lists them once per test binary.
var listExports = sync.OnceValues(func() (*listing, error) {
	out, err := exec.Command("go", "list", "-export", "-deps", "-json", ".").Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	l := &listing{exports: map[string]string{}}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			return nil, err
		}
		l.exports[p.ImportPath] = p.Export
		l.self = p // the package itself comes last
	}
	return l, nil
})

// typeCheck type-checks the non-test files of the package in the working
// directory, plus extra files (name → source) in its place when given,
// against the export data of its dependencies.
func typeCheck(t *testing.T, extra map[string]string) *types.Package {
	t.Helper()
	l, err := listExports()
	if err != nil {
		t.Fatal(err)
	}
	self := l.self
	fset := token.NewFileSet()
	var files []*ast.File
	add := func(name string, src any) {
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if extra == nil {
		for _, name := range self.GoFiles {
			add(filepath.Join(self.Dir, name), nil)
		}
	}
	for name, src := range extra {
		add(name, src)
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) { return os.Open(l.exports[path]) })
	pkg, err := (&types.Config{Importer: imp}).Check(self.ImportPath, fset, files, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pkg
}

// internalMentions lists, for every exported identifier of pkg, the
// internal types its exported API mentions: types of exported variables
// and constants, signatures of exported functions and methods, exported
// and embedded fields, interface methods, and alias targets.
func internalMentions(pkg *types.Package) []string {
	var out []string
	var visit func(where string, t types.Type)
	visit = func(where string, t types.Type) {
		switch t := t.(type) {
		case *types.Alias:
			visit(where, types.Unalias(t))
		case *types.Named:
			if p := t.Obj().Pkg(); p != nil && p != pkg && (strings.Contains(p.Path(), "/internal/") || strings.HasSuffix(p.Path(), "/internal")) {
				out = append(out, where+" mentions "+p.Path()+"."+t.Obj().Name())
			}
			for a := range t.TypeArgs().Types() {
				visit(where, a)
			}
		case *types.Pointer:
			visit(where, t.Elem())
		case *types.Slice:
			visit(where, t.Elem())
		case *types.Array:
			visit(where, t.Elem())
		case *types.Chan:
			visit(where, t.Elem())
		case *types.Map:
			visit(where, t.Key())
			visit(where, t.Elem())
		case *types.Signature:
			for v := range t.Params().Variables() {
				visit(where, v.Type())
			}
			for v := range t.Results().Variables() {
				visit(where, v.Type())
			}
		case *types.Struct:
			for f := range t.Fields() {
				if f.Exported() || f.Embedded() {
					visit(where+"."+f.Name(), f.Type())
				}
			}
		case *types.Interface:
			for i := range t.NumExplicitMethods() {
				if m := t.ExplicitMethod(i); m.Exported() {
					visit(where+"."+m.Name(), m.Type())
				}
			}
			for i := range t.NumEmbeddeds() {
				visit(where, t.EmbeddedType(i))
			}
		case *types.TypeParam:
			visit(where, t.Constraint())
		}
	}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		where := pkg.Name() + "." + name
		tn, isType := obj.(*types.TypeName)
		if !isType || tn.IsAlias() {
			visit(where, obj.Type())
			continue
		}
		named := tn.Type().(*types.Named)
		visit(where, named.Underlying())
		for m := range named.Methods() {
			if m.Exported() {
				visit(where+"."+m.Name(), m.Type())
			}
		}
	}
	slices.Sort(out)
	return out
}

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
