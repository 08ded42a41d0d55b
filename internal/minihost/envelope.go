// Package minihost stands in for the Azure Functions host in tests: it
// receives from a Service Bus session subscription with azservicebus, builds
// each invocation envelope exactly as the host does for a custom handler
// (research/functions.md §1, `dataType: binary`, sessions on), POSTs it to
// the handler and settles the message the way the host does: complete on a
// successful (2xx, JSON) invocation, abandon otherwise. It also builds timer
// invocations.
//
// The envelope builders are pure functions so their byte shape can be
// checked against captured fixtures.
package minihost

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// Property is one application property; the host writes them in the order
// the message carried them.
type Property struct {
	Name  string
	Value any
}

// ServiceBusTrigger is what the host knows about one delivered message.
// Nil pointers are the .NET nulls the host leaves out of Metadata.
type ServiceBusTrigger struct {
	Body []byte
	// SessionLockedUntil is the session lock; the zero time means a
	// non-session trigger, whose action objects are {}.
	SessionLockedUntil time.Time
	// Namespace is Client.FullyQualifiedNamespace; ClientIdentifier is
	// Client.Identifier, written only when set.
	Namespace        string
	ClientIdentifier string

	DeliveryCount           int
	DeadLetterSource        *string
	LockToken               string
	ExpiresAt               time.Time
	EnqueuedTime            time.Time
	MessageID               string
	ContentType             *string
	ReplyTo                 *string
	SequenceNumber          int64
	To                      *string
	Subject                 *string
	CorrelationID           *string
	ApplicationProperties   []Property
	SessionID               *string
	ReplyToSessionID        *string
	PartitionKey            *string
	TransactionPartitionKey *string
}

// Sys is the WebJobs system binding data every invocation carries.
type Sys struct {
	MethodName string
	UtcNow     time.Time
	RandGuid   string
}

// NewSys returns Sys for an invocation of function now.
func NewSys(function string) Sys {
	return Sys{MethodName: function, UtcNow: time.Now().UTC(), RandGuid: NewGUID()}
}

// maxDateTimeOffset is .NET's DateTimeOffset.MaxValue: ExpiresAt of a
// message whose time to live is unlimited.
var maxDateTimeOffset = time.Date(9999, 12, 31, 23, 59, 59, 999999900, time.UTC)

// TriggerFromMessage describes m as the Service Bus extension does.
// Application properties are sorted by name: the SDK hands them over as a Go
// map, so their wire order is lost (JSON object order carries no meaning).
func TriggerFromMessage(m *azservicebus.ReceivedMessage, sessionLockedUntil time.Time, namespace, clientIdentifier string) *ServiceBusTrigger {
	t := &ServiceBusTrigger{
		Body:               m.Body,
		SessionLockedUntil: sessionLockedUntil,
		Namespace:          namespace,
		ClientIdentifier:   clientIdentifier,
		DeliveryCount:      int(m.DeliveryCount),
		DeadLetterSource:   m.DeadLetterSource,
		LockToken:          formatGUID(m.LockToken),
		MessageID:          m.MessageID,
		ContentType:        m.ContentType,
		ReplyTo:            m.ReplyTo,
		To:                 m.To,
		Subject:            m.Subject,
		CorrelationID:      m.CorrelationID,
		SessionID:          m.SessionID,
		ReplyToSessionID:   m.ReplyToSessionID,
		PartitionKey:       m.PartitionKey,
		ExpiresAt:          maxDateTimeOffset,
	}
	if m.SequenceNumber != nil {
		t.SequenceNumber = *m.SequenceNumber
	}
	if m.EnqueuedTime != nil {
		t.EnqueuedTime = *m.EnqueuedTime
		if m.TimeToLive != nil && *m.TimeToLive > 0 && maxDateTimeOffset.Sub(t.EnqueuedTime) > *m.TimeToLive {
			t.ExpiresAt = t.EnqueuedTime.Add(*m.TimeToLive)
		}
	}
	names := make([]string, 0, len(m.ApplicationProperties))
	for k := range m.ApplicationProperties {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		t.ApplicationProperties = append(t.ApplicationProperties, Property{Name: k, Value: m.ApplicationProperties[k]})
	}
	return t
}

