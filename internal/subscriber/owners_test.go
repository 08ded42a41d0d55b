package subscriber

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// fieldOwners names the one file that writes each field of a delivery's
// state (docs/layout.md): the read-only view only where it is read, and
// each field the job keeps in the file of the step that owns it.
var fieldOwners = map[string]string{
	"view.*":           "view.go",
	"job.view":         "view.go",
	"job.settle":       "view.go",
	"job.settleCancel": "view.go",
	"job.own":          "inbox.go",
	"job.st":           "sessionstate.go",
	"job.tx":           "tx.go",
	"job.behindBlock":  "drain.go",
	"job.out":          "run.go",
	"txState.*":        "tx.go",
	"outbox.*":         "publish.go",
}

// Each field of a delivery's state is written (assigned, incremented or
// its address taken) from the one file that owns it: nothing outside
// job.read writes the view of a delivery, and no step writes another's
// state.
func TestDeliveryStateHasOneWriterFile(t *testing.T) {
	writes := stateWrites(t)
	if len(writes["job.st"]) == 0 || len(writes["view.attempt"]) == 0 {
		t.Fatalf("found no write of job.st or view.attempt: the check reads nothing (%d fields)", len(writes))
	}
	for field, files := range writes {
		owner, ok := fieldOwners[field]
		if !ok {
			owner, ok = fieldOwners[strings.SplitN(field, ".", 2)[0]+".*"]
		}
		if !ok {
			continue
		}
		for _, f := range files {
			if f != owner {
				t.Errorf("%s is written in %s; only %s writes it", field, f, owner)
			}
		}
	}
}

// stateWrites type-checks the package's files and returns, for each field
// of a job, view, txState or outbox, the files that write it.
func stateWrites(t *testing.T) map[string][]string {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	// Only the package's own types matter: the imported packages are
	// left empty, and the errors that leaves are ignored.
	conf := types.Config{Importer: emptyImporter{}, Error: func(error) {}}
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}}
	pkg, _ := conf.Check("subscriber", fset, files, info)
	seen := map[string]map[string]bool{}
	note := func(e ast.Expr) {
		se, ok := ast.Unparen(e).(*ast.SelectorExpr)
		if !ok {
			return
		}
		sel := info.Selections[se]
		if sel == nil || sel.Kind() != types.FieldVal {
			return
		}
		recv := sel.Recv()
		if p, ok := recv.(*types.Pointer); ok {
			recv = p.Elem()
		}
		named, ok := recv.(*types.Named)
		if !ok || named.Obj().Pkg() != pkg {
			return
		}
		// A promoted field is the embedded struct's.
		if len(sel.Index()) > 1 {
			named = embeddedOwner(named, sel.Index())
		}
		field := named.Obj().Name() + "." + se.Sel.Name
		file := filepath.Base(fset.Position(se.Pos()).Filename)
		if seen[field] == nil {
			seen[field] = map[string]bool{}
		}
		seen[field][file] = true
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				for _, l := range n.Lhs {
					note(l)
				}
			case *ast.IncDecStmt:
				note(n.X)
			case *ast.UnaryExpr:
				if n.Op == token.AND {
					note(n.X)
				}
			}
			return true
		})
	}
	out := map[string][]string{}
	for field, fs := range seen {
		for f := range fs {
			out[field] = append(out[field], f)
		}
		sort.Strings(out[field])
	}
	return out
}

// embeddedOwner is the struct type that declares the field reached from
// named through the embedding path index.
func embeddedOwner(named *types.Named, index []int) *types.Named {
	for _, i := range index[:len(index)-1] {
		st, ok := named.Underlying().(*types.Struct)
		if !ok {
			return named
		}
		t := st.Field(i).Type()
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		n, ok := t.(*types.Named)
		if !ok {
			return named
		}
		named = n
	}
	return named
}

// emptyImporter imports every package as an empty one.
type emptyImporter struct{}

func (emptyImporter) Import(path string) (*types.Package, error) {
	p := types.NewPackage(path, filepath.Base(path))
	p.MarkComplete()
	return p, nil
}
