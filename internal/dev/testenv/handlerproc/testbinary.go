package handlerproc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
// and returns the binary's path. The binary lives in a directory of the
// user's cache named for the repository checkout, shared by every test
// binary of the checkout: go build leaves an up-to-date binary as it is, so
// after a change only the first test binary that needs the handler links
// it, and the others find it current. Without a user cache directory it
// builds into the directory RunTests made. Tests may call it from every
// test: later calls in one process wait for the first build (see Build).
func TestBinary(ctx context.Context, flags ...string) (string, error) {
	testBinaries.mu.Lock()
	dir := testBinaries.dir
	testBinaries.mu.Unlock()
	if dir == "" {
		return "", errors.New("handlerproc: TestBinary needs TestMain to call RunTests")
	}
	c, err := checkout()
	if err != nil {
		return "", err
	}
	root := c.root
	if c.binDir != "" {
		dir = c.binDir
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

// checkout finds, once per process, the repository root and (making it)
// the directory of the user's cache for the test binaries of that checkout:
// binDir is "" when there is no user cache directory to use.
var checkout = sync.OnceValues(func() (checkoutDirs, error) {
	root, err := RepoRoot()
	if err != nil {
		return checkoutDirs{}, err
	}
	c := checkoutDirs{root: root}
	if cache, err := os.UserCacheDir(); err == nil {
		sum := sha256.Sum256([]byte(root))
		dir := filepath.Join(cache, "nimbus-functions-subscriber", "test-handlers", hex.EncodeToString(sum[:8]))
		if os.MkdirAll(dir, 0o755) == nil {
			c.binDir = dir
		}
	}
	return c, nil
})

type checkoutDirs struct{ root, binDir string }