// BuildServiceBusInvocation returns the request body the host POSTs for a
// Service Bus trigger with `"dataType": "binary"`, cardinality one:
// Data.<binding> is the base64 body; Metadata has the keys in the host's
// order, strings JSON-encoded inside JSON strings, numbers as strings,
// DateTime values at second precision without an offset, DateTimeOffset
// values with +00:00, objects (action objects, Client, ApplicationProperties,
// sys) as real JSON objects, and null values left out. It fails only for an
// application property value of a type the host could not have produced.
func BuildServiceBusInvocation(binding string, t *ServiceBusTrigger, sys Sys) ([]byte, error) {
	b := make([]byte, 0, 1024+len(t.Body)*4/3)
	b = append(b, `{"Data":{`...)
	b = message.AppendString(b, binding)
	b = append(b, ':', '"')
	b = base64.StdEncoding.AppendEncode(b, t.Body)
	b = append(b, `"},"Metadata":{`...)

	actions := []byte("{}")
	if !t.SessionLockedUntil.IsZero() {
		actions = append([]byte(`{"SessionLockedUntil":`), appendISO(nil, t.SessionLockedUntil, "+00:00")...)
		actions = append(actions, '}')
	}
	for _, k := range []string{"MessageReceiver", "MessageSession", "MessageActions", "SessionActions"} {
		b = appendKey(b, k)
		b = append(b, actions...)
	}
	b = append(b, `,"ReceiveActions":{},"Client":{"FullyQualifiedNamespace":`...)
	b = message.AppendString(b, t.Namespace)
	b = append(b, `,"IsClosed":false,"TransportType":0`...)
	if t.ClientIdentifier != "" {
		b = append(b, `,"Identifier":`...)
		b = message.AppendString(b, t.ClientIdentifier)
	}
	b = append(b, '}')

	b = appendKey(b, "DeliveryCount")
	b = message.AppendString(b, strconv.Itoa(t.DeliveryCount))
	b = appendDoubleEncoded(b, "DeadLetterSource", t.DeadLetterSource)
	b = appendDoubleEncoded(b, "LockToken", &t.LockToken)
	b = appendKey(b, "ExpiresAtUtc")
	b = appendSeconds(b, t.ExpiresAt, "")
	b = appendKey(b, "ExpiresAt")
	b = appendSeconds(b, t.ExpiresAt, "+00:00")
	b = appendKey(b, "EnqueuedTimeUtc")
	b = appendSeconds(b, t.EnqueuedTime, "")
	b = appendKey(b, "EnqueuedTime")
	b = appendSeconds(b, t.EnqueuedTime, "+00:00")
	if t.MessageID != "" {
		b = appendDoubleEncoded(b, "MessageId", &t.MessageID)
	}
	b = appendDoubleEncoded(b, "ContentType", t.ContentType)
	b = appendDoubleEncoded(b, "ReplyTo", t.ReplyTo)
	b = appendKey(b, "SequenceNumber")
	b = message.AppendString(b, strconv.FormatInt(t.SequenceNumber, 10))
	b = appendDoubleEncoded(b, "To", t.To)
	b = appendDoubleEncoded(b, "Subject", t.Subject)
	b = appendDoubleEncoded(b, "Label", t.Subject)
	b = appendDoubleEncoded(b, "CorrelationId", t.CorrelationID)

	props := []byte{'{'}
	for i, p := range t.ApplicationProperties {
		if i > 0 {
			props = append(props, ',')
		}
		props = message.AppendString(props, p.Name)
		props = append(props, ':')
		var err error
		if props, err = appendValue(props, p.Value); err != nil {
			return nil, fmt.Errorf("minihost: application property %q: %w", p.Name, err)
		}
	}
	props = append(props, '}')
	b = appendKey(b, "ApplicationProperties")
	b = append(b, props...)
	b = appendKey(b, "UserProperties")
	b = append(b, props...)

	b = appendDoubleEncoded(b, "SessionId", t.SessionID)
	b = appendDoubleEncoded(b, "ReplyToSessionId", t.ReplyToSessionID)
	b = appendDoubleEncoded(b, "PartitionKey", t.PartitionKey)
	b = appendDoubleEncoded(b, "TransactionPartitionKey", t.TransactionPartitionKey)
	b = appendSys(b, sys)
	return append(b, "}}"...), nil
}

// TimerInfo is the timer trigger's TimerInfo.
type TimerInfo struct {
	// Last, Next and LastUpdated are the schedule status; the zero time is
	// written as 0001-01-01T00:00:00+00:00 (first run).
	Last, Next, LastUpdated time.Time
	// NoMonitor writes "ScheduleStatus": null (useMonitor off).
	NoMonitor bool
	IsPastDue bool
}

