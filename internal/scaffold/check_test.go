package scaffold

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// initModule returns a module with everything init writes, the Resolver's
// files included.
func initModule(t *testing.T) string {
	t.Helper()
	dir := newModule(t)
	if err := Init(InitOptions{Dir: dir, Endpoint: "Orders", Resolver: true}, new(strings.Builder)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// editJSON rewrites the JSON object in the file at the slash path rel.
func editJSON(t *testing.T, dir, rel string, edit func(m map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	var m map[string]any
	if err := json.Unmarshal(readFile(t, p), &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// appSettingsOf returns an app description that declares names and no
// transactional handler.
func appSettingsOf(names []string) func() (AppDescription, error) {
	return func() (AppDescription, error) { return AppDescription{Settings: names}, nil }
}

// declaresNone makes the command learn, for the rest of the test, that
// the app declares no setting of its own (the test modules have no app to
// build).
func declaresNone(t *testing.T) {
	prev := describeApp
	describeApp = func(context.Context, string, string) (AppDescription, error) { return AppDescription{}, nil }
	t.Cleanup(func() { describeApp = prev })
}

// binding0 edits the first binding of a function.json.
func binding0(edit func(b map[string]any)) func(m map[string]any) {
	return func(m map[string]any) { edit(m["bindings"].([]any)[0].(map[string]any)) }
}

// values edits the Values of a local settings file.
func values(edit func(v map[string]any)) func(m map[string]any) {
	return func(m map[string]any) { edit(m["Values"].(map[string]any)) }
}

func TestCheckAcceptsWhatInitWrites(t *testing.T) {
	dir := initModule(t)
	for _, args := range [][]string{{"check", "--dir", dir}, {"check", "--dir", dir, "--resolver"}} {
		code, out, errOut := run(t, args...)
		if code != 0 || !strings.Contains(out, "the host files are fine") {
			t.Errorf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	// The repository's own files, and a local.settings.json next to the sample.
	if problems := Check(repoRoot(t), CheckOptions{Resolver: true}); len(problems) != 0 {
		t.Errorf("the repository's host files: %q", problems)
	}
	ls := readFile(t, filepath.Join(dir, "local.settings.sample.json"))
	if err := os.WriteFile(filepath.Join(dir, "local.settings.json"), ls, 0o644); err != nil {
		t.Fatal(err)
	}
	editJSON(t, dir, "local.settings.json", values(func(v map[string]any) {
		v["NimBus__RetryPolicies__EventTypes__3__EventTypeId"] = "OrderPlaced" // an indexed setting
		v["FUNCTIONS_WORKER_RUNTIME"] = "Custom"                               // compared case-insensitively
		v["MyOwnSetting"] = "x"                                                // not NimBus's business
	}))
	if problems := Check(dir, CheckOptions{Resolver: true}); len(problems) != 0 {
		t.Errorf("with local.settings.json: %q", problems)
	}
}

// What the host reads as the template's values passes: keys and enum
// values in another case, booleans and numbers written as strings, an
// optional function disabled, host.json's functions list naming every
// required function, and the settings the app's registrations declare.
func TestCheckAcceptsWhatTheHostReadsTheSame(t *testing.T) {
	dir := initModule(t)
	editJSON(t, dir, "host.json", func(m map[string]any) {
		sb := m["extensions"].(map[string]any)["serviceBus"].(map[string]any)
		delete(sb, "autoCompleteMessages")
		sb["AutoCompleteMessages"], sb["maxConcurrentCallsPerSession"] = "True", "1"
		m["functions"] = []any{"Subscriber", "deferredprocessor", "InboxCleanup"}
	})
	editJSON(t, dir, "functions/Subscriber/function.json", binding0(func(b map[string]any) {
		delete(b, "type")
		b["Type"], b["dataType"], b["isSessionsEnabled"] = "ServiceBusTrigger", "Binary", "true"
	}))
	editJSON(t, dir, "functions/CloudEventsIngress/function.json", func(m map[string]any) { m["disabled"] = true })
	editJSON(t, dir, "functions/InboxCleanup/function.json", func(m map[string]any) { m["disabled"] = true })
	editJSON(t, dir, "local.settings.sample.json", values(func(v map[string]any) {
		v["NimBus__Ledger__DatabaseId"] = "Payments"
		v["NimBus__Ledger__ContainerId"] = "ledger"
	}))
	asked := 0
	declared := func() (AppDescription, error) {
		asked++
		return AppDescription{Settings: []string{"NimBus__Ledger__DatabaseId", "NimBus__Ledger__ContainerId", "LEDGER_ACCOUNT"}}, nil
	}
	if problems := Check(dir, CheckOptions{App: declared}); len(problems) != 0 {
		t.Errorf("problems: %q", problems)
	}
	if asked != 1 {
		t.Errorf("the app was asked %d times for its settings, want once", asked)
	}
}

// The app is asked for its settings only when a NimBus__ name is not the
// library's; when it cannot answer, the line says why.
func TestCheckAsksTheAppOnlyForUnknownSettings(t *testing.T) {
	dir := initModule(t)
	failing := func() (AppDescription, error) { return AppDescription{}, errors.New("go build .: exit status 1") }
	if problems := Check(dir, CheckOptions{App: failing}); len(problems) != 0 {
		t.Errorf("the library's settings alone: %q", problems)
	}
	editJSON(t, dir, "local.settings.sample.json", values(func(v map[string]any) { v["NimBus__Ledger__DatabaseId"] = "Payments" }))
	want := `local.settings.sample.json: Values.NimBus__Ledger__DatabaseId is not a setting this version of the library reads, and the app's own settings could not be learned: go build .: exit status 1`
	if problems := Check(dir, CheckOptions{App: failing}); strings.Join(problems, "\n") != want {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), want)
	}
}

func TestCheckNamesEachProblem(t *testing.T) {
	const (
		sub      = "functions/Subscriber/function.json"
		deferred = "functions/DeferredProcessor/function.json"
		sample   = "local.settings.sample.json"
	)
	for _, c := range []struct {
		name     string
		resolver bool
		break_   func(t *testing.T, dir string)
		want     []string // the problem lines, exactly
	}{
		{"string data type", false, func(t *testing.T, dir string) {
			editJSON(t, dir, sub, binding0(func(b map[string]any) { b["dataType"] = "string" }))
		}, []string{`functions/Subscriber/function.json: bindings[0].dataType is "string", want "binary"`}},
		{"no data type", false, func(t *testing.T, dir string) {
			editJSON(t, dir, sub, binding0(func(b map[string]any) { delete(b, "dataType") }))
		}, []string{`functions/Subscriber/function.json: bindings[0].dataType is missing, want "binary"`}},
		{"sessions off", false, func(t *testing.T, dir string) {
			editJSON(t, dir, sub, binding0(func(b map[string]any) { b["isSessionsEnabled"] = false }))
		}, []string{`functions/Subscriber/function.json: bindings[0].isSessionsEnabled is false, want true`}},
		{"sessions on where the handler accepts the session itself", false, func(t *testing.T, dir string) {
			editJSON(t, dir, deferred, binding0(func(b map[string]any) { b["isSessionsEnabled"] = true }))
		}, []string{`functions/DeferredProcessor/function.json: bindings[0].isSessionsEnabled is true, want false`}},
		{"direction, type and name", false, func(t *testing.T, dir string) {
			editJSON(t, dir, "functions/InboxCleanup/function.json", binding0(func(b map[string]any) {
				b["direction"], b["type"], b["name"] = "out", "timer", "myTimer"
			}))
		}, []string{
			`functions/InboxCleanup/function.json: bindings[0].direction is "out", want "in"`,
			`functions/InboxCleanup/function.json: bindings[0].name is "myTimer", want "timer"`,
			`functions/InboxCleanup/function.json: bindings[0].type is "timer", want "timerTrigger"`,
		}},
		{"connection", false, func(t *testing.T, dir string) {
			editJSON(t, dir, sub, binding0(func(b map[string]any) { b["connection"] = "OtherBus" }))
		}, []string{
			`functions/Subscriber/function.json: bindings[0].connection is "OtherBus", want "ServiceBusConnection"`,
			`local.settings.sample.json: Values has neither OtherBus nor OtherBus__fullyQualifiedNamespace, which functions/Subscriber/function.json's connection names`,
		}},
		{"expression with __", false, func(t *testing.T, dir string) {
			editJSON(t, dir, sub, binding0(func(b map[string]any) { b["topicName"] = "%NimBus__Endpoint%" }))
		}, []string{`functions/Subscriber/function.json: bindings[0].topicName is "%NimBus__Endpoint%", want "%NimBus:Endpoint%" (the host resolves %A:B% to the app setting A__B; %A__B% never resolves)`}},
		{"no bindings", false, func(t *testing.T, dir string) {
			editJSON(t, dir, sub, func(m map[string]any) { m["bindings"] = []any{} })
		}, []string{`functions/Subscriber/function.json: bindings[0] is missing, want a "serviceBusTrigger" binding named "message"`}},
		{"auto-completion off in the trigger", false, func(t *testing.T, dir string) {
			editJSON(t, dir, sub, binding0(func(b map[string]any) { b["autoCompleteMessages"] = false }))
		}, []string{`functions/Subscriber/function.json: bindings[0].autoCompleteMessages is false, want it left out: a custom handler cannot settle messages itself`}},
		{"function folder missing", false, func(t *testing.T, dir string) {
			if err := os.RemoveAll(filepath.Join(dir, "functions", "DeferredProcessor")); err != nil {
				t.Fatal(err)
			}
		}, []string{`functions/DeferredProcessor/function.json: is missing`}},
		{"unknown function folder", false, func(t *testing.T, dir string) {
			if err := os.MkdirAll(filepath.Join(dir, "functions", "Orders"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, []string{`functions/Orders: the handler serves no function of this name (it serves CloudEventsIngress, DeferredProcessor, InboxCleanup, OutboxSweep, Subscriber, and the HTTP functions the app registers); the host would call it and fail every invocation`}},
		{"function.json not JSON", false, func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "functions", "Subscriber", "function.json"), []byte(`{"bindings": [`), 0o644); err != nil {
				t.Fatal(err)
			}
		}, []string{`functions/Subscriber/function.json: not valid JSON: unexpected EOF`}},
		{"no custom handler", false, func(t *testing.T, dir string) {
			editJSON(t, dir, "host.json", func(m map[string]any) { delete(m, "customHandler") })
		}, []string{`host.json: customHandler is missing: the host would not start the handler binary`}},
		{"executable path", false, func(t *testing.T, dir string) {
			editJSON(t, dir, "host.json", func(m map[string]any) {
				m["customHandler"].(map[string]any)["description"].(map[string]any)["defaultExecutablePath"] = "bin/handler"
			})
		}, []string{`host.json: customHandler.description.defaultExecutablePath is "bin/handler", want a plain file name in the app root (the binary package stages), such as "handler"`}},
		{"host version and bundle", false, func(t *testing.T, dir string) {
			editJSON(t, dir, "host.json", func(m map[string]any) { m["version"] = "1.0"; delete(m, "extensionBundle") })
		}, []string{
			`host.json: version is "1.0", want "2.0"`,
			`host.json: extensionBundle.id is missing, want "Microsoft.Azure.Functions.ExtensionBundle"`,
			`host.json: extensionBundle.version is missing, want a version range such as "[4.*, 5.0.0)"`,
		}},
		{"service bus settlement and ordering", false, func(t *testing.T, dir string) {
			editJSON(t, dir, "host.json", func(m map[string]any) {
				sb := m["extensions"].(map[string]any)["serviceBus"].(map[string]any)
				sb["autoCompleteMessages"], sb["maxConcurrentCallsPerSession"] = false, 2
			})
		}, []string{
			`host.json: extensions.serviceBus.autoCompleteMessages is false, want true`,
			`host.json: extensions.serviceBus.maxConcurrentCallsPerSession is 2, want 1`,
		}},
		// The host reads host.json and function.json keys
		// case-insensitively: a key in another case is the same setting.
		{"service bus settings in PascalCase", false, func(t *testing.T, dir string) {
			editJSON(t, dir, "host.json", func(m map[string]any) {
				ext := m["extensions"].(map[string]any)
				sb := ext["serviceBus"].(map[string]any)
				delete(ext, "serviceBus")
				delete(sb, "autoCompleteMessages")
				delete(sb, "maxConcurrentCallsPerSession")
				sb["AutoCompleteMessages"], sb["MaxConcurrentCallsPerSession"] = false, 8
				ext["ServiceBus"] = sb
			})
		}, []string{
			`host.json: extensions.serviceBus.autoCompleteMessages is false, want true`,
			`host.json: extensions.serviceBus.maxConcurrentCallsPerSession is 8, want 1`,
		}},
		{"a key twice in two cases", false, func(t *testing.T, dir string) {
			editJSON(t, dir, "host.json", func(m map[string]any) {
				m["extensions"].(map[string]any)["serviceBus"].(map[string]any)["AutoCompleteMessages"] = false
			})
		}, []string{
			`host.json: extensions.serviceBus has the keys "AutoCompleteMessages" and "autoCompleteMessages", which differ only in case: the host reads keys case-insensitively and takes one of them; keep one`,
		}},
		{"binding properties in PascalCase", false, func(t *testing.T, dir string) {
			editJSON(t, dir, sub, binding0(func(b map[string]any) {
				delete(b, "dataType")
				delete(b, "isSessionsEnabled")
				b["DataType"], b["IsSessionsEnabled"] = "string", false
			}))
		}, []string{
			`functions/Subscriber/function.json: bindings[0].dataType is "string", want "binary"`,
			`functions/Subscriber/function.json: bindings[0].isSessionsEnabled is false, want true`,
		}},
		{"a disabled function", false, func(t *testing.T, dir string) {
			editJSON(t, dir, sub, func(m map[string]any) { m["disabled"] = true })
			editJSON(t, dir, deferred, func(m map[string]any) { m["Disabled"] = "True" })
		}, []string{
			`functions/DeferredProcessor/function.json: disabled is "True": the host would not run DeferredProcessor, and parked messages would never be replayed, so a blocked session would stay blocked`,
			`functions/Subscriber/function.json: disabled is true: the host would not run Subscriber, and no event would reach the endpoint`,
		}},
		{"a function disabled by a setting", false, func(t *testing.T, dir string) {
			editJSON(t, dir, sample, values(func(v map[string]any) {
				v["AzureWebJobs.Subscriber.Disabled"] = "true"
				v["NimBus__CloudEvents__Enabled"] = "true" // and CloudEventsIngress stays disabled
			}))
		}, []string{
			`local.settings.sample.json: Values.AzureWebJobs.CloudEventsIngress.Disabled is "true" while NimBus__CloudEvents__Enabled is true: no CloudEvent would be consumed`,
			`local.settings.sample.json: Values.AzureWebJobs.Subscriber.Disabled is "true": the host would not run Subscriber, and no event would reach the endpoint`,
		}},
		{"host.json overridden by app settings", false, func(t *testing.T, dir string) {
			editJSON(t, dir, sample, values(func(v map[string]any) {
				v["AzureFunctionsJobHost__extensions__serviceBus__autoCompleteMessages"] = "false"
				v["azurefunctionsjobhost__Extensions__ServiceBus__MaxConcurrentCallsPerSession"] = "1" // the value needed
				v["AzureFunctionsJobHost__extensions__serviceBus__maxConcurrentSessions"] = "8"        // not one check needs
			}))
		}, []string{`local.settings.sample.json: Values.AzureFunctionsJobHost__extensions__serviceBus__autoCompleteMessages is "false": it overrides host.json's extensions.serviceBus.autoCompleteMessages, want true`}},
		{"bindings not a list", false, func(t *testing.T, dir string) {
			editJSON(t, dir, sub, func(m map[string]any) { delete(m, "bindings"); m["Bindings"] = map[string]any{} })
		}, []string{`functions/Subscriber/function.json: bindings is {}, want a list of bindings`}},
		{"a second trigger", false, func(t *testing.T, dir string) {
			editJSON(t, dir, sub, func(m map[string]any) {
				m["bindings"] = append(m["bindings"].([]any), map[string]any{"name": "tick", "type": "TimerTrigger", "direction": "in", "schedule": "0 * * * * *"})
			})
		}, []string{`functions/Subscriber/function.json: bindings[1] is a second trigger ("TimerTrigger"): a function has exactly one trigger, and the host would not load this one`}},
		{"host.json loads only some functions", false, func(t *testing.T, dir string) {
			editJSON(t, dir, "host.json", func(m map[string]any) { m["Functions"] = []any{"subscriber", "InboxCleanup"} })
		}, []string{`host.json: functions does not name DeferredProcessor, so the host would not load it: parked messages would never be replayed, so a blocked session would stay blocked`}},
		{"lock renewal shorter than the timeout", false, func(t *testing.T, dir string) {
			editJSON(t, dir, "host.json", func(m map[string]any) {
				m["extensions"].(map[string]any)["serviceBus"].(map[string]any)["maxAutoLockRenewalDuration"] = "00:05:00"
			})
		}, []string{`host.json: extensions.serviceBus.maxAutoLockRenewalDuration 00:05:00 is shorter than functionTimeout 00:10:00: a long invocation would lose its session lock`}},
		{"unknown and miscased settings", false, func(t *testing.T, dir string) {
			editJSON(t, dir, sample, values(func(v map[string]any) {
				v["NimBus__Inbox__Retention"] = "7.00:00:00"
				v["NimBus__inbox__Enabled"] = "true"
			}))
		}, []string{
			`local.settings.sample.json: Values.NimBus__Inbox__Retention is not a setting this version of the library reads, nor one the app's registrations declare`,
			`local.settings.sample.json: Values.NimBus__inbox__Enabled is not a setting this version of the library reads, nor one the app's registrations declare (app setting names are case-sensitive: NimBus__Inbox__Enabled)`,
		}},
		{"setting a binding expression needs", false, func(t *testing.T, dir string) {
			editJSON(t, dir, sample, values(func(v map[string]any) { delete(v, "NimBus__Endpoint") }))
		}, []string{
			`local.settings.sample.json: Values.NimBus__Endpoint is missing; functions/DeferredProcessor/function.json uses %NimBus:Endpoint%`,
			`local.settings.sample.json: Values.NimBus__Endpoint is missing; functions/Subscriber/function.json uses %NimBus:Endpoint%`,
		}},
		{"worker runtime and value types", false, func(t *testing.T, dir string) {
			editJSON(t, dir, sample, values(func(v map[string]any) {
				delete(v, "FUNCTIONS_WORKER_RUNTIME")
				v["NimBus__Inbox__PurgeBatchSize"] = 100
			}))
		}, []string{
			`local.settings.sample.json: Values.FUNCTIONS_WORKER_RUNTIME is missing, want "custom"`,
			`local.settings.sample.json: Values.NimBus__Inbox__PurgeBatchSize is 100, want a string`,
		}},
		{"no local settings", false, func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, sample)); err != nil {
				t.Fatal(err)
			}
		}, []string{`local.settings.sample.json: is missing (and there is no local.settings.json): 'nimbus-func init' writes one`}},
		{"the Resolver's trigger", true, func(t *testing.T, dir string) {
			editJSON(t, dir, "apps/resolver/functions/Resolver/function.json", binding0(func(b map[string]any) { b["topicName"] = "resolver" }))
		}, []string{`apps/resolver/functions/Resolver/function.json: bindings[0].topicName is "resolver", want "Resolver"`}},
		{"the Resolver's host.json", true, func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "apps", "resolver", "host.json")); err != nil {
				t.Fatal(err)
			}
		}, []string{`apps/resolver/host.json: is missing`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := initModule(t)
			c.break_(t, dir)
			declaresNone(t)
			got := Check(dir, CheckOptions{Resolver: c.resolver, App: appSettingsOf(nil)})
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
			args := []string{"check", "--dir", dir}
			if c.resolver {
				args = append(args, "--resolver")
			}
			code, out, errOut := run(t, args...)
			count := fmt.Sprintf("nimbus-func check: %d problems\n", len(c.want))
			if len(c.want) == 1 {
				count = "nimbus-func check: 1 problem\n"
			}
			if code != 1 || out != strings.Join(c.want, "\n")+"\n" || errOut != count {
				t.Errorf("nimbus-func check: exit %d, stdout %q, stderr %q; want exit 1, one line per problem and %q", code, out, errOut, count)
			}
		})
	}
}

