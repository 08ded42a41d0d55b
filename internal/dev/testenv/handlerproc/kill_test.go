package handlerproc_test

import (
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testctx"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv/handlerproc"
)

// TestKillThenRestartOnTheSamePort kills the handler with SIGKILL (exit by
// signal, no clean exit code), starts it again on the same port and sees it
// answer there; a second Kill of the dead process does nothing.
func TestKillThenRestartOnTheSamePort(t *testing.T) {
	bin := handler(t)
	p, err := handlerproc.Start(handlerproc.Options{Binary: bin, Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(testctx.Timeout(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(testctx.Timeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if code := p.ExitCode(); code != -1 {
		t.Errorf("exit code after SIGKILL = %d, want -1 (ended by a signal)", code)
	}
	if err := p.Kill(testctx.Timeout(t, time.Second)); err != nil {
		t.Errorf("killing the dead process again: %v", err)
	}
	q, err := handlerproc.Start(handlerproc.Options{Binary: bin, Settings: settings, Port: p.Port()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = q.Stop(testctx.Timeout(t, 30*time.Second)) })
	if err := q.WaitReady(testctx.Timeout(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if q.BaseURL() != p.BaseURL() {
		t.Errorf("restarted on %s, want %s", q.BaseURL(), p.BaseURL())
	}
}
