package testenv

import (
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