// check reports the inbox turned off in the settings of an app whose
// registrations include a transactional handler, which refuses to start
// without it; an app without one may run with the inbox off.
func TestCheckReportsAnInboxTheAppNeeds(t *testing.T) {
	dir := initModule(t)
	tx := func() (AppDescription, error) { return AppDescription{Transactional: []string{"InvoicePaid"}}, nil }
	if problems := Check(dir, CheckOptions{App: tx}); len(problems) != 0 {
		t.Errorf("the inbox as init writes it: %q", problems)
	}
	editJSON(t, dir, "local.settings.sample.json", values(func(v map[string]any) { v["NimBus__Inbox__Enabled"] = "False" }))
	want := `local.settings.sample.json: Values.NimBus__Inbox__Enabled is "False", but the app's transactional handlers (InvoicePaid) commit with inbox markers and the app refuses to start without the inbox: set it to "true", with NimBus__Inbox__Store Cosmos (or InMemory for local runs)`
	if problems := Check(dir, CheckOptions{App: tx}); strings.Join(problems, "\n") != want {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), want)
	}
	if problems := Check(dir, CheckOptions{App: appSettingsOf(nil)}); len(problems) != 0 {
		t.Errorf("no transactional handler: %q", problems)
	}
	editJSON(t, dir, "local.settings.sample.json", values(func(v map[string]any) { delete(v, "NimBus__Inbox__Enabled") }))
	if problems := Check(dir, CheckOptions{App: tx}); len(problems) != 1 || !strings.Contains(problems[0], "Values.NimBus__Inbox__Enabled is missing (the default is false), but the app's transactional handlers (InvoicePaid)") {
		t.Errorf("the setting left out: %q", problems)
	}
	// The Resolver app has no inbox.
	editJSON(t, dir, "local.settings.sample.json", values(func(v map[string]any) { v["NimBus__App"] = "Resolver" }))
	if problems := Check(dir, CheckOptions{App: tx}); len(problems) != 0 {
		t.Errorf("the Resolver app: %q", problems)
	}
}

