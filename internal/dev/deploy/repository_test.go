package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/config"
)

// trackedFiles runs .ci/tracked-files on the checkout dir and returns its
// exit code and what it printed.
func trackedFiles(t *testing.T, dir string) (int, string) {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(repoRoot(t), ".ci", "tracked-files"), dir)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// git runs git in dir.
func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// The repository holds no build output: CI's check passes on it.
func TestRepositoryTracksNoBuildOutput(t *testing.T) {
	root := repoRoot(t)
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		t.Skip("not a git checkout: nothing is tracked")
	}
	if code, out := trackedFiles(t, root); code != 0 {
		t.Errorf(".ci/tracked-files: exit %d\n%s", code, out)
	}
}

// CI's check refuses a tracked executable binary (by its header, or a binary
// file marked executable) and a file over 1 MB, naming each, and lets
// through text, small binary data and what .ci/fixtures lists.
func TestTrackedFilesRefusesBuildOutput(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is not on PATH")
	}
	dir := t.TempDir()
	git(t, dir, "init", "-q")
	write := func(p string, b []byte, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), b, mode); err != nil {
			t.Fatal(err)
		}
	}
	elf := append([]byte("\x7fELF\x02\x01\x01"), make([]byte, 64)...)
	write("cmd/tool/tool", elf, 0o644)                                         // refused by its header, even unmarked
	write("app.exe", append([]byte("MZ\x90\x00"), make([]byte, 64)...), 0o644) // a PE header
	write("bin/blob", []byte("\x00\x01\x02 data"), 0o755)                      // binary and marked executable
	write("big.txt", bytes.Repeat([]byte("a\n"), 600<<10), 0o644)              // 1.2 MB of text
	write("testdata/tiny.bin", []byte("\x00\x01\x02"), 0o644)                  // small binary data: fine
	write("scripts/run.sh", []byte("#!/bin/sh\necho hi\n"), 0o755)             // an executable script: fine
	write("testdata/fixture.elf", elf, 0o644)                                  // listed below: fine
	write(".ci/fixtures", []byte("# fixtures\ntestdata/fixture.elf # read by TestSomething\n"), 0o644)
	git(t, dir, "add", "-A")

	code, out := trackedFiles(t, dir)
	if code != 1 {
		t.Errorf("exit %d, want 1; output:\n%s", code, out)
	}
	for _, want := range []string{"cmd/tool/tool: an executable binary", "app.exe: an executable binary", "bin/blob: a binary file marked executable",
		"big.txt: 1228800 bytes, over 1 MB"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, fine := range []string{"tiny.bin", "run.sh", "fixture.elf"} {
		if strings.Contains(out, fine) {
			t.Errorf("output names %s, which is allowed:\n%s", fine, out)
		}
	}

	// Removed from the index (and ignored), the check passes.
	git(t, dir, "rm", "-q", "--cached", "cmd/tool/tool", "app.exe", "bin/blob", "big.txt")
	if code, out := trackedFiles(t, dir); code != 0 {
		t.Errorf("after removing them: exit %d\n%s", code, out)
	}
}

// The README sends a reader to the runnable examples where they are: go doc
// prints no examples, so it must not promise them there, and every example
// file it links holds examples.
func TestReadmeNamesWhereTheExamplesAre(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := strings.Join(strings.Fields(string(b)), " ")
	for _, claim := range regexp.MustCompile("`go doc[^`]*`[^.;]*example").FindAllString(readme, -1) {
		if !strings.Contains(claim, "example test files") {
			t.Errorf("README.md says go doc shows examples, which it does not: %q", claim)
		}
	}
	links := regexp.MustCompile(`\]\((nimbus/example[^)]*_test\.go)\)`).FindAllStringSubmatch(readme, -1)
	if len(links) == 0 {
		t.Fatal("README.md links no example test file of package nimbus")
	}
	for _, l := range links {
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(l[1])))
		if err != nil {
			t.Errorf("README.md links %s: %v", l[1], err)
			continue
		}
		if !regexp.MustCompile(`(?m)^func Example\w*\(\) \{`).Match(src) || !bytes.Contains(src, []byte("// Output:")) {
			t.Errorf("%s holds no runnable example (a func Example… with an // Output: comment)", l[1])
		}
	}
}

// The Bicep's endpointName takes what the app takes at start-up and
// nimbus-func init writes: the same longest name, and it names every name
// NimBus reserves.
func TestBicepEndpointNameIsTheAppsRule(t *testing.T) {
	for _, rel := range []string{"main.bicep", "modules/servicebus-topology.bicep"} {
		src := bicepText(t, rel)
		m := regexp.MustCompile(`(?s)@description\('([^\n]*)'\)\n@minLength\(1\)\n@maxLength\((\d+)\)\nparam endpointName string`).FindStringSubmatch(src)
		if m == nil {
			t.Errorf("%s: no endpointName parameter with @minLength(1) and @maxLength", rel)
			continue
		}
		if m[2] != strconv.Itoa(config.MaxDeployedEndpointLen) {
			t.Errorf("%s: endpointName @maxLength(%s), the app takes %d characters", rel, m[2], config.MaxDeployedEndpointLen)
		}
		if rel != "main.bicep" {
			continue
		}
		for _, r := range config.ReservedEndpointNames {
			if !regexp.MustCompile(`\b` + r + `\b`).MatchString(m[1]) {
				t.Errorf("%s: endpointName's description does not name the reserved %s", rel, r)
			}
		}
	}
}
