// Package handlerproc builds the custom handler binary (./handler) and runs it
// the way the Azure Functions host does: a free loopback port in
// FUNCTIONS_CUSTOMHANDLER_PORT, the app settings as environment variables,
// GET / polled until it answers, SIGTERM to stop. It keeps the handler's
// stdout as JSON log lines and its stderr for failure reports.
//
// The demo (a normal program) and the tests share it, so it does not import
// testing.
package handlerproc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// PortSetting is the variable the Functions host passes the port in.
const PortSetting = "FUNCTIONS_CUSTOMHANDLER_PORT"

// HandlerPackage is the import path of the handler command.
const HandlerPackage = "github.com/nimbus-go/functions-subscriber/handler"

// RepoRoot returns the directory of the go.mod that contains the working
// directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("handlerproc: no go.mod above the working directory; run from inside the repository")
		}
		dir = parent
	}
}

type buildResult struct {
	done chan struct{}
	err  error
}

var (
	buildMu     sync.Mutex
	buildsCache = map[string]*buildResult{}
)

// Build compiles the handler command into outPath with `go build` run in
// repoRoot; flags (for example "-race") go before the package. A process
// builds each (repoRoot, outPath, flags) once: later calls wait for the
// first and return its result, so tests may call it from every test.
func Build(ctx context.Context, repoRoot, outPath string, flags ...string) error {
	return buildPackage(ctx, repoRoot, outPath, HandlerPackage, flags...)
}

// buildPackage is Build for any main package pkg.
func buildPackage(ctx context.Context, repoRoot, outPath, pkg string, flags ...string) error {
	key := strings.Join(append([]string{repoRoot, outPath, pkg}, flags...), "\x00")
	buildMu.Lock()
	r, ok := buildsCache[key]
	if !ok {
		r = &buildResult{done: make(chan struct{})}
		buildsCache[key] = r
	}
	buildMu.Unlock()
	if ok {
		select {
		case <-r.done:
			return r.err
		case <-ctx.Done():
			return fmt.Errorf("handlerproc: waiting for the handler build: %w", ctx.Err())
		}
	}
	args := append([]string{"build", "-o", outPath}, flags...)
	args = append(args, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.err = fmt.Errorf("handlerproc: go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	if ctx.Err() != nil && r.err != nil {
		// A cancelled build is not a result: let the next caller try again.
		buildMu.Lock()
		delete(buildsCache, key)
		buildMu.Unlock()
	}
	close(r.done)
	return r.err
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("handlerproc: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// isHandlerSetting reports whether an environment entry is one the handler
// or the Functions host reads.
func isHandlerSetting(kv string) bool {
	return strings.HasPrefix(kv, "NimBus__") || strings.HasPrefix(kv, "ServiceBusConnection") || strings.HasPrefix(kv, "FUNCTIONS_")
}

// Env is this process's environment without the NimBus, Service Bus and
// Functions settings of the machine, plus extra ("KEY=value"): the
// environment to start the handler with, so the caller controls every
// setting it reads.
func Env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !isHandlerSetting(kv) {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// Options configures Start.
type Options struct {
	// Binary is the built handler.
	Binary string
	// Settings are the app settings (name → value), passed as environment
	// variables on top of Env().
	Settings map[string]string
	// Port is the port passed in FUNCTIONS_CUSTOMHANDLER_PORT; 0 picks a
	// free one. NoPort leaves the variable unset.
	Port   int
	NoPort bool
	// Secrets are replaced with "<redacted>" in Output, Redact and the
	// errors of WaitReady.
	Secrets []string
	// Stdout and Stderr, when set, receive a copy of the process's output
	// (stdout line by line).
	Stdout, Stderr io.Writer
	// DropLines reads stdout without keeping or decoding its lines (Lines
	// and WaitLine see none): for load runs, whose millions of lines
	// would pile up in memory.
	DropLines bool
}

// Line is one line the handler printed on stdout.
type Line struct {
	// Seq is the line's position among the stdout lines, from 1.
	Seq int
	// Raw is the line as printed.
	Raw string
	// Fields is the line decoded as a JSON object; nil when it is not one.
	Fields map[string]any
}

// Str returns the field k when it is a JSON string, else "".
func (l Line) Str(k string) string { s, _ := l.Fields[k].(string); return s }

// Num returns the field k when it is a JSON number, else 0.
func (l Line) Num(k string) float64 { f, _ := l.Fields[k].(float64); return f }

// Proc is a running handler process.
type Proc struct {
	cmd    *exec.Cmd
	port   int
	redact *strings.Replacer
	done   chan struct{} // closed when the process exited and its output is read

	mu      sync.Mutex
	lines   []Line
	stderr  bytes.Buffer
	changed chan struct{} // closed and replaced on every new stdout line
}

// Start starts the handler. It does not wait for it to listen: call
// WaitReady.
func Start(opts Options) (*Proc, error) {
	if opts.Binary == "" {
		return nil, errors.New("handlerproc: Options.Binary is empty")
	}
	port := opts.Port
	if port == 0 && !opts.NoPort {
		var err error
		if port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	var extra []string
	if !opts.NoPort {
		extra = append(extra, fmt.Sprintf("%s=%d", PortSetting, port))
	}
	keys := make([]string, 0, len(opts.Settings))
	for k := range opts.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		extra = append(extra, k+"="+opts.Settings[k])
	}
	var pairs []string
	for _, s := range opts.Secrets {
		if s != "" {
			pairs = append(pairs, s, "<redacted>")
		}
	}
	p := &Proc{
		cmd:     exec.Command(opts.Binary),
		port:    port,
		redact:  strings.NewReplacer(pairs...),
		done:    make(chan struct{}),
		changed: make(chan struct{}),
	}
	p.cmd.Env = Env(extra...)
	var errOut io.Writer = lockedWriter{&p.mu, &p.stderr}
	if opts.Stderr != nil {
		errOut = io.MultiWriter(errOut, opts.Stderr)
	}
	p.cmd.Stderr = errOut
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("handlerproc: %w", err)
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("handlerproc: starting %s: %w", opts.Binary, err)
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			raw := sc.Text()
			if opts.Stdout != nil {
				_, _ = io.WriteString(opts.Stdout, raw+"\n")
			}
			if opts.DropLines {
				continue
			}
			var m map[string]any
			if json.Unmarshal([]byte(raw), &m) != nil {
				m = nil
			}
			p.mu.Lock()
			p.lines = append(p.lines, Line{Seq: len(p.lines) + 1, Raw: raw, Fields: m})
			close(p.changed)
			p.changed = make(chan struct{})
			p.mu.Unlock()
		}
		// Drain what is left after an over-long line, so the process never
		// blocks on a full pipe.
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		<-readDone // Wait closes the pipe: read everything first
		_ = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(b)
}

// Pid returns the process id (for reading its CPU time and memory).
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Port returns the port the handler was told to listen on.
func (p *Proc) Port() int { return p.port }

// BaseURL returns "http://127.0.0.1:PORT".
func (p *Proc) BaseURL() string { return fmt.Sprintf("http://127.0.0.1:%d", p.port) }

// Done is closed once the process has exited and its output is read.
func (p *Proc) Done() <-chan struct{} { return p.done }

// ExitCode returns the exit code, or -1 while the process runs or when a
// signal ended it.
func (p *Proc) ExitCode() int {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// WaitReady polls GET / until it answers 200. It fails at once when the
// process exits, with its exit code and last output lines, and when ctx
// ends.
func (p *Proc) WaitReady(ctx context.Context) error {
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.BaseURL()+"/", nil)
		if err != nil {
			return fmt.Errorf("handlerproc: %w", err)
		}
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET / answered %d", resp.StatusCode)
		}
		last = err
		select {
		case <-p.done:
			return fmt.Errorf("handlerproc: the handler exited with code %d during start-up:\n%s", p.ExitCode(), p.Output(40))
		case <-ctx.Done():
			return fmt.Errorf("handlerproc: the handler did not answer GET / (last error: %s): %w\n%s", p.Redact(last.Error()), ctx.Err(), p.Output(40))
		case <-tick.C:
		}
	}
}

// Lines returns the stdout lines printed so far.
func (p *Proc) Lines() []Line {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Line(nil), p.lines...)
}

