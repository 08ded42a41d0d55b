package minihost

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// The fixtures in testdata are research/functions-fixtures: the compact
// bodies the host's serializer emits for a session Service Bus trigger with
// dataType binary, and for a timer trigger.

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ptr[T any](v T) *T { return &v }

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestServiceBusInvocationMatchesFixture(t *testing.T) {
	trigger := &ServiceBusTrigger{
		Body:               []byte(`{"orderId":"A-1001","amount":42.5,"customer":{"id":7},"lines":[1,2]}`),
		SessionLockedUntil: at("2025-01-15T10:21:05.123Z"),
		Namespace:          "sb-demo.servicebus.windows.net",
		DeliveryCount:      1,
		LockToken:          "5e3d6a39-8f6c-4f55-9c0e-0d2a1f4b7c11",
		ExpiresAt:          at("2025-01-29T10:20:05.999Z"), // sub-seconds are dropped
		EnqueuedTime:       at("2025-01-15T10:20:05.5Z"),
		MessageID:          "7c9e6679-7425-40de-944b-e07fc1f90ae7",
		ContentType:        ptr("application/json"),
		SequenceNumber:     41,
		Subject:            ptr("OrderCreated"),
		CorrelationID:      ptr("corr-77"),
		ApplicationProperties: []Property{
			{Name: "eventType", Value: "OrderCreated"},
			{Name: "schemaVersion", Value: int32(2)},
		},
		SessionID: ptr("order-A-1001"),
	}
	sys := Sys{MethodName: "OrderEvents", UtcNow: at("2025-01-15T10:20:05.4567891Z"), RandGuid: "0f8fad5b-d9cb-469f-a165-70867728950e"}
	got, err := BuildServiceBusInvocation("message", trigger, sys)
	if err != nil {
		t.Fatal(err)
	}
	if want := fixture(t, "sb_session_binary.json"); !bytes.Equal(got, want) {
		t.Fatalf("envelope differs from the fixture\n got %s\nwant %s", got, want)
	}
}

func TestTimerInvocationMatchesFixture(t *testing.T) {
	info := TimerInfo{
		Last:        at("2025-01-15T10:15:00.0061234Z"),
		Next:        at("2025-01-15T10:20:00Z"),
		LastUpdated: at("2025-01-15T10:15:00.0061234Z"),
	}
	sys := Sys{MethodName: "Reconcile", UtcNow: at("2025-01-15T10:20:00.0156789Z"), RandGuid: "b3c2a1d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d"}
	got := BuildTimerInvocation("myTimer", info, sys)
	if want := fixture(t, "timer.json"); !bytes.Equal(got, want) {
		t.Fatalf("envelope differs from the fixture\n got %s\nwant %s", got, want)
	}
}

func TestTimerInvocationFirstRunAndNoMonitor(t *testing.T) {
	sys := Sys{MethodName: "InboxCleanup", UtcNow: at("2025-01-15T10:20:00Z"), RandGuid: "g"}
	first := string(BuildTimerInvocation("timer", TimerInfo{Next: at("2025-01-15T10:20:00Z"), IsPastDue: true}, sys))
	want := `{"Data":{"timer":{"Schedule":{"AdjustForDST":true},"ScheduleStatus":{"Last":"0001-01-01T00:00:00+00:00","Next":"2025-01-15T10:20:00+00:00","LastUpdated":"0001-01-01T00:00:00+00:00"},"IsPastDue":true}},"Metadata":{"sys":{"MethodName":"InboxCleanup","UtcNow":"2025-01-15T10:20:00Z","RandGuid":"g"}}}`
	if first != want {
		t.Errorf("first run\n got %s\nwant %s", first, want)
	}
	noMonitor := string(BuildTimerInvocation("timer", TimerInfo{NoMonitor: true}, sys))
	if !strings.Contains(noMonitor, `"ScheduleStatus":null,"IsPastDue":false`) || !json.Valid([]byte(noMonitor)) {
		t.Errorf("no monitor: %s", noMonitor)
	}
}

