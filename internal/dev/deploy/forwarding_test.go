package deploy

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestBicepDuplicateDetection checks that the endpoint topic the templates
// create requires duplicate detection by default with a 10-minute window,
// that the setting is a parameter of main.bicep passed to the topology, and
// that no other topic (the Resolver's above all: its re-sends keep their
// MessageId) requires it.
func TestBicepDuplicateDetection(t *testing.T) {
	topo := bicepText(t, "modules/servicebus-topology.bicep")
	for what, re := range map[string]string{
		"parameter, default on":                           `(?m)^param duplicateDetection bool = true$`,
		"window parameter, 10 minutes":                    `(?m)^param duplicateDetectionWindow string = 'PT10M'$`,
		"endpoint topic properties":                       `var endpointTopicProperties = union\(topicProperties, \{\s*requiresDuplicateDetection: duplicateDetection\s*\}, duplicateDetection \? \{\s*duplicateDetectionHistoryTimeWindow: duplicateDetectionWindow\s*\} : \{\}\)`,
		"the endpoint topic takes them":                   `resource endpointTopic '[^']+' = \{\s*parent: namespace\s*name: endpointName\s*properties: endpointTopicProperties\s*\}`,
		"the Resolver topic does not":                     `resource resolverTopic '[^']+' = \{\s*parent: namespace\s*name: resolverId\s*properties: topicProperties\s*\}`,
		"shared topic properties, no duplicate detection": `var topicProperties = \{\s*supportOrdering: true\s*enableBatchedOperations: true\s*maxSizeInMegabytes: 5120\s*\}`,
	} {
		if !regexp.MustCompile(re).MatchString(topo) {
			t.Errorf("servicebus-topology.bicep: %s not found (/%s/)", what, re)
		}
	}
	main := bicepText(t, "main.bicep")
	for what, re := range map[string]string{
		"parameter, default on":        `(?m)^param endpointTopicDuplicateDetection bool = true$`,
		"window parameter, 10 minutes": `(?m)^param duplicateDetectionWindow string = 'PT10M'$`,
		"passed to the topology":       `module serviceBusTopology '[^']+' = if \(createServiceBus\) \{[^}]*params: \{[^}]*duplicateDetection: endpointTopicDuplicateDetection\s+duplicateDetectionWindow: duplicateDetectionWindow\s`,
	} {
		if !regexp.MustCompile(re).MatchString(main) {
			t.Errorf("main.bicep: %s not found (/%s/)", what, re)
		}
	}
	for _, f := range bicepFiles(t) {
		n := strings.Count(f.Text, "requiresDuplicateDetection:")
		if want := map[bool]int{true: 1, false: 0}[f.Name == "modules/servicebus-topology.bicep"]; n != want {
			t.Errorf("%s sets requiresDuplicateDetection %d times, want %d (the endpoint topic only)", f.Name, n, want)
		}
	}
	param := string(readFile(t, filepath.Join(repoRoot(t), "infra", "bicep", "main.bicepparam")))
	for _, s := range []string{"param endpointTopicDuplicateDetection = true\n", "param duplicateDetectionWindow = 'PT10M'\n"} {
		if !strings.Contains(param, s) {
			t.Errorf("main.bicepparam does not set %q", s)
		}
	}
}

// sqlExpressionRE finds the SQL filters and actions of a Bicep file.
var sqlExpressionRE = regexp.MustCompile(`sqlExpression: '((?:[^'\\]|\\.)*)'`)

// renderBicep evaluates a Bicep string literal's body: \' and \\ escapes
// and ${name} interpolations from vars (an unknown one fails t).
func renderBicep(t *testing.T, lit string, vars map[string]string) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < len(lit); i++ {
		switch {
		case lit[i] == '\\' && i+1 < len(lit):
			i++
			b.WriteByte(lit[i])
		case strings.HasPrefix(lit[i:], "${"):
			end := strings.IndexByte(lit[i:], '}')
			name := lit[i+2 : i+end]
			v, ok := vars[name]
			if !ok {
				t.Fatalf("no value for ${%s} in %q", name, lit)
			}
			b.WriteString(v)
			i += end
		default:
			b.WriteByte(lit[i])
		}
	}
	return b.String()
}

