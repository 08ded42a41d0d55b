package funchost

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/funchost/funchosttest"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
)

func TestDecodeServiceBusReplayFixtures(t *testing.T) {
	wantBody := `{"orderId":"A-1001","amount":42.5,"customer":{"id":7},"lines":[1,2]}`
	for _, name := range []string{"sb_session_binary.json", "sb_session_string.json"} {
		t.Run(name, func(t *testing.T) {
			m, err := DecodeServiceBus(funchosttest.HostFixture(t, name), "message")
			if err != nil {
				t.Fatal(err)
			}
			if string(m.Body) != wantBody {
				t.Errorf("Body = %q, want %q", m.Body, wantBody)
			}
			checkStr(t, "MessageID", m.MessageID, "7c9e6679-7425-40de-944b-e07fc1f90ae7")
			checkStr(t, "SessionID", m.SessionID, "order-A-1001")
			checkStr(t, "CorrelationID", m.CorrelationID, "corr-77")
			if m.ContentType != "application/json" || m.Subject != "OrderCreated" {
				t.Errorf("ContentType, Subject = %q, %q", m.ContentType, m.Subject)
			}
			if m.DeliveryCount != 1 || m.SequenceNumber != 41 {
				t.Errorf("DeliveryCount, SequenceNumber = %d, %d", m.DeliveryCount, m.SequenceNumber)
			}
			if want := time.Date(2025, 1, 15, 10, 20, 5, 0, time.UTC); !m.EnqueuedTime.Equal(want) {
				t.Errorf("EnqueuedTime = %v, want %v", m.EnqueuedTime, want)
			}
			if m.ApplicationProperties["eventType"] != "OrderCreated" || m.ApplicationProperties["schemaVersion"] != json.Number("2") {
				t.Errorf("ApplicationProperties = %#v", m.ApplicationProperties)
			}
		})
	}
}

func TestDecodeTimerReplayFixture(t *testing.T) {
	info, err := DecodeTimer(funchosttest.HostFixture(t, "timer.json"), "timer")
	if err != nil {
		t.Fatal(err)
	}
	if info.IsPastDue || !info.Next.Equal(time.Date(2025, 1, 15, 10, 20, 0, 0, time.UTC)) {
		t.Errorf("timer = %+v", info)
	}
	if !info.UtcNow.Equal(time.Date(2025, 1, 15, 10, 20, 0, 15678900, time.UTC)) {
		t.Errorf("UtcNow = %v", info.UtcNow)
	}
}

// nimbusEnvelope builds a host envelope carrying a NimBus EventRequest.
func nimbusEnvelope(stringData bool) []byte {
	body := `{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1\",\"Note\":\"<a&b> \\\"q\\\" ünï 😀\"}"},"ErrorContent":null}`
	return hostwire.ServiceBus(hostwire.ServiceBusMessage{
		FunctionName:   "Subscriber",
		StringData:     stringData,
		Body:           []byte(body),
		MessageID:      `OrderPlaced-"quoted"\id`,
		SessionID:      hostwire.S("customer-1"),
		CorrelationID:  hostwire.S("corr-1"),
		DeliveryCount:  3,
		SequenceNumber: 1 << 40,
		EnqueuedTime:   time.Date(2026, 11, 30, 8, 0, 1, 0, time.UTC),
		Properties: hostwire.Props(
			"To", "BillingEndpoint", "From", "ShopEndpoint", "MessageType", "EventRequest",
			"EventId", "evt-1", "EventTypeId", "OrderPlaced", "OriginatingMessageId", "self",
			"ParentMessageId", "self", "RetryCount", int32(0), "OriginatingFrom", "ShopEndpoint",
			"Nothing", nil, "Flag", true, "Big", int64(1)<<40),
		Namespace: "sb-test.servicebus.windows.net",
		UtcNow:    time.Date(2026, 11, 30, 8, 0, 2, 0, time.UTC),
		RandGUID:  "00000000-0000-0000-0000-000000000001",
	})
}

