package scaffold

import (
	"bytes"
	"encoding/json"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the repository's host files from the templates")

// goldenFiles and goldenDirs are the repository's renderings of the
// templates for the sample endpoint (main.go, .funcignore and .gitignore are
// not: the repository's main package is handler/, package stages
// .funcignore, and the repository's .gitignore is its own).
var (
	goldenFiles = []string{"host.json", "local.settings.sample.json"}
	goldenDirs  = []string{"functions", "apps/resolver", "infra/bicep"}
)

// repoRoot is the module root: two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("runtime.Caller failed")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// sampleEndpoint reads the sample endpoint's name from the repository's
// local.settings.sample.json.
func sampleEndpoint(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "local.settings.sample.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s struct{ Values map[string]string }
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("local.settings.sample.json: %v", err)
	}
	return s.Values["NimBus__Endpoint"]
}

// TestRepositoryFilesAreTheTemplates asserts that the repository's host
// files are exactly what init writes for the sample endpoint, no more and no
// less. With -update it rewrites them from the templates instead.
func TestRepositoryFilesAreTheTemplates(t *testing.T) {
	root := repoRoot(t)
	endpoint := sampleEndpoint(t, root)
	files, err := render(endpoint, true, true)
	if err != nil {
		t.Fatalf("the sample endpoint %q: %v", endpoint, err)
	}
	want := map[string][]byte{}
	for _, f := range files {
		if f.Path == mainFile || f.Path == funcIgnore || f.Path == gitIgnore {
			continue
		}
		if !inGolden(f.Path) {
			t.Errorf("template %s has no rendering in the repository: add its path to goldenFiles or goldenDirs", f.Path)
		}
		want[f.Path] = f.Data
	}

	got := map[string][]byte{}
	for _, p := range goldenFiles {
		if b, err := os.ReadFile(filepath.Join(root, p)); err == nil {
			got[p] = b
		}
	}
	for _, d := range goldenDirs {
		err := filepath.WalkDir(filepath.Join(root, filepath.FromSlash(d)), func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			got[filepath.ToSlash(rel)], err = os.ReadFile(p)
			return err
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}

	if *update {
		for p := range got {
			if _, ok := want[p]; !ok {
				if err := os.Remove(filepath.Join(root, filepath.FromSlash(p))); err != nil {
					t.Fatal(err)
				}
				t.Logf("removed %s", p)
			}
		}
		for p, b := range want {
			if !bytes.Equal(got[p], b) {
				dst := filepath.Join(root, filepath.FromSlash(p))
				if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(dst, b, 0o644); err != nil {
					t.Fatal(err)
				}
				t.Logf("wrote %s", p)
			}
		}
		return
	}
	for p, b := range want {
		g, ok := got[p]
		switch {
		case !ok:
			t.Errorf("%s is missing: init writes it (go test ./internal/scaffold -run %s -update)", p, t.Name())
		case !bytes.Equal(g, b):
			t.Errorf("%s differs from its template for endpoint %s (go test ./internal/scaffold -run %s -update): %s", p, endpoint, t.Name(), firstDiff(g, b))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s has no template: add it under internal/scaffold/templates or remove it", p)
		}
	}
}

func inGolden(p string) bool {
	for _, f := range goldenFiles {
		if p == f {
			return true
		}
	}
	for _, d := range goldenDirs {
		if inDir(p, d) {
			return true
		}
	}
	return false
}

// firstDiff describes the first line where got and want differ.
func firstDiff(got, want []byte) string {
	g, w := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl []byte
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if !bytes.Equal(gl, wl) {
			return "line " + strconv.Itoa(i+1) + ": have " + truncate(string(gl), 100) + "; want " + truncate(string(wl), 100)
		}
	}
	return "same lines"
}
