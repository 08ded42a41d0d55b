package app

import (
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/funchost"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
)

var ceSettings = map[string]string{
	config.KeyCloudEventsEnabled:             "true",
	config.KeyCloudEventsDeduplication:       "SourceAndId",
	config.KeyCloudEventsIngressTopic:        "PartnerInbound",
	config.KeyCloudEventsIngressSubscription: "BillingEndpoint",
}

// ceEnvelope is an ingress delivery in the envelope the Functions host
// builds with "dataType": "binary": application-property names such as
// cloudEvents:type and ce-id arrive as they are, the content type only in
// the (doubly encoded) ContentType metadata.
func ceEnvelope(messageID, contentType string, body []byte, props ...any) []byte {
	return hostwire.ServiceBus(hostwire.ServiceBusMessage{
		FunctionName:       FuncCloudEventsIngress,
		Body:               body,
		MessageID:          messageID,
		SessionID:          hostwire.S("lead-42"),
		ContentType:        hostwire.S(contentType),
		LockToken:          "5e3d6a39-8f6c-4f55-9c0e-0d2a1f4b7c11",
		DeliveryCount:      1,
		SequenceNumber:     7,
		EnqueuedTime:       time.Date(2026, 11, 30, 9, 15, 2, 0, time.UTC),
		SessionLockedUntil: time.Date(2026, 11, 30, 9, 16, 2, 0, time.UTC),
		Properties:         hostwire.Props(props...),
	})
}

func TestCloudEventsIngressThroughTheProtocol(t *testing.T) {
	ta := newTestApp(t, ceSettings, nil)
	structured := []byte(`{"specversion":"1.0","id":"evt-3","source":"/crm","type":"com.acme.crm.OrderPlaced","subject":"lead/42","datacontenttype":"application/json","data":{"OrderId":"O-SECRET-3"}}`)
	steps := []struct {
		name, env string
		status    int
		outcome   string
		ceID      string
	}{
		{"binary, cloudEvents: prefix", string(ceEnvelope("broker-1", "application/json", []byte(`{"OrderId":"O-1"}`),
			"cloudEvents:specversion", "1.0", "cloudEvents:id", "evt-1", "cloudEvents:source", "/crm", "cloudEvents:type", "com.acme.crm.OrderPlaced",
			"Diagnostic-Id", "00-abc")), 200, "completed", "evt-1"},
		{"binary, ce- prefix", string(ceEnvelope("broker-2", "application/json", []byte(`{"OrderId":"O-2"}`),
			"ce-specversion", "1.0", "ce-id", "evt-2", "ce-source", "/crm", "ce-type", "com.acme.crm.OrderPlaced", "ce-subject", "lead/42")), 200, "completed", "evt-2"},
		{"structured", string(ceEnvelope("broker-3", "application/cloudevents+json; charset=utf-8", structured)), 200, "completed", "evt-3"},
		{"structured re-send, new broker MessageId", string(ceEnvelope("broker-4", "application/cloudevents+json", structured)), 200, "duplicate", "evt-3"},
		{"binary re-send of evt-1 under the other prefix", string(ceEnvelope("broker-5", "application/json", []byte(`{"OrderId":"O-1"}`),
			"ce-specversion", "1.0", "ce-id", "evt-1", "ce-source", "/crm", "ce-type", "com.acme.crm.OrderPlaced")), 200, "duplicate", "evt-1"},
		{"same id, another source", string(ceEnvelope("broker-6", "application/json", []byte(`{"OrderId":"O-1"}`),
			"ce-specversion", "1.0", "ce-id", "evt-1", "ce-source", "/erp", "ce-type", "com.acme.crm.OrderPlaced")), 200, "completed", "evt-1"},
		{"specversion 0.3", string(ceEnvelope("broker-7", "application/json", []byte(`{}`),
			"ce-specversion", "0.3", "ce-id", "evt-7", "ce-source", "/crm", "ce-type", "com.acme.crm.OrderPlaced")), 422, "invalid_cloudevent", ""},
		{"unknown type", string(ceEnvelope("broker-8", "application/json", []byte(`{}`),
			"ce-specversion", "1.0", "ce-id", "evt-8", "ce-source", "/crm", "ce-type", "com.acme.crm.Unknown")), 422, "invalid_cloudevent", ""},
	}
	for _, s := range steps {
		before := len(ta.pub.Sent())
		ta.logs.Reset()
		status, _ := ta.post(t, FuncCloudEventsIngress, []byte(s.env))
		line := ta.logs.String()
		if status != s.status || !strings.Contains(line, `"outcome":"`+s.outcome+`"`) {
			t.Fatalf("%s: status %d, log %s", s.name, status, line)
		}
		sent := ta.pub.Sent()
		if s.ceID == "" {
			if len(sent) != before {
				t.Fatalf("%s: a response was sent", s.name)
			}
			continue
		}
		m := sent[len(sent)-1]
		if m.ApplicationProperties["CloudEventId"] != s.ceID || m.ApplicationProperties["EventTypeId"] != "OrderPlaced" || m.SessionID != "lead-42" {
			t.Fatalf("%s: response %+v", s.name, m.ApplicationProperties)
		}
	}
	if ta.handled != 4 {
		t.Fatalf("handler ran %d times, want 4 (two duplicates skipped, two rejected)", ta.handled)
	}

	// NimBus's texts in the log; a structured body's values never.
	ta.logs.Reset()
	ta.post(t, FuncCloudEventsIngress, ceEnvelope("broker-9", "application/json", nil, "ce-id", "evt-9", "ce-source", "/crm", "ce-type", "T"))
	if line := ta.logs.String(); !strings.Contains(line, `CloudEvents message has unsupported specversion '\u003cnull\u003e' (expected '1.0').`) &&
		!strings.Contains(line, `CloudEvents message has unsupported specversion '<null>' (expected '1.0').`) {
		t.Fatalf("log %s", line)
	}
	ta.logs.Reset()
	ta.post(t, FuncCloudEventsIngress, ceEnvelope("broker-10", "application/cloudevents+json",
		[]byte(`{"specversion":"1.0","id":"evt-10","source":"/crm","type":"com.acme.SECRET.Type","data":{"OrderId":"O-SECRET-10"}}`)))
	if line := ta.logs.String(); strings.Contains(line, "SECRET") || !strings.Contains(line, `"cloudEvent":"structured"`) ||
		!strings.Contains(line, "maps to no registered event contract") {
		t.Fatalf("structured log line quotes body values or lacks the text: %s", line)
	}
	ta.logs.Reset()
	ta.post(t, FuncCloudEventsIngress, ceEnvelope("broker-11", "application/cloudevents+json", structured[:40]))
	if line := ta.logs.String(); !strings.Contains(line, "missing required attribute 'id'") {
		t.Fatalf("unreadable structured body: %s", line)
	}
}

