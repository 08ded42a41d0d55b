// Package outcometest checks an outcome table against the outcome constants
// its package declares, so a constant added without a row fails a test.
package outcometest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/outcome"
)

// Constants reads the constants of type typeName declared in the non-test
// Go files of the current directory (a test's package directory): value →
// constant name.
func Constants(t testing.TB, typeName string) map[string]string {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	fset := token.NewFileSet()
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != typeName {
					continue
				}
				for i, n := range vs.Names {
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok {
						t.Fatalf("%s: not a literal", n.Name)
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatalf("%s: %v", n.Name, err)
					}
					consts[v] = n.Name
				}
			}
		}
	}
	return consts
}

// Check fails t unless every constant of type typeName in the package has a
// complete row in table, every row has a constant, and an outcome without a
// row fails the invocation. minConsts guards against a parser that silently
// finds nothing.
func Check[O ~string](t *testing.T, table outcome.Table[O], typeName string, minConsts int) {
	t.Helper()
	if u := table.Spec("no such outcome"); u.Completes() || u.Message == "" || u != table.Unknown {
		t.Errorf("an outcome without a row gets %+v, want the table's failing Unknown row", u)
	}
	consts := Constants(t, typeName)
	if len(consts) < minConsts {
		t.Fatalf("found only %d %s constants; the parser missed some", len(consts), typeName)
	}
	for v, name := range consts {
		spec, ok := table.Rows[O(v)]
		if !ok {
			t.Errorf("%s (%q) has no row in the outcomes table", name, v)
			continue
		}
		if spec.Message == "" || http.StatusText(spec.Status) == "" {
			t.Errorf("%s: incomplete row %+v", name, spec)
		}
		if spec.Completes() && spec.Pause {
			t.Errorf("%s completes the message but pauses", name)
		}
	}
	for o := range table.Rows {
		if _, ok := consts[string(o)]; !ok {
			t.Errorf("table row %q has no constant", o)
		}
	}
}

// CheckSettlement fails t unless every outcome of want has, in table, the
// HTTP status the handler answers (Status) and whether that answer waits for
// the redelivery pause (Pause), and want names every row of table.
func CheckSettlement[O ~string](t *testing.T, table outcome.Table[O], want map[O]struct {
	Status int
	Pause  bool
}) {
	t.Helper()
	for o, w := range want {
		s, ok := table.Rows[o]
		if !ok {
			t.Errorf("%s has no row in the outcomes table", o)
			continue
		}
		if s.Status != w.Status || s.Pause != w.Pause {
			t.Errorf("%s: status %d pause %v, want %d %v", o, s.Status, s.Pause, w.Status, w.Pause)
		}
	}
	for o := range table.Rows {
		if _, ok := want[o]; !ok {
			t.Errorf("%s: the outcomes table has a row whose settlement is not checked", o)
		}
	}
}
