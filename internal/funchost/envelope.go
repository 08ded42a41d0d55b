package funchost

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MalformedError reports an envelope the handler cannot decode. The
// invocation fails so the broker redelivers, and finally dead-letters, the
// message: nothing is acknowledged that was not processed. The text never
// contains the payload.
type MalformedError struct {
	Field  string
	Reason string
}

func (e *MalformedError) Error() string {
	if e.Field == "" {
		return "malformed invocation: " + e.Reason
	}
	return fmt.Sprintf("malformed invocation: %s: %s", e.Field, e.Reason)
}

// ErrMalformed matches every *MalformedError with errors.Is.
var ErrMalformed = errors.New("malformed invocation")

// Is makes errors.Is(err, ErrMalformed) true.
func (e *MalformedError) Is(target error) bool { return target == ErrMalformed }

func malformed(field, format string, args ...any) error {
	return &MalformedError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ServiceBusMessage is a Service Bus trigger invocation (cardinality one),
// decoded from the host's envelope.
type ServiceBusMessage struct {
	// Body is the raw message body. With "dataType":"binary" the host sends
	// it base64-encoded; with the default string data type it sends the
	// body text JSON-encoded twice. Both are accepted.
	Body []byte
	// MessageID, SessionID and CorrelationID are nil when the host did not
	// send them (it omits null values).
	MessageID     *string
	SessionID     *string
	CorrelationID *string
	ContentType   string
	Subject       string
	DeliveryCount int
	// SequenceNumber is -1 when absent.
	SequenceNumber int64
	// EnqueuedTime is UTC with the second precision the host sends; zero
	// when absent.
	EnqueuedTime time.Time
	// ApplicationProperties keep their JSON types: strings, json.Number for
	// numbers, booleans, nil, and nested values as decoded.
	ApplicationProperties map[string]any
}

// sbEnvelope is a Service Bus trigger envelope as encoding/json reads it.
// Metadata values stay raw: the host writes strings as JSON text inside a
// JSON string, and numbers and dates as strings, so each is decoded by the
// helpers below. Member names match case-insensitively.
type sbEnvelope struct {
	Data     map[string]json.RawMessage `json:"Data"`
	Metadata sbMetadata                 `json:"Metadata"`
}

// sbMetadata holds the Metadata members the handler reads; the others (the
// action objects, Client, LockToken, expiry, sys, ...) are skipped.
type sbMetadata struct {
	DeliveryCount         json.RawMessage `json:"DeliveryCount"`
	MessageID             json.RawMessage `json:"MessageId"`
	SessionID             json.RawMessage `json:"SessionId"`
	CorrelationID         json.RawMessage `json:"CorrelationId"`
	ContentType           json.RawMessage `json:"ContentType"`
	Subject               json.RawMessage `json:"Subject"`
	SequenceNumber        json.RawMessage `json:"SequenceNumber"`
	EnqueuedTimeUtc       json.RawMessage `json:"EnqueuedTimeUtc"`
	EnqueuedTime          json.RawMessage `json:"EnqueuedTime"`
	ApplicationProperties json.RawMessage `json:"ApplicationProperties"`
	UserProperties        json.RawMessage `json:"UserProperties"`
}

// DecodeServiceBus decodes a Service Bus trigger envelope. binding names the
// trigger's binding in function.json; when Data holds exactly one entry of
// another name, that entry is used. Every failure is a *MalformedError.
func DecodeServiceBus(envelope []byte, binding string) (*ServiceBusMessage, error) {
	var env sbEnvelope
	if err := json.Unmarshal(envelope, &env); err != nil {
		return nil, malformed("", "envelope is not a JSON object with Data and Metadata (%s)", jsonErrorKind(err))
	}
	if env.Data == nil {
		return nil, malformed("Data", "missing")
	}
	raw, err := bindingData(env.Data, binding)
	if err != nil {
		return nil, err
	}
	return decodeServiceBusFields(raw, &env.Metadata)
}

// decodeServiceBusFields decodes the trigger value and the Metadata values
// the handler reads.
func decodeServiceBusFields(raw json.RawMessage, md *sbMetadata) (*ServiceBusMessage, error) {
	m := &ServiceBusMessage{SequenceNumber: -1}
	var err error
	if m.Body, err = decodeBody(raw); err != nil {
		return nil, err
	}
	if m.MessageID, err = metaString("MessageId", md.MessageID); err != nil {
		return nil, err
	}
	if m.SessionID, err = metaString("SessionId", md.SessionID); err != nil {
		return nil, err
	}
	if m.CorrelationID, err = metaString("CorrelationId", md.CorrelationID); err != nil {
		return nil, err
	}
	if s, err := metaString("ContentType", md.ContentType); err != nil {
		return nil, err
	} else if s != nil {
		m.ContentType = *s
	}
	if s, err := metaString("Subject", md.Subject); err != nil {
		return nil, err
	} else if s != nil {
		m.Subject = *s
	}
	if n, ok, err := metaInt("DeliveryCount", md.DeliveryCount); err != nil {
		return nil, err
	} else if ok {
		if n < 0 || n > 1<<31-1 {
			return nil, malformed("DeliveryCount", "out of range")
		}
		m.DeliveryCount = int(n)
	}
	if n, ok, err := metaInt("SequenceNumber", md.SequenceNumber); err != nil {
		return nil, err
	} else if ok {
		m.SequenceNumber = n
	}
	if m.EnqueuedTime, err = metaTime("EnqueuedTimeUtc", md.EnqueuedTimeUtc); err != nil {
		return nil, err
	}
	if m.EnqueuedTime.IsZero() {
		if m.EnqueuedTime, err = metaTime("EnqueuedTime", md.EnqueuedTime); err != nil {
			return nil, err
		}
	}
	props := md.ApplicationProperties
	if isNull(props) {
		props = md.UserProperties
	}
	if m.ApplicationProperties, err = decodeProperties(props); err != nil {
		return nil, err
	}
	return m, nil
}

// decodeBody accepts the binary form (a base64 JSON string) and the default
// string form (the body text, JSON-encoded, inside a JSON string).
func decodeBody(raw json.RawMessage) ([]byte, error) {
	if isNull(raw) {
		return nil, nil
	}
	raw = bytes.TrimSpace(raw)
	if raw[0] != '"' {
		return nil, malformed("Data", "trigger value is a JSON %s, want a string (use cardinality one)", jsonKind(raw[0]))
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, malformed("Data", "trigger value is not a valid JSON string")
	}
	if len(s) > 0 && s[0] == '"' {
		var inner string
		if err := json.Unmarshal([]byte(s), &inner); err != nil {
			return nil, malformed("Data", "string-typed trigger value is not a JSON-encoded string")
		}
		return []byte(inner), nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, malformed("Data", "binary trigger value is not valid base64")
	}
	return b, nil
}

// metaString decodes a Metadata string: a JSON string whose content is the
// JSON encoding of the value. A plain (single-encoded) string is accepted
// too. Absent or null is nil.
func metaString(field string, raw json.RawMessage) (*string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, malformed(field, "not a JSON string")
	}
	if len(s) >= 2 && s[0] == '"' {
		var inner string
		if err := json.Unmarshal([]byte(s), &inner); err != nil {
			return nil, malformed(field, "not a JSON-encoded string")
		}
		return &inner, nil
	}
	return &s, nil
}