// TestBicepEventForwarding checks the forwarding subscriptions of the
// events an endpoint publishes: NimBus's subscription per consumer and its
// filter and action per event type, byte for byte, with the catch-all
// $Default made inert; and how main.bicep deploys them.
func TestBicepEventForwarding(t *testing.T) {
	mod := bicepText(t, "modules/event-forwarding.bicep")
	var exprs []string
	for _, m := range sqlExpressionRE.FindAllStringSubmatch(mod, -1) {
		exprs = append(exprs, renderBicep(t, m[1], map[string]string{"f.eventTypeId": "PaymentRecorded", "endpointName": "Billing", "f.consumer": "Ledger"}))
	}
	// The strings of NimBus's TopologyDescriptor (ForwardFilter, ForwardAction).
	want := []string{
		"1=0",
		"user.EventTypeId = 'PaymentRecorded' AND user.From IS NULL",
		"SET user.From = 'Billing'; SET user.EventId = newid(); SET user.To = 'Ledger';",
	}
	if strings.Join(exprs, "\n") != strings.Join(want, "\n") {
		t.Errorf("SQL expressions\n%s\nwant\n%s", strings.Join(exprs, "\n"), strings.Join(want, "\n"))
	}
	for what, re := range map[string]string{
		"the map parameter":                 `(?m)^param publishedEvents object$`,
		"one entry per event and consumer":  `var forwards = filter\(flatten\(map\(items\(publishedEvents\), e => map\(e\.value, consumer => \{\s*eventTypeId: e\.key\s*consumer: consumer\s*\}\)\)\), f => f\.consumer != endpointName\)`,
		"each consumer once":                `var consumers = union\(map\(forwards, f => f\.consumer\), \[\]\)`,
		"on the endpoint topic":             `resource endpointTopic '[^']+' existing = \{\s*parent: namespace\s*name: endpointName\s*\}`,
		"a subscription per consumer":       `resource forwarders '[^']+' = \[for consumer in consumers: \{\s*parent: endpointTopic\s*name: consumer\s*properties: \{\s*requiresSession: false\s*forwardTo: consumer\s*maxDeliveryCount: 10\s*lockDuration: 'PT30S'`,
		"its $Default inert":                `@batchSize\(1\)\s*resource inertDefaultRules '[^']+' = \[for \(consumer, i\) in consumers: \{\s*parent: forwarders\[i\]\s*name: '\$Default'`,
		"a rule per event type, named so":   `@batchSize\(1\)\s*resource forwardRules '[^']+' = \[for f in forwards: \{\s*parent: forwarders\[indexOf\(consumers, f\.consumer\)\]\s*name: f\.eventTypeId`,
		"rules after the inert $Default":    `dependsOn: \[\s*inertDefaultRules\s*\]`,
		"in the namespace's resource group": `resource namespace 'Microsoft\.ServiceBus/namespaces@[0-9-]+' existing = \{\s*name: namespaceName\s*\}`,
	} {
		if !regexp.MustCompile(re).MatchString(mod) {
			t.Errorf("event-forwarding.bicep: %s not found (/%s/)", what, re)
		}
	}

	main := bicepText(t, "main.bicep")
	for what, re := range map[string]string{
		"parameter, none by default": `(?m)^param publishedEvents object = \{\}$`,
		"module only when asked":     `module eventForwarding 'modules/event-forwarding\.bicep' = if \(!empty\(publishedEvents\)\) \{`,
		"new or existing namespace":  `module eventForwarding '[^']+' = [^{]*\{\s*name: 'event-forwarding'\s*scope: resourceGroup\(serviceBusResourceGroupName\)\s*params: \{\s*namespaceName: serviceBusNamespaceName\s*endpointName: endpointName\s*publishedEvents: publishedEvents\s*\}\s*dependsOn: \[\s*serviceBusTopology\s*\]`,
		"the app waits for it":       `dependsOn: \[[^\]]*\beventForwarding\b[^\]]*\]`,
	} {
		if !regexp.MustCompile(re).MatchString(main) {
			t.Errorf("main.bicep: %s not found (/%s/)", what, re)
		}
	}
	param := string(readFile(t, filepath.Join(repoRoot(t), "infra", "bicep", "main.bicepparam")))
	if !regexp.MustCompile(`// param publishedEvents = \{\n//   PaymentRecorded: \[\n//     'Ledger'`).MatchString(param) {
		t.Error("main.bicepparam does not show publishedEvents")
	}
}

// The deployment guide describes both parameters and what they cannot do.
func TestDeployingDocumentsPublishing(t *testing.T) {
	guide := string(readFile(t, filepath.Join(repoRoot(t), "docs", "deploying.md")))
	for _, s := range []string{
		"`endpointTopicDuplicateDetection`", "`duplicateDetectionWindow`", "`publishedEvents`",
		"cannot be switched on or off for an existing topic",
		"user.EventTypeId = 'T' AND user.From IS NULL",
		"SET user.From = 'E'; SET user.EventId = newid(); SET user.To = 'C';",
		"the downstream inbox",
	} {
		if !strings.Contains(guide, s) {
			t.Errorf("docs/deploying.md does not say %q", s)
		}
	}
}
