package deploy

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageStagesAppRoot runs scripts/package.sh into a temporary directory
// for each app and checks the app root it stages: what the Functions host
// and Core Tools expect to find, and nothing else.
func TestPackageStagesAppRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the handler four times through scripts/package.sh: the full suite (go test without -short, scripts/test.sh) runs it")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not on PATH; scripts/package.sh needs it to build the handler")
	}
	root := repoRoot(t)
	bin := filepath.Join(t.TempDir(), "bin")
	for _, c := range []struct {
		args, env []string
		app       string
		functions []string
		settings  string // the NimBus__App of the minimal local.settings.json
	}{
		{nil, nil, "", []string{"CloudEventsIngress", "DeferredProcessor", "InboxCleanup", "OutboxSweep", "PlaceOrder", "Subscriber"}, ""},
		{[]string{"resolver"}, nil, "apps/resolver", []string{"Resolver"}, "Resolver"},
		{nil, []string{"NIMBUS_APP=Resolver"}, "apps/resolver", []string{"Resolver"}, "Resolver"},
		{[]string{"endpoint"}, []string{"NIMBUS_APP=resolver"}, "", []string{"CloudEventsIngress", "DeferredProcessor", "InboxCleanup", "OutboxSweep", "PlaceOrder", "Subscriber"}, ""},
	} {
		t.Run(strings.Join(append(append([]string{}, c.args...), c.env...), ","), func(t *testing.T) {
			dist := filepath.Join(t.TempDir(), "dist")
			checkPackage(t, root, filepath.Join(root, c.app), dist, bin, c.args, c.env, c.functions, c.settings)
		})
	}
}

