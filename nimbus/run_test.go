package nimbus_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testlog"
	"github.com/nimbus-go/functions-subscriber/nimbus"
)

// runApp runs app with settings on a loopback listener until the returned
// stop function is called; stop returns Run's error.
func runApp(t *testing.T, app *nimbus.App, settings map[string]string, stdout, stderr *testlog.Buffer) (base string, stop func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, nimbus.Options{Environ: environ(settings), Listener: ln, Stdout: stdout, Stderr: stderr, Version: "1.2.3"})
	}()
	stopped := false
	stop = func() error {
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			t.Fatal("Run did not return within 20 s of its context ending")
			return nil
		}
	}
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	return "http://" + ln.Addr().String(), stop
}

// Run serves invocations on the listener it is given, hands the handler
// the delivery through the public Event, and returns nil once its context
// ends.
func TestRunServesUntilTheContextEnds(t *testing.T) {
	var mu sync.Mutex
	var got []nimbus.Event
	app := nimbus.New()
	app.Handle("OrderPlaced", func(ctx context.Context, ev *nimbus.Event) (nimbus.Result, error) {
		mu.Lock()
		got = append(got, *ev)
		mu.Unlock()
		return nimbus.PendingHandoff(nimbus.Handoff{Reason: "ManualApproval", ExternalJobID: "approval-1"}), nil
	})
	var stdout, stderr testlog.Buffer
	base, stop := runApp(t, app, memorySettings(), &stdout, &stderr)
	resp, err := http.Post(base+"/Subscriber", "application/json", strings.NewReader(orderEnvelope(7, `{"OrderId":"O-7"}`, "")))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /Subscriber answered %d", resp.StatusCode)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v; stderr %q", err, stderr.String())
	}
	if len(got) != 1 {
		t.Fatalf("handler ran %d times, want 1", len(got))
	}
	ev := got[0]
	if ev.EventTypeID != "OrderPlaced" || ev.JSON != `{"OrderId":"O-7"}` || ev.MessageID != "m-7" || ev.SessionID != "s-7" ||
		ev.EventID != "e-7" || ev.From != "Shop" || ev.DeliveryCount != 1 || ev.Attempt != nimbus.AttemptOriginal || ev.CloudEvent != nil {
		t.Errorf("handler got %+v", ev)
	}
	var listening, outcome map[string]any
	for _, l := range testlog.ParseLines(t, stdout.String()) {
		switch {
		case l["message"] == "custom handler listening":
			listening = l
		case l["outcome"] != nil:
			outcome = l
		}
	}
	if listening == nil || listening["version"] != "1.2.3" || listening["addr"] != strings.TrimPrefix(base, "http://") {
		t.Errorf("listening line %v", listening)
	}
	if types, _ := listening["eventTypes"].([]any); len(types) != 1 || types[0] != "OrderPlaced" {
		t.Errorf("listening line names the event types %v", listening["eventTypes"])
	}
	if outcome == nil || outcome["outcome"] != "pending_handoff" {
		t.Errorf("outcome line %v, want the pending handoff", outcome)
	}
}

// The same entry point serves the Resolver app, with no handlers.
func TestRunServesTheResolverApp(t *testing.T) {
	var stdout, stderr testlog.Buffer
	base, stop := runApp(t, nimbus.New(), map[string]string{"NimBus__App": "Resolver", "NimBus__Resolver__Store": "InMemory",
		// Clients are created on first use: nothing connects here.
		"ServiceBusConnection": "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true"}, &stdout, &stderr)
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatalf("%v; stderr %q", err, stderr.String())
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET / answered %d", resp.StatusCode)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v; stderr %q\n%s", err, stderr.String(), stdout.String())
	}
	if !strings.Contains(stdout.String(), `"app":"Resolver"`) {
		t.Fatalf("the app did not start as the Resolver:\n%s", stdout.String())
	}
}

// Wrong settings: a *SettingsError with every problem, also on Stderr;
// the listener is closed.
func TestRunRefusesWrongSettings(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr testlog.Buffer
	err = nimbus.New().Run(t.Context(), nimbus.Options{
		Environ:  []string{"NimBus__Inbox__Enabled=true", "NimBus__Inbox__PurgeBatchSize=0"},
		Listener: ln, Stdout: &stdout, Stderr: &stderr,
	})
	var se *nimbus.SettingsError
	if !errors.As(err, &se) {
		t.Fatalf("Run: %v (%T), want a *nimbus.SettingsError", err, err)
	}
	for _, want := range []string{"NimBus__Endpoint", "NimBus__Inbox__Store", "NimBus__Inbox__PurgeBatchSize"} {
		if !slices.ContainsFunc(se.Problems, func(p string) bool { return strings.HasPrefix(p, want) || strings.Contains(p, " "+want) }) {
			t.Errorf("no problem names %s: %q", want, se.Problems)
		}
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr does not mention %s: %q", want, stderr.String())
		}
	}
	if got := strings.TrimSpace(stderr.String()); got != se.Error() {
		t.Errorf("stderr %q, want the error's text %q", got, se.Error())
	}
	if _, err := ln.Accept(); err == nil {
		t.Error("the listener is still open")
	}
}

// Without a listener, Run listens on the port the host gives; a port in use
// is an error (not a settings error: exit code 1) with the reason on
// Stderr.
func TestRunCannotListen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var stdout, stderr testlog.Buffer
	settings := map[string]string{"NimBus__Endpoint": "BillingEndpoint", "NimBus__Resolver__Sink": "InMemory",
		"FUNCTIONS_CUSTOMHANDLER_PORT": strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)}
	err = nimbus.New().Run(t.Context(), nimbus.Options{Environ: environ(settings), Stdout: &stdout, Stderr: &stderr})
	var se *nimbus.SettingsError
	var op *net.OpError
	if err == nil || errors.As(err, &se) || !errors.As(err, &op) || !strings.Contains(stderr.String(), "cannot listen") {
		t.Fatalf("Run: %v, stderr %q", err, stderr.String())
	}
}

