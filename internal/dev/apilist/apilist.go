// Package apilist lists the exported API of a package, one line per
// exported identifier, field and method with its signature, as Go's own
// api/*.txt files list the standard library, and compares it with a
// golden file; and it finds internal types a public API mentions. The
// public packages' tests use it.
package apilist

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

// TypeCheck type-checks the non-test files of the package in the working
// directory, or extra files (name → source) in their place when given,
// against the export data of its dependencies.
func TypeCheck(t testing.TB, extra map[string]string) *types.Package {
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

// InternalMentions lists, for every exported identifier of pkg, the
// internal types its exported API mentions: types of exported variables
// and constants, signatures of exported functions and methods, exported
// and embedded fields, interface methods, and alias targets.
func InternalMentions(pkg *types.Package) []string {
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

// Golden compares pkg's exported API with the file at path (relative to
// the package's directory): every line added or removed is an error that
// tells to run rerun after a deliberate change. With update, it rewrites
// the file instead.
func Golden(t *testing.T, pkg *types.Package, path string, update bool, rerun string) {
	t.Helper()
	got := strings.Join(Lines(pkg), "\n") + "\n"
	if update {
		if err := os.MkdirAll(filepath.Dir(filepath.FromSlash(path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.FromSlash(path), []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(filepath.FromSlash(path))
	if err != nil {
		t.Fatalf("%v (create it with %s)", err, rerun)
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
	t.Errorf("the exported API differs from %s (+ added, - removed); if the change is meant, run %s and list it in CHANGELOG.md", path, rerun)
}

// Lines lists pkg's exported API, sorted.
func Lines(pkg *types.Package) []string {
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