func checkPackage(t *testing.T, root, appRoot, dist, bin string, args, env []string, wantFunctions []string, wantApp string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(appRoot, "local.settings.json")); err == nil {
		t.Skipf("%s/local.settings.json exists: the staged settings are a copy of it", appRoot)
	}
	cmd := exec.Command("bash", append([]string{filepath.Join(root, "scripts", "package.sh")}, args...)...)
	cmd.Dir = t.TempDir() // the script must work from any directory
	cmd.Env = append(append(os.Environ(), "DIST_DIR="+dist, "BIN_DIR="+bin), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/package.sh failed: %v\n%s", err, out)
	}

	// host.json is staged unchanged and names the executable.
	if !bytes.Equal(readFile(t, filepath.Join(dist, "host.json")), readFile(t, filepath.Join(appRoot, "host.json"))) {
		t.Errorf("dist/host.json differs from %s/host.json", appRoot)
	}
	var h hostJSON
	readJSON(t, filepath.Join(dist, "host.json"), &h)
	exe := h.CustomHandler.Description.DefaultExecutablePath
	if exe == "" || filepath.Base(exe) != exe {
		t.Fatalf("defaultExecutablePath %q must be a plain file name in the app root", exe)
	}
	exePath := filepath.Join(dist, exe)
	fi, err := os.Stat(exePath)
	if err != nil {
		t.Fatalf("the executable host.json names is not staged: %v", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 != 0o111 {
		t.Errorf("%s: mode %v, want a regular file executable by everyone", exe, fi.Mode())
	}
	checkLinuxAmd64Static(t, exePath)

	// Function folders sit directly in the app root: the host only looks at its
	// immediate sub-directories.
	fns := appFunctions(t, appRoot)
	var names []string
	for _, fn := range fns {
		names = append(names, fn.Name)
	}
	if strings.Join(names, ",") != strings.Join(wantFunctions, ",") {
		t.Errorf("functions %v, want %v", names, wantFunctions)
	}
	allowed := map[string]bool{
		"host.json": true, exe: true, ".funcignore": true,
		"local.settings.json": true, ".nimbus-package": true,
	}
	for _, fn := range fns {
		if !functionNameRE.MatchString(fn.Name) || strings.EqualFold(fn.Name, "host") {
			t.Errorf("function %q does not match the host's function name rule", fn.Name)
		}
		staged := filepath.Join(dist, fn.Name, "function.json")
		b, err := os.ReadFile(staged)
		if err != nil {
			t.Errorf("functions/%s/function.json is not staged as %s/function.json: %v", fn.Name, fn.Name, err)
			continue
		}
		if !bytes.Equal(b, readFile(t, fn.Path)) {
			t.Errorf("%s/function.json differs from functions/%s/function.json", fn.Name, fn.Name)
		}
		allowed[fn.Name] = true
	}

	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !allowed[e.Name()] {
			t.Errorf("unexpected entry staged in the app root: %s", e.Name())
		}
	}
	for _, must := range []string{".funcignore", "local.settings.json"} {
		if _, err := os.Stat(filepath.Join(dist, must)); err != nil {
			t.Errorf("%s is not staged: %v", must, err)
		}
	}

	ignore := string(readFile(t, filepath.Join(dist, ".funcignore")))
	for _, pattern := range []string{"local.settings.json", "*.go", "go.mod"} {
		if !containsLine(ignore, pattern) {
			t.Errorf(".funcignore does not exclude %s", pattern)
		}
	}
	var ls struct{ Values map[string]string }
	if err := json.Unmarshal(readFile(t, filepath.Join(dist, "local.settings.json")), &ls); err != nil {
		t.Errorf("staged local.settings.json is not valid JSON: %v", err)
	}
	if ls.Values["FUNCTIONS_WORKER_RUNTIME"] != "custom" || ls.Values["NimBus__App"] != wantApp {
		t.Errorf("staged local.settings.json values %v, want FUNCTIONS_WORKER_RUNTIME=custom and NimBus__App=%q", ls.Values, wantApp)
	}

	// No sources or module files anywhere in the package.
	err = filepath.WalkDir(dist, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if strings.HasSuffix(name, ".go") || name == "go.mod" || name == "go.sum" {
			t.Errorf("Go source or module file staged: %s", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkLinuxAmd64Static asserts path is a statically linked Go ELF executable
// for linux/amd64.
func checkLinuxAmd64Static(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s is not an ELF file: %v", path, err)
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 {
		t.Errorf("%s: %v %v, want ELFCLASS64 EM_X86_64", path, f.Class, f.Machine)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		t.Errorf("%s: ELF type %v is not an executable", path, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a program interpreter: it is dynamically linked (build with CGO_ENABLED=0)", path)
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v", path, libs)
	}
	if f.Section(".note.go.buildid") == nil {
		t.Errorf("%s has no Go build id note: not a Go binary", path)
	}
}

func containsLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}

// TestPackageRefusesForeignDistDir checks that package.sh never deletes a
// non-empty directory it did not stage. It fails before building anything.
func TestPackageRefusesForeignDistDir(t *testing.T) {
	root := repoRoot(t)
	dist := t.TempDir()
	keep := filepath.Join(dist, "keep.txt")
	if err := os.WriteFile(keep, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "package.sh"))
	cmd.Env = append(os.Environ(), "DIST_DIR="+dist, "BIN_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("package.sh accepted a foreign non-empty DIST_DIR:\n%s", out)
	}
	if !strings.Contains(string(out), "refusing") {
		t.Errorf("package.sh failed without saying why:\n%s", out)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("package.sh deleted a file it did not stage: %v", err)
	}
}

// TestPublishPreconditions runs publish.sh with a PATH that has no `func`: it
// must stop with an install hint before doing anything, and it needs an app name.
func TestPublishPreconditions(t *testing.T) {
	root := repoRoot(t)
	pathDir := t.TempDir()
	for _, tool := range []string{"bash", "dirname", "cat"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("%s is not on PATH: %v", tool, err)
		}
		if err := os.Symlink(p, filepath.Join(pathDir, tool)); err != nil {
			t.Fatal(err)
		}
	}
	dist := filepath.Join(t.TempDir(), "dist")
	run := func(args ...string) (string, int) {
		cmd := exec.Command(filepath.Join(pathDir, "bash"), append([]string{filepath.Join(root, "scripts", "publish.sh")}, args...)...)
		cmd.Env = []string{"PATH=" + pathDir, "DIST_DIR=" + dist, "HOME=" + t.TempDir()}
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}

	if out, code := run(); code != 2 || !strings.Contains(out, "usage") {
		t.Errorf("publish.sh without an app name: exit %d, output %q; want exit 2 and usage", code, out)
	}
	out, code := run("my-app")
	if code != 127 || !strings.Contains(out, "Core Tools") || !strings.Contains(out, "azure-functions-core-tools") {
		t.Errorf("publish.sh without func: exit %d, output %q; want exit 127 and an install hint", code, out)
	}
	if _, err := os.Stat(dist); !os.IsNotExist(err) {
		t.Errorf("publish.sh staged %s although func is missing", dist)
	}
}
