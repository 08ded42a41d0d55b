// Package hostwire builds invocation envelopes exactly as the Azure
// Functions host does for a custom handler: for `nimbus-func invoke`, the
// local demo, replay tests, benchmarks and the test mini host. Its output is
// checked byte for byte against captured host fixtures
// (internal/funchost/testdata/host).
//
// The host POSTs {"Data":{<binding>:<trigger value>},"Metadata":{...}} and
// serializes with Newtonsoft.Json: Metadata string values are the JSON text
// of the .NET string sent as a JSON string (encoded twice), numbers arrive
// as strings, top-level dates keep whole seconds, objects (action objects,
// Client, ApplicationProperties, sys) are real JSON objects, and null values
// are left out. A Service Bus body is base64 with "dataType": "binary" and
// JSON-encoded twice with the default string data type.
package hostwire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/netjson"
)

// Property is one application property, in wire order. Value is the .NET
// value the Service Bus SDK decoded, given as its Go counterpart: string,
// bool, integers, floats, time.Time, []byte, a fmt.Stringer (a UUID), or nil.
type Property struct {
	Name  string
	Value any
}

// Props builds properties from name, value pairs, in order.
func Props(nameValues ...any) []Property {
	out := make([]Property, 0, len(nameValues)/2)
	for i := 0; i+1 < len(nameValues); i += 2 {
		out = append(out, Property{Name: nameValues[i].(string), Value: nameValues[i+1]})
	}
	return out
}

// ServiceBusMessage describes one Service Bus trigger invocation
// (cardinality one).
type ServiceBusMessage struct {
	FunctionName string
	// Binding is the trigger's binding name; default "message".
	Binding string
	// StringData selects the default "string" data type (the body text is
	// JSON-encoded twice and a JSON-object body is merged into Metadata)
	// instead of "dataType":"binary" (base64).
	StringData bool

	Body []byte
	// MessageID and LockToken are left out when empty.
	MessageID string
	LockToken string
	// Nil is the .NET null, left out; a pointer to "" is written.
	SessionID               *string
	CorrelationID           *string
	ContentType             *string
	Subject                 *string
	ReplyTo                 *string
	ReplyToSessionID        *string
	To                      *string
	PartitionKey            *string
	TransactionPartitionKey *string
	DeadLetterSource        *string
	DeliveryCount           int
	SequenceNumber          int64
	EnqueuedTime            time.Time
	// ExpiresAt zero means no time to live (9999-12-31T23:59:59).
	ExpiresAt time.Time
	// SessionLockedUntil is the session lock; zero means a trigger without
	// sessions, whose action objects are {}.
	SessionLockedUntil time.Time
	Properties         []Property

	// Namespace is Client.FullyQualifiedNamespace; ClientID is
	// Client.Identifier, written only when set.
	Namespace string
	ClientID  string
	UtcNow    time.Time
	RandGUID  string
}

