// Package hostsim builds invocation envelopes exactly as the Azure Functions
// host does for a custom handler (research/functions.md §1–2), for replay
// tests, benchmarks, the local demo and the test mini host. Its output is
// checked byte for byte against the research fixtures.
package hostsim

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"
)

// Property is one application property, in wire order. Value keeps its JSON
// type (string, int, int32, int64, float64, bool, nil).
type Property struct {
	Name  string
	Value any
}

// ServiceBusMessage describes one Service Bus trigger invocation
// (cardinality one, sessions on). Empty strings are omitted, as the host
// omits null values.
type ServiceBusMessage struct {
	FunctionName string
	// Binding is the trigger's binding name; default "message".
	Binding string
	// StringData selects the default "string" data type (the body text is
	// JSON-encoded twice and a JSON-object body is merged into Metadata)
	// instead of "dataType":"binary" (base64).
	StringData bool

	Body           []byte
	MessageID      string
	SessionID      string
	CorrelationID  string
	ContentType    string
	Subject        string
	ReplyTo        string
	To             string
	LockToken      string
	DeliveryCount  int
	SequenceNumber int64
	EnqueuedTime   time.Time
	// ExpiresAt zero means no TTL (9999-12-31T23:59:59).
	ExpiresAt          time.Time
	SessionLockedUntil time.Time
	Properties         []Property

	Namespace string
	ClientID  string // the Client.Identifier; omitted when empty
	UtcNow    time.Time
	RandGUID  string
}

var maxTime = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// ServiceBus returns the envelope the host POSTs for m.
func ServiceBus(m ServiceBusMessage) []byte {
	binding := m.Binding
	if binding == "" {
		binding = "message"
	}
	var b bytes.Buffer
	b.WriteString(`{"Data":{`)
	writeJSON(&b, binding)
	b.WriteByte(':')
	if m.StringData {
		writeJSON(&b, jsonText(string(m.Body)))
	} else {
		writeJSON(&b, base64.StdEncoding.EncodeToString(m.Body))
	}
	b.WriteString(`},"Metadata":{`)

	md := &metadata{}
	actions := json.RawMessage(`{"SessionLockedUntil":` + jsonText(dateTimeOffset(m.SessionLockedUntil)) + `}`)
	md.raw("MessageReceiver", actions)
	md.raw("MessageSession", actions)
	md.raw("MessageActions", actions)
	md.raw("SessionActions", actions)
	md.raw("ReceiveActions", json.RawMessage(`{}`))
	client := `{"FullyQualifiedNamespace":` + jsonText(m.Namespace) + `,"IsClosed":false,"TransportType":0`
	if m.ClientID != "" {
		client += `,"Identifier":` + jsonText(m.ClientID)
	}
	md.raw("Client", json.RawMessage(client+"}"))
	md.str("DeliveryCount", jsonText(m.DeliveryCount))
	md.optString("LockToken", m.LockToken)
	exp := m.ExpiresAt
	if exp.IsZero() {
		exp = maxTime
	}
	md.str("ExpiresAtUtc", dateTime(exp))
	md.str("ExpiresAt", dateTimeOffsetSeconds(exp))
	md.str("EnqueuedTimeUtc", dateTime(m.EnqueuedTime))
	md.str("EnqueuedTime", dateTimeOffsetSeconds(m.EnqueuedTime))
	md.optString("MessageId", m.MessageID)
	md.optString("ContentType", m.ContentType)
	md.optString("ReplyTo", m.ReplyTo)
	md.str("SequenceNumber", jsonText(m.SequenceNumber))
	md.optString("To", m.To)
	md.optString("Subject", m.Subject)
	md.optString("Label", m.Subject)
	md.optString("CorrelationId", m.CorrelationID)
	props := propertiesJSON(m.Properties)
	md.raw("ApplicationProperties", props)
	md.raw("UserProperties", props)
	md.optString("SessionId", m.SessionID)
	md.raw("sys", json.RawMessage(`{"MethodName":`+jsonText(m.FunctionName)+`,"UtcNow":`+jsonText(utcDateTime(m.UtcNow))+`,"RandGuid":`+jsonText(m.RandGUID)+`}`))
	if m.StringData {
		md.mergeBody(m.Body)
	}
	md.write(&b)
	b.WriteString(`}}`)
	return b.Bytes()
}

// Timer describes a timer trigger invocation.
type Timer struct {
	FunctionName string
	// Binding is the trigger's binding name; default "timer".
	Binding     string
	Last        time.Time
	Next        time.Time
	LastUpdated time.Time
	IsPastDue   bool
	// NoMonitor sends "ScheduleStatus": null (useMonitor off).
	NoMonitor bool
	UtcNow    time.Time
	RandGUID  string
}

