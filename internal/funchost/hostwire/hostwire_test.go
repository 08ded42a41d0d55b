package hostwire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/funchost/funchosttest"
)

func fixtureMessage(stringData bool) ServiceBusMessage {
	return ServiceBusMessage{
		FunctionName:       "OrderEvents",
		StringData:         stringData,
		Body:               []byte(`{"orderId":"A-1001","amount":42.5,"customer":{"id":7},"lines":[1,2]}`),
		MessageID:          "7c9e6679-7425-40de-944b-e07fc1f90ae7",
		SessionID:          S("order-A-1001"),
		CorrelationID:      S("corr-77"),
		ContentType:        S("application/json"),
		Subject:            S("OrderCreated"),
		LockToken:          "5e3d6a39-8f6c-4f55-9c0e-0d2a1f4b7c11",
		DeliveryCount:      1,
		SequenceNumber:     41,
		EnqueuedTime:       time.Date(2025, 1, 15, 10, 20, 5, 0, time.UTC),
		ExpiresAt:          time.Date(2025, 1, 29, 10, 20, 5, 0, time.UTC),
		SessionLockedUntil: time.Date(2025, 1, 15, 10, 21, 5, 123e6, time.UTC),
		Properties:         Props("eventType", "OrderCreated", "schemaVersion", 2),
		Namespace:          "sb-demo.servicebus.windows.net",
		UtcNow:             time.Date(2025, 1, 15, 10, 20, 5, 456789100, time.UTC),
		RandGUID:           "0f8fad5b-d9cb-469f-a165-70867728950e",
	}
}

func TestServiceBusMatchesHostFixtures(t *testing.T) {
	for name, stringData := range map[string]bool{"sb_session_binary.json": false, "sb_session_string.json": true} {
		t.Run(name, func(t *testing.T) {
			got := ServiceBus(fixtureMessage(stringData))
			want := funchosttest.HostFixture(t, name)
			if !bytes.Equal(got, want) {
				t.Fatalf("envelope differs from the host fixture\n got: %s\nwant: %s", got, want)
			}
		})
	}
}

func TestTimerMatchesHostFixture(t *testing.T) {
	got := BuildTimer(Timer{
		FunctionName: "Reconcile",
		Binding:      "myTimer",
		Last:         time.Date(2025, 1, 15, 10, 15, 0, 6123400, time.UTC),
		Next:         time.Date(2025, 1, 15, 10, 20, 0, 0, time.UTC),
		LastUpdated:  time.Date(2025, 1, 15, 10, 15, 0, 6123400, time.UTC),
		UtcNow:       time.Date(2025, 1, 15, 10, 20, 0, 15678900, time.UTC),
		RandGUID:     "b3c2a1d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
	})
	if want := funchosttest.HostFixture(t, "timer.json"); !bytes.Equal(got, want) {
		t.Fatalf("timer envelope differs from the host fixture\n got: %s\nwant: %s", got, want)
	}
}

func TestTimerFirstRunAndNoMonitor(t *testing.T) {
	now := time.Date(2025, 1, 15, 10, 20, 0, 0, time.UTC)
	first := string(BuildTimer(Timer{FunctionName: "InboxCleanup", Next: now, IsPastDue: true, UtcNow: now, RandGUID: "g"}))
	want := `{"Data":{"timer":{"Schedule":{"AdjustForDST":true},"ScheduleStatus":{"Last":"0001-01-01T00:00:00+00:00","Next":"2025-01-15T10:20:00+00:00","LastUpdated":"0001-01-01T00:00:00+00:00"},"IsPastDue":true}},"Metadata":{"sys":{"MethodName":"InboxCleanup","UtcNow":"2025-01-15T10:20:00Z","RandGuid":"g"}}}`
	if first != want {
		t.Errorf("first run\n got %s\nwant %s", first, want)
	}
	noMonitor := string(BuildTimer(Timer{FunctionName: "InboxCleanup", NoMonitor: true, UtcNow: now, RandGUID: "g"}))
	if !strings.Contains(noMonitor, `"ScheduleStatus":null,"IsPastDue":false`) || !json.Valid([]byte(noMonitor)) {
		t.Errorf("no monitor: %s", noMonitor)
	}
}

func TestServiceBusConventions(t *testing.T) {
	body := []byte{0x00, 0xff, 0xfe, '{', '"', '}', 0x80}
	tricky := "id \"quoted\" \\ back\tslash é \u2028 <&>"
	stamp := time.Date(2025, 3, 4, 5, 6, 7, 123456700, time.UTC)
	msg := ServiceBusMessage{
		FunctionName: "Subscriber", UtcNow: stamp, RandGUID: "r", Body: body,
		SessionLockedUntil: time.Date(2025, 3, 4, 5, 7, 7, 5e8, time.UTC), Namespace: "ns", ClientID: "ns-1",
		DeliveryCount: 3, LockToken: "00000000-0000-0000-0000-000000000001", EnqueuedTime: stamp,
		MessageID: tricky, SequenceNumber: 1 << 40, CorrelationID: S(""),
		Properties: []Property{
			{Name: "b", Value: true}, {Name: "bytes", Value: []byte("hi")}, {Name: "f", Value: 1.5}, {Name: "f2", Value: 2.0}, {Name: "i32", Value: int32(-7)},
			{Name: "i64", Value: int64(1) << 53}, {Name: "nil", Value: nil}, {Name: "s", Value: tricky}, {Name: "ts", Value: stamp}, {Name: "u8", Value: uint8(200)},
		},
		SessionID: S("s-1"),
	}
	env, err := Build(msg)
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
	if s := funchosttest.DecodeTwice(t, md["MessageId"]); s != tricky {
		t.Errorf("MessageId round trip = %q", s)
	}
	if s := funchosttest.DecodeTwice(t, md["CorrelationId"]); s != "" {
		t.Errorf("an empty CorrelationId is a value, not null: %q", s)
	}
	if s := funchosttest.DecodeTwice(t, md["LockToken"]); s != msg.LockToken {
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
	if keys := funchosttest.MetadataKeys(t, env); strings.Join(keys, ",") != strings.Join(wantKeys, ",") {
		t.Errorf("Metadata keys (null ones omitted)\n got %v\nwant %v", keys, wantKeys)
	}

	// Without a session lock the action objects are empty.
	msg.SessionLockedUntil = time.Time{}
	env, _ = Build(msg)
	if !bytes.Contains(env, []byte(`"MessageReceiver":{},"MessageSession":{},"MessageActions":{},"SessionActions":{},"ReceiveActions":{}`)) {
		t.Errorf("non-session actions: %s", env)
	}

	msg.Properties = []Property{{Name: "x", Value: struct{}{}}}
	if _, err := Build(msg); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("unsupported property type: err = %v", err)
	}
}