var maxTime = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// Build returns the envelope the host POSTs for m. It fails only for an
// application property value the host could not have produced.
func Build(m ServiceBusMessage) ([]byte, error) {
	binding := m.Binding
	if binding == "" {
		binding = "message"
	}
	b := make([]byte, 0, 1024+len(m.Body)*4/3)
	b = append(b, `{"Data":{`...)
	b = netjson.AppendString(b, binding)
	b = append(b, ':')
	if m.StringData {
		b = netjson.AppendString(b, string(netjson.AppendString(nil, string(m.Body))))
	} else {
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, m.Body)
		b = append(b, '"')
	}
	b = append(b, `},"Metadata":{`...)

	md := &metadata{}
	actions := []byte("{}")
	if !m.SessionLockedUntil.IsZero() {
		actions = append([]byte(`{"SessionLockedUntil":`), netjson.AppendDateTime(nil, m.SessionLockedUntil, "+00:00")...)
		actions = append(actions, '}')
	}
	for _, k := range []string{"MessageReceiver", "MessageSession", "MessageActions", "SessionActions"} {
		md.raw(k, actions)
	}
	md.raw("ReceiveActions", []byte("{}"))
	client := append([]byte(`{"FullyQualifiedNamespace":`), netjson.AppendString(nil, m.Namespace)...)
	client = append(client, `,"IsClosed":false,"TransportType":0`...)
	if m.ClientID != "" {
		client = append(append(client, `,"Identifier":`...), netjson.AppendString(nil, m.ClientID)...)
	}
	md.raw("Client", append(client, '}'))
	md.text("DeliveryCount", strconv.Itoa(m.DeliveryCount))
	md.opt("DeadLetterSource", m.DeadLetterSource)
	md.str("LockToken", m.LockToken)
	exp := m.ExpiresAt
	if exp.IsZero() {
		exp = maxTime
	}
	md.text("ExpiresAtUtc", seconds(exp, ""))
	md.text("ExpiresAt", seconds(exp, "+00:00"))
	md.text("EnqueuedTimeUtc", seconds(m.EnqueuedTime, ""))
	md.text("EnqueuedTime", seconds(m.EnqueuedTime, "+00:00"))
	md.str("MessageId", m.MessageID)
	md.opt("ContentType", m.ContentType)
	md.opt("ReplyTo", m.ReplyTo)
	md.text("SequenceNumber", strconv.FormatInt(m.SequenceNumber, 10))
	md.opt("To", m.To)
	md.opt("Subject", m.Subject)
	md.opt("Label", m.Subject)
	md.opt("CorrelationId", m.CorrelationID)
	props := []byte{'{'}
	for i, p := range m.Properties {
		if i > 0 {
			props = append(props, ',')
		}
		props = netjson.AppendString(props, p.Name)
		props = append(props, ':')
		var err error
		if props, err = appendValue(props, p.Value); err != nil {
			return nil, fmt.Errorf("hostwire: application property %q: %w", p.Name, err)
		}
	}
	props = append(props, '}')
	md.raw("ApplicationProperties", props)
	md.raw("UserProperties", props)
	md.opt("SessionId", m.SessionID)
	md.opt("ReplyToSessionId", m.ReplyToSessionID)
	md.opt("PartitionKey", m.PartitionKey)
	md.opt("TransactionPartitionKey", m.TransactionPartitionKey)
	md.raw("sys", sys(m.FunctionName, m.UtcNow, m.RandGUID))
	if m.StringData {
		md.mergeBody(m.Body)
	}
	b = md.appendTo(b)
	return append(b, "}}"...), nil
}

// ServiceBus is Build for values known to be valid; it panics otherwise.
func ServiceBus(m ServiceBusMessage) []byte {
	b, err := Build(m)
	if err != nil {
		panic(err)
	}
	return b
}

// Timer describes a timer trigger invocation.
type Timer struct {
	FunctionName string
	// Binding is the trigger's binding name; default "timer".
	Binding string
	// Last, Next and LastUpdated are the schedule status; the zero time is
	// written as 0001-01-01T00:00:00+00:00 (first run).
	Last        time.Time
	Next        time.Time
	LastUpdated time.Time
	IsPastDue   bool
	// NoMonitor sends "ScheduleStatus": null (useMonitor off).
	NoMonitor bool
	UtcNow    time.Time
	RandGUID  string
}

