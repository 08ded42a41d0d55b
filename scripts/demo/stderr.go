package main

import (
	"bytes"
	"strings"
	"sync"
	"time"
)

// stderrWait bounds how long a step waits for the handler's stderr line of
// a failing invocation: the line is written before the answer, but it
// reaches the demo through a pipe of its own, so it can lag the answer.
const stderrWait = 2 * time.Second

// lineLog collects a handler process's stderr as whole lines, so that each
// step prints the lines its invocation wrote under itself instead of where
// the pipe happens to deliver them.
type lineLog struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
	shown   int
	changed chan struct{} // closed and replaced when a line arrives
}

func newLineLog() *lineLog { return &lineLog{changed: make(chan struct{})} }

// Write implements io.Writer for the process's stderr.
func (l *lineLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, b...)
	added := false
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.lines = append(l.lines, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
		added = true
	}
	if added {
		close(l.changed)
		l.changed = make(chan struct{})
	}
	return len(b), nil
}

// take returns the lines not yet taken. With mark set, it first waits, at
// most wait, until a line containing mark has arrived, and reports whether
// one did.
func (l *lineLog) take(mark string, wait time.Duration) ([]string, bool) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	timedOut := false
	for {
		l.mu.Lock()
		found := mark == "" || timedOut
		for _, line := range l.lines[l.shown:] {
			found = found || strings.Contains(line, mark)
		}
		changed := l.changed
		if found {
			out := append([]string(nil), l.lines[l.shown:]...)
			l.shown = len(l.lines)
			l.mu.Unlock()
			return out, !timedOut
		}
		l.mu.Unlock()
		select {
		case <-changed:
		case <-deadline.C:
			timedOut = true // take what there is
		}
	}
}

// printStderr prints the handler's stderr lines that arrived since the
// last step, waiting for the one that contains mark when mark is set, and
// reports whether that line arrived.
func (d *proc) printStderr(mark string) bool {
	lines, found := d.errs.take(mark, stderrWait)
	for _, line := range lines {
		d.s.printf("   handler stderr: %s\n", line)
	}
	return found
}