// With the default string data type the host copies a structured event's
// top-level members into Metadata, so its sessionid extension and subject
// replace the broker's SessionId and Subject: the reason both Service Bus
// triggers use "dataType": "binary".
func TestStringDataTypeLetsAStructuredEventOverwriteBrokerProperties(t *testing.T) {
	body := []byte(`{"specversion":"1.0","id":"evt-1","source":"/crm","type":"T","subject":"from-event","sessionid":"from-event"}`)
	for _, stringData := range []bool{false, true} {
		env := hostwire.ServiceBus(hostwire.ServiceBusMessage{
			FunctionName: FuncCloudEventsIngress, StringData: stringData, Body: body, MessageID: "m-1",
			SessionID: hostwire.S("broker-session"), Subject: hostwire.S("broker-subject"),
			ContentType: hostwire.S("application/cloudevents+json"), DeliveryCount: 1,
			EnqueuedTime: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), SessionLockedUntil: time.Date(2026, 11, 30, 9, 1, 0, 0, time.UTC),
		})
		m, err := funchost.DecodeServiceBus(env, "message")
		if err != nil {
			t.Fatal(err)
		}
		overwritten := *m.SessionID == "from-event" && m.Subject == "from-event"
		if overwritten != stringData {
			t.Fatalf("string data %v: SessionId %q Subject %q", stringData, *m.SessionID, m.Subject)
		}
		if string(m.Body) != string(body) || m.ContentType != "application/cloudevents+json" {
			t.Fatalf("string data %v: body %q content type %q", stringData, m.Body, m.ContentType)
		}
	}
}

func TestCloudEventsOffRejectsThemAsNotNimBus(t *testing.T) {
	ta := newTestApp(t, nil, nil)
	status, _ := ta.post(t, FuncSubscriber, ceEnvelope("broker-1", "application/json", []byte(`{}`),
		"ce-specversion", "1.0", "ce-id", "evt-1", "ce-source", "/crm", "ce-type", "com.acme.crm.OrderPlaced"))
	if status != 422 || !strings.Contains(ta.logs.String(), `"outcome":"invalid_message"`) {
		t.Fatalf("status %d log %s", status, ta.logs.String())
	}
}
