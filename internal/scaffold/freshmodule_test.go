//go:build unix

package scaffold

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/dev/minihost"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testctx"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv/handlerproc"
	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
	"github.com/nimbus-go/functions-subscriber/internal/servicebus"
)

// The library's module path, and the team's publisher and event in the
// fresh-module test; its module and endpoint are the README's.
const (
	libraryModule = "github.com/nimbus-go/functions-subscriber"
	teamPublisher = "ShopEndpoint"
	teamEvent     = "InvoiceRequested"
)

// teamMain is the team's own main.go, replacing the sample init writes: one
// handler that fails the event when its body asks for it, and a
// transactional one whose container ids come from settings of the team's
// own (check must accept them).
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
	app.HandleTx("InvoicePaid", nimbus.Container{DatabaseID: "Billing", ContainerID: "invoices", PartitionKeyPath: "/customerId",
		DatabaseSetting: "NimBus__Invoices__DatabaseId", ContainerSetting: "NimBus__Invoices__ContainerId"},
		func(*nimbus.Event) (string, error) { return "", errors.New("not delivered in this test") },
		func(context.Context, *nimbus.Event, *nimbus.Tx) (nimbus.Result, error) { return nimbus.Completed(), nil })
	app.Main()
}
`

// teamSettings are the settings of the team's own that teamMain reads.
var teamSettings = map[string]string{"NimBus__Invoices__DatabaseId": "Billing", "NimBus__Invoices__ContainerId": "invoices"}

// rejectedText is the ErrorText of teamMain's failure.
const rejectedText = "invoice rejected: the event asks for it"

// TestFreshModuleEndToEnd is what a team does with the library, from the
// README: its commands under "Create your own endpoint" run as written in
// a new module, except that the library is this checkout (a replace
// directive after `go mod init`, and the checkout's go.sum standing in for
// the checksum database), and offline: the module cache holds what
// building this repository needs and the go.mod files of its module graph,
// which `go get` reads. "Run it locally" runs `go run .` of the sample
// init writes and sends it an event with `nimbus-func invoke`.
//
// The team's own handler then replaces the sample: `check` (which asks
// the app for the settings it declares) and `package`; the staged
// executable runs against the local Cosmos DB and Service Bus stand-ins,
// invoked by mini hosts built from the staged function.json files and
// configured from the scaffolded local settings: a fresh delivery, its
// duplicate, a failure that blocks its session (the next event is parked)
// and the Manager's resubmission, which resolves it and replays the parked
// event. Finally a broken binding makes `check` fail naming it.
func TestFreshModuleEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a new module and runs it against the local stand-ins")
	}
	cosmos := testenv.StartCosmos(t, testenv.CosmosOptions{Consistency: "Strong"})
	root, err := handlerproc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	qs := readQuickStart(t, root)
	sb := testenv.StartServiceBus(t, testenv.NimBusTopology(qs.endpoint))
	primeModuleGraph(t, root)

	mod := t.TempDir()
	for i, c := range qs.create {
		out := shell(t, mod, c)
		if i == 0 {
			useCheckout(t, mod, root)
		}
		if strings.Contains(c, "nimbus-func init") && !strings.Contains(out, "init: 18 files written, 0 skipped") {
			t.Fatalf("%s wrote:\n%s", c, out)
		}
	}
	runLocally(t, mod, qs)

	if err := os.WriteFile(filepath.Join(mod, "main.go"), []byte(teamMain), 0o644); err != nil {
		t.Fatal(err)
	}

	// Connection strings instead of the sample's identity-based
	// placeholders, which name Azure accounts.
	settings := writeLocalSettings(t, mod, map[string]string{
		"NimBus__Inbox__Enabled":                        "true",
		"NimBus__Inbox__Cosmos__ConnectionString":       cosmos.ConnectionString(),
		"NimBus__Inbox__Cosmos__AccountEndpoint":        "",
		"ServiceBusConnection":                          sb.ConnectionString,
		"ServiceBusConnection__fullyQualifiedNamespace": "",
	}, teamSettings)
	goTool(t, mod, 0, "the host files are fine", "check")
	goTool(t, mod, 0, "package: staged the endpoint app", "package")
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
	send := func(m nimbusmsg.Message) {
		t.Helper()
		err := sender.Send(testctx.Timeout(t, 10*time.Second), qs.endpoint, &servicebus.Message{Body: m.Body,
			ApplicationProperties: m.ApplicationProperties, SessionID: m.SessionID, CorrelationID: m.CorrelationID, MessageID: m.MessageID})
		if err != nil {
			t.Fatal(err)
		}
	}
	resolver := sb.Client(t)

	// A fresh delivery is resolved; its duplicate (the outbox sending the
	// same MessageId again, with a new EventId) is skipped unhandled.
	invoice := func(messageID, session string, reject bool) nimbusmsg.Event {
		return nimbusmsg.Event{
			Publisher: teamPublisher, Endpoint: qs.endpoint, EventTypeID: teamEvent, SessionID: session, MessageID: messageID,
			EventJSON: fmt.Sprintf(`{"InvoiceId":"%s","Reject":%t}`, messageID, reject),
		}
	}
	fresh := invoice("inv-1", "customer-1", false)
	send(nimbusmsg.EventRequest(fresh))
	wantResponses(t, resolver, fresh.SessionID, []string{"ResolutionResponse:inv-1"})
	again := fresh
	again.EventID = "5d0b6c1e-8a53-4c1f-9d7e-2a9f3c4b5e60"
	send(nimbusmsg.EventRequest(again))
	rs := wantResponses(t, resolver, fresh.SessionID, []string{"SkipResponse:inv-1"})
	if text := errorText(t, rs[0]); text != "DuplicateDetected" {
		t.Errorf("the duplicate's SkipResponse says %q, want DuplicateDetected", text)
	}

	// A failure blocks its session: the Resolver gets the ErrorResponse
	// and the next event of the session is parked behind it.
	failing := invoice("inv-2", "customer-2", true)
	next := invoice("inv-3", "customer-2", false)
	failed := nimbusmsg.EventRequest(failing)
	send(failed)
	send(nimbusmsg.EventRequest(next))
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
	send(nimbusmsg.Resubmission(nimbusmsg.ErrorResponse{MessageID: er.MessageID, CorrelationID: deref(er.CorrelationID),
		EventID: prop(er, "EventId"), SessionID: deref(er.SessionID), OriginatingMessageID: prop(er, "OriginatingMessageId")},
		qs.endpoint, teamEvent, fixed))
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
	if out := goTool(t, mod, 1, problem, "check"); out != problem+"\n" {
		t.Errorf("check printed\n%s\nwant only the broken binding's line", out)
	}
}

// quickStart are the README's commands under "Create your own endpoint".
type quickStart struct {
	// create are the commands that create the module, `go mod init` first.
	create []string
	// run is the command that runs the app locally (`… go run .`), and
	// invoke the one that sends it an event.
	run, invoke string
	// endpoint is the endpoint name given to init.
	endpoint string
}

// readQuickStart reads the shell commands of the README's section "Create
// your own endpoint": the first bash block creates the module, one command
// ends with `go run .` and one runs `nimbus-func invoke`.
func readQuickStart(t *testing.T, root string) quickStart {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Create your own endpoint\n")
	if !ok {
		t.Fatal(`README.md has no section "## Create your own endpoint"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var qs quickStart
	for i, block := range bashBlocks(section) {
		for _, c := range block {
			switch {
			case i == 0:
				qs.create = append(qs.create, c)
			case strings.HasSuffix(c, " go run ."):
				qs.run = c
			case strings.Contains(c, "nimbus-func invoke "):
				qs.invoke = c
			}
		}
	}
	if len(qs.create) == 0 || !strings.HasPrefix(qs.create[0], "go mod init ") || qs.run == "" || qs.invoke == "" {
		t.Fatalf("README.md's quick start: create %q, run %q, invoke %q; want `go mod init` first, a `go run .` and an invoke", qs.create, qs.run, qs.invoke)
	}
	for _, c := range qs.create {
		if _, rest, ok := strings.Cut(c, "nimbus-func init --endpoint "); ok {
			qs.endpoint, _, _ = strings.Cut(rest, " ")
		}
	}
	if qs.endpoint == "" {
		t.Fatalf("README.md's quick start runs no `nimbus-func init --endpoint NAME`: %q", qs.create)
	}
	return qs
}

