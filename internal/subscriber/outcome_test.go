package subscriber

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// outcomeConstants reads the Outcome constants declared in this package's
// source, so a constant added without a row in the table fails the test.
func outcomeConstants(t *testing.T) map[Outcome]string {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	consts := map[Outcome]string{}
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
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Outcome" {
					continue
				}
				for i, name := range vs.Names {
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok {
						t.Fatalf("%s: not a literal", name.Name)
					}
					consts[Outcome(lit.Value[1:len(lit.Value)-1])] = name.Name
				}
			}
		}
	}
	return consts
}

func TestEveryOutcomeHasARow(t *testing.T) {
	consts := outcomeConstants(t)
	if len(consts) < 10 {
		t.Fatalf("found only %d Outcome constants; the parser missed some", len(consts))
	}
	for o, name := range consts {
		spec, ok := outcomes[o]
		if !ok {
			t.Errorf("%s (%q) has no row in the outcomes table", name, o)
			continue
		}
		if spec.Message == "" || http.StatusText(spec.Status) == "" {
			t.Errorf("%s: incomplete row %+v", name, spec)
		}
		if o.Completes() && spec.Pause {
			t.Errorf("%s completes the message but pauses", name)
		}
	}
	for o := range outcomes {
		if _, ok := consts[o]; !ok {
			t.Errorf("table row %q has no constant", o)
		}
	}
	if Outcome("no such outcome").Completes() {
		t.Error("an outcome without a row completes the message")
	}
}

// The settlement of each outcome, as the README's table documents it.
func TestOutcomeSettlement(t *testing.T) {
	cases := map[Outcome]struct {
		status int
		pause  bool
	}{
		OutcomeCompleted:              {200, false},
		OutcomeDuplicate:              {200, false},
		OutcomeUnsupported:            {200, false},
		OutcomePendingHandoff:         {200, false},
		OutcomeHeartbeat:              {200, false},
		OutcomeTransientFailure:       {503, true},
		OutcomeHandlerFailed:          {503, true},
		OutcomePublishFailed:          {503, true},
		OutcomePermanentFailure:       {422, false},
		OutcomeInvalidMessage:         {422, false},
		OutcomeUnsupportedMessageType: {422, false},
		OutcomeInvalidCloudEvent:      {422, false},
		OutcomeCanceled:               {503, false},
		OutcomeMalformed:              {400, false},
		OutcomeOverloaded:             {503, false},
	}
	for o, want := range cases {
		if s := o.Spec(); s.Status != want.status || s.Pause != want.pause {
			t.Errorf("%s: status %d pause %v, want %d %v", o, s.Status, s.Pause, want.status, want.pause)
		}
	}
	if len(cases) != len(outcomes) {
		t.Errorf("%d outcomes in the table, %d checked here", len(outcomes), len(cases))
	}
}
