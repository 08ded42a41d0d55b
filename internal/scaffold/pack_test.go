package scaffold

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// builds records the builds of the stub that replaces GoBuild.
type builds struct {
	dirs, pkgs []string
}

// stubBuild makes package write a small file instead of building, so that
// the tests check the staging without a compiler run; the real build is
// checked by internal/dev/deploy through scripts/package.sh.
func stubBuild(t *testing.T) *builds {
	t.Helper()
	var b builds
	build = func(_ context.Context, dir, pkg, out string, _ io.Writer) error {
		b.dirs, b.pkgs = append(b.dirs, dir), append(b.pkgs, pkg)
		return os.WriteFile(out, []byte("\x7fELF stub"), 0o600)
	}
	t.Cleanup(func() { build = GoBuild })
	return &b
}

// staged lists the files in dist, slash-separated and sorted.
func staged(t *testing.T, dist string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dist, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dist, p)
		files = append(files, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

func TestPackageStagesTheAppRoot(t *testing.T) {
	endpointFiles := []string{".funcignore", ".nimbus-package", "CloudEventsIngress/function.json", "DeferredProcessor/function.json",
		"InboxCleanup/function.json", "OutboxSweep/function.json", "Subscriber/function.json", "handler", "host.json", "local.settings.json"}
	resolverFiles := []string{".funcignore", ".nimbus-package", "Resolver/function.json", "handler", "host.json", "local.settings.json"}
	for _, c := range []struct {
		name     string
		args     []string
		appRoot  string
		files    []string
		pkg      string
		settings string // NimBus__App of the minimal local.settings.json
	}{
		{"endpoint", nil, "", endpointFiles, ".", ""},
		{"resolver", []string{"--resolver"}, "apps/resolver", resolverFiles, ".", "Resolver"},
		{"other main package", []string{"--pkg", "./cmd/orders"}, "", endpointFiles, "./cmd/orders", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := stubBuild(t)
			dir := initModule(t)
			dist := filepath.Join(t.TempDir(), "dist")
			code, out, errOut := run(t, append([]string{"package", "--dir", dir, "--dist", dist}, c.args...)...)
			if code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out, errOut)
			}
			if len(b.pkgs) != 1 || b.pkgs[0] != c.pkg || b.dirs[0] != dir {
				t.Errorf("built %v in %v, want %s once in %s", b.pkgs, b.dirs, c.pkg, dir)
			}
			if got := staged(t, dist); strings.Join(got, " ") != strings.Join(c.files, " ") {
				t.Errorf("staged %v, want %v", got, c.files)
			}
			appRoot := filepath.Join(dir, filepath.FromSlash(c.appRoot))
			for _, f := range c.files {
				if f == "host.json" || strings.HasSuffix(f, "/function.json") {
					src := filepath.Join(appRoot, filepath.FromSlash(f))
					if strings.HasSuffix(f, "/function.json") {
						src = filepath.Join(appRoot, "functions", filepath.FromSlash(f))
					}
					if string(readFile(t, filepath.Join(dist, f))) != string(readFile(t, src)) {
						t.Errorf("%s is not a copy of %s", f, src)
					}
				}
			}
			if fi, err := os.Stat(filepath.Join(dist, "handler")); err != nil {
				t.Error(err)
			} else if fi.Mode().Perm() != 0o755 {
				t.Errorf("the executable has mode %v, want 0755", fi.Mode().Perm())
			}
			ignore := string(readFile(t, filepath.Join(dist, ".funcignore")))
			for _, p := range []string{"local.settings.json", "*.go", "go.mod", ".nimbus-package"} {
				if !strings.Contains("\n"+ignore, "\n"+p+"\n") {
					t.Errorf(".funcignore does not exclude %s", p)
				}
			}
			var ls struct{ Values map[string]string }
			if err := json.Unmarshal(readFile(t, filepath.Join(dist, "local.settings.json")), &ls); err != nil {
				t.Fatal(err)
			}
			wantValues := 1
			if c.settings != "" {
				wantValues = 2
			}
			if ls.Values["FUNCTIONS_WORKER_RUNTIME"] != "custom" || ls.Values["NimBus__App"] != c.settings || len(ls.Values) != wantValues {
				t.Errorf("minimal local.settings.json values %v, want FUNCTIONS_WORKER_RUNTIME=custom and NimBus__App=%q only", ls.Values, c.settings)
			}
			if !strings.Contains(out, "functions: ") || !strings.Contains(out, "minimal local.settings.json written") {
				t.Errorf("the output does not say what it staged:\n%s", out)
			}

			// Again, with the app's own local.settings.json: it is staged and
			// the directory is recreated (a stale file disappears).
			own := []byte(`{"IsEncrypted": false, "Values": {"FUNCTIONS_WORKER_RUNTIME": "custom", "NimBus__Endpoint": "Orders"}}`)
			if err := os.WriteFile(filepath.Join(appRoot, "local.settings.json"), own, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dist, "stale.txt"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if code, out, errOut := run(t, append([]string{"package", "--dir", dir, "--dist", dist}, c.args...)...); code != 0 {
				t.Fatalf("second run: exit %d\n%s%s", code, out, errOut)
			}
			if string(readFile(t, filepath.Join(dist, "local.settings.json"))) != string(own) {
				t.Error("the app's local.settings.json is not staged")
			}
			if got := staged(t, dist); strings.Join(got, " ") != strings.Join(c.files, " ") {
				t.Errorf("second run staged %v, want %v", got, c.files)
			}
		})
	}
}

