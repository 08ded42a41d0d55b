package deploy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/config"
)

func TestHostJSON(t *testing.T) {
	root := repoRoot(t)
	var h hostJSON
	readJSON(t, filepath.Join(root, "host.json"), &h)

	if h.Version != "2.0" {
		t.Errorf("version = %q, want 2.0", h.Version)
	}
	if h.ExtensionBundle.ID != "Microsoft.Azure.Functions.ExtensionBundle" || h.ExtensionBundle.Version != "[4.*, 5.0.0)" {
		t.Errorf("extensionBundle = %+v, want Microsoft.Azure.Functions.ExtensionBundle [4.*, 5.0.0)", h.ExtensionBundle)
	}

	d := h.CustomHandler.Description
	if d.DefaultExecutablePath != "handler" {
		t.Errorf("customHandler.description.defaultExecutablePath = %q, want handler (the name scripts/build.sh produces)", d.DefaultExecutablePath)
	}
	if d.WorkingDirectory == nil || *d.WorkingDirectory != "" {
		t.Errorf("customHandler.description.workingDirectory must be present and empty (the app root)")
	}
	if d.Arguments == nil || len(*d.Arguments) != 0 {
		t.Errorf("customHandler.description.arguments must be present and empty")
	}
	if f := h.CustomHandler.EnableForwardingHTTPRequest; f == nil || !*f {
		t.Errorf("customHandler.enableForwardingHttpRequest must be true: the host then forwards an HTTP function's request as it came, at /api/<route>")
	}

	timeout, err := parseTimeSpan(h.FunctionTimeout)
	if err != nil {
		t.Fatalf("functionTimeout: %v", err)
	}
	if timeout < 5*time.Minute {
		t.Errorf("functionTimeout %v is shorter than five minutes", timeout)
	}
	// The InboxCleanup run must end (by its budget) before the host kills it.
	_, values := sampleSettings(t, root)
	budget, err := parseTimeSpan(values["NimBus__Inbox__CleanupTimeBudget"])
	if err != nil {
		t.Fatalf("NimBus__Inbox__CleanupTimeBudget in the sample: %v", err)
	}
	if budget >= timeout {
		t.Errorf("cleanup time budget %v must be shorter than functionTimeout %v", budget, timeout)
	}

	sb := h.Extensions.ServiceBus
	if sb == nil {
		t.Fatal("extensions.serviceBus is missing")
	}
	want := map[string]any{
		// A custom handler cannot settle messages: 2xx completes, anything else abandons.
		"autoCompleteMessages":         true,
		"prefetchCount":                float64(0),
		"maxConcurrentCallsPerSession": float64(1),
	}
	for k, v := range want {
		if sb[k] != v {
			t.Errorf("extensions.serviceBus.%s = %v, want %v", k, sb[k], v)
		}
	}
	if n, ok := sb["maxConcurrentSessions"].(float64); !ok || n < 1 {
		t.Errorf("extensions.serviceBus.maxConcurrentSessions = %v, want a positive number", sb["maxConcurrentSessions"])
	}
	renewal, err := parseTimeSpan(asString(sb["maxAutoLockRenewalDuration"]))
	if err != nil {
		t.Errorf("extensions.serviceBus.maxAutoLockRenewalDuration: %v", err)
	} else if renewal < timeout {
		t.Errorf("maxAutoLockRenewalDuration %v < functionTimeout %v: a long invocation would lose its session lock and be redelivered while running", renewal, timeout)
	}
	if idle, err := parseTimeSpan(asString(sb["sessionIdleTimeout"])); err != nil || idle <= 0 {
		t.Errorf("extensions.serviceBus.sessionIdleTimeout = %v: %v", sb["sessionIdleTimeout"], err)
	}
	retry, ok := sb["clientRetryOptions"].(map[string]any)
	if !ok {
		t.Fatal("extensions.serviceBus.clientRetryOptions is missing")
	}
	for _, k := range []string{"tryTimeout", "delay", "maxDelay"} {
		if _, err := parseTimeSpan(asString(retry[k])); err != nil {
			t.Errorf("clientRetryOptions.%s: %v", k, err)
		}
	}
	if mode := asString(retry["mode"]); mode != "Exponential" && mode != "Fixed" {
		t.Errorf("clientRetryOptions.mode = %q", mode)
	}
}

func asString(v any) string {
	s, _ := v.(string)
	return s
}