// metadataKeys returns Metadata's keys in wire order.
func metadataKeys(t *testing.T, envelope []byte) []string {
	t.Helper()
	var top struct{ Metadata json.RawMessage }
	if err := json.Unmarshal(envelope, &top); err != nil {
		t.Fatalf("envelope is not JSON: %v\n%s", err, envelope)
	}
	dec := json.NewDecoder(bytes.NewReader(top.Metadata))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// decodeTwice reads a host string value: a JSON string holding a JSON text.
func decodeTwice(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var inner, s string
	if err := json.Unmarshal(raw, &inner); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	if err := json.Unmarshal([]byte(inner), &s); err != nil {
		t.Fatalf("inner %q: %v", inner, err)
	}
	return s
}

func TestServiceBusInvocationConventions(t *testing.T) {
	body := []byte{0x00, 0xff, 0xfe, '{', '"', '}', 0x80}
	tricky := "id \"quoted\" \\ back\tslash é \u2028 <&>"
	stamp := at("2025-03-04T05:06:07.1234567Z")
	trigger := &ServiceBusTrigger{
		Body: body, SessionLockedUntil: at("2025-03-04T05:07:07.5Z"), Namespace: "ns", ClientIdentifier: "ns-1",
		DeliveryCount: 3, LockToken: "00000000-0000-0000-0000-000000000001",
		ExpiresAt: maxDateTimeOffset, EnqueuedTime: stamp,
		MessageID: tricky, SequenceNumber: 1 << 40, CorrelationID: ptr(""),
		ApplicationProperties: []Property{
			{Name: "b", Value: true}, {Name: "bytes", Value: []byte("hi")}, {Name: "f", Value: 1.5}, {Name: "f2", Value: 2.0}, {Name: "i32", Value: int32(-7)},
			{Name: "i64", Value: int64(1) << 53}, {Name: "nil", Value: nil}, {Name: "s", Value: tricky}, {Name: "ts", Value: stamp}, {Name: "u8", Value: uint8(200)},
		},
		SessionID: ptr("s-1"),
	}
	env, err := BuildServiceBusInvocation("message", trigger, Sys{MethodName: "Subscriber", UtcNow: stamp, RandGuid: "r"})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Data     map[string]string
		Metadata map[string]json.RawMessage
	}
	if err := json.Unmarshal(env, &got); err != nil {
		t.Fatalf("%v\n%s", err, env)
	}
	if b, err := base64.StdEncoding.DecodeString(got.Data["message"]); err != nil || !bytes.Equal(b, body) {
		t.Errorf("Data.message = %q, want base64 of the body bytes", got.Data["message"])
	}
	md := got.Metadata
	if s := decodeTwice(t, md["MessageId"]); s != tricky {
		t.Errorf("MessageId round trip = %q", s)
	}
	if s := decodeTwice(t, md["CorrelationId"]); s != "" {
		t.Errorf("an empty CorrelationId is a value, not null: %q", s)
	}
	if s := decodeTwice(t, md["LockToken"]); s != trigger.LockToken {
		t.Errorf("LockToken = %q", s)
	}
	for key, want := range map[string]string{
		"DeliveryCount":   `"3"`,
		"SequenceNumber":  `"1099511627776"`,
		"ExpiresAtUtc":    `"9999-12-31T23:59:59"`,
		"ExpiresAt":       `"9999-12-31T23:59:59+00:00"`,
		"EnqueuedTimeUtc": `"2025-03-04T05:06:07"`,
		"EnqueuedTime":    `"2025-03-04T05:06:07+00:00"`,
		"MessageActions":  `{"SessionLockedUntil":"2025-03-04T05:07:07.5+00:00"}`,
		"ReceiveActions":  `{}`,
		"Client":          `{"FullyQualifiedNamespace":"ns","IsClosed":false,"TransportType":0,"Identifier":"ns-1"}`,
		"sys":             `{"MethodName":"Subscriber","UtcNow":"2025-03-04T05:06:07.1234567Z","RandGuid":"r"}`,
		"ApplicationProperties": `{"b":true,"bytes":"aGk=","f":1.5,"f2":2.0,"i32":-7,"i64":9007199254740992,"nil":null,` +
			`"s":"id \"quoted\" \\ back\tslash é \u2028 <&>","ts":"2025-03-04T05:06:07.1234567Z","u8":200}`,
	} {
		if string(md[key]) != want {
			t.Errorf("%s = %s, want %s", key, md[key], want)
		}
	}
	if string(md["UserProperties"]) != string(md["ApplicationProperties"]) {
		t.Errorf("UserProperties differs from ApplicationProperties")
	}
	wantKeys := []string{"MessageReceiver", "MessageSession", "MessageActions", "SessionActions", "ReceiveActions", "Client",
		"DeliveryCount", "LockToken", "ExpiresAtUtc", "ExpiresAt", "EnqueuedTimeUtc", "EnqueuedTime", "MessageId",
		"SequenceNumber", "CorrelationId", "ApplicationProperties", "UserProperties", "SessionId", "sys"}
	if keys := metadataKeys(t, env); strings.Join(keys, ",") != strings.Join(wantKeys, ",") {
		t.Errorf("Metadata keys (null ones omitted)\n got %v\nwant %v", keys, wantKeys)
	}

	// Without a session lock the action objects are empty.
	trigger.SessionLockedUntil = time.Time{}
	env, _ = BuildServiceBusInvocation("message", trigger, Sys{})
	if !bytes.Contains(env, []byte(`"MessageReceiver":{},"MessageSession":{},"MessageActions":{},"SessionActions":{},"ReceiveActions":{}`)) {
		t.Errorf("non-session actions: %s", env)
	}

	trigger.ApplicationProperties = []Property{{Name: "x", Value: struct{}{}}}
	if _, err := BuildServiceBusInvocation("message", trigger, Sys{}); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("unsupported property type: err = %v", err)
	}
}

