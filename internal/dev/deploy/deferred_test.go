package deploy

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDeferredProcessorFunction checks the trigger of the function that
// replays a session's parked copies: the endpoint topic's non-session
// DeferredProcessor subscription, which takes the ProcessDeferredRequests
// (To=DeferredProcessor). The function accepts the Deferred session itself
// with azservicebus, so the trigger must not use sessions.
func TestDeferredProcessorFunction(t *testing.T) {
	root := repoRoot(t)
	var fn function
	for _, f := range appFunctions(t, root) {
		if f.Name == "DeferredProcessor" {
			fn = f
		}
	}
	if fn.Path == "" {
		t.Fatal("functions/DeferredProcessor/function.json is missing")
	}
	b := triggerOf(t, fn)
	for k, v := range map[string]any{
		"type":              "serviceBusTrigger",
		"name":              "message",
		"topicName":         "%NimBus:Endpoint%",
		"subscriptionName":  "DeferredProcessor",
		"connection":        "ServiceBusConnection",
		"isSessionsEnabled": false,
		"dataType":          "binary",
	} {
		if b[k] != v {
			t.Errorf("DeferredProcessor trigger %s = %v, want %v", k, b[k], v)
		}
	}
	if c, set := b["cardinality"]; set && c != "one" {
		t.Errorf("DeferredProcessor trigger cardinality = %v, want one", c)
	}
	if ac, set := b["autoCompleteMessages"]; set && ac != true {
		t.Errorf("DeferredProcessor trigger overrides autoCompleteMessages = %v; a custom handler cannot settle messages itself", ac)
	}

	// The subscription the trigger names is the topology's, without sessions.
	topo := bicepText(t, "modules/servicebus-topology.bicep")
	if !regexp.MustCompile(`name: 'DeferredProcessor'\s+properties: union\(subscriptionDefaults, \{ requiresSession: false \}\)`).MatchString(topo) {
		t.Error("servicebus-topology.bicep: the DeferredProcessor subscription is not declared without sessions")
	}
	if !regexp.MustCompile(`name: 'Deferred'\s+properties: union\(subscriptionDefaults, \{\s+requiresSession: true`).MatchString(topo) {
		t.Error("servicebus-topology.bicep: the Deferred subscription is not declared with sessions")
	}
}

// TestHostJSONSessionConcurrency checks the values docs/concurrency.md
// justifies: the per-session order (one invocation per session at a time),
// an idle timeout short enough that sparse sessions do not pin slots, and a
// bounded number of concurrent DeferredProcessor invocations. The document
// must state the values host.json has.
func TestHostJSONSessionConcurrency(t *testing.T) {
	root := repoRoot(t)
	var h hostJSON
	readJSON(t, filepath.Join(root, "host.json"), &h)
	sb := h.Extensions.ServiceBus
	if sb["maxConcurrentCallsPerSession"] != float64(1) {
		t.Errorf("maxConcurrentCallsPerSession = %v, want 1 (one invocation per session at a time keeps the session's order)", sb["maxConcurrentCallsPerSession"])
	}
	sessions, ok := sb["maxConcurrentSessions"].(float64)
	if !ok || sessions < 1 || sessions > 200 || sessions != float64(int(sessions)) {
		t.Fatalf("maxConcurrentSessions = %v, want an integer in 1..200", sb["maxConcurrentSessions"])
	}
	idle, err := parseTimeSpan(asString(sb["sessionIdleTimeout"]))
	if err != nil {
		t.Fatalf("sessionIdleTimeout: %v", err)
	}
	if idle <= 0 || idle.Seconds() > 5 {
		t.Errorf("sessionIdleTimeout = %v: a slot stays with an idle session that long; keep it within 5 s (docs/concurrency.md)", idle)
	}
	calls, ok := sb["maxConcurrentCalls"].(float64)
	if !ok || calls < 1 || calls != float64(int(calls)) {
		t.Fatalf("maxConcurrentCalls = %v, want a positive integer (it bounds concurrent DeferredProcessor invocations)", sb["maxConcurrentCalls"])
	}

	doc := string(readFile(t, filepath.Join(root, "docs", "concurrency.md")))
	for _, want := range []string{
		`"maxConcurrentSessions": ` + formatInt(sessions),
		`"sessionIdleTimeout": "` + asString(sb["sessionIdleTimeout"]) + `"`,
		`"maxConcurrentCalls": ` + formatInt(calls),
		"maxConcurrentCallsPerSession",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/concurrency.md does not state %s", want)
		}
	}
}

