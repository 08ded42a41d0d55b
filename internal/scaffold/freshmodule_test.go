package scaffold

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/message/nimbustest"
	"github.com/nimbus-go/functions-subscriber/internal/minihost"
	"github.com/nimbus-go/functions-subscriber/internal/servicebus"
	"github.com/nimbus-go/functions-subscriber/internal/testctx"
	"github.com/nimbus-go/functions-subscriber/internal/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/testenv/handlerproc"
)

// The team's module, endpoint and event in the fresh-module test.
const (
	libraryModule = "github.com/nimbus-go/functions-subscriber"
	teamModule    = "example.com/billing"
	teamEndpoint  = "InvoiceEndpoint"
	teamPublisher = "ShopEndpoint"
	teamEvent     = "InvoiceRequested"
)

// teamMain is the team's own main.go, replacing the sample init writes: one
// handler that fails the event when its body asks for it.
const teamMain = `package main

import (
	"context"
	"errors"

	"github.com/nimbus-go/functions-subscriber/nimbus"
)

type invoiceRequested struct {
	InvoiceID string ` + "`json:\"InvoiceId\"`" + `
	Reject    bool   ` + "`json:\"Reject\"`" + `
}

func main() {
	app := nimbus.New()
	app.Handle("InvoiceRequested", func(ctx context.Context, ev *nimbus.Event) (nimbus.Result, error) {
		var in invoiceRequested
		if err := ev.Decode(&in); err != nil {
			return nimbus.Result{}, err
		}
		if in.Reject {
			return nimbus.Result{}, errors.New("invoice rejected: the event asks for it")
		}
		return nimbus.Completed(), nil
	})
	app.Main()
}
`

// rejectedText is the ErrorText of teamMain's failure.
const rejectedText = "invoice rejected: the event asks for it"