// bashBlocks returns the commands of each ```bash block of a Markdown
// text: lines joined where they end with a backslash, comments and blank
// lines left out.
func bashBlocks(md string) [][]string {
	var blocks [][]string
	for {
		_, rest, ok := strings.Cut(md, "```bash\n")
		if !ok {
			return blocks
		}
		body, after, _ := strings.Cut(rest, "```")
		var cmds []string
		pending := ""
		for _, line := range strings.Split(body, "\n") {
			line = strings.TrimSpace(line)
			if strings.HasSuffix(line, "\\") {
				pending += strings.TrimSuffix(line, "\\") + " "
				continue
			}
			line = strings.TrimSpace(pending + line)
			pending = ""
			if line != "" && !strings.HasPrefix(line, "#") {
				cmds = append(cmds, line)
			}
		}
		blocks = append(blocks, cmds)
		md = after
	}
}

// primeModuleGraph makes sure the module cache holds the go.mod files of
// the library's whole module graph: `go get` reads them all, while
// building reads only those of the modules it builds with (lazy module
// loading). `go mod download` in the checkout fetches what is missing
// (nothing on a machine that ran it, a few small files on one that only
// built the repository); every other command of the test runs offline.
func primeModuleGraph(t *testing.T, root string) {
	t.Helper()
	cmd := exec.CommandContext(testctx.Timeout(t, 5*time.Minute), "go", "mod", "download")
	cmd.Dir, cmd.Env = root, append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go mod download in the checkout (the go.mod files of the module graph `go get` reads): %v\n%s", err, out)
	}
}

