package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets the test binary run as the command: the tests start it
// again with NIMBUS_FUNC_RUN_MAIN=1 and the command's arguments.
func TestMain(m *testing.M) {
	if os.Getenv("NIMBUS_FUNC_RUN_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// command runs the command in dir and returns its exit code and output.
func command(t *testing.T, dir string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NIMBUS_FUNC_RUN_MAIN=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

func TestCommand(t *testing.T) {
	// From a sub-directory of a module, the commands work on the module root.
	// The real packaging is tested in internal/dev/deploy through scripts/package.sh.
	mod := t.TempDir()
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module example.com/orders\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(mod, "internal")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir  string
		args []string
		code int
		out  string
	}{
		{mod, nil, 2, "usage: nimbus-func <command>"},
		{mod, []string{"init", "-h"}, 0, "usage: nimbus-func init --endpoint NAME"},
		{mod, []string{"version"}, 0, "nimbus-func "},
		{sub, []string{"check"}, 1, "host.json: is missing"},
		{sub, []string{"init", "--endpoint", "Orders", "--resolver"}, 0, "20 files written, 0 skipped"},
		{sub, []string{"check", "--resolver"}, 0, "the host files are fine"},
		{mod, []string{"init", "--endpoint", "Orders"}, 0, "0 files written, 18 skipped"},
		{t.TempDir(), []string{"check"}, 1, "is not inside a Go module"},
	} {
		code, out := command(t, c.dir, c.args...)
		if code != c.code || !strings.Contains(out, c.out) {
			t.Errorf("nimbus-func %v in %s: exit %d, output:\n%s\nwant exit %d and %q", c.args, c.dir, code, out, c.code, c.out)
		}
	}
	if _, err := os.Stat(filepath.Join(mod, "main.go")); err != nil {
		t.Errorf("init did not write main.go at the module root: %v", err)
	}
}