func TestDecodeServiceBusNimBusProperties(t *testing.T) {
	for _, stringData := range []bool{false, true} {
		m, err := DecodeServiceBus(nimbusEnvelope(stringData), "message")
		if err != nil {
			t.Fatalf("stringData=%v: %v", stringData, err)
		}
		checkStr(t, "MessageID", m.MessageID, `OrderPlaced-"quoted"\id`)
		if !strings.Contains(string(m.Body), `ünï 😀`) || !strings.HasPrefix(string(m.Body), `{"EventContent"`) {
			t.Errorf("stringData=%v: body = %s", stringData, m.Body)
		}
		p := m.ApplicationProperties
		if p["To"] != "BillingEndpoint" || p["MessageType"] != "EventRequest" || p["RetryCount"] != json.Number("0") {
			t.Errorf("properties = %#v", p)
		}
		if v, ok := p["Nothing"]; !ok || v != nil {
			t.Errorf("null property: %#v, %v", v, ok)
		}
		if p["Flag"] != true || p["Big"] != json.Number("1099511627776") {
			t.Errorf("Flag, Big = %#v, %#v", p["Flag"], p["Big"])
		}
		if m.DeliveryCount != 3 || m.SequenceNumber != 1<<40 {
			t.Errorf("DeliveryCount, SequenceNumber = %d, %d", m.DeliveryCount, m.SequenceNumber)
		}
	}
}

func TestDecodeServiceBusAbsentValues(t *testing.T) {
	env := hostwire.ServiceBus(hostwire.ServiceBusMessage{FunctionName: "Subscriber", Body: nil, DeliveryCount: 1})
	m, err := DecodeServiceBus(env, "message")
	if err != nil {
		t.Fatal(err)
	}
	if m.MessageID != nil || m.SessionID != nil || m.CorrelationID != nil {
		t.Errorf("absent ids decoded as %v %v %v", m.MessageID, m.SessionID, m.CorrelationID)
	}
	if len(m.Body) != 0 || m.ApplicationProperties == nil {
		t.Errorf("body %q, props %v", m.Body, m.ApplicationProperties)
	}
	// An empty (but present) message id stays distinguishable from absent.
	env = hostwire.ServiceBus(hostwire.ServiceBusMessage{FunctionName: "Subscriber", Body: []byte("x")})
	env = []byte(strings.Replace(string(env), `"SequenceNumber"`, `"MessageId":"\"\"","SequenceNumber"`, 1))
	m, err = DecodeServiceBus(env, "message")
	if err != nil {
		t.Fatal(err)
	}
	checkStr(t, "MessageID", m.MessageID, "")
}

func TestDecodeServiceBusMalformed(t *testing.T) {
	good := string(funchosttest.HostFixture(t, "sb_session_binary.json"))
	cases := map[string]string{
		"not json":             `{"Data":`,
		"array":                `[1,2]`,
		"no data":              `{"Metadata":{}}`,
		"two bindings":         `{"Data":{"a":"eA==","b":"eA=="},"Metadata":{}}`,
		"object trigger value": `{"Data":{"message":{"x":1}},"Metadata":{}}`,
		"bad base64":           `{"Data":{"message":"@@@"},"Metadata":{}}`,
		"bad delivery count":   strings.Replace(good, `"DeliveryCount":"1"`, `"DeliveryCount":"one"`, 1),
		"negative delivery":    strings.Replace(good, `"DeliveryCount":"1"`, `"DeliveryCount":"-4"`, 1),
		"message id number":    strings.Replace(good, `"MessageId":"\"7c9e6679-7425-40de-944b-e07fc1f90ae7\""`, `"MessageId":7`, 1),
		"bad date":             strings.Replace(good, `"EnqueuedTimeUtc":"2025-01-15T10:20:05"`, `"EnqueuedTimeUtc":"yesterday"`, 1),
		"properties array":     strings.Replace(good, `"ApplicationProperties":{"eventType":"OrderCreated","schemaVersion":2}`, `"ApplicationProperties":[1]`, 1),
		"number envelope":      `98765`,
		"number data":          `{"Data":98765,"Metadata":{"Subject":"\"OrderCreated\""}}`,
		"number metadata":      `{"Data":{"message":"eA=="},"Metadata":98765}`,
		"bad character":        `{"Data":{"message":"eA=="},"Metadata":{"MessageId":OrderCreated}}`,
	}
	for name, env := range cases {
		_, err := DecodeServiceBus([]byte(env), "message")
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
		if err != nil && (strings.Contains(err.Error(), "OrderCreated") || strings.Contains(err.Error(), "98765")) {
			t.Errorf("%s: error text leaks envelope content: %v", name, err)
		}
	}
}

