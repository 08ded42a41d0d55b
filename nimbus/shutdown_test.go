package nimbus_test

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testctx"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv/handlerproc"
)

// startPaced starts the handler with in-memory stores and a long
// redelivery pause.
func startPaced(t *testing.T) *handlerproc.Proc {
	t.Helper()
	p := startApp(t, handlerproc.Options{Settings: memorySettings(
		"NimBus__Retry__BaseDelay", "00:01:00",
		"NimBus__Retry__MaxDelay", "00:01:00",
	)})
	t.Cleanup(func() { _, _ = p.Stop(testctx.Timeout(t, 10*time.Second)) })
	if err := p.WaitReady(testctx.Timeout(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	return p
}

// SIGTERM during a 60 s redelivery pause: the paused invocations answer 503
// at once (the broker redelivers them), and the process exits 0 because
// every invocation got its answer.
func TestSIGTERMEndsPausesAndExitsClean(t *testing.T) {
	p := startPaced(t)
	const n = 20
	statuses := make(chan int, n)
	for i := range n {
		// FailFirstAttempts fails delivery 1 transiently: a 60 s pause follows.
		env := orderEnvelope(i, fmt.Sprintf(`{"OrderId":"O-%d","FailFirstAttempts":1}`, i), "")
		go func() {
			resp, err := http.Post(p.BaseURL()+"/Subscriber", "application/json", strings.NewReader(env))
			if err != nil {
				statuses <- -1
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	// Every invocation has failed and logged its line before it pauses.
	for i := range n {
		if _, err := p.WaitLine(testctx.Timeout(t, 20*time.Second), func(l handlerproc.Line) bool {
			return l.Str("outcome") == "handler_failed" && l.Str("messageId") == fmt.Sprintf("m-%d", i)
		}); err != nil {
			t.Fatalf("invocation %d never failed: %v", i, err)
		}
	}
	sent := time.Now()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range n {
		select {
		case s := <-statuses:
			if s != http.StatusServiceUnavailable {
				t.Fatalf("a paused invocation answered %d, want 503", s)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("paused invocations were not answered after SIGTERM")
		}
	}
	code, err := p.Wait(testctx.Timeout(t, 20*time.Second))
	if err != nil || code != 0 {
		t.Fatalf("exit %d, %v; output:\n%s", code, err, p.Output(20))
	}
	t.Logf("%d paused invocations answered and the process exited %v after SIGTERM", n, time.Since(sent).Round(time.Millisecond))
}

// An invocation that cannot finish (its body never arrives) holds shutdown
// open; a second SIGTERM cuts it off, and the exit code says shutdown was
// not clean.
func TestSecondSIGTERMCutsOffAndExitsNonZero(t *testing.T) {
	// The stalled body is given up after funchost.DefaultBodyTimeout (5 s):
	// an attempt whose second SIGTERM comes later than that, on a machine
	// too busy to get there sooner, tests nothing, and another is made.
	for attempt := 1; ; attempt++ {
		if secondSIGTERM(t) {
			return
		}
		if attempt == 3 {
			t.Fatal("three attempts took longer than the body timeout to send the second SIGTERM")
		}
		t.Logf("attempt %d: the second SIGTERM came after the body timeout; trying again", attempt)
	}
}

// secondSIGTERM runs one attempt of TestSecondSIGTERMCutsOffAndExitsNonZero;
// it returns false when the attempt was too slow to test anything.
func secondSIGTERM(t *testing.T) bool {
	p := startPaced(t)
	c, err := net.Dial("tcp", strings.TrimPrefix(p.BaseURL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Headers announce 100 bytes; 10 arrive, then nothing.
	stalled := time.Now()
	if _, err := fmt.Fprintf(c, "POST /Subscriber HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"Data\":{"); err != nil {
		t.Fatal(err)
	}
	// The request is in the handler once it waits for the rest of the body;
	// a GET on another connection proves the server is serving.
	if err := p.WaitReady(testctx.Timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if _, err := p.WaitLine(testctx.Timeout(t, 10*time.Second), func(l handlerproc.Line) bool {
		return strings.HasPrefix(l.Str("message"), "shutting down")
	}); err != nil {
		t.Fatalf("no shutdown line: %v", err)
	}
	if time.Since(stalled) > 4*time.Second {
		return false
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait(testctx.Timeout(t, 20*time.Second))
	if err != nil {
		t.Fatalf("no exit after the second SIGTERM: %v", err)
	}
	if code == 0 {
		t.Fatalf("exit code 0 although an invocation was cut off; output:\n%s", p.Output(20))
	}
	if !strings.Contains(p.Stderr(), "did not finish cleanly") {
		t.Fatalf("stderr does not say shutdown was not clean: %q", p.Stderr())
	}
	return true
}

// A port already in use fails start-up with the error on stderr, not only
// in the JSON log.
func TestListenFailureIsOnStderr(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := startApp(t, handlerproc.Options{
		Port: ln.Addr().(*net.TCPAddr).Port,
		Settings: map[string]string{
			"NimBus__Endpoint":       "BillingEndpoint",
			"NimBus__Resolver__Sink": "InMemory",
		},
	})
	code, err := p.Wait(testctx.Timeout(t, 20*time.Second))
	if err != nil || code != 1 {
		t.Fatalf("exit %d, %v", code, err)
	}
	if !strings.Contains(p.Stderr(), "cannot listen") {
		t.Fatalf("stderr = %q", p.Stderr())
	}
}
