package handlerproc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

var testBinaries struct {
	mu  sync.Mutex
	dir string
}

// RunTests is the body of a TestMain whose tests run the handler: it makes
// the temporary directory TestBinary builds into, runs m (a *testing.M)
// and removes the directory, returning m's exit code for os.Exit.
func RunTests(m interface{ Run() int }) int {
	dir, err := os.MkdirTemp("", "nimbus-handler-test-")
	if err != nil {
		os.Stderr.WriteString("handlerproc: " + err.Error() + "\n")
		return 1
	}
	testBinaries.mu.Lock()
	testBinaries.dir = dir
	testBinaries.mu.Unlock()
	code := m.Run()
	_ = os.RemoveAll(dir)
	return code
}

// TestBinary builds the handler command with flags (for example "-race")
// into the directory RunTests made, once per test binary and flag set, and
// returns the binary's path. Tests may call it from every test: later
// calls wait for the first build (see Build).
func TestBinary(ctx context.Context, flags ...string) (string, error) {
	testBinaries.mu.Lock()
	dir := testBinaries.dir
	testBinaries.mu.Unlock()
	if dir == "" {
		return "", errors.New("handlerproc: TestBinary needs TestMain to call RunTests")
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	name := "handler"
	for _, f := range flags {
		name += "_" + strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
				return r
			}
			return '-'
		}, f)
	}
	bin := filepath.Join(dir, name)
	if err := Build(ctx, root, bin, flags...); err != nil {
		return "", err
	}
	return bin, nil
}
