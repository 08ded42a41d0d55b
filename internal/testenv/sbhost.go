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

// sbHost is scripts/testenv/sbfake.js run as a host of brokers
// (SBFAKE_HOST=1): it starts and stops Service Bus stand-ins on request, so
// a test package pays one Node start-up for all its stand-ins instead of one
// per test. Each broker has its own entities, port and connections.
type sbHost struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	writeMu sync.Mutex    // one command line written at a time
	done    chan struct{} // closed when the process has exited

	mu      sync.Mutex
	next    int
	replies map[string]chan string // broker id → its next reply line
	logs    map[string]*strings.Builder
	stderr  strings.Builder
}

// brokerSettings are the variables a broker reads; the test process's own
// values are its defaults, as a stand-in process of its own would inherit
// them.
var brokerSettings = []string{"LOCK_MS", "MAX_DELIVERY", "DEBUG_FAKE", "SEND_FAULTS"}

// startSBHost starts the host and waits until it is ready for commands.
func startSBHost() (*sbHost, error) {
	if why := nodeReady(); why != "" {
		return nil, errors.New(why)
	}
	cmd := exec.Command("node", "sbfake.js")
	cmd.Dir = Dir()
	cmd.Env = append(os.Environ(), "SBFAKE_HOST=1")
	dieWithParent(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	h := &sbHost{cmd: cmd, stdin: stdin, done: make(chan struct{}), replies: map[string]chan string{}, logs: map[string]*strings.Builder{}}
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
		return nil, fmt.Errorf("node sbfake.js (host) exited before it was ready: %s", h.stderrText())
	case <-time.After(30 * time.Second):
		h.stop()
		return nil, fmt.Errorf("node sbfake.js (host) was not ready within 30s: %s", h.stderrText())
	}
}

// read dispatches the host's output: replies to the commands waiting for
// them, log lines to their broker's log.
func (h *sbHost) read(stdout io.Reader, ready chan struct{}) {
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
		case "LISTENING", "FAILED", "STOPPED":
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

func (h *sbHost) stderrText() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stderr.String()
}

// command sends one command for broker id and waits for its reply.
func (h *sbHost) command(id, cmd string, timeout time.Duration) (string, error) {
	h.mu.Lock()
	ch := h.replies[id]
	h.mu.Unlock()
	h.writeMu.Lock()
	_, err := io.WriteString(h.stdin, cmd+"\n")
	h.writeMu.Unlock()
	if err != nil {
		return "", fmt.Errorf("sbfake host: %w (%s)", err, h.stderrText())
	}
	select {
	case reply := <-ch:
		return reply, nil
	case <-h.done:
		return "", fmt.Errorf("sbfake host exited: %s", h.stderrText())
	case <-time.After(timeout):
		return "", fmt.Errorf("sbfake host: no answer to %q within %v", strings.Fields(cmd)[0], timeout)
	}
}

// start starts a broker with the settings env ("KEY=value") and returns it
// once it listens.
func (h *sbHost) start(env []string) (*hostedBroker, error) {
	settings := map[string]string{}
	for _, k := range brokerSettings {
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
	b := &hostedBroker{host: h, id: id}
	reply, err := h.command(id, "START "+id+" "+string(js), 30*time.Second)
	if err != nil {
		return nil, err
	}
	kind, text, _ := strings.Cut(reply, " ")
	if kind != "LISTENING" {
		return nil, fmt.Errorf("sbfake: %s", text)
	}
	if b.Port, err = strconv.Atoi(text); err != nil {
		return nil, fmt.Errorf("sbfake host: bad port %q", text)
	}
	return b, nil
}

// stop ends the host: stdin closed (it exits), killed if it lingers.
func (h *sbHost) stop() {
	_ = h.stdin.Close()
	select {
	case <-h.done:
	case <-time.After(5 * time.Second):
		_ = h.cmd.Process.Kill()
		<-h.done
	}
}

// hostedBroker is one broker of an sbHost.
type hostedBroker struct {
	host *sbHost
	id   string
	Port int
	once sync.Once
}

// Stop closes the broker: its port stops listening and every connection to
// it is cut, as when a stand-in process is killed.
func (b *hostedBroker) Stop() {
	b.once.Do(func() { _, _ = b.host.command(b.id, "STOP "+b.id, 10*time.Second) })
}

// Logs returns what the broker logged so far.
func (b *hostedBroker) Logs() string {
	b.host.mu.Lock()
	defer b.host.mu.Unlock()
	if l := b.host.logs[b.id]; l != nil {
		return l.String()
	}
	return ""
}