// TestFreshModuleEndToEnd is what a team does with the library: a new module
// that requires it (a replace to this checkout), `nimbus-func init`, its own
// handler, `check` and `package`. The staged executable then runs against
// the local Cosmos DB and Service Bus stand-ins, invoked by mini hosts built
// from the staged function.json files and configured from the scaffolded
// local settings: a fresh delivery, its duplicate, a failure that blocks its
// session (the next event is parked) and the Manager's resubmission, which
// resolves it and replays the parked event. Finally a broken binding makes
// `check` fail naming it.
func TestFreshModuleEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a new module and runs it against the local stand-ins")
	}
	cosmos := testenv.StartCosmos(t, testenv.CosmosOptions{Consistency: "Strong"})
	sb := testenv.StartServiceBus(t, testenv.NimBusTopology(teamEndpoint))

	mod := newTeamModule(t)
	tool := filepath.Join(t.TempDir(), "nimbus-func")
	goCmd(t, mod, "build", "-o", tool, libraryModule+"/cmd/nimbus-func")
	nimbusFunc(t, mod, tool, 0, "init: 18 files written, 0 skipped", "init", "--endpoint", teamEndpoint)
	if err := os.WriteFile(filepath.Join(mod, "main.go"), []byte(teamMain), 0o644); err != nil {
		t.Fatal(err)
	}
	goCmd(t, mod, "mod", "tidy")

	// Connection strings instead of the sample's identity-based
	// placeholders, which name Azure accounts.
	settings := writeLocalSettings(t, mod, map[string]string{
		"NimBus__Inbox__Enabled":                        "true",
		"NimBus__Inbox__Cosmos__ConnectionString":       cosmos.ConnectionString(),
		"NimBus__Inbox__Cosmos__AccountEndpoint":        "",
		"ServiceBusConnection":                          sb.ConnectionString,
		"ServiceBusConnection__fullyQualifiedNamespace": "",
	})
	nimbusFunc(t, mod, tool, 0, "the host files are fine", "check")
	nimbusFunc(t, mod, tool, 0, "package: staged the endpoint app", "package")
	dist := filepath.Join(mod, "dist")
	checkDistLayout(t, dist)

	h, err := handlerproc.Start(handlerproc.Options{Binary: filepath.Join(dist, "handler"), Settings: settings,
		Secrets: []string{cosmos.Key, cosmos.ConnectionString(), sb.ConnectionString}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		code, err := h.Stop(testctx.Timeout(t, 30*time.Second))
		if err != nil || code != 0 {
			t.Errorf("the staged handler stopped with code %d (%v)", code, err)
		}
		if t.Failed() {
			t.Logf("handler output:\n%s", h.Output(60))
		}
	})
	if err := h.WaitReady(testctx.Timeout(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	startHosts(t, sb, dist, settings, h.BaseURL())
	sender, err := servicebus.New(servicebus.Options{ConnectionString: sb.ConnectionString,
		Retry: azservicebus.RetryOptions{MaxRetries: 2, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sender.Close(context.Background()) })
	send := func(m nimbustest.Message) {
		t.Helper()
		err := sender.Send(testctx.Timeout(t, 10*time.Second), teamEndpoint, &servicebus.Message{Body: m.Body,
			ApplicationProperties: m.ApplicationProperties, SessionID: m.SessionID, CorrelationID: m.CorrelationID, MessageID: m.MessageID})
		if err != nil {
			t.Fatal(err)
		}
	}
	resolver := sb.Client(t)

	// A fresh delivery is resolved; its duplicate (the outbox sending the
	// same MessageId again, with a new EventId) is skipped unhandled.
	fresh := invoice("inv-1", "customer-1", false)
	send(nimbustest.EventRequest(fresh))
	wantResponses(t, resolver, fresh.SessionID, []string{"ResolutionResponse:inv-1"})
	again := fresh
	again.EventID = "5d0b6c1e-8a53-4c1f-9d7e-2a9f3c4b5e60"
	send(nimbustest.EventRequest(again))
	rs := wantResponses(t, resolver, fresh.SessionID, []string{"SkipResponse:inv-1"})
	if text := errorText(t, rs[0]); text != "DuplicateDetected" {
		t.Errorf("the duplicate's SkipResponse says %q, want DuplicateDetected", text)
	}

	// A failure blocks its session: the Resolver gets the ErrorResponse
	// and the next event of the session is parked behind it.
	failing := invoice("inv-2", "customer-2", true)
	next := invoice("inv-3", "customer-2", false)
	failed := nimbustest.EventRequest(failing)
	send(failed)
	send(nimbustest.EventRequest(next))
	rs = wantResponses(t, resolver, failing.SessionID, []string{"ErrorResponse:inv-2", "DeferralResponse:inv-3"})
	if text := errorText(t, rs[0]); text != rejectedText {
		t.Errorf("ErrorResponse text %q, want the handler's %q", text, rejectedText)
	}
	if text, want := errorText(t, rs[1]), "Session customer-2 is blocked by "+failed.ApplicationProperties["EventId"].(string); text != want {
		t.Errorf("DeferralResponse text %q, want %q", text, want)
	}

	// The Manager resubmits the failed event without the rejection: it is
	// resolved, and the parked event replays after it.
	er := rs[0]
	fixed := strings.Replace(failing.EventJSON, `"Reject":true`, `"Reject":false`, 1)
	send(nimbustest.Resubmission(nimbustest.ErrorResponse{MessageID: er.MessageID, CorrelationID: deref(er.CorrelationID),
		EventID: prop(er, "EventId"), SessionID: deref(er.SessionID), OriginatingMessageID: prop(er, "OriginatingMessageId")},
		teamEndpoint, teamEvent, fixed))
	wantResponses(t, resolver, failing.SessionID, []string{"ResolutionResponse:inv-2", "ResolutionResponse:inv-3"})

	// A binding check names what is broken.
	sub := filepath.Join(mod, "functions", "Subscriber", "function.json")
	b, err := os.ReadFile(sub)
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(b), `"dataType": "binary"`, `"dataType": "string"`, 1)
	if broken == string(b) {
		t.Fatalf("functions/Subscriber/function.json has no binary dataType to break:\n%s", b)
	}
	if err := os.WriteFile(sub, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	const problem = `functions/Subscriber/function.json: bindings[0].dataType is "string", want "binary"`
	if out := nimbusFunc(t, mod, tool, 1, problem, "check"); out != problem+"\n" {
		t.Errorf("check printed\n%s\nwant only the broken binding's line", out)
	}
}

// newTeamModule returns a new module that requires this checkout, with this
// checkout's go.sum so that `go mod tidy` needs no network.
func newTeamModule(t *testing.T) string {
	t.Helper()
	root, err := handlerproc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	mod := t.TempDir()
	goCmd(t, mod, "mod", "init", teamModule)
	goCmd(t, mod, "mod", "edit", "-require", libraryModule+"@v0.0.0", "-replace", libraryModule+"="+root)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	return mod
}

// offline is the environment of the go and nimbus-func commands: modules
// come from the module cache only.
func offline() []string {
	return append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off")
}

// goCmd runs go with args in dir.
func goCmd(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(testctx.Timeout(t, 10*time.Minute), "go", args...)
	cmd.Dir, cmd.Env = dir, offline()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// nimbusFunc runs the built command in dir, wants exit code and the line
// want in its output, and returns its standard output.
func nimbusFunc(t *testing.T, dir, tool string, code int, want string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(testctx.Timeout(t, 10*time.Minute), tool, args...)
	cmd.Dir, cmd.Env = dir, offline()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	got := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		got = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if got != code || !strings.Contains(string(out), want) {
		t.Fatalf("nimbus-func %s: exit %d, want %d and %q; output:\n%s%s", strings.Join(args, " "), got, code, want, out, stderr.String())
	}
	return string(out)
}

// writeLocalSettings fills the scaffolded sample settings in as a team
// would (local.settings.json: the sample with the connections set) and
// returns the settings the Functions host would pass the handler.
func writeLocalSettings(t *testing.T, mod string, set map[string]string) map[string]string {
	t.Helper()
	var s struct {
		IsEncrypted bool
		Values      map[string]string
	}
	b, err := os.ReadFile(filepath.Join(mod, "local.settings.sample.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("local.settings.sample.json: %v", err)
	}
	if s.Values["NimBus__Endpoint"] != teamEndpoint {
		t.Fatalf("local.settings.sample.json names the endpoint %q, want %q", s.Values["NimBus__Endpoint"], teamEndpoint)
	}
	for k, v := range set {
		if _, ok := s.Values[k]; !ok {
			t.Fatalf("local.settings.sample.json has no %s to fill in", k)
		}
		s.Values[k] = v
	}
	if b, err = json.MarshalIndent(s, "", "  "); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "local.settings.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return s.Values
}

// checkDistLayout asserts the app root package staged: what the Functions
// host reads, and the executable host.json names.
func checkDistLayout(t *testing.T, dist string) {
	t.Helper()
	want := []string{".funcignore", ".nimbus-package", "CloudEventsIngress/function.json", "DeferredProcessor/function.json",
		"InboxCleanup/function.json", "OutboxSweep/function.json", "Subscriber/function.json", "handler", "host.json", "local.settings.json"}
	if got := staged(t, dist); !slices.Equal(got, want) {
		t.Errorf("dist/ holds\n %v\nwant\n %v", got, want)
	}
	var host struct {
		CustomHandler struct {
			Description struct {
				DefaultExecutablePath string `json:"defaultExecutablePath"`
			} `json:"description"`
		} `json:"customHandler"`
	}
	b, err := os.ReadFile(filepath.Join(dist, "host.json"))
	if err == nil {
		err = json.Unmarshal(b, &host)
	}
	if err != nil || host.CustomHandler.Description.DefaultExecutablePath != "handler" {
		t.Errorf("dist/host.json starts %q (%v), want the staged handler", host.CustomHandler.Description.DefaultExecutablePath, err)
	}
	if fi, err := os.Stat(filepath.Join(dist, "handler")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("dist/handler: %v, mode %v, want an executable (0755)", err, fi.Mode())
	}
}

// settingRef is a binding expression, %A:B% for the app setting A__B.
var settingRef = regexp.MustCompile(`%([^%]+)%`)

// startHosts starts a mini host for every Service Bus trigger of the staged
// app the way the Functions host reads it: each <Name>/function.json, its
// binding expressions resolved from the settings, except the functions the
// settings disable (AzureWebJobs.<Name>.Disabled).
func startHosts(t *testing.T, sb *testenv.ServiceBus, dist string, settings map[string]string, baseURL string) {
	t.Helper()
	resolve := func(s string) string {
		return settingRef.ReplaceAllStringFunc(s, func(m string) string {
			return settings[strings.ReplaceAll(strings.Trim(m, "%"), ":", "__")]
		})
	}
	files, err := filepath.Glob(filepath.Join(dist, "*", "function.json"))
	if err != nil {
		t.Fatal(err)
	}
	var started []string
	for _, f := range files {
		name := filepath.Base(filepath.Dir(f))
		var fn struct {
			Bindings []struct {
				Name, Type, TopicName, SubscriptionName string
				IsSessionsEnabled                       bool
			}
		}
		b, err := os.ReadFile(f)
		if err == nil {
			err = json.Unmarshal(b, &fn)
		}
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(fn.Bindings) == 0 || fn.Bindings[0].Type != "serviceBusTrigger" || strings.EqualFold(settings["AzureWebJobs."+name+".Disabled"], "true") {
			continue
		}
		tr := fn.Bindings[0]
		host, err := minihost.New(minihost.Config{
			Client: sb.Client(t), Topic: resolve(tr.TopicName), Subscription: resolve(tr.SubscriptionName),
			NoSessions: !tr.IsSessionsEnabled, Function: name, Binding: tr.Name,
			Invoker:            &minihost.Invoker{BaseURL: baseURL},
			SessionIdleTimeout: 300 * time.Millisecond, InvocationTimeout: time.Minute,
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := host.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := host.Stop(testctx.Timeout(t, time.Minute)); err != nil {
				t.Errorf("stopping the %s mini host: %v", name, err)
			}
		})
		started = append(started, name)
	}
	if want := []string{"DeferredProcessor", "Subscriber"}; !slices.Equal(started, want) {
		t.Fatalf("Service Bus triggers started %v, want %v", started, want)
	}
}

// invoice is an InvoiceRequested event from the shop to the team's
// endpoint; reject makes the handler fail it.
func invoice(messageID, session string, reject bool) nimbustest.Event {
	return nimbustest.Event{
		Publisher: teamPublisher, Endpoint: teamEndpoint, EventTypeID: teamEvent, SessionID: session, MessageID: messageID,
		EventJSON: fmt.Sprintf(`{"InvoiceId":"%s","Reject":%t}`, messageID, reject),
	}
}

// wantResponses reads the Resolver's session until the responses labelled
// want (MessageType:OriginatingMessageId, in order) arrived, skipping the
// audit copies of requests the topology also forwards there.
func wantResponses(t *testing.T, c *azservicebus.Client, session string, want []string) []*azservicebus.ReceivedMessage {
	t.Helper()
	var got []*azservicebus.ReceivedMessage
	var labels []string
	for len(got) < len(want) {
		m := testenv.ReceiveSession(t, c, testenv.ResolverTopic, testenv.ResolverSubscription, session, 1, time.Minute)[0]
		if prop(m, "To") != testenv.ResolverTopic {
			continue
		}
		got = append(got, m)
		labels = append(labels, prop(m, "MessageType")+":"+prop(m, "OriginatingMessageId"))
	}
	if !slices.Equal(labels, want) {
		t.Fatalf("session %s: the Resolver got %v, want %v", session, labels, want)
	}
	return got
}

// errorText returns the ErrorContent.ErrorText of a response.
func errorText(t *testing.T, m *azservicebus.ReceivedMessage) string {
	t.Helper()
	var body struct{ ErrorContent *struct{ ErrorText string } }
	if err := json.Unmarshal(m.Body, &body); err != nil || body.ErrorContent == nil {
		t.Fatalf("%s has no ErrorContent (%v): %s", prop(m, "MessageType"), err, m.Body)
	}
	return body.ErrorContent.ErrorText
}

func prop(m *azservicebus.ReceivedMessage, k string) string {
	s, _ := m.ApplicationProperties[k].(string)
	return s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