// environ turns settings into "key=value" pairs, as os.Environ returns them.
func environ(settings map[string]string) []string {
	out := make([]string, 0, len(settings))
	for k, v := range settings {
		out = append(out, k+"="+v)
	}
	return out
}

// A NimBus__ setting a Container names is accepted; any other unknown one
// still fails start-up.
func TestRunKnowsTheContainerSettings(t *testing.T) {
	app := nimbus.New()
	app.HandleTx("PaymentReceived", nimbus.Container{DatabaseID: "Billing", ContainerID: "ledger", PartitionKeyPath: "/customerId",
		DatabaseSetting: "NimBus__Ledger__Db"},
		func(*nimbus.Event) (string, error) { return "k", nil },
		func(context.Context, *nimbus.Event, *nimbus.Tx) (nimbus.Result, error) {
			return nimbus.Completed(), nil
		})
	base := []string{"NimBus__Endpoint=BillingEndpoint", "NimBus__Resolver__Sink=InMemory", "NimBus__Ledger__Db=Payments",
		"NimBus__Inbox__Enabled=true", "NimBus__Inbox__Store=InMemory"}
	for _, c := range []struct {
		extra   string
		refused bool
	}{{"", false}, {"NimBus__Ledger__Dbx=x", true}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		env := base
		if c.extra != "" {
			env = append(append([]string(nil), base...), c.extra)
		}
		var stderr testlog.Buffer
		ctx, cancel := context.WithCancel(t.Context())
		cancel() // serve nothing: start up and stop
		err = app.Run(ctx, nimbus.Options{Environ: env, Listener: ln, Stdout: io.Discard, Stderr: &stderr})
		var se *nimbus.SettingsError
		if refused := errors.As(err, &se); refused != c.refused || (!refused && err != nil) {
			t.Fatalf("with %q: Run: %v, want refused=%v: %s", c.extra, err, c.refused, stderr.String())
		}
	}
}

// handleLedger registers a transactional handler on the ledger container.
func handleLedger(app *nimbus.App) {
	app.HandleTx("PaymentReceived", nimbus.Container{DatabaseID: "Billing", ContainerID: "ledger", PartitionKeyPath: "/customerId"},
		func(*nimbus.Event) (string, error) { return "k", nil },
		func(context.Context, *nimbus.Event, *nimbus.Tx) (nimbus.Result, error) {
			return nimbus.Completed(), nil
		})
}

// A transactional handler never runs on an in-memory container unless the
// inbox is explicitly in memory: with the inbox off (its default), even
// with the Cosmos settings present, start-up fails naming the setting, in
// the one error with every other problem.
func TestRunRefusesTransactionalHandlersWithoutTheInbox(t *testing.T) {
	for name, env := range map[string][]string{
		"inbox unset": {"NimBus__Resolver__Sink=InMemory"},
		"inbox off, Cosmos settings present": {"NimBus__Resolver__Sink=InMemory", "NimBus__Inbox__Enabled=false",
			"NimBus__Inbox__Store=Cosmos", "NimBus__Inbox__Cosmos__AccountEndpoint=https://acct.documents.azure.com:443/"},
	} {
		t.Run(name, func(t *testing.T) {
			app := nimbus.New()
			handleLedger(app)
			var stderr testlog.Buffer
			err := app.Run(t.Context(), nimbus.Options{Environ: env, Stdout: io.Discard, Stderr: &stderr})
			var se *nimbus.SettingsError
			if !errors.As(err, &se) {
				t.Fatalf("Run: %v, want a *nimbus.SettingsError", err)
			}
			var endpoint, inbox bool
			for _, p := range se.Problems {
				endpoint = endpoint || strings.HasPrefix(p, "NimBus__Endpoint is required")
				inbox = inbox || strings.HasPrefix(p, "NimBus__Inbox__Enabled is not true") && strings.Contains(p, "PaymentReceived")
			}
			if !endpoint || !inbox {
				t.Fatalf("problems %q: want the missing endpoint and the inbox, naming the handler", se.Problems)
			}
			if !strings.Contains(stderr.String(), "NimBus__Inbox__Enabled is not true") {
				t.Errorf("stderr %q", stderr.String())
			}
		})
	}
}

// With the inbox in memory, the start-up line says the transactional
// containers are in memory, and a warning says what that means.
func TestRunSaysTheTransactionalContainersAreInMemory(t *testing.T) {
	app := nimbus.New()
	handleLedger(app)
	var stdout, stderr testlog.Buffer
	_, stop := runApp(t, app, memorySettings(), &stdout, &stderr)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v; %s", err, stderr.String())
	}
	var listening, warned bool
	for _, l := range testlog.ParseLines(t, stdout.String()) {
		switch {
		case l["message"] == "custom handler listening":
			containers, _ := l["txnContainers"].([]any)
			listening = l["txnStore"] == "InMemory" && len(containers) == 1 && containers[0] == "Billing/ledger"
		case l["level"] == "warn" && strings.Contains(fmt.Sprint(l["message"]), "keeps the transactional handlers' containers in this process only"):
			warned = true
		}
	}
	if !listening || !warned {
		t.Fatalf("listening line names the in-memory containers: %v; warning: %v\n%s", listening, warned, stdout.String())
	}
}