// writeHTTPFunction writes functions/<name>/function.json of an HTTP
// function with route and methods.
func writeHTTPFunction(t *testing.T, dir, name, route string, methods ...string) {
	t.Helper()
	ms, _ := json.Marshal(methods)
	doc := `{"bindings":[{"type":"httpTrigger","direction":"in","name":"req","authLevel":"function","methods":` + string(ms) +
		`,"route":"` + route + `"},{"type":"http","direction":"out","name":"$return"}]}`
	if err := os.MkdirAll(filepath.Join(dir, "functions", name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "functions", name, "function.json"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
}

// check accepts an HTTP function whose function.json and registration
// agree, and names each disagreement: a function.json the app does not
// register, a registration without one, another route, a method the app
// refuses, and host.json not forwarding HTTP requests.
func TestCheckHTTPFunctions(t *testing.T) {
	placeOrder := DescribedHTTP{Name: "PlaceOrder", Route: "orders", Methods: []string{"POST"}}
	describes := func(fs ...DescribedHTTP) func() (AppDescription, error) {
		return func() (AppDescription, error) { return AppDescription{HTTPFunctions: fs}, nil }
	}
	for _, c := range []struct {
		name  string
		edit  func(t *testing.T, dir string)
		regs  []DescribedHTTP
		wants []string
	}{
		{"agreeing", func(t *testing.T, dir string) { writeHTTPFunction(t, dir, "PlaceOrder", "orders", "post") }, []DescribedHTTP{placeOrder}, nil},
		{"not registered", func(t *testing.T, dir string) { writeHTTPFunction(t, dir, "PlaceOrder", "orders", "post") }, nil,
			[]string{`functions/PlaceOrder/function.json: is an HTTP function the app does not register (no HandleHTTP with Name "PlaceOrder"); the app would answer the host's forwarded request 404`}},
		{"no function.json", func(*testing.T, string) {}, []DescribedHTTP{placeOrder},
			[]string{`functions/PlaceOrder/function.json: is missing: the app registers the HTTP function PlaceOrder (route "orders"), which the host never calls without it; 'nimbus-func init --http PlaceOrder' writes it`}},
		{"another route and method", func(t *testing.T, dir string) { writeHTTPFunction(t, dir, "PlaceOrder", "order", "post", "get") }, []DescribedHTTP{placeOrder},
			[]string{
				`functions/PlaceOrder/function.json: route is "order", but the app serves PlaceOrder at route "orders"; the host would forward requests the app answers 404`,
				`functions/PlaceOrder/function.json: methods lists GET, which the app's PlaceOrder does not accept (it accepts POST); the app would answer 405`,
			}},
		{"not forwarded", func(t *testing.T, dir string) {
			writeHTTPFunction(t, dir, "PlaceOrder", "orders", "post")
			editJSON(t, dir, "host.json", func(m map[string]any) { m["customHandler"].(map[string]any)["enableForwardingHttpRequest"] = false })
		}, []DescribedHTTP{placeOrder},
			[]string{`host.json: customHandler.enableForwardingHttpRequest is false, want true: the app has HTTP functions, which the host forwards as they came only then`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := initModule(t)
			c.edit(t, dir)
			got := Check(dir, CheckOptions{App: describes(c.regs...)})
			if strings.Join(got, "\n") != strings.Join(c.wants, "\n") {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.wants, "\n"))
			}
		})
	}
	// Without HTTP functions, forwarding may be off (an app scaffolded
	// before HTTP functions).
	dir := initModule(t)
	editJSON(t, dir, "host.json", func(m map[string]any) { m["customHandler"].(map[string]any)["enableForwardingHttpRequest"] = false })
	if got := Check(dir, CheckOptions{App: describes()}); len(got) != 0 {
		t.Errorf("no HTTP function, forwarding off: %q", got)
	}
}