func TestTriggerFromMessage(t *testing.T) {
	enq := at("2025-01-15T10:20:05.5Z")
	m := &azservicebus.ReceivedMessage{
		Body:                  []byte("b"),
		MessageID:             "m-1",
		SessionID:             ptr("s"),
		DeliveryCount:         2,
		LockToken:             [16]byte{0x5e, 0x3d, 0x6a, 0x39, 0x8f, 0x6c, 0x4f, 0x55, 0x9c, 0x0e, 0x0d, 0x2a, 0x1f, 0x4b, 0x7c, 0x11},
		SequenceNumber:        ptr(int64(41)),
		EnqueuedTime:          &enq,
		TimeToLive:            ptr(time.Duration(0)),
		ApplicationProperties: map[string]any{"z": "last", "a": int32(1), "m": nil},
	}
	lockedUntil := enq.Add(time.Minute)
	tr := TriggerFromMessage(m, lockedUntil, "ns", "id")
	if tr.LockToken != "5e3d6a39-8f6c-4f55-9c0e-0d2a1f4b7c11" {
		t.Errorf("LockToken = %s", tr.LockToken)
	}
	if !tr.ExpiresAt.Equal(maxDateTimeOffset) {
		t.Errorf("unlimited TTL: ExpiresAt = %v", tr.ExpiresAt)
	}
	if tr.DeliveryCount != 2 || tr.SequenceNumber != 41 || !tr.EnqueuedTime.Equal(enq) || *tr.SessionID != "s" || !tr.SessionLockedUntil.Equal(lockedUntil) {
		t.Errorf("trigger = %+v", tr)
	}
	var names []string
	for _, p := range tr.ApplicationProperties {
		names = append(names, p.Name)
	}
	if strings.Join(names, ",") != "a,m,z" {
		t.Errorf("property order %v, want sorted", names)
	}
	m.TimeToLive = ptr(time.Hour)
	if tr := TriggerFromMessage(m, lockedUntil, "ns", "id"); !tr.ExpiresAt.Equal(enq.Add(time.Hour)) {
		t.Errorf("ExpiresAt = %v, want enqueued + TTL", tr.ExpiresAt)
	}
}
