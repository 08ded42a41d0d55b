package testenv

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// nodeHost is a stand-in script of scripts/testenv run as a host
// (TESTENV_HOST=1, scripts/testenv/host.js): it starts and stops instances
// of the stand-in on request, so a test package pays one Node start-up for
// all its stand-ins instead of one per test. Each instance has its own
// port, state and connections.
type nodeHost struct {
	script  string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	writeMu sync.Mutex    // one command line written at a time
	done    chan struct{} // closed when the process has exited

	mu      sync.Mutex
	next    int
	replies map[string]chan string // instance id → its next reply line
	logs    map[string]*strings.Builder
	stderr  strings.Builder
}

// inheritedSettings are, per script, the variables an instance reads; the
// test process's own values are its defaults, as a stand-in process of its
// own would inherit them.
var inheritedSettings = map[string][]string{
	"sbfake.js": {"LOCK_MS", "MAX_DELIVERY", "DEBUG_FAKE", "SEND_FAULTS"},
	"cosmos.js": {"COSMOS_CONSISTENCY"},
}

// startNodeHost starts script as a host and waits until it is ready for
// commands.
func startNodeHost(script string) (*nodeHost, error) {
	if why := nodeReady(); why != "" {
		return nil, errors.New(why)
	}
	cmd := exec.Command("node", script)
	cmd.Dir = Dir()
	cmd.Env = append(os.Environ(), "TESTENV_HOST=1")
	dieWithParent(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	h := &nodeHost{script: script, cmd: cmd, stdin: stdin, done: make(chan struct{}), replies: map[string]chan string{}, logs: map[string]*strings.Builder{}}
	cmd.Stderr = writerFunc(func(b []byte) (int, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.stderr.Len() < 1<<20 {
			h.stderr.Write(b)
		}
		return len(b), nil
	})
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan struct{})
	go h.read(stdout, ready)
	go func() { _ = cmd.Wait(); close(h.done) }()
	select {
	case <-ready:
		return h, nil
	case <-h.done:
		return nil, fmt.Errorf("node %s (host) exited before it was ready: %s", script, h.stderrText())
	case <-time.After(30 * time.Second):
		h.stop()
		return nil, fmt.Errorf("node %s (host) was not ready within 30s: %s", script, h.stderrText())
	}
}

// read dispatches the host's output: replies to the commands waiting for
// them, log lines to their instance's log.
func (h *nodeHost) read(stdout io.Reader, ready chan struct{}) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "READY" {
			close(ready)
			continue
		}
		kind, rest, _ := strings.Cut(line, " ")
		id, text, _ := strings.Cut(rest, " ")
		h.mu.Lock()
		switch kind {
		case "LOG":
			if b := h.logs[id]; b != nil && b.Len() < 1<<20 {
				b.WriteString(text + "\n")
			}
		case "LISTENING", "FAILED", "STOPPED", "CONFIGURED":
			if ch := h.replies[id]; ch != nil {
				select {
				case ch <- kind + " " + text:
				default:
				}
			}
		}
		h.mu.Unlock()
	}
}

func (h *nodeHost) stderrText() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stderr.String()
}

// command sends one command for instance id and waits for its reply.
func (h *nodeHost) command(id, cmd string, timeout time.Duration) (string, error) {
	h.mu.Lock()
	ch := h.replies[id]
	h.mu.Unlock()
	h.writeMu.Lock()
	_, err := io.WriteString(h.stdin, cmd+"\n")
	h.writeMu.Unlock()
	if err != nil {
		return "", fmt.Errorf("%s host: %w (%s)", h.script, err, h.stderrText())
	}
	select {
	case reply := <-ch:
		return reply, nil
	case <-h.done:
		return "", fmt.Errorf("%s host exited: %s", h.script, h.stderrText())
	case <-time.After(timeout):
		return "", fmt.Errorf("%s host: no answer to %q within %v", h.script, strings.Fields(cmd)[0], timeout)
	}
}

// start starts an instance with the settings env ("KEY=value") and returns
// it once it listens.
func (h *nodeHost) start(env []string) (*hostedInstance, error) {
	settings := map[string]string{}
	for _, k := range inheritedSettings[h.script] {
		if v, ok := os.LookupEnv(k); ok {
			settings[k] = v
		}
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		settings[k] = v
	}
	js, err := json.Marshal(settings)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.next++
	id := strconv.Itoa(h.next)
	h.replies[id] = make(chan string, 1)
	h.logs[id] = &strings.Builder{}
	h.mu.Unlock()
	b := &hostedInstance{host: h, id: id}
	reply, err := h.command(id, "START "+id+" "+string(js), 30*time.Second)
	if err != nil {
		return nil, err
	}
	kind, text, _ := strings.Cut(reply, " ")
	if kind != "LISTENING" {
		return nil, fmt.Errorf("%s: %s", h.script, text)
	}
	if b.Port, err = strconv.Atoi(text); err != nil {
		return nil, fmt.Errorf("%s host: bad port %q", h.script, text)
	}
	return b, nil
}

// stop ends the host: stdin closed (it exits), killed if it lingers.
func (h *nodeHost) stop() {
	_ = h.stdin.Close()
	select {
	case <-h.done:
	case <-time.After(5 * time.Second):
		_ = h.cmd.Process.Kill()
		<-h.done
	}
}

// standIn is a running stand-in: a process of its own (*Process) or an
// instance of the package's host (*hostedInstance).
type standIn interface {
	Stop()
	Logs() string
}

// startStandIn starts script with the settings env ("KEY=value"): an
// instance of the package's host when its TestMain calls Main, otherwise a
// process of its own. It returns the stand-in and its port.
func startStandIn(script string, env []string) (standIn, int, error) {
	host, err := sharedNodeHost(script)
	if err != nil {
		return nil, 0, err
	}
	if host != nil {
		i, err := host.start(env)
		if err != nil {
			return nil, 0, err
		}
		return i, i.Port, nil
	}
	p, err := StartNode(script, env...)
	if err != nil {
		return nil, 0, err
	}
	return p, p.Port, nil
}

// hostedInstance is one instance of a nodeHost.
type hostedInstance struct {
	host *nodeHost
	id   string
	Port int
	once sync.Once
}

// Stop closes the instance: its port stops listening and every connection
// to it is cut, as when a stand-in process is killed.
func (b *hostedInstance) Stop() {
	b.once.Do(func() { _, _ = b.host.command(b.id, "STOP "+b.id, 10*time.Second) })
}

// configure changes settings of the running instance (what its script's
// configure allows).
func (b *hostedInstance) configure(settings map[string]string) error {
	js, err := json.Marshal(settings)
	if err != nil {
		return err
	}
	reply, err := b.host.command(b.id, "SET "+b.id+" "+string(js), 10*time.Second)
	if err != nil {
		return err
	}
	if kind, text, _ := strings.Cut(reply, " "); kind != "CONFIGURED" {
		return fmt.Errorf("%s: %s", b.host.script, text)
	}
	return nil
}

// Logs returns what the instance logged so far, then what the host wrote
// on stderr (shared by its instances: the Cosmos server's own errors).
func (b *hostedInstance) Logs() string {
	b.host.mu.Lock()
	defer b.host.mu.Unlock()
	var out string
	if l := b.host.logs[b.id]; l != nil {
		out = l.String()
	}
	if b.host.stderr.Len() > 0 {
		out += "host stderr:\n" + b.host.stderr.String()
	}
	return out
}