// TimerEnvelope returns the envelope the host POSTs for t.
func TimerEnvelope(t Timer) []byte {
	binding := t.Binding
	if binding == "" {
		binding = "timer"
	}
	var b bytes.Buffer
	b.WriteString(`{"Data":{`)
	writeJSON(&b, binding)
	b.WriteString(`:{"Schedule":{"AdjustForDST":true},"ScheduleStatus":`)
	if t.NoMonitor {
		b.WriteString("null")
	} else {
		b.WriteString(`{"Last":` + jsonText(localDateTime(t.Last)) + `,"Next":` + jsonText(localDateTime(t.Next)) +
			`,"LastUpdated":` + jsonText(localDateTime(t.LastUpdated)) + `}`)
	}
	b.WriteString(`,"IsPastDue":`)
	b.WriteString(jsonText(t.IsPastDue))
	b.WriteString(`}},"Metadata":{"sys":{"MethodName":` + jsonText(t.FunctionName) + `,"UtcNow":` +
		jsonText(utcDateTime(t.UtcNow)) + `,"RandGuid":` + jsonText(t.RandGUID) + `}}}`)
	return b.Bytes()
}

// metadata keeps keys in insertion order with case-insensitive replacement,
// like the host's binding-data dictionary.
type metadata struct {
	keys []string
	vals []json.RawMessage
}

func (m *metadata) raw(k string, v json.RawMessage) {
	for i, old := range m.keys {
		if strings.EqualFold(old, k) {
			m.vals[i] = v
			return
		}
	}
	m.keys = append(m.keys, k)
	m.vals = append(m.vals, v)
}

// str adds a value the host serialized to JSON text (a .NET string), which
// is then written as a JSON string.
func (m *metadata) str(k, text string) { m.raw(k, json.RawMessage(jsonText(text))) }

// optString adds a .NET string value: JSON-encoded, then sent as a string.
func (m *metadata) optString(k, v string) {
	if v != "" {
		m.str(k, jsonText(v))
	}
}

// mergeBody copies a JSON-object body's top-level non-array, non-null
// properties into the metadata, as WorkerFunctionInvoker.TransformInput
// does for a string trigger value.
func (m *metadata) mergeBody(body []byte) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return
	}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return
		}
		k := kt.(string)
		switch t := bytes.TrimSpace(v); {
		case len(t) == 0 || t[0] == '[' || string(t) == "null":
		case t[0] == '{':
			m.raw(k, t)
		case t[0] == '"':
			var s string
			_ = json.Unmarshal(t, &s)
			m.optString(k, s)
		case string(t) == "true":
			m.optString(k, "True")
		case string(t) == "false":
			m.optString(k, "False")
		default:
			m.optString(k, string(t))
		}
	}
}

func (m *metadata) write(b *bytes.Buffer) {
	for i, k := range m.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSON(b, k)
		b.WriteByte(':')
		b.Write(m.vals[i])
	}
}

func propertiesJSON(props []Property) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, p := range props {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSON(&b, p.Name)
		b.WriteByte(':')
		writeJSON(&b, p.Value)
	}
	b.WriteByte('}')
	return b.Bytes()
}

func writeJSON(b *bytes.Buffer, v any) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	b.Truncate(b.Len() - 1) // Encode appends a newline
}

func jsonText(v any) string {
	var b bytes.Buffer
	writeJSON(&b, v)
	return b.String()
}

// dateTime is the host's DateTime form: seconds, no offset.
func dateTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05") }

// dateTimeOffsetSeconds is the host's DateTimeOffset form: seconds, +00:00.
func dateTimeOffsetSeconds(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05") + "+00:00"
}

// dateTimeOffset is Newtonsoft's DateTimeOffset form inside an object:
// trimmed 7-digit fraction and +00:00.
func dateTimeOffset(t time.Time) string {
	return t.UTC().Truncate(100*time.Nanosecond).Format("2006-01-02T15:04:05.9999999") + "+00:00"
}

// localDateTime is a Kind=Local DateTime on a UTC machine.
func localDateTime(t time.Time) string { return dateTimeOffset(t) }

// utcDateTime is a Kind=Utc DateTime: trimmed fraction and Z.
func utcDateTime(t time.Time) string {
	return t.UTC().Truncate(100*time.Nanosecond).Format("2006-01-02T15:04:05.9999999") + "Z"
}

// Props builds properties from name, value pairs, in order.
func Props(nameValues ...any) []Property {
	out := make([]Property, 0, len(nameValues)/2)
	for i := 0; i+1 < len(nameValues); i += 2 {
		out = append(out, Property{Name: nameValues[i].(string), Value: nameValues[i+1]})
	}
	return out
}