// BuildTimerInvocation returns the request body the host POSTs for a timer
// trigger: Data.<binding> is TimerInfo as a JSON object (dates with full
// precision and +00:00), Metadata holds only sys.
func BuildTimerInvocation(binding string, t TimerInfo, sys Sys) []byte {
	b := append([]byte(`{"Data":{`), message.AppendString(nil, binding)...)
	b = append(b, `:{"Schedule":{"AdjustForDST":true},"ScheduleStatus":`...)
	if t.NoMonitor {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"Last":`...)
		b = appendISO(b, t.Last, "+00:00")
		b = append(b, `,"Next":`...)
		b = appendISO(b, t.Next, "+00:00")
		b = append(b, `,"LastUpdated":`...)
		b = appendISO(b, t.LastUpdated, "+00:00")
		b = append(b, '}')
	}
	b = append(b, `,"IsPastDue":`...)
	b = strconv.AppendBool(b, t.IsPastDue)
	b = append(b, `}},"Metadata":{`...)
	b = appendSys(b, sys)
	return append(b, "}}"...)
}

// appendSys writes the sys object (a UTC DateTime inside an object keeps
// its full precision and Z).
func appendSys(b []byte, s Sys) []byte {
	b = appendKey(b, "sys")
	b = append(b, `{"MethodName":`...)
	b = message.AppendString(b, s.MethodName)
	b = append(b, `,"UtcNow":`...)
	b = appendISO(b, s.UtcNow, "Z")
	b = append(b, `,"RandGuid":`...)
	b = message.AppendString(b, s.RandGuid)
	return append(b, '}')
}

// appendKey writes a Metadata key; every key but the first follows a comma.
func appendKey(b []byte, k string) []byte {
	if b[len(b)-1] != '{' {
		b = append(b, ',')
	}
	b = message.AppendString(b, k)
	return append(b, ':')
}

// appendDoubleEncoded writes a .NET string value the way the host does:
// JsonConvert.SerializeObject(value) (a JSON text) serialized again as a
// JSON string. A nil value is left out.
func appendDoubleEncoded(b []byte, key string, v *string) []byte {
	if v == nil {
		return b
	}
	b = appendKey(b, key)
	return message.AppendString(b, string(message.AppendString(nil, *v)))
}

// appendSeconds writes a top-level DateTime (offset "") or DateTimeOffset
// ("+00:00"): the host round-trips them through ToString/Parse, which keeps
// whole seconds only.
func appendSeconds(b []byte, t time.Time, offset string) []byte {
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, "2006-01-02T15:04:05")
	return append(append(b, offset...), '"')
}

// appendISO writes a date inside a JSON object as Newtonsoft.Json does:
// yyyy-MM-ddTHH:mm:ss.FFFFFFF (trailing zeros of the fraction dropped) then
// the offset ("Z" for a UTC DateTime, "+00:00" for a DateTimeOffset).
func appendISO(b []byte, t time.Time, offset string) []byte {
	t = t.UTC()
	b = append(b, '"')
	b = t.AppendFormat(b, "2006-01-02T15:04:05")
	if ticks := t.Nanosecond() / 100; ticks != 0 {
		frac := strings.TrimRight(fmt.Sprintf("%07d", ticks), "0")
		b = append(append(b, '.'), frac...)
	}
	return append(append(b, offset...), '"')
}

// appendValue writes an application property value as JObject.FromObject
// and Newtonsoft.Json write the .NET value the SDK decoded: native JSON
// numbers, booleans, strings and null; timestamps as ISO dates; binary as
// base64; UUIDs as GUID strings.
func appendValue(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case string:
		return message.AppendString(b, x), nil
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
		return appendDouble(b, float64(x)), nil
	case float64:
		return appendDouble(b, x), nil
	case time.Time:
		return appendISO(b, x, "Z"), nil
	case []byte:
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, x)
		return append(b, '"'), nil
	case fmt.Stringer: // go-amqp's UUID
		return message.AppendString(b, x.String()), nil
	default:
		return nil, fmt.Errorf("type %T has no Functions host JSON form", v)
	}
}

// appendDouble writes a double as Newtonsoft.Json does: .NET's shortest
// round-trip text (fixed notation for exponents -4..14, else d.dddE+XX),
// with ".0" added to integral values; NaN and infinities as strings.
func appendDouble(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(b, `"-Infinity"`...)
	}
	sci := strconv.FormatFloat(f, 'e', -1, 64) // -d.ddde±XX
	mant, expText, _ := strings.Cut(sci, "e")
	exp, _ := strconv.Atoi(expText)
	if exp > -5 && exp < 15 {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
		return append(b, s...)
	}
	sign := "+"
	if exp < 0 {
		sign, exp = "-", -exp
	}
	return append(b, fmt.Sprintf("%sE%s%02d", mant, sign, exp)...)
}

// formatGUID formats 16 bytes in .NET's Guid "D" form. The SDK already
// presents lock tokens in .NET byte order, so this is the host's text.
func formatGUID(u [16]byte) string {
	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:], u[10:])
	return string(s[:])
}

// NewGUID returns a random (version 4) GUID in "D" form.
func NewGUID() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return formatGUID(u)
}
