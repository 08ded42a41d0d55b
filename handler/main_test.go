package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
	"github.com/nimbus-go/functions-subscriber/internal/testctx"
	"github.com/nimbus-go/functions-subscriber/internal/testenv/handlerproc"
)

func TestMain(m *testing.M) { os.Exit(handlerproc.RunTests(m)) }

// buildHandler compiles this package once per test binary and returns the
// binary's path.
func buildHandler(t *testing.T) string {
	t.Helper()
	bin, err := handlerproc.TestBinary(testctx.Timeout(t, 5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func TestStartupFailsWithEveryProblemListed(t *testing.T) {
	p, err := handlerproc.Start(handlerproc.Options{
		Binary:   buildHandler(t),
		NoPort:   true,
		Settings: map[string]string{"NimBus__Inbox__Enabled": "true", "NimBus__Inbox__PurgeBatchSize": "0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait(testctx.Timeout(t, 20*time.Second))
	if err != nil {
		_, _ = p.Stop(testctx.Timeout(t, 5*time.Second))
		t.Fatalf("%v; output:\n%s", err, p.Output(20))
	}
	if code != 2 {
		t.Fatalf("exit code %d, want 2; output:\n%s", code, p.Output(20))
	}
	out := p.Stderr()
	for _, l := range p.Lines() {
		out += l.Raw + "\n"
	}
	for _, want := range []string{"NimBus__Endpoint", "NimBus__Inbox__Store", "NimBus__Inbox__PurgeBatchSize", "ServiceBusConnection"} {
		if !strings.Contains(p.Stderr(), want) {
			t.Errorf("start-up error on stderr does not mention %s:\n%s", want, out)
		}
	}
	// The log line says the same, as JSON on stdout.
	if _, err := p.WaitLine(testctx.Timeout(t, time.Second), func(l handlerproc.Line) bool {
		return l.Str("level") == "error" && strings.Contains(l.Str("error"), "NimBus__Endpoint")
	}); err != nil {
		t.Errorf("no JSON error line naming the settings: %v\n%s", err, out)
	}
}

func TestBinaryServesTheHostAndShutsDownGracefully(t *testing.T) {
	p, err := handlerproc.Start(handlerproc.Options{
		Binary: buildHandler(t),
		Settings: map[string]string{
			"NimBus__Endpoint":               "BillingEndpoint",
			"NimBus__Inbox__Enabled":         "true",
			"NimBus__Inbox__Store":           "InMemory",
			"NimBus__Inbox__CleanupSchedule": "0 0 * * * *",
			"NimBus__Resolver__Sink":         "InMemory",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := p.Stop(testctx.Timeout(t, 20*time.Second)); err != nil {
			t.Error(err)
		}
	})
	if err := p.WaitReady(testctx.Timeout(t, 20*time.Second)); err != nil {
		t.Fatalf("GET / never answered 200: %v", err)
	}
	port := p.Port()
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
	resp, err := http.Post(p.BaseURL()+"/Subscriber", "application/json", strings.NewReader(env))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST /Subscriber: %v %v", resp, err)
	}
	resp.Body.Close()

	code, err := p.Stop(testctx.Timeout(t, 20*time.Second))
	if err != nil {
		t.Fatalf("no exit within 20s of SIGTERM: %v", err)
	}
	if code != 0 {
		t.Fatalf("exit code %d after SIGTERM; output:\n%s", code, p.Output(20))
	}
	var outcomes []string
	for _, l := range p.Lines() {
		if o, ok := l.Fields["outcome"].(string); ok {
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