// TestDecodeServiceBusEdgeCases pins encoding/json's reading of the
// envelope: case-insensitive member names (with its folding), the last
// duplicate wins, Data objects merge and null resets them, Metadata null is
// empty, a single-encoded Metadata string is accepted, trailing bytes (a
// NUL too) are refused.
func TestDecodeServiceBusEdgeCases(t *testing.T) {
	type want struct {
		body, id      string // id "-" is absent
		deliveryCount int
		props         map[string]any
	}
	ok := func(body, id string) *want { return &want{body: body, id: id, props: map[string]any{}} }
	cases := []struct {
		env  string
		want *want // nil: malformed
	}{
		{`null`, nil}, {`[]`, nil}, {`"x"`, nil}, {`12`, nil}, {`{}`, nil}, {`{"Data":null}`, nil}, {`{"Data":{}}`, nil}, {`{"Data":5}`, nil},
		{`{"Data":{"message":"eA=="}}`, ok("x", "-")},
		{`{"data":{"message":"eA=="},"metadata":{"messageid":"\"m\""}}`, ok("x", "m")},
		{`{"D\u0061ta":{"message":"eA=="},"Metadata":{"MessageId":"\"a\\u00e9\""}}`, ok("x", "aé")},
		{`{"Data":{"message":"eA=="},"Metadata":{"Me\u017fsageId":"\"kelvin\""}}`, ok("x", "kelvin")},
		{`{"Data":{"message":"eA==","message":"eQ=="}}`, ok("y", "-")},
		{`{"Data":{"a":"eA=="},"Data":{"b":"eQ=="}}`, nil},
		{`{"Data":{"a":"eA=="},"Data":null,"Data":{"b":"eQ=="}}`, ok("y", "-")},
		{`{"Data":{"message":"eA=="},"Metadata":null}`, ok("x", "-")},
		{`{"Data":{"message":"eA=="},"Metadata":[]}`, nil},
		{`{"Data":{"message":"eA=="},"Metadata":7}`, nil},
		{`{"Data":{"message":"eA=="},"Metadata":{"MessageId":"\"a\"","MessageId":"\"b\""}}`, ok("x", "b")},
		{`{"Data":{"message":"eA=="},"Metadata":{"MessageId":"plain"}}`, ok("x", "plain")},
		{"{\"Data\":{\"message\":\"eA==\"},\"Metadata\":{\"MessageId\":\"\\\"\xff\\\"\"}}", ok("x", "\ufffd")},
		{`{"Data":{"message":"eA=="},"Metadata":{"ApplicationProperties":{"a":1,"a":"x","n":null,"t":true,"o":{"x":[1,2.5e3]},"s":"\ud83d\ude00","bad":"\ud800"}}}`,
			&want{body: "x", id: "-", props: map[string]any{"a": "x", "n": nil, "t": true, "o": map[string]any{"x": []any{json.Number("1"), json.Number("2.5e3")}}, "s": "😀", "bad": "\ufffd"}}},
		{`{"Data":{"message":"eA=="},"Metadata":{"DeliveryCount":"007","SequenceNumber":"99999999999999999999"}}`, nil},
		{`{"Data":{"message":"eA=="},"Metadata":{"DeliveryCount":3,"SequenceNumber":"-1"}}`, &want{body: "x", id: "-", deliveryCount: 3, props: map[string]any{}}},
		{`{"Data":{"message":"eA=="}} x`, nil}, {`{"Data":{"message":"eA=="},}`, nil}, {`{"Data":{"message":"eA=="}`, nil},
		{`{"Data":{"message":"e\u0041=="}}`, ok("x", "-")},
		{`{"Data":{"message":"\"\\\"x\\\"\""}}`, ok(`"x"`, "-")},
		{`{"Data":{"message":-0.5e+3}}`, nil}, {`{"Data":{"message":01}}`, nil}, {`{"Data":{"message":tru}}`, nil},
		{"{\"Data\":{\"message\":\"eA==\"}}\x00", nil},
		{"{\"Data\":{\"message\":\"eA==\"},\"Metadata\":{\"ApplicationProperties\":{}\x00}}", nil},
	}
	for _, c := range cases {
		m, err := DecodeServiceBus([]byte(c.env), "message")
		if c.want == nil {
			var me *MalformedError
			if !errors.As(err, &me) {
				t.Errorf("%q: err = %v, want a *MalformedError", c.env, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.env, err)
			continue
		}
		id := "-"
		if m.MessageID != nil {
			id = *m.MessageID
		}
		if string(m.Body) != c.want.body || id != c.want.id || m.DeliveryCount != c.want.deliveryCount || !reflect.DeepEqual(m.ApplicationProperties, c.want.props) {
			t.Errorf("%q: body %q, MessageId %q, DeliveryCount %d, properties %#v; want %+v", c.env, m.Body, id, m.DeliveryCount, m.ApplicationProperties, *c.want)
		}
	}
}

func TestDecodeServiceBusDates(t *testing.T) {
	env := `{"Data":{"message":"eA=="},"Metadata":{"EnqueuedTimeUtc":"2025-01-15T10:20:05","EnqueuedTime":"2025-01-15T10:20:05+01:00"}}`
	m, err := DecodeServiceBus([]byte(env), "message")
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2025, 1, 15, 10, 20, 5, 0, time.UTC); !m.EnqueuedTime.Equal(want) || m.EnqueuedTime.Location() != time.UTC {
		t.Errorf("EnqueuedTimeUtc wins: %v, want %v", m.EnqueuedTime, want)
	}
	m, err = DecodeServiceBus([]byte(`{"Data":{"message":"eA=="},"Metadata":{"EnqueuedTime":"2025-01-15T10:20:05+01:00"}}`), "message")
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2025, 1, 15, 9, 20, 5, 0, time.UTC); !m.EnqueuedTime.Equal(want) || m.EnqueuedTime.Location() != time.UTC {
		t.Errorf("EnqueuedTime with offset: %v, want %v", m.EnqueuedTime, want)
	}
}

