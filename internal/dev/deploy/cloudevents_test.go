package deploy

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/config"
)

// The ingress function: a second Service Bus trigger with sessions on the
// ingress topic's subscription, binary data type (with the string data type
// the host would copy a structured event's members into Metadata and
// overwrite SessionId, CorrelationId and Subject), disabled by a setting.
func TestCloudEventsIngressFunction(t *testing.T) {
	root := repoRoot(t)
	var ingress *function
	for _, fn := range repoFunctions(t, root) {
		if fn.Name == "CloudEventsIngress" {
			ingress = &fn
		}
	}
	if ingress == nil {
		t.Fatal("functions/CloudEventsIngress/function.json is missing")
	}
	b := triggerOf(t, *ingress)
	for k, v := range map[string]any{
		"type":              "serviceBusTrigger",
		"name":              "message",
		"topicName":         "%NimBus:CloudEvents:IngressTopic%",
		"subscriptionName":  "%NimBus:CloudEvents:IngressSubscription%",
		"connection":        "ServiceBusConnection",
		"isSessionsEnabled": true,
		"dataType":          "binary",
		"cardinality":       "one",
	} {
		if b[k] != v {
			t.Errorf("CloudEventsIngress trigger %s = %v, want %v", k, b[k], v)
		}
	}
	if _, set := b["autoCompleteMessages"]; set {
		t.Error("CloudEventsIngress overrides autoCompleteMessages")
	}

	_, values := sampleSettings(t, root)
	for _, s := range config.Settings {
		if !strings.HasPrefix(s.Name, "NimBus__CloudEvents__") {
			continue
		}
		v, ok := values[s.Name]
		if !ok {
			t.Errorf("local.settings.sample.json lacks %s", s.Name)
		} else if s.Default != "" && v != s.Default {
			t.Errorf("%s = %q in the sample, want its default %q", s.Name, v, s.Default)
		}
	}
	if values["AzureWebJobs.CloudEventsIngress.Disabled"] != "true" {
		t.Error("the sample must keep CloudEventsIngress disabled (AzureWebJobs.CloudEventsIngress.Disabled=true)")
	}
	if conf := string(readFile(t, filepath.Join(root, "docs", "configuration.md"))); !strings.Contains(conf, "| `AzureWebJobs.CloudEventsIngress.Disabled` |") {
		t.Error("docs/configuration.md has no row for AzureWebJobs.CloudEventsIngress.Disabled")
	}
	guide := string(readFile(t, filepath.Join(root, "docs", "cloudevents.md")))
	for _, want := range []string{"## Detection and mapping", "## Deduplication by CloudEvents identity", "SourceAndId", "`missing_or_blank`", "`too_long`"} {
		if !strings.Contains(guide, want) {
			t.Errorf("docs/cloudevents.md does not mention %s", want)
		}
	}
}

func TestBicepCloudEventsIngress(t *testing.T) {
	main := bicepText(t, "main.bicep")
	for what, re := range map[string]string{
		"parameter":                  `(?m)^param cloudEventsIngressTopic string = ''$`,
		"ingress on when named":      `var cloudEventsIngress = !empty\(cloudEventsIngressTopic\)`,
		"module only when named":     `module cloudEventsIngressTopology 'modules/cloudevents-ingress.bicep' = if \(cloudEventsIngress\)`,
		"in the namespace's group":   `name: 'cloudevents-ingress'\s+scope: resourceGroup\(serviceBusResourceGroupName\)`,
		"subscription = endpoint":    `subscriptionName: endpointName`,
		"enabled by the parameter":   `name: 'NimBus__CloudEvents__Enabled'\s+value: cloudEventsIngress \? 'true' : 'false'`,
		"topic setting resolvable":   `name: 'NimBus__CloudEvents__IngressTopic'\s+value: cloudEventsIngress \? cloudEventsIngressTopic : endpointName`,
		"subscription setting":       `name: 'NimBus__CloudEvents__IngressSubscription'\s+value: endpointName`,
		"function disabled when off": `name: 'AzureWebJobs.CloudEventsIngress.Disabled'\s+value: cloudEventsIngress \? 'false' : 'true'`,
		"deduplication setting":      `name: 'NimBus__CloudEvents__Deduplication'\s+value: cloudEventsDeduplication`,
		"app waits for the ingress":  `dependsOn: \[[^\]]*cloudEventsIngressTopology`,
	} {
		if !regexp.MustCompile(re).MatchString(main) {
			t.Errorf("main.bicep: %s not found (%s)", what, re)
		}
	}
	mod := bicepText(t, "modules/cloudevents-ingress.bicep")
	for what, re := range map[string]string{
		"topic":                 `resource ingressTopic 'Microsoft.ServiceBus/namespaces/topics@[0-9-]+' = \{\s+parent: namespace\s+name: ingressTopicName`,
		"session subscription":  `parent: ingressTopic\s+name: subscriptionName\s+properties: \{\s+requiresSession: true`,
		"MaxDeliveryCount 10":   `maxDeliveryCount: 10`,
		"no filtering rules":    `^[^$]*$`,
		"receiver on the topic": `scope: ingressTopic`,
		"Data Receiver role":    `4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0`,
	} {
		if what == "no filtering rules" {
			if strings.Contains(mod, "subscriptions/rules@") {
				t.Error("cloudevents-ingress.bicep declares rules: external producers stamp no NimBus properties, so the subscription must keep $Default")
			}
			continue
		}
		if !regexp.MustCompile(re).MatchString(mod) {
			t.Errorf("cloudevents-ingress.bicep: %s not found (%s)", what, re)
		}
	}
	if strings.Contains(mod, "Data Sender") || strings.Contains(mod, "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39") {
		t.Error("the identity needs no Send on the ingress topic: responses go to the endpoint topic")
	}
}
