package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"github.com/nimbus-go/functions-subscriber/internal/testenv"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

// buildHandler compiles this package once per test binary.
func buildHandler(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "handler")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestStartupFailsWithEveryProblemListed(t *testing.T) {
	bin := buildHandler(t)
	cmd := exec.Command(bin)
	cmd.Env = testenv.HandlerEnv("NimBus__Inbox__Enabled=true", "NimBus__Inbox__PurgeBatchSize=0")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errorsAs(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("exit = %v, output:\n%s", err, out)
	}
	for _, want := range []string{"NimBus__Endpoint", "NimBus__Inbox__Store", "NimBus__Inbox__PurgeBatchSize", "ServiceBusConnection"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("start-up error does not mention %s:\n%s", want, out)
		}
	}
}

func TestBinaryServesTheHostAndShutsDownGracefully(t *testing.T) {
	bin := buildHandler(t)
	port := testenv.FreePort(t)
	cmd := exec.Command(bin)
	cmd.Env = testenv.HandlerEnv(
		fmt.Sprintf("FUNCTIONS_CUSTOMHANDLER_PORT=%d", port),
		"NimBus__Endpoint=BillingEndpoint",
		"NimBus__Inbox__Enabled=true",
		"NimBus__Inbox__Store=InMemory",
		"NimBus__Inbox__CleanupSchedule=0 0 * * * *",
		"NimBus__Resolver__Sink=InMemory",
	)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan map[string]any, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
		close(lines)
	}()

	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	var resp *http.Response
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if resp, err = http.Get(base + "/"); err == nil {
			break
		}
	}
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET / never answered 200: %v", err)
	}
	resp.Body.Close()
	// It listens on loopback only.
	if addrs, _ := net.InterfaceAddrs(); len(addrs) > 0 {
		for _, a := range addrs {
			ip, _, _ := net.ParseCIDR(a.String())
			if ip == nil || ip.IsLoopback() || ip.To4() == nil {
				continue
			}
			c, err := net.DialTimeout("tcp", net.JoinHostPort(ip.String(), fmt.Sprint(port)), time.Second)
			if err == nil {
				c.Close()
				t.Fatalf("the handler accepts connections on %s", ip)
			}
		}
	}

	body := `{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1\",\"Amount\":10}"},"ErrorContent":null}`
	env := fmt.Sprintf(`{"Data":{"message":%q},"Metadata":{"DeliveryCount":"1","MessageId":"\"m-1\"","SessionId":"\"s-1\"","ApplicationProperties":{"To":"BillingEndpoint","From":"Shop","MessageType":"EventRequest","EventId":"e-1","EventTypeId":"OrderPlaced"}}}`, b64(body))
	resp, err = http.Post(base+"/Subscriber", "application/json", strings.NewReader(env))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST /Subscriber: %v %v", resp, err)
	}
	resp.Body.Close()

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no exit within 20s of SIGTERM")
	}
	var outcomes []string
	for l := range lines {
		if o, ok := l["outcome"].(string); ok {
			outcomes = append(outcomes, o)
		}
	}
	if strings.Join(outcomes, ",") != "completed" {
		t.Fatalf("outcomes logged = %v", outcomes)
	}
}

func TestSampleHandler(t *testing.T) {
	r := newRegistryForTest()
	if got := strings.Join(r.EventTypes(), ","); got != "OrderPlaced" {
		t.Fatalf("registered = %s", got)
	}
	ctx := t.Context()
	cases := []struct {
		name      string
		json      string
		delivery  int
		permanent bool
		fails     bool
		handoff   bool
	}{
		{"completes", `{"OrderId":"O-1","Amount":10}`, 1, false, false, false},
		{"large order is handed off", `{"OrderId":"O-2","Amount":25000}`, 1, false, false, true},
		{"first attempt fails transiently", `{"OrderId":"O-3","FailFirstAttempts":1}`, 1, false, true, false},
		{"second attempt succeeds", `{"OrderId":"O-3","FailFirstAttempts":1}`, 2, false, false, false},
		{"no order id is permanent", `{"Amount":10}`, 1, true, true, false},
		{"unreadable event is permanent", `not json`, 1, true, true, false},
	}
	for _, c := range cases {
		res, err := handleOrderPlaced(ctx, &subscriber.Event{EventTypeID: "OrderPlaced", JSON: c.json, DeliveryCount: c.delivery})
		if (err != nil) != c.fails || subscriber.IsPermanent(err) != c.permanent {
			t.Errorf("%s: err = %v", c.name, err)
		}
		if err == nil && (res != subscriber.Completed()) != c.handoff {
			t.Errorf("%s: result = %+v", c.name, res)
		}
	}
}
