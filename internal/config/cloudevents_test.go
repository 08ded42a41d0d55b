package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestCloudEventsDefaults(t *testing.T) {
	c, err := Load(FromMap(base()))
	if err != nil {
		t.Fatal(err)
	}
	ce := c.CloudEvents
	if ce.Enabled || !reflect.DeepEqual(ce.Prefixes, []string{"cloudEvents:", "ce-"}) || ce.TypeMap != nil ||
		ce.SessionIDAttribute != "sessionid" || ce.CorrelationIDAttribute != "correlationid" || ce.Deduplication != DedupMessageID ||
		ce.IngressTopic != "" || ce.IngressSubscription != "" {
		t.Fatalf("defaults %+v", ce)
	}
}

func TestCloudEventsSettings(t *testing.T) {
	m := base()
	m[KeyCloudEventsEnabled] = "true"
	m[KeyCloudEventsPrefixes] = " ce- , cloudEvents: "
	m[KeyCloudEventsTypeMap] = `{"com.acme.order.placed":"OrderPlaced"}`
	m[KeyCloudEventsSessionIDAttribute] = "subject"
	m[KeyCloudEventsCorrelationIDAttribute] = "traceid"
	m[KeyCloudEventsDeduplication] = "sourceandid"
	m[KeyCloudEventsIngressTopic] = "PartnerInbound"
	m[KeyCloudEventsIngressSubscription] = "BillingEndpoint"
	m[KeyInboxEnabled] = "true"
	m[KeyInboxStore] = "InMemory"
	c, err := Load(FromMap(m))
	if err != nil {
		t.Fatal(err)
	}
	ce := c.CloudEvents
	if !ce.Enabled || !reflect.DeepEqual(ce.Prefixes, []string{"ce-", "cloudEvents:"}) || ce.TypeMap["com.acme.order.placed"] != "OrderPlaced" ||
		ce.SessionIDAttribute != "subject" || ce.CorrelationIDAttribute != "traceid" || ce.Deduplication != DedupSourceAndID ||
		ce.IngressTopic != "PartnerInbound" || ce.IngressSubscription != "BillingEndpoint" {
		t.Fatalf("settings %+v", ce)
	}
}

func TestCloudEventsProblems(t *testing.T) {
	m := base()
	m[KeyCloudEventsPrefixes] = "ce-,,ce-"
	m[KeyCloudEventsTypeMap] = `["not","an","object"]`
	m[KeyCloudEventsSessionIDAttribute] = "session-id"
	m[KeyCloudEventsDeduplication] = "ByHash"
	m[KeyCloudEventsIngressTopic] = "PartnerInbound"
	_, err := Load(FromMap(m))
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("err %v", err)
	}
	for _, want := range []string{
		KeyCloudEventsPrefixes + `="ce-,,ce-" has an empty prefix`,
		`lists "ce-" twice`,
		KeyCloudEventsTypeMap + `=`,
		KeyCloudEventsSessionIDAttribute + `="session-id" is not a CloudEvents attribute name`,
		KeyCloudEventsDeduplication + `="ByHash" is not supported`,
		KeyCloudEventsIngressTopic + `="PartnerInbound" names an ingress topic but ` + KeyCloudEventsEnabled + ` is false`,
		KeyCloudEventsIngressSubscription + " must be set",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if len(e.Problems) != 7 {
		t.Errorf("%d problems: %q", len(e.Problems), e.Problems)
	}

	m = base()
	m[KeyCloudEventsTypeMap] = `{"a.b":"  "}`
	m[KeyCloudEventsIngressTopic] = strings.Repeat("t", 261)
	m[KeyCloudEventsIngressSubscription] = strings.Repeat("s", 51)
	_, err = Load(FromMap(m))
	for _, want := range []string{`maps "a.b" to an empty EventTypeId`, "at most 260", "at most 50"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

// Deduplication by source and id without the inbox does nothing: a warning.
// The placeholder Bicep writes without an ingress topic (the endpoint's own
// topic) is accepted with CloudEvents off.
func TestCloudEventsWarningsAndPlaceholder(t *testing.T) {
	m := base()
	m[KeyCloudEventsDeduplication] = "SourceAndId"
	m[KeyCloudEventsIngressTopic] = "BillingEndpoint"
	m[KeyCloudEventsIngressSubscription] = "BillingEndpoint"
	m[KeySessionStore] = "InMemory"
	c, err := Load(FromMap(m))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "has no effect while "+KeyInboxEnabled+" is false") {
		t.Fatalf("warnings %q", c.Warnings)
	}
}