// metaInt decodes a number the host sends as a string ("1"); a bare JSON
// number is accepted too.
func metaInt(field string, raw json.RawMessage) (int64, bool, error) {
	if isNull(raw) {
		return 0, false, nil
	}
	text := string(bytes.TrimSpace(raw))
	if text[0] == '"' {
		if err := json.Unmarshal(raw, &text); err != nil {
			return 0, false, malformed(field, "not a JSON string")
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
	if err != nil {
		return 0, false, malformed(field, "not an integer")
	}
	return n, true, nil
}

var timeLayouts = []string{
	"2006-01-02T15:04:05",
	time.RFC3339Nano,
	"2006-01-02T15:04:05.9999999",
}

// metaTime decodes a host date: "2025-01-15T10:20:05" (a DateTime without
// offset, taken as UTC) or an RFC 3339 value with an offset.
func metaTime(field string, raw json.RawMessage) (time.Time, error) {
	if isNull(raw) {
		return time.Time{}, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return time.Time{}, malformed(field, "not a JSON string")
	}
	for _, layout := range timeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, malformed(field, "not a date")
}

// decodeProperties decodes ApplicationProperties, keeping numbers as
// json.Number so no precision is lost.
func decodeProperties(raw json.RawMessage) (map[string]any, error) {
	if isNull(raw) {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var props map[string]any
	if err := dec.Decode(&props); err != nil {
		return nil, malformed("ApplicationProperties", "not a JSON object")
	}
	if props == nil {
		props = map[string]any{}
	}
	return props, nil
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

func jsonKind(c byte) string {
	switch c {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	default:
		return "number"
	}
}

// jsonErrorKind describes a decoding error without envelope bytes: the
// offset of a syntax error, or the member (a name of the envelope structs,
// never a payload key) that holds a value of the wrong JSON type.
func jsonErrorKind(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("syntax error at offset %d", syn.Offset)
	case errors.As(err, &typ):
		// Value is "number 42" for an out-of-range number: keep the kind.
		kind, _, _ := strings.Cut(typ.Value, " ")
		where := "the envelope"
		if typ.Field != "" {
			where = typ.Field
		}
		return fmt.Sprintf("%s is a JSON %s", where, kind)
	default:
		return "invalid JSON"
	}
}

// TimerInfo is a timer trigger invocation.
type TimerInfo struct {
	IsPastDue bool
	// Next is the occurrence being run; zero when the host sent no
	// schedule status (useMonitor off).
	Next time.Time
	Last time.Time
	// UtcNow is the host's sys.UtcNow; zero when absent.
	UtcNow time.Time
}

type timerEnvelope struct {
	Data     map[string]json.RawMessage `json:"Data"`
	Metadata struct {
		Sys struct {
			UtcNow string `json:"UtcNow"`
		} `json:"sys"`
	} `json:"Metadata"`
}

type timerData struct {
	IsPastDue      bool `json:"IsPastDue"`
	ScheduleStatus *struct {
		Last string `json:"Last"`
		Next string `json:"Next"`
	} `json:"ScheduleStatus"`
}

// DecodeTimer decodes a timer trigger envelope. Every failure is a
// *MalformedError.
func DecodeTimer(envelope []byte, binding string) (*TimerInfo, error) {
	var env timerEnvelope
	if err := json.Unmarshal(envelope, &env); err != nil {
		return nil, malformed("", "envelope is not a JSON object with Data and Metadata (%s)", jsonErrorKind(err))
	}
	raw, err := bindingData(env.Data, binding)
	if err != nil {
		return nil, err
	}
	var d timerData
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, malformed("Data", "timer value is not a TimerInfo object")
	}
	info := &TimerInfo{IsPastDue: d.IsPastDue}
	parse := func(s string) time.Time {
		for _, layout := range timeLayouts {
			if t, err := time.Parse(layout, s); err == nil {
				return t.UTC()
			}
		}
		return time.Time{}
	}
	if d.ScheduleStatus != nil {
		info.Next = parse(d.ScheduleStatus.Next)
		info.Last = parse(d.ScheduleStatus.Last)
	}
	if env.Metadata.Sys.UtcNow != "" {
		info.UtcNow = parse(env.Metadata.Sys.UtcNow)
	}
	return info, nil
}

// bindingData returns the trigger's entry of an envelope's Data: the one
// named binding, else the only one.
func bindingData(data map[string]json.RawMessage, binding string) (json.RawMessage, error) {
	raw, ok := data[binding]
	if !ok && len(data) != 1 {
		return nil, malformed("Data", "no binding named %q among %d bindings", binding, len(data))
	}
	if !ok {
		for _, v := range data {
			raw = v
		}
	}
	return raw, nil
}