// triggerOf returns the single trigger binding of a function.json.
func triggerOf(t *testing.T, fn function) binding {
	t.Helper()
	var f functionJSON
	readJSON(t, fn.Path, &f)
	var triggers []binding
	for _, b := range f.Bindings {
		if strings.HasSuffix(asString(b["type"]), "Trigger") {
			triggers = append(triggers, b)
		}
	}
	if len(triggers) != 1 {
		t.Fatalf("%s: %d trigger bindings, want exactly 1", fn.Name, len(triggers))
	}
	if d := asString(triggers[0]["direction"]); d != "in" {
		t.Fatalf("%s: trigger direction %q, want in", fn.Name, d)
	}
	return triggers[0]
}

func TestFunctionBindings(t *testing.T) {
	root := repoRoot(t)
	byName := map[string]function{}
	for _, fn := range repoFunctions(t, root) {
		if !functionNameRE.MatchString(fn.Name) || strings.EqualFold(fn.Name, "host") {
			t.Errorf("function folder %q is not a valid Functions host function name", fn.Name)
		}
		byName[fn.Name] = fn
		triggerOf(t, fn)
	}

	sub, ok := byName["Subscriber"]
	if !ok {
		t.Fatal("functions/Subscriber/function.json is missing")
	}
	b := triggerOf(t, sub)
	for k, v := range map[string]any{
		"type":              "serviceBusTrigger",
		"name":              "message",
		"topicName":         "%NimBus:Endpoint%",
		"subscriptionName":  "%NimBus:Endpoint%",
		"connection":        "ServiceBusConnection",
		"isSessionsEnabled": true,
		"dataType":          "binary",
	} {
		if b[k] != v {
			t.Errorf("Subscriber trigger %s = %v, want %v", k, b[k], v)
		}
	}
	if c, set := b["cardinality"]; set && c != "one" {
		t.Errorf("Subscriber trigger cardinality = %v, want one", c)
	}
	if ac, set := b["autoCompleteMessages"]; set && ac != true {
		t.Errorf("Subscriber trigger overrides autoCompleteMessages = %v; a custom handler cannot settle messages itself", ac)
	}

	for name, schedule := range map[string]string{
		"InboxCleanup": "%NimBus:Inbox:CleanupSchedule%",
		"OutboxSweep":  "%NimBus:Outbox:SweepSchedule%",
	} {
		fn, ok := byName[name]
		if !ok {
			t.Fatalf("functions/%s/function.json is missing", name)
		}
		b = triggerOf(t, fn)
		for k, v := range map[string]any{
			"type":         "timerTrigger",
			"name":         "timer",
			"schedule":     schedule,
			"runOnStartup": false,
			"useMonitor":   true,
		} {
			if b[k] != v {
				t.Errorf("%s trigger %s = %v, want %v", name, k, b[k], v)
			}
		}
	}
}

// TestBindingExpressionsResolve checks every %name% in a function.json. The
// host resolves it with IConfiguration[name], where an app setting A__B is
// stored as A:B, so the expression must use ':' (%A__B% never resolves), and
// the setting it names must be in the sample settings and in the Bicep app
// settings.
func TestBindingExpressionsResolve(t *testing.T) {
	root := repoRoot(t)
	_, values := sampleSettings(t, root)
	bicep := string(readFile(t, filepath.Join(root, "infra", "bicep", "main.bicep")))
	for _, fn := range repoFunctions(t, root) {
		var f functionJSON
		readJSON(t, fn.Path, &f)
		for _, b := range f.Bindings {
			for prop, v := range b {
				s, ok := v.(string)
				if !ok {
					continue
				}
				for _, m := range bindingExprRE.FindAllStringSubmatch(s, -1) {
					expr := m[1]
					if strings.Contains(expr, "__") {
						t.Errorf("%s.%s: %%%s%% cannot resolve: write the hierarchy with ':' (%%%s%%)", fn.Name, prop, expr, strings.ReplaceAll(expr, "__", ":"))
						continue
					}
					setting := strings.ReplaceAll(expr, ":", "__")
					if _, ok := values[setting]; !ok {
						t.Errorf("%s.%s: %%%s%% names app setting %s, which local.settings.sample.json does not define", fn.Name, prop, expr, setting)
					}
					if !strings.Contains(bicep, "name: '"+setting+"'") {
						t.Errorf("%s.%s: %%%s%% names app setting %s, which main.bicep does not set", fn.Name, prop, expr, setting)
					}
				}
			}
		}
	}
}