// useCheckout makes the library of the module mod this checkout, as a
// published version would be: a replace directive, and the checkout's
// go.sum in place of the checksum database, which the test does not reach.
func useCheckout(t *testing.T, mod, root string) {
	t.Helper()
	shell(t, mod, "go mod edit -replace "+libraryModule+"="+root)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
}

// offline is the environment of the team's commands: the machine's, without
// its NimBus, Service Bus and Functions settings, modules from the module
// cache only, and no workspace.
func offline(extra ...string) []string {
	return handlerproc.Env(append([]string{"GOPROXY=off", "GOWORK=off"}, extra...)...)
}

// shell runs a command line with bash (the README's blocks are bash) in
// dir, offline, and returns its
// output; a failure fails t.
func shell(t *testing.T, dir, command string) string {
	t.Helper()
	cmd := exec.CommandContext(testctx.Timeout(t, 10*time.Minute), "bash", "-c", command)
	cmd.Dir, cmd.Env = dir, offline()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", command, err, out)
	}
	return string(out)
}

// goTool runs `go tool nimbus-func args…` in dir, offline, wants exit code
// and the line want in its output, and returns its standard output.
func goTool(t *testing.T, dir string, code int, want string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(testctx.Timeout(t, 10*time.Minute), "go", append([]string{"tool", "nimbus-func"}, args...)...)
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
		t.Fatalf("go tool nimbus-func %s: exit %d, want %d and %q; output:\n%s%s", strings.Join(args, " "), got, code, want, out, stderr.String())
	}
	return string(out)
}

// runLocally runs the README's "Run it locally": the app with `go run .`
// (on a free port, given as FUNCTIONS_CUSTOMHANDLER_PORT), then the invoke
// command twice: the event is handled and resolved, then a duplicate.
// Interrupted as Ctrl-C interrupts it (SIGINT to its process group), the
// app shuts down cleanly: its last log line says it stopped with exit code
// 0 (go run itself exits 1 when interrupted).
func runLocally(t *testing.T, mod string, qs quickStart) {
	t.Helper()
	port, err := handlerproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	portEnv := fmt.Sprintf("%s=%d", portSetting, port)
	var output strings.Builder
	app := exec.Command("bash", "-c", qs.run)
	app.Dir, app.Env = mod, offline(portEnv)
	app.Stdout, app.Stderr = &output, &output
	app.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- app.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = syscall.Kill(-app.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			t.Logf("%s printed:\n%s", qs.run, output.String())
		}
	}()
	waitListening(t, port, exited)

	for _, want := range [][]string{
		{"→ HTTP 200: the host completes the message; log: invocation completed: outcome=completed inbox=new", "Resolver ← ResolutionResponse ("},
		{"outcome=duplicate inbox=duplicate", "Resolver ← SkipResponse ("},
	} {
		cmd := exec.CommandContext(testctx.Timeout(t, 5*time.Minute), "bash", "-c", qs.invoke)
		cmd.Dir, cmd.Env = mod, offline(portEnv)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", qs.invoke, err, out)
		}
		for _, w := range append(want, "Subscriber ← EventRequest OrderPlaced to "+qs.endpoint+" ") {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s printed\n%s\nwithout %q", qs.invoke, out, w)
			}
		}
	}

	_ = syscall.Kill(-app.Process.Pid, syscall.SIGINT)
	select {
	case <-exited:
		stopped = true
		lines := strings.Split(strings.TrimSpace(output.String()), "\n")
		var last struct {
			ExitCode *int
			Message  string
		}
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Message != "stopped" || last.ExitCode == nil || *last.ExitCode != 0 {
			t.Errorf("the app's last line is %q, want it stopped with exit code 0", lines[len(lines)-1])
		}
	case <-time.After(time.Minute):
		t.Errorf("%s did not stop within a minute of SIGINT", qs.run)
	}
}

// waitListening waits until something answers the host's health probe on
// 127.0.0.1:port (go run builds the app first), failing t when the
// process exits or three minutes pass.
func waitListening(t *testing.T, port int, exited <-chan error) {
	t.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	deadline := time.After(3 * time.Minute)
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("the app exited before it listened: %v", err)
		case <-deadline:
			t.Fatalf("the app did not listen on port %d within three minutes", port)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// writeLocalSettings fills the scaffolded sample settings in as a team
// would (local.settings.json: the sample with set's values, and add's
// settings of the team's own) and returns the settings the Functions host
// would pass the handler.
func writeLocalSettings(t *testing.T, mod string, set, add map[string]string) map[string]string {
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
	for k, v := range set {
		if _, ok := s.Values[k]; !ok {
			t.Fatalf("local.settings.sample.json has no %s to fill in", k)
		}
		s.Values[k] = v
	}
	for k, v := range add {
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