func TestMalformedErrorTextNamesTheProblem(t *testing.T) {
	for env, want := range map[string]string{
		`98765`:                      "(the envelope is a JSON number)",
		`{"Data":98765}`:             "(Data is a JSON number)",
		`{"Data":{},"Metadata":[1]}`: "(Metadata is a JSON array)",
		`{"Data":{"m":x}}`:           "(syntax error at offset 14)",
	} {
		_, err := DecodeServiceBus([]byte(env), "message")
		if err == nil || !strings.HasSuffix(err.Error(), want) {
			t.Errorf("%s: err = %v, want it to end in %q", env, err, want)
		}
	}
}

func TestDecodeServiceBusOtherBindingName(t *testing.T) {
	env := hostwire.ServiceBus(hostwire.ServiceBusMessage{Binding: "msg", Body: []byte("hello"), MessageID: "m"})
	m, err := DecodeServiceBus(env, "message")
	if err != nil || string(m.Body) != "hello" {
		t.Fatalf("single binding of another name: %q, %v", m.Body, err)
	}
}

func checkStr(t *testing.T, name string, got *string, want string) {
	t.Helper()
	if got == nil || *got != want {
		t.Errorf("%s = %v, want %q", name, got, want)
	}
}

func FuzzDecodeServiceBus(f *testing.F) {
	f.Add(funchosttest.HostFixture(f, "sb_session_binary.json"))
	f.Add(funchosttest.HostFixture(f, "sb_session_string.json"))
	f.Add(nimbusEnvelope(false))
	f.Add(nimbusEnvelope(true))
	f.Add([]byte(`{"Data":{"message":null},"Metadata":{"MessageId":"\"\\\"\""}}`))
	f.Fuzz(func(t *testing.T, env []byte) {
		m, err := DecodeServiceBus(env, "message")
		if err != nil {
			var me *MalformedError
			if m != nil || !errors.As(err, &me) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("DecodeServiceBus = %v, %v; want nil and a *MalformedError", m, err)
			}
			return
		}
		if m.ApplicationProperties == nil {
			t.Fatal("nil ApplicationProperties on success")
		}
		if m.DeliveryCount < 0 {
			t.Fatal("negative DeliveryCount")
		}
	})
}