func TestLocalSettingsSample(t *testing.T) {
	root := repoRoot(t)
	encrypted, values := sampleSettings(t, root)
	if encrypted {
		t.Error("IsEncrypted must be false")
	}
	if v := values["FUNCTIONS_WORKER_RUNTIME"]; v != "custom" {
		t.Errorf("FUNCTIONS_WORKER_RUNTIME = %q, want custom", v)
	}
	if v := values["AzureWebJobsStorage"]; v != "UseDevelopmentStorage=true" {
		t.Errorf("AzureWebJobsStorage = %q, want UseDevelopmentStorage=true (Azurite)", v)
	}
	for _, s := range handlerSettings {
		v, ok := values[s.Name]
		if s.SetByHost {
			if ok {
				t.Errorf("%s is set by the host; the sample must not set it", s.Name)
			}
			continue
		}
		if s.Indexed {
			if ok {
				t.Errorf("%s is the pattern of an indexed setting; the sample must not set it", s.Name)
			}
			continue
		}
		if !ok {
			t.Errorf("%s is missing", s.Name)
			continue
		}
		if s.SampleValue() != "" && v != s.SampleValue() {
			t.Errorf("%s = %q, want %q", s.Name, v, s.SampleValue())
		}
	}
	for _, k := range []string{"NimBus__Inbox__CleanupSchedule", "NimBus__Outbox__SweepSchedule"} {
		if f := strings.Fields(values[k]); len(f) != 6 {
			t.Errorf("%s has %d fields, want 6 (NCRONTAB with seconds)", k, len(f))
		}
	}
	// No secrets in a tracked file.
	for _, k := range []string{"ServiceBusConnection", "NimBus__Inbox__Cosmos__ConnectionString"} {
		if values[k] != "" {
			t.Errorf("%s must be empty in the sample (it would hold a key)", k)
		}
	}
	for k, v := range values {
		lv := strings.ToLower(v)
		if strings.Contains(lv, "accountkey=") || strings.Contains(lv, "sharedaccesskey=") {
			t.Errorf("%s looks like it holds a key", k)
		}
	}
}

func TestDocsCoverSettingsAndDeployment(t *testing.T) {
	root := repoRoot(t)
	table := string(readFile(t, filepath.Join(root, "docs", "configuration.md")))
	for _, s := range handlerSettings {
		if !strings.Contains(table, "| `"+s.Name+"` |") {
			t.Errorf("docs/configuration.md has no row for %s", s.Name)
		}
	}
	// Every Key* constant of the config package, so a setting added there
	// but not yet to config.Settings is still caught.
	for _, name := range configKeys(t, root) {
		if !strings.Contains(table, "| `"+name+"` |") {
			t.Errorf("docs/configuration.md has no row for %s (a Key constant of internal/config)", name)
		}
	}
	readme := string(readFile(t, filepath.Join(root, "README.md")))
	for _, page := range []string{"configuration.md", "operations.md", "observability.md", "cloudevents.md", "resolver.md", "tracking-store.md", "deploying.md"} {
		if !strings.Contains(readme, "(docs/"+page) {
			t.Errorf("README.md does not link docs/%s", page)
		}
		readFile(t, filepath.Join(root, "docs", page))
	}
	for page, wants := range map[string][]string{
		"operations.md":    {"Retention sizing", "Outages", "Strong", "AllowRelaxedConsistency"},
		"observability.md": {"never contain the payload"},
		"deploying.md":     {"az deployment group create", "scripts/package.sh", "scripts/publish.sh", "func start", "Azurite", "AllowRelaxedConsistency"},
	} {
		doc := string(readFile(t, filepath.Join(root, "docs", page)))
		for _, want := range wants {
			if !strings.Contains(doc, want) {
				t.Errorf("docs/%s does not mention %q", page, want)
			}
		}
	}
}

