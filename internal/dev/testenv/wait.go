package testenv

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// PollInterval is how often WaitUntil checks its condition.
const PollInterval = 20 * time.Millisecond

// WaitUntil checks cond every PollInterval until it holds. When timeout
// passes first it fails tb with "timed out after <timeout> waiting for "
// and what() (called only then, so it may describe the state it finds).
func WaitUntil(tb testing.TB, timeout time.Duration, cond func() bool, what func() string) {
	tb.Helper()
	if !Poll(timeout, cond) {
		tb.Fatalf("timed out after %v waiting for %s", timeout, what())
	}
}

// Poll checks cond every PollInterval until it holds (true) or timeout
// passes (false).
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			return cond()
		case <-tick.C:
		}
	}
	return true
}

// GoroutinesIn counts the goroutines whose stack has a frame containing fn
// (for example "servicebus.(*Client).sender("): a test waits until the
// callers it started are all blocked where it expects, instead of sleeping.
func GoroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			count++
		}
	}
	return count
}