func formatInt(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// TestBicepDeferredAccessAndSessionState checks what the session blocking
// needs from the deployment: the session-state container (partition key
// /id, no TTL) in the inbox's database, its app setting, the Cosmos data
// role covering it, and the Service Bus roles (Data Sender on the endpoint
// topic; Data Receiver on exactly the {E}, Deferred and DeferredProcessor
// subscriptions).
func TestBicepDeferredAccessAndSessionState(t *testing.T) {
	main := bicepText(t, "main.bicep")
	for what, re := range map[string]string{
		"parameter, default sessionstate": `(?m)^param sessionStateContainerId string = 'sessionstate'$`,
		"container in the inbox database": `resource sessionStateContainer 'Microsoft\.DocumentDB/databaseAccounts/sqlDatabases/containers@[0-9-]+' = \{\s+parent: cosmosDatabase\s+name: sessionStateContainerId`,
		"partition key /id":               `id: sessionStateContainerId\s+partitionKey: \{\s+paths: \[\s+'/id'\s+\]\s+kind: 'Hash'`,
		"app setting":                     `name: 'NimBus__Inbox__Cosmos__SessionContainerId'\s+value: sessionStateContainerId`,
		"app waits for the container":     `dependsOn: \[[^\]]*sessionStateContainer`,
		"data role on the account":        `sqlRoleAssignments@[0-9-]+' = \{\s+parent: cosmos\s+name: [^\n]+\s+properties: \{\s+roleDefinitionId: [^\n]+\s+principalId: [^\n]+\s+scope: cosmos\.id`,
	} {
		if !regexp.MustCompile(re).MatchString(main) {
			t.Errorf("main.bicep: %s not found (%s)", what, re)
		}
	}
	block := main[strings.Index(main, "resource sessionStateContainer"):]
	block = block[:strings.Index(block, "\n}\n")]
	for _, banned := range []string{"defaultTtl", "ttl"} {
		if strings.Contains(strings.ToLower(block), strings.ToLower(banned)) {
			t.Errorf("the session-state container sets %s; its documents must never expire", banned)
		}
	}
	settings := bicepAppSettings(t, main)
	if settings["NimBus__Inbox__Cosmos__SessionContainerId"] != "sessionStateContainerId" {
		t.Errorf("app setting NimBus__Inbox__Cosmos__SessionContainerId = %q", settings["NimBus__Inbox__Cosmos__SessionContainerId"])
	}

	access := bicepText(t, "modules/servicebus-access.bicep")
	for what, re := range map[string]string{
		"receive subscriptions default":      `param receiveSubscriptionNames array = \[\s+endpointTopicName\s+'Deferred'\s+'DeferredProcessor'\s+\]`,
		"existing subscriptions of topic":    `resource receiveSubscriptions 'Microsoft\.ServiceBus/namespaces/topics/subscriptions@[0-9-]+' existing = \[for name in receiveSubscriptionNames: \{\s+parent: endpointTopic\s+name: name`,
		"Data Receiver on each subscription": `resource receivers [^\n]+\n\s+name: guid\(receiveSubscriptions\[i\]\.id, principalId, serviceBusDataReceiver\)\s+scope: receiveSubscriptions\[i\]\s+properties: \{\s+roleDefinitionId: subscriptionResourceId\('Microsoft\.Authorization/roleDefinitions', serviceBusDataReceiver\)`,
		"Data Sender on the topic":           `resource sender [^\n]+\n\s+name: guid\(endpointTopic\.id, principalId, serviceBusDataSender\)\s+scope: endpointTopic\s+properties: \{\s+roleDefinitionId: subscriptionResourceId\('Microsoft\.Authorization/roleDefinitions', serviceBusDataSender\)`,
		"receiver role id":                   `var serviceBusDataReceiver = '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0'`,
		"sender role id":                     `var serviceBusDataSender = '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39'`,
	} {
		if !regexp.MustCompile(re).MatchString(access) {
			t.Errorf("servicebus-access.bicep: %s not found (%s)", what, re)
		}
	}
	// Receive is never granted on the whole topic or namespace: the topic's
	// Resolver fan-out subscription is not the app's to drain.
	if regexp.MustCompile(`scope: (endpointTopic|namespace)\s+properties: \{\s+roleDefinitionId: subscriptionResourceId\('Microsoft\.Authorization/roleDefinitions', serviceBusDataReceiver\)`).MatchString(access) {
		t.Error("servicebus-access.bicep grants Data Receiver on the whole topic or namespace")
	}
	// The module is used with its default subscriptions.
	if strings.Contains(main, "receiveSubscriptionNames") {
		t.Error("main.bicep overrides receiveSubscriptionNames; the defaults are the three subscriptions the app receives from")
	}
	doc := string(readFile(t, filepath.Join(repoRoot(t), "infra", "bicep", "README.md")))
	for _, want := range []string{"session-state container", "`Deferred`", "`DeferredProcessor`"} {
		if !strings.Contains(doc, want) {
			t.Errorf("infra/bicep/README.md does not mention %s", want)
		}
	}
}
