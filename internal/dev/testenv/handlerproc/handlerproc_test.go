package handlerproc_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testctx"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv/handlerproc"
)

func TestMain(m *testing.M) { os.Exit(handlerproc.RunTests(m)) }

func handler(t *testing.T) string {
	t.Helper()
	bin, err := handlerproc.TestBinary(testctx.Timeout(t, 5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

var settings = map[string]string{
	"NimBus__Endpoint":               "BillingEndpoint",
	"NimBus__Inbox__Enabled":         "true",
	"NimBus__Inbox__Store":           "InMemory",
	"NimBus__Inbox__CleanupSchedule": "0 0 * * * *",
	"NimBus__Outbox__SweepSchedule":  "0 */5 * * * *",
	"NimBus__Resolver__Sink":         "InMemory",
}

func TestTestBinaryIsBuiltOnceInTheCheckoutsCacheDirectory(t *testing.T) {
	t.Parallel()
	first := handler(t)
	if second := handler(t); second != first {
		t.Fatalf("second TestBinary = %s, want %s", second, first)
	}
	if fi, err := os.Stat(first); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("binary %s: %v, %v", first, fi, err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Skipf("no user cache directory (%v): the binary is in the directory RunTests made", err)
	}
	if !strings.HasPrefix(first, filepath.Join(cache, "nimbus-functions-subscriber", "test-handlers")+string(filepath.Separator)) {
		t.Fatalf("binary %s is not in the user's cache directory %s", first, cache)
	}
}

// smallCommand is a main package that links in a fraction of the handler's
// time, relative to the repository root.
const smallCommand = "./internal/dev/testenv/handlerproc/testdata/small"

func TestBuildRunsOncePerOutputPath(t *testing.T) {
	root, err := handlerproc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// A small command stands in for the handler: what is tested is how
	// calls share a build, not the handler.
	bin := filepath.Join(t.TempDir(), "small")
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = handlerproc.BuildPackage(testctx.Timeout(t, 5*time.Minute), root, bin, smallCommand)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatal(err)
	}
	// A second call returns the first result without building again.
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	if err := handlerproc.BuildPackage(testctx.Timeout(t, time.Minute), root, bin, smallCommand); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the second Build built again (stat: %v)", err)
	}
	// A failed build reports go build's output.
	err = handlerproc.Build(testctx.Timeout(t, time.Minute), root, filepath.Join(t.TempDir(), "x"), "-no-such-flag")
	if err == nil || !strings.Contains(err.Error(), "no-such-flag") {
		t.Fatalf("build with a bad flag: %v", err)
	}
}

// syncBuffer collects what a process writes, safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestStartServesStopsAndKeepsTheLogLines(t *testing.T) {
	var tee syncBuffer
	p, err := handlerproc.Start(handlerproc.Options{Binary: handler(t), Settings: settings, Stdout: &tee})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.Stop(testctx.Timeout(t, 10*time.Second)) })
	if err := p.WaitReady(testctx.Timeout(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(p.BaseURL(), "http://127.0.0.1:") || p.Port() == 0 {
		t.Fatalf("BaseURL %q port %d", p.BaseURL(), p.Port())
	}
	l, err := p.WaitLine(testctx.Timeout(t, 10*time.Second), func(l handlerproc.Line) bool { return l.Str("message") == "custom handler listening" })
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("127.0.0.1:%d", p.Port()); l.Str("addr") != want || l.Str("endpoint") != "BillingEndpoint" || l.Seq < 1 {
		t.Errorf("listening line %+v, want addr %s", l, want)
	}
	if p.ExitCode() != -1 {
		t.Errorf("ExitCode = %d while running, want -1", p.ExitCode())
	}

	code, err := p.Stop(testctx.Timeout(t, 20*time.Second))
	if err != nil || code != 0 {
		t.Fatalf("Stop = %d, %v; want 0 after SIGTERM\n%s", code, err, p.Output(20))
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Done is open after Stop")
	}
	lines := p.Lines()
	if len(lines) < 3 || !strings.HasPrefix(lines[len(lines)-2].Str("message"), "shutting down") ||
		lines[len(lines)-1].Str("message") != "stopped" {
		t.Fatalf("the last lines are not the shutdown and stopped lines: %+v", lines)
	}
	var raw []string
	for i, l := range lines {
		if l.Seq != i+1 || l.Fields == nil {
			t.Errorf("line %d: %+v", i, l)
		}
		raw = append(raw, l.Raw)
	}
	if got := tee.String(); got != strings.Join(raw, "\n")+"\n" {
		t.Errorf("stdout tee\n got %q\nwant the lines %q", got, raw)
	}
	// Stopping again reports the same exit.
	if code, err := p.Stop(testctx.Timeout(t, time.Second)); err != nil || code != 0 {
		t.Errorf("second Stop = %d, %v", code, err)
	}
	if _, err := p.WaitLine(testctx.Timeout(t, 10*time.Second), func(handlerproc.Line) bool { return false }); err == nil {
		t.Error("WaitLine after the exit found a line that matches nothing")
	}
}

// DropLines keeps no line, and still copies every one to Stdout.
func TestDropLinesKeepsNoLineAndStillCopiesStdout(t *testing.T) {
	var tee syncBuffer
	p, err := handlerproc.Start(handlerproc.Options{Binary: handler(t), Settings: settings, DropLines: true, Stdout: &tee})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.Stop(testctx.Timeout(t, 10*time.Second)) })
	if err := p.WaitReady(testctx.Timeout(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if code, err := p.Stop(testctx.Timeout(t, 20*time.Second)); err != nil || code != 0 {
		t.Fatalf("Stop = %d, %v", code, err)
	}
	if lines := p.Lines(); len(lines) != 0 {
		t.Errorf("DropLines kept %d lines: %+v", len(lines), lines)
	}
	if got := tee.String(); !strings.Contains(got, `"custom handler listening"`) || !strings.Contains(got, `"stopped"`) {
		t.Errorf("stdout copy %q lacks the listening and stopped lines", got)
	}
}

func TestWaitReadyFailsFastWhenTheHandlerExits(t *testing.T) {
	secret := "AccountKey=c2VjcmV0LXZhbHVl"
	p, err := handlerproc.Start(handlerproc.Options{
		Binary: handler(t),
		// No endpoint: start-up fails with exit code 2 and names the
		// missing settings. The name NimBus__Endpoint stands in for a
		// secret the output contains.
		Settings: map[string]string{"NimBus__Inbox__Cosmos__ConnectionString": "AccountEndpoint=http://127.0.0.1:1/;" + secret + ";"},
		Secrets:  []string{"NimBus__Endpoint", "", secret},
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = p.WaitReady(testctx.Timeout(t, time.Minute))
	if err == nil {
		t.Fatal("WaitReady succeeded")
	}
	if errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 30*time.Second {
		t.Fatalf("WaitReady waited for its deadline: %v", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "exited with code 2") || !strings.Contains(msg, "<redacted>") || strings.Contains(msg, "NimBus__Endpoint") {
		t.Fatalf("error does not give the exit code and the redacted output: %s", msg)
	}
	if strings.Contains(msg, secret) || strings.Contains(p.Output(100), secret) || strings.Contains(p.Output(100), "NimBus__Endpoint") {
		t.Fatalf("a secret is printed: %s", p.Output(100))
	}
	if !strings.Contains(p.Stderr(), "NimBus__Endpoint") {
		t.Errorf("Stderr is redacted or empty: %q", p.Stderr())
	}
	if code, err := p.Wait(testctx.Timeout(t, 10*time.Second)); code != 2 || err != nil || p.ExitCode() != 2 {
		t.Errorf("Wait = %d, %v; ExitCode = %d; want 2", code, err, p.ExitCode())
	}
}

// A process that ignores SIGTERM is killed when Stop's context ends, and
// WaitReady gives up at its deadline with the output so far.
func TestStopKillsAProcessThatIgnoresSIGTERM(t *testing.T) {
	script := filepath.Join(t.TempDir(), "stubborn.sh")
	body := "#!/bin/sh\ntrap '' TERM\necho 'not json'\necho '{\"message\":\"up\"}'\nwhile :; do sleep 0.05; done\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := handlerproc.Start(handlerproc.Options{Binary: script})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.WaitLine(testctx.Timeout(t, 10*time.Second), func(l handlerproc.Line) bool { return l.Str("message") == "up" }); err != nil {
		t.Fatal(err)
	}
	if ls := p.Lines(); len(ls) != 2 || ls[0].Fields != nil || ls[0].Raw != "not json" || ls[1].Seq != 2 {
		t.Fatalf("lines %+v", ls)
	}
	err = p.WaitReady(testctx.Timeout(t, 300*time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `{"message":"up"}`) {
		t.Fatalf("WaitReady on a process that never listens: %v", err)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, err := p.Stop(testctx.Timeout(t, 300*time.Millisecond))
	if !errors.Is(err, handlerproc.ErrKilled) || code != -1 {
		t.Fatalf("Stop = %d, %v; want -1 and ErrKilled", code, err)
	}
}

func TestEnvDropsTheMachinesHandlerSettings(t *testing.T) {
	t.Setenv("NimBus__Endpoint", "FromTheMachine")
	t.Setenv("ServiceBusConnection__fullyQualifiedNamespace", "x")
	t.Setenv("FUNCTIONS_CUSTOMHANDLER_PORT", "1")
	t.Setenv("HANDLERPROC_KEEP", "kept")
	env := strings.Join(handlerproc.Env("NimBus__LogLevel=debug"), "\n")
	for _, gone := range []string{"FromTheMachine", "ServiceBusConnection", "FUNCTIONS_CUSTOMHANDLER_PORT"} {
		if strings.Contains(env, gone) {
			t.Errorf("Env keeps %s", gone)
		}
	}
	if !strings.Contains(env, "HANDLERPROC_KEEP=kept") || !strings.HasSuffix(env, "NimBus__LogLevel=debug") {
		t.Errorf("Env = %s", env)
	}
}