// BuildTimer returns the envelope the host POSTs for t: Data.<binding>
// is TimerInfo as a JSON object, Metadata holds only sys.
func BuildTimer(t Timer) []byte {
	binding := t.Binding
	if binding == "" {
		binding = "timer"
	}
	b := append([]byte(`{"Data":{`), netjson.AppendString(nil, binding)...)
	b = append(b, `:{"Schedule":{"AdjustForDST":true},"ScheduleStatus":`...)
	if t.NoMonitor {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"Last":`...)
		b = netjson.AppendDateTime(b, t.Last, "+00:00")
		b = append(b, `,"Next":`...)
		b = netjson.AppendDateTime(b, t.Next, "+00:00")
		b = append(b, `,"LastUpdated":`...)
		b = netjson.AppendDateTime(b, t.LastUpdated, "+00:00")
		b = append(b, '}')
	}
	b = append(b, `,"IsPastDue":`...)
	b = strconv.AppendBool(b, t.IsPastDue)
	b = append(b, `}},"Metadata":{"sys":`...)
	b = append(b, sys(t.FunctionName, t.UtcNow, t.RandGUID)...)
	return append(b, "}}"...)
}

// sys is the WebJobs system binding data; UtcNow is a UTC DateTime inside an
// object, so it keeps its precision and Z.
func sys(method string, now time.Time, guid string) []byte {
	b := append([]byte(`{"MethodName":`), netjson.AppendString(nil, method)...)
	b = append(b, `,"UtcNow":`...)
	b = netjson.AppendDateTime(b, now, "Z")
	b = append(b, `,"RandGuid":`...)
	b = netjson.AppendString(b, guid)
	return append(b, '}')
}

// seconds is the host's top-level DateTime (offset "") or DateTimeOffset
// ("+00:00") text: it round-trips through ToString/Parse, keeping whole
// seconds.
func seconds(t time.Time, offset string) string {
	return t.UTC().Format("2006-01-02T15:04:05") + offset
}

// metadata keeps keys in insertion order with case-insensitive replacement,
// like the host's binding-data dictionary.
type metadata struct {
	keys []string
	vals [][]byte
}

func (m *metadata) raw(k string, v []byte) {
	for i, old := range m.keys {
		if strings.EqualFold(old, k) {
			m.vals[i] = v
			return
		}
	}
	m.keys = append(m.keys, k)
	m.vals = append(m.vals, v)
}

// text adds a value the host turned into JSON text (a number, a date),
// which is then sent as a JSON string.
func (m *metadata) text(k, text string) { m.raw(k, netjson.AppendString(nil, text)) }

// str adds a .NET string: its JSON text, sent as a JSON string. An empty
// value is a null and left out.
func (m *metadata) str(k, v string) {
	if v != "" {
		m.text(k, string(netjson.AppendString(nil, v)))
	}
}

// opt adds a nullable .NET string: nil is left out, "" is written.
func (m *metadata) opt(k string, v *string) {
	if v != nil {
		m.text(k, string(netjson.AppendString(nil, *v)))
	}
}

// S returns a pointer to s, for the nullable fields.
func S(s string) *string { return &s }

// mergeBody copies a JSON-object body's top-level non-array, non-null
// properties into the metadata, as WorkerFunctionInvoker.TransformInput does
// for a string trigger value: objects stay objects, other values become
// their string form (booleans as True/False).
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
			m.str(k, s)
		case string(t) == "true":
			m.str(k, "True")
		case string(t) == "false":
			m.str(k, "False")
		default:
			m.str(k, string(t))
		}
	}
}

func (m *metadata) appendTo(b []byte) []byte {
	for i, k := range m.keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = netjson.AppendString(b, k)
		b = append(b, ':')
		b = append(b, m.vals[i]...)
	}
	return b
}

// appendValue writes an application property value as JObject.FromObject
// and Newtonsoft.Json write the .NET value: native JSON numbers, booleans,
// strings and null; timestamps as ISO dates; binary as base64; UUIDs as GUID
// strings.
func appendValue(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case string:
		return netjson.AppendString(b, x), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case int:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int8:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int16:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int32:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case uint8:
		return strconv.AppendUint(b, uint64(x), 10), nil
	case uint16:
		return strconv.AppendUint(b, uint64(x), 10), nil
	case uint32:
		return strconv.AppendUint(b, uint64(x), 10), nil
	case uint64:
		return strconv.AppendUint(b, x, 10), nil
	case float32:
		return netjson.AppendDouble(b, float64(x)), nil
	case float64:
		return netjson.AppendDouble(b, x), nil
	case time.Time:
		return netjson.AppendDateTime(b, x, "Z"), nil
	case []byte:
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, x)
		return append(b, '"'), nil
	case fmt.Stringer: // go-amqp's UUID
		return netjson.AppendString(b, x.String()), nil
	default:
		return nil, fmt.Errorf("type %T has no Functions host JSON form", v)
	}
}
