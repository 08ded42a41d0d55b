package config

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// keyConstants returns the values of the Key* constants declared in config.go.
func keyConstants(t *testing.T) map[string]string {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		inspectKeys(f, keys)
	}
	if len(keys) < 20 {
		t.Fatalf("found only %d Key constants", len(keys))
	}
	return keys
}

// inspectKeys adds the Key* string constants of f to keys.
func inspectKeys(f *ast.File, keys map[string]string) {
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, name := range vs.Names {
			if len(name.Name) > 3 && name.Name[:3] == "Key" && i < len(vs.Values) {
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
					v, _ := strconv.Unquote(lit.Value)
					keys[name.Name] = v
				}
			}
		}
		return true
	})
}

func TestSettingsListsEveryKeyOnce(t *testing.T) {
	listed := map[string]int{}
	for _, s := range Settings {
		listed[s.Name]++
	}
	for name, v := range keyConstants(t) {
		if listed[v] != 1 {
			t.Errorf("%s (%s) is listed %d times in Settings, want once", name, v, listed[v])
		}
		delete(listed, v)
	}
	for v := range listed {
		t.Errorf("Settings lists %s, which no Key constant names", v)
	}
}

// Writing a default out changes nothing: the listed defaults are Load's.
func TestSettingsDefaultsAreLoadDefaults(t *testing.T) {
	implicit, err := Load(FromMap(base()))
	if err != nil {
		t.Fatal(err)
	}
	m := base()
	for _, s := range Settings {
		if s.Default != "" {
			m[s.Name] = s.Default
		}
	}
	explicit, err := Load(FromMap(m))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(implicit, explicit) {
		t.Errorf("defaults written out load differently:\n implicit %+v\n explicit %+v", implicit, explicit)
	}
}

// The sample settings list every setting the host does not set, with its
// default.
func TestSampleSettingsShowDefaults(t *testing.T) {
	raw, err := os.ReadFile("../../local.settings.sample.json")
	if err != nil {
		t.Fatal(err)
	}
	var sample struct{ Values map[string]string }
	if err := json.Unmarshal(raw, &sample); err != nil {
		t.Fatal(err)
	}
	for _, s := range Settings {
		v, ok := sample.Values[s.Name]
		switch {
		case s.SetByHost:
			if ok {
				t.Errorf("the sample sets %s, which the host sets", s.Name)
			}
		case s.Indexed:
			if ok {
				t.Errorf("the sample sets %s, the pattern of an indexed setting", s.Name)
			}
		case !ok:
			t.Errorf("the sample does not list %s", s.Name)
		case s.SampleValue() != "" && v != s.SampleValue():
			t.Errorf("the sample sets %s=%q, want %q", s.Name, v, s.SampleValue())
		}
	}
}