func TestPackageRefuses(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, dir, dist string)
		msg   string
	}{
		{"foreign staging directory", func(t *testing.T, dir, dist string) {
			mustWrite(t, filepath.Join(dist, "keep.txt"), "precious")
		}, "was not staged by nimbus-func package; refusing to delete it"},
		{"staging path is a file", func(t *testing.T, dir, dist string) {
			if err := os.Remove(dist); err != nil {
				t.Fatal(err)
			}
			mustWrite(t, dist, "precious")
		}, "exists and is not a directory"},
		{"executable outside the app root", func(t *testing.T, dir, dist string) {
			editJSON(t, dir, "host.json", func(m map[string]any) {
				m["customHandler"].(map[string]any)["description"].(map[string]any)["defaultExecutablePath"] = "../handler"
			})
		}, `defaultExecutablePath "../handler" must be a plain file name in the app root`},
		{"no executable", func(t *testing.T, dir, dist string) {
			editJSON(t, dir, "host.json", func(m map[string]any) { delete(m, "customHandler") })
		}, "has no customHandler.description.defaultExecutablePath"},
		{"folder without function.json", func(t *testing.T, dir, dist string) {
			if err := os.Mkdir(filepath.Join(dir, "functions", "Empty"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, "functions/Empty/function.json is missing"},
		{"function name the host refuses", func(t *testing.T, dir, dist string) {
			mustWrite(t, filepath.Join(dir, "functions", "1st", "function.json"), `{"bindings": []}`)
		}, `function name "1st" is not valid for the Functions host`},
		{"function named like the executable", func(t *testing.T, dir, dist string) {
			mustWrite(t, filepath.Join(dir, "functions", "Handler", "function.json"), `{"bindings": []}`)
		}, `function folder "Handler" would collide with the executable "handler"`},
		{"no functions", func(t *testing.T, dir, dist string) {
			if err := os.RemoveAll(filepath.Join(dir, "functions")); err != nil {
				t.Fatal(err)
			}
		}, "no functions/*/function.json found"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := stubBuild(t)
			dir := initModule(t)
			dist := t.TempDir()
			c.setup(t, dir, dist)
			before := staged(t, dir)
			code, out, errOut := run(t, "package", "--dir", dir, "--dist", dist)
			if code != 1 || !strings.Contains(errOut, c.msg) {
				t.Errorf("exit %d, stderr %q; want exit 1 and %q", code, errOut, c.msg)
			}
			if len(b.pkgs) != 0 {
				t.Errorf("it built %v before refusing", b.pkgs)
			}
			if strings.Contains(out, "staged") {
				t.Errorf("it staged:\n%s", out)
			}
			if after := staged(t, dir); strings.Join(after, " ") != strings.Join(before, " ") {
				t.Errorf("the module changed: %v, was %v", after, before)
			}
		})
	}
	t.Run("foreign directory kept", func(t *testing.T) {
		stubBuild(t)
		dir, dist := initModule(t), t.TempDir()
		mustWrite(t, filepath.Join(dist, "keep.txt"), "precious")
		run(t, "package", "--dir", dir, "--dist", dist)
		if string(readFile(t, filepath.Join(dist, "keep.txt"))) != "precious" {
			t.Error("package changed a file it did not stage")
		}
	})
}

func mustWrite(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fakeFunc puts a `func` on PATH that records its arguments and working
// directory in the returned file, and exits with code.
func fakeFunc(t *testing.T, code string) (record string) {
	t.Helper()
	bin := t.TempDir()
	record = filepath.Join(t.TempDir(), "func.args")
	mustWrite(t, filepath.Join(bin, "func"), "#!/bin/sh\n{ pwd; printf '%s\\n' \"$@\"; } > '"+record+"'\nexit "+code+"\n")
	if err := os.Chmod(filepath.Join(bin, "func"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return record
}

func TestPublish(t *testing.T) {
	b := stubBuild(t)
	record := fakeFunc(t, "0")
	dir := initModule(t)
	dist := filepath.Join(t.TempDir(), "dist")
	code, out, errOut := run(t, "publish", "orders-func", "--resolver", "--dir", dir, "--dist", dist, "--", "--slot", "staging")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	want := []string{dist, "azure", "functionapp", "publish", "orders-func", "--slot", "staging"}
	if got := strings.Fields(string(readFile(t, record))); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("func ran as %q, want %q (working directory first)", got, want)
	}
	if len(b.pkgs) != 1 {
		t.Errorf("built %d times, want once", len(b.pkgs))
	}
	if _, err := os.Stat(filepath.Join(dist, "Resolver", "function.json")); err != nil {
		t.Errorf("publish --resolver did not stage the Resolver app: %v", err)
	}
	if !strings.Contains(out, "publish: func azure functionapp publish orders-func --slot staging") {
		t.Errorf("the output does not show the func command:\n%s", out)
	}

	// The app name may also follow the options; a failing func fails publish.
	record = fakeFunc(t, "3")
	code, _, errOut = run(t, "publish", "--dir", dir, "--dist", dist, "orders-func")
	if code != 1 || !strings.Contains(errOut, "func azure functionapp publish: exit status 3") {
		t.Errorf("failing func: exit %d, stderr %q; want exit 1 and the func failure", code, errOut)
	}
	if got := strings.Fields(string(readFile(t, record))); strings.Join(got, " ") != strings.Join(want[:5], " ") {
		t.Errorf("func ran as %q, want %q", got, want[:5])
	}
}

func TestPublishPreconditions(t *testing.T) {
	b := stubBuild(t)
	dir := initModule(t)
	dist := filepath.Join(t.TempDir(), "dist")
	t.Setenv("PATH", t.TempDir()) // no func

	code, _, errOut := run(t, "publish", "--dir", dir, "--dist", dist)
	if code != 2 || !strings.Contains(errOut, "the function app's name is required\nusage: nimbus-func publish APP ") {
		t.Errorf("without an app name: exit %d, stderr %q; want exit 2 and usage", code, errOut)
	}
	code, _, errOut = run(t, "publish", "orders-func", "--dir", dir, "--dist", dist)
	if code != 127 || !strings.Contains(errOut, "Core Tools") || !strings.Contains(errOut, "azure-functions-core-tools") {
		t.Errorf("without func: exit %d, stderr %q; want exit 127 and an install hint", code, errOut)
	}
	if _, err := os.Stat(dist); !os.IsNotExist(err) || len(b.pkgs) != 0 {
		t.Errorf("publish built or staged although func is missing: %v, %v", err, b.pkgs)
	}
}
