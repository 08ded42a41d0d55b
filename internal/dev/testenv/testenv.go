// Package testenv starts the local stand-ins the integration tests need: a
// Cosmos DB–compatible server and an AMQP 1.0 peer that speaks enough of
// Service Bus for the azservicebus SDK. Both are Node programs under
// scripts/testenv, installed with `npm ci` there.
//
// Without Node or the installed packages, tests that need a stand-in skip
// with a clear message; with NIMBUS_REQUIRE_EMULATORS=1 (CI) they fail
// instead.
//
// WaitUntil is the tests' way to wait for a condition (a deadline and a
// short tick, never a bare sleep). The handler binary itself is built and run
// by the subpackage handlerproc, which the demo shares.
package testenv

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// RequireEnv is the variable that turns a missing stand-in into a failure.
const RequireEnv = "NIMBUS_REQUIRE_EMULATORS"

// Required reports whether stand-ins are mandatory (CI).
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// Unavailable skips tb, or fails it when stand-ins are required.
func Unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required() {
		tb.Fatalf("%s (%s=1: integration tests must not skip)", msg, RequireEnv)
	}
	tb.Skipf("%s; run scripts/test.sh (or `npm ci --prefix scripts/testenv`) to enable", msg)
}

// Dir returns the absolute path of scripts/testenv in this repository.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts", "testenv")
}

// nodeReady reports why the Node stand-ins cannot run, or "" when they can.
func nodeReady() string {
	if _, err := exec.LookPath("node"); err != nil {
		return "node is not on PATH"
	}
	if _, err := os.Stat(filepath.Join(Dir(), "node_modules")); err != nil {
		return "scripts/testenv/node_modules is missing"
	}
	return ""
}

// Process is a started stand-in.
type Process struct {
	cmd  *exec.Cmd
	Port int
	mu   sync.Mutex
	logs strings.Builder
	done chan struct{}
}

// Logs returns what the process printed so far (for failure messages).
func (p *Process) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Stop kills the process and waits for it.
func (p *Process) Stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// StartNode runs `node script` from scripts/testenv with env added, waits for
// a line "LISTENING <port>" on stdout and returns the process. Later output
// is kept for Logs. It does not skip; callers decide with Unavailable.
func StartNode(script string, env ...string) (*Process, error) {
	if why := nodeReady(); why != "" {
		return nil, fmt.Errorf("%s", why)
	}
	cmd := exec.Command("node", script)
	cmd.Dir = Dir()
	cmd.Env = append(os.Environ(), env...)
	dieWithParent(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = writerFunc(p.appendLog)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	ports := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			var port int
			if !sent {
				if _, err := fmt.Sscanf(line, "LISTENING %d", &port); err == nil {
					ports <- port
					sent = true
					continue
				}
			}
			p.appendLog([]byte(line + "\n"))
		}
	}()
	select {
	case p.Port = <-ports:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("node %s exited before listening: %s", script, p.Logs())
	case <-time.After(30 * time.Second):
		p.Stop()
		return nil, fmt.Errorf("node %s did not report LISTENING within 30s: %s", script, p.Logs())
	}
}

func (p *Process) appendLog(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.logs.Len() < 1<<20 {
		p.logs.Write(b)
	}
	return len(b), nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

var _ io.Writer = writerFunc(nil)
