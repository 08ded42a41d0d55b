package nimbus_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testctx"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv/handlerproc"
	"github.com/nimbus-go/functions-subscriber/nimbus"
)

// childSetting, set to 1 in the environment, makes the test binary run
// testApp's Main instead of the tests: the tests of the entry point start
// it as the Functions host starts a handler, and signal it.
const childSetting = "NIMBUS_TEST_RUN_APP"

func TestMain(m *testing.M) {
	if os.Getenv(childSetting) == "1" {
		testApp().Main()
	}
	os.Exit(m.Run())
}

// order is the test app's event.
type order struct {
	OrderID           string `json:"OrderId"`
	FailFirstAttempts int
}

// testApp handles OrderPlaced: it fails transiently on the first
// FailFirstAttempts deliveries and completes after them.
func testApp() *nimbus.App {
	app := nimbus.New()
	app.Handle("OrderPlaced", func(ctx context.Context, ev *nimbus.Event) (nimbus.Result, error) {
		var o order
		if err := ev.Decode(&o); err != nil {
			return nimbus.Result{}, err
		}
		if ev.DeliveryCount <= o.FailFirstAttempts {
			return nimbus.Result{}, nimbus.Transient(fmt.Errorf("busy on delivery %d", ev.DeliveryCount))
		}
		return nimbus.Completed(), nil
	})
	return app
}

// startApp starts the test app as a process with opts (Binary and the
// child setting are filled in).
func startApp(t *testing.T, opts handlerproc.Options) *handlerproc.Proc {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	opts.Binary = bin
	settings := map[string]string{childSetting: "1"}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	opts.Settings = settings
	p, err := handlerproc.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// memorySettings are the settings of an endpoint app with in-memory stores.
func memorySettings(extra ...string) map[string]string {
	m := map[string]string{
		"NimBus__Endpoint":               "BillingEndpoint",
		"NimBus__Inbox__Enabled":         "true",
		"NimBus__Inbox__Store":           "InMemory",
		"NimBus__Inbox__CleanupSchedule": "0 0 * * * *",
		"NimBus__Outbox__SweepSchedule":  "0 */5 * * * *",
		"NimBus__Resolver__Sink":         "InMemory",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

// orderEnvelope is the Functions host's invocation of Subscriber with an
// OrderPlaced EventRequest; extraProps are more application properties
// (JSON members, with a leading comma).
func orderEnvelope(i int, eventJSON, extraProps string) string {
	body := fmt.Sprintf(`{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":%q},"ErrorContent":null}`, eventJSON)
	return fmt.Sprintf(`{"Data":{"message":%q},"Metadata":{"DeliveryCount":"1","MessageId":"\"m-%d\"","SessionId":"\"s-%d\"","ApplicationProperties":{"To":"BillingEndpoint","From":"Shop","MessageType":"EventRequest","EventId":"e-%d","EventTypeId":"OrderPlaced"%s}}}`,
		base64.StdEncoding.EncodeToString([]byte(body)), i, i, i, extraProps)
}

func TestStartupFailsWithEveryProblemListed(t *testing.T) {
	p := startApp(t, handlerproc.Options{
		NoPort:   true,
		Settings: map[string]string{"NimBus__Inbox__Enabled": "true", "NimBus__Inbox__PurgeBatchSize": "0"},
	})
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

func TestMainServesTheHostAndShutsDownGracefully(t *testing.T) {
	p := startApp(t, handlerproc.Options{Settings: memorySettings()})
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

	env := orderEnvelope(1, `{"OrderId":"O-1","Amount":10}`, "")
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
	if _, err := p.WaitLine(testctx.Timeout(t, time.Second), func(l handlerproc.Line) bool {
		return strings.HasPrefix(l.Str("message"), "shutting down") && l.Str("signal") == "terminated"
	}); err != nil {
		t.Errorf("the shutdown line does not name the signal: %v\n%s", err, p.Output(20))
	}
}