// TestResolverHostJSON checks the Resolver app's host.json: the endpoint
// app's host.json except the session settings NimBus pins for its Resolver
// (16 sessions, 1 s idle, 5 minutes of lock renewal, dynamic concurrency
// off) and a functionTimeout no longer than that lock renewal.
func TestResolverHostJSON(t *testing.T) {
	root := repoRoot(t)
	var endpoint, resolver map[string]any
	readJSON(t, filepath.Join(root, "host.json"), &endpoint)
	readJSON(t, filepath.Join(root, "apps", "resolver", "host.json"), &resolver)

	sb := resolver["extensions"].(map[string]any)["serviceBus"].(map[string]any)
	for k, v := range map[string]any{
		"maxConcurrentSessions":        float64(16),
		"sessionIdleTimeout":           "00:00:01",
		"maxAutoLockRenewalDuration":   "00:05:00",
		"autoCompleteMessages":         true, // a custom handler cannot settle: 2xx completes
		"prefetchCount":                float64(0),
		"maxConcurrentCallsPerSession": float64(1),
	} {
		if sb[k] != v {
			t.Errorf("Resolver host.json extensions.serviceBus.%s = %v, want %v", k, sb[k], v)
		}
	}
	if c, _ := resolver["concurrency"].(map[string]any); c == nil || c["dynamicConcurrencyEnabled"] != false {
		t.Errorf("Resolver host.json concurrency = %v, want dynamicConcurrencyEnabled false", resolver["concurrency"])
	}
	timeout, err := parseTimeSpan(asString(resolver["functionTimeout"]))
	if err != nil {
		t.Fatal(err)
	}
	renewal, _ := parseTimeSpan(asString(sb["maxAutoLockRenewalDuration"]))
	if timeout > renewal || timeout < time.Minute {
		t.Errorf("Resolver functionTimeout %v: want at least a minute and at most the lock renewal %v", timeout, renewal)
	}

	// Everything else is the endpoint app's (maxConcurrentCalls is the
	// endpoint's DeferredProcessor trigger's; the Resolver has no trigger
	// without sessions).
	for _, k := range []string{"maxConcurrentSessions", "sessionIdleTimeout", "maxAutoLockRenewalDuration", "maxConcurrentCalls"} {
		delete(sb, k)
		delete(endpoint["extensions"].(map[string]any)["serviceBus"].(map[string]any), k)
	}
	delete(resolver, "concurrency")
	delete(resolver, "functionTimeout")
	delete(endpoint, "functionTimeout")
	if !reflect.DeepEqual(endpoint, resolver) {
		t.Errorf("the Resolver host.json differs from the endpoint's beyond its session settings:\n endpoint %v\n resolver %v", endpoint, resolver)
	}
}

func TestResolverFunctionBinding(t *testing.T) {
	root := repoRoot(t)
	fns := appFunctions(t, filepath.Join(root, "apps", "resolver"))
	if len(fns) != 1 || fns[0].Name != "Resolver" {
		t.Fatalf("Resolver app functions = %v, want only Resolver", fns)
	}
	b := triggerOf(t, fns[0])
	for k, v := range map[string]any{
		"type":              "serviceBusTrigger",
		"name":              "message",
		"topicName":         "Resolver",
		"subscriptionName":  "Resolver",
		"connection":        "ServiceBusConnection",
		"isSessionsEnabled": true,
		"dataType":          "binary",
		"cardinality":       "one",
	} {
		if b[k] != v {
			t.Errorf("Resolver trigger %s = %v, want %v", k, b[k], v)
		}
	}
	if _, set := b["autoCompleteMessages"]; set {
		t.Error("the Resolver trigger overrides autoCompleteMessages; a custom handler cannot settle messages itself")
	}
	// The endpoint app must not carry the Resolver function, nor the other
	// way round.
	for _, fn := range appFunctions(t, root) {
		if fn.Name == "Resolver" {
			t.Error("functions/Resolver would be staged into the endpoint app")
		}
	}
}

func TestResolverSettingsAndDocs(t *testing.T) {
	root := repoRoot(t)
	// The Resolver's settings are in config.Settings, so TestLocalSettingsSample
	// and TestDocsCoverSettingsAndDeployment check their sample values and
	// rows in docs/configuration.md.
	_, values := sampleSettings(t, root)
	if values["NimBus__Cosmos__ConnectionString"] != "" {
		t.Error("NimBus__Cosmos__ConnectionString must be empty in the sample (it would hold a key)")
	}
	page := string(readFile(t, filepath.Join(root, "docs", "resolver.md")))
	for _, want := range []string{"NimBus__App=Resolver", "## What the host gets", "(deploying.md#8-the-nimbus-resolver-app)", "resolverEndpointIds"} {
		if !strings.Contains(page, want) {
			t.Errorf("docs/resolver.md does not mention %q", want)
		}
	}
	guide := string(readFile(t, filepath.Join(root, "docs", "deploying.md")))
	for _, want := range []string{"deployResolver=true", "NIMBUS_APP=resolver scripts/publish.sh", "scripts/package.sh resolver", "resolverEndpointIds", "NimBus__App"} {
		if !strings.Contains(guide, want) {
			t.Errorf("docs/deploying.md does not mention %q", want)
		}
	}
}

// configKeys returns the values of the Key* string constants declared in the
// config package's non-test sources.
func configKeys(t *testing.T, root string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "internal", "config", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Key") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					keys = append(keys, v)
				}
			}
			return true
		})
	}
	if len(keys) < len(config.Settings) {
		t.Fatalf("found %d Key constants in internal/config, fewer than config.Settings lists (%d)", len(keys), len(config.Settings))
	}
	return keys
}