// WaitLine waits until a stdout line satisfies match, checking every line
// printed so far and each new one as it arrives. It fails when ctx ends or
// the process exits without such a line.
func (p *Proc) WaitLine(ctx context.Context, match func(Line) bool) (Line, error) {
	seen := 0
	for {
		p.mu.Lock()
		lines, changed := p.lines[seen:], p.changed
		seen = len(p.lines)
		p.mu.Unlock()
		for _, l := range lines {
			if match(l) {
				return l, nil
			}
		}
		select {
		case <-changed:
		case <-p.done:
			p.mu.Lock()
			more := len(p.lines) > seen
			p.mu.Unlock()
			if !more {
				return Line{}, errors.New("handlerproc: the handler exited without printing the line")
			}
		case <-ctx.Done():
			return Line{}, fmt.Errorf("handlerproc: waiting for a log line: %w", ctx.Err())
		}
	}
}

// Stderr returns what the process printed on stderr so far (not redacted).
func (p *Proc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// Redact replaces the secrets of Options.Secrets in s.
func (p *Proc) Redact(s string) string { return p.redact.Replace(s) }

// Output returns the last n stdout lines and the last 8 KiB of stderr, with
// the secrets redacted: for failure reports.
func (p *Proc) Output(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	lines := p.lines
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	raw := make([]string, len(lines))
	for i, l := range lines {
		raw[i] = l.Raw
	}
	errTail := p.stderr.String()
	if len(errTail) > 8192 {
		errTail = errTail[len(errTail)-8192:]
	}
	return p.redact.Replace(strings.Join(raw, "\n") + "\n--- stderr ---\n" + errTail)
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Wait waits for the process to exit and returns its exit code (-1 when a
// signal ended it), or ctx's error.
func (p *Proc) Wait(ctx context.Context) (int, error) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), nil
	case <-ctx.Done():
		return -1, fmt.Errorf("handlerproc: waiting for the handler to exit: %w", ctx.Err())
	}
}

// ErrKilled is returned by Stop when the process did not exit after SIGTERM
// before ctx ended and was killed.
var ErrKilled = errors.New("handlerproc: the handler did not exit after SIGTERM and was killed")

// Stop sends SIGTERM (the host's graceful stop) and waits for the exit.
// When ctx ends first it kills the process and returns ErrKilled. Stopping
// a process that has already exited returns its exit code.
func (p *Proc) Stop(ctx context.Context) (int, error) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), nil
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		<-p.done
		return p.cmd.ProcessState.ExitCode(), ErrKilled
	}
}
