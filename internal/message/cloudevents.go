package message

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// CloudEvents on the consume side, read as NimBus reads them: a message is a
// CloudEvent when its content type starts with application/cloudevents+json
// (structured mode, case-insensitive), or when any of the specversion, id,
// source or type attributes is present under an accepted application-property
// prefix (binary mode). A message with markers but missing attributes is still
// a CloudEvent, so it is rejected rather than read as a native message.

// CloudEvents constants.
const (
	// CloudEventsSpecVersion is the only specversion accepted.
	CloudEventsSpecVersion = "1.0"
	// StructuredContentType marks a structured-mode CloudEvent.
	StructuredContentType = "application/cloudevents+json"
	// PrefixCanonical is the AMQP binding's application-property prefix.
	PrefixCanonical = "cloudEvents:"
	// PrefixAlternate is the widely used alternative prefix.
	PrefixAlternate = "ce-"
	// CloudEventMissingID is the MessageId and EventId of a CloudEvent that
	// carries neither a CloudEvents id nor a broker MessageId.
	CloudEventMissingID = "(cloudevent-missing-id)"
	// AttributeSubject selects the subject attribute in a mapping.
	AttributeSubject = "subject"
	// External is the From of a CloudEvent without a source.
	External = "external"
)

// Application properties a response to a CloudEvent carries (only when
// non-empty, so native responses are unchanged).
const (
	PropCloudEventID      = "CloudEventId"
	PropCloudEventSource  = "CloudEventSource"
	PropCloudEventType    = "CloudEventType"
	PropCloudEventSubject = "CloudEventSubject"
)

// DefaultPrefixes are the accepted binary-mode prefixes, probed in order.
var DefaultPrefixes = []string{PrefixCanonical, PrefixAlternate}

// coreAttributes are never extensions.
var coreAttributes = map[string]bool{
	"specversion": true, "id": true, "source": true, "type": true, "subject": true,
	"time": true, "dataschema": true, "datacontenttype": true, "data": true,
}

// Mode is how a CloudEvent was carried.
type Mode string

// CloudEvents content modes.
const (
	ModeBinary     Mode = "binary"
	ModeStructured Mode = "structured"
)

// CloudEvent is a detected CloudEvent. A nil attribute was absent (or null).
type CloudEvent struct {
	Mode            Mode
	SpecVersion     *string
	ID              *string
	Source          *string
	Type            *string
	Subject         *string
	Time            *string
	DataSchema      *string
	DataContentType *string
	// Data is the event payload text: the body (binary mode), or the data
	// member (structured mode: a JSON string is used as is, any other JSON
	// value compacted). nil when absent.
	Data *string
	// Extensions are the other attributes, by exact name.
	Extensions map[string]string
}

// CloudEventOptions turns CloudEvents detection on (a nil *CloudEventOptions
// reads every message as native NimBus).
type CloudEventOptions struct {
	// Prefixes are the accepted binary-mode prefixes in probe order; empty
	// means DefaultPrefixes.
	Prefixes []string
	// TypeMap maps a CloudEvents type to an EventTypeId; types not in it use
	// the default rule (the last dot-delimited segment).
	TypeMap map[string]string
	// SessionIDAttribute carries the SessionId fallback: an extension name,
	// or "subject" (any case) for the subject attribute. Default "sessionid".
	SessionIDAttribute string
	// CorrelationIDAttribute carries the CorrelationId fallback, likewise.
	// Default "correlationid".
	CorrelationIDAttribute string
}

func (o *CloudEventOptions) prefixes() []string {
	if len(o.Prefixes) == 0 {
		return DefaultPrefixes
	}
	return o.Prefixes
}

// MapType returns the EventTypeId for a CloudEvents type: the explicit map
// first, else the last dot-delimited segment (a type without a dot, or
// ending with one, maps to itself). nil stays nil.
func (o *CloudEventOptions) MapType(t *string) *string {
	if t == nil {
		return nil
	}
	if v, ok := o.TypeMap[*t]; ok {
		return &v
	}
	s := DefaultTypeToEventTypeID(*t)
	return &s
}

// DefaultTypeToEventTypeID is NimBus's default mapping: the last
// dot-delimited segment of t (com.acme.OrderPlaced → OrderPlaced); t itself
// when it has no dot or ends with one.
func DefaultTypeToEventTypeID(t string) string {
	i := strings.LastIndexByte(t, '.')
	if i >= 0 && i < len(t)-1 {
		return t[i+1:]
	}
	return t
}

func (o *CloudEventOptions) attr(ce *CloudEvent, name, def string) *string {
	if name == "" {
		name = def
	}
	if strings.EqualFold(name, AttributeSubject) {
		return ce.Subject
	}
	if v, ok := ce.Extensions[name]; ok {
		return &v
	}
	return nil
}

// SessionID returns the mapped session attribute of ce, or nil.
func (o *CloudEventOptions) SessionID(ce *CloudEvent) *string {
	return o.attr(ce, o.SessionIDAttribute, "sessionid")
}

// CorrelationID returns the mapped correlation attribute of ce, or nil.
func (o *CloudEventOptions) CorrelationID(ce *CloudEvent) *string {
	return o.attr(ce, o.CorrelationIDAttribute, "correlationid")
}

// DetectCloudEvent returns the CloudEvent a message carries, or nil when it
// carries no CloudEvents marker.
func (o *CloudEventOptions) DetectCloudEvent(contentType string, props map[string]any, body []byte) *CloudEvent {
	structured := len(contentType) >= len(StructuredContentType) &&
		strings.EqualFold(contentType[:len(StructuredContentType)], StructuredContentType)
	prefixes := o.prefixes()
	probe := func(attr string) *string {
		for _, p := range prefixes {
			if s, ok := propString(props, p+attr); ok {
				return &s
			}
		}
		return nil
	}
	if !structured && !hasMarker(props, prefixes) {
		return nil
	}
	if structured {
		return ParseStructured(body)
	}
	spec, id, source, typ := probe("specversion"), probe("id"), probe("source"), probe("type")
	ce := &CloudEvent{
		Mode: ModeBinary, SpecVersion: spec, ID: id, Source: source, Type: typ,
		Subject: probe("subject"), DataSchema: probe("dataschema"), Time: probe("time"),
		Extensions: map[string]string{},
	}
	if contentType != "" {
		ce.DataContentType = &contentType
	}
	if len(body) > 0 {
		s := toValidUTF8(body)
		ce.Data = &s
	}
	// Every other prefixed property is an extension (prefix stripped). When
	// two prefixes carry the same extension, the earlier prefix wins.
	from := map[string]int{}
	for name, v := range props {
		for i, p := range prefixes {
			if !strings.HasPrefix(name, p) {
				continue
			}
			attr := name[len(p):]
			if s, ok := valueString(v); ok && attr != "" && !coreAttributes[attr] {
				if j, seen := from[attr]; !seen || i < j {
					ce.Extensions[attr], from[attr] = s, i
				}
			}
			break
		}
	}
	return ce
}

// hasMarker reports whether a specversion, id, source or type attribute has
// a value under one of the prefixes. It scans the property names without
// allocating, so a native message pays little for the detection.
func hasMarker(props map[string]any, prefixes []string) bool {
	for name, v := range props {
		if v == nil {
			continue
		}
		for _, p := range prefixes {
			if len(name) > len(p) && name[:len(p)] == p {
				switch name[len(p):] {
				case "specversion", "id", "source", "type":
					return true
				}
			}
		}
	}
	return false
}

// maxStructuredDepth is Newtonsoft.Json's default MaxDepth (64) for
// JObject.Parse: a deeper envelope is unreadable.
const maxStructuredDepth = 64

// ParseStructured reads a structured-mode CloudEvents JSON envelope. It
// never fails: a body that is not a JSON object (or is nested deeper than
// 64) gives a CloudEvent with no attributes, which validation then rejects.
// Attribute names match exactly (case-sensitive); a string attribute is
// taken as is, a number or boolean as its JSON text, and an object, array or
// null as absent. data that is a JSON string is used as is; any other JSON
// value is compacted. Every other top-level member with a scalar value is an
// extension.
func ParseStructured(body []byte) *CloudEvent {
	ce := &CloudEvent{Mode: ModeStructured, Extensions: map[string]string{}}
	// The body is decoded as UTF-8 text first, invalid bytes replaced, as
	// NimBus does before parsing (so compacted data carries no invalid bytes).
	trimmed := bytes.TrimSpace([]byte(toValidUTF8(body)))
	if len(trimmed) == 0 || trimmed[0] != '{' || depth(trimmed) > maxStructuredDepth {
		return ce
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &env); err != nil {
		return ce
	}
	attr := func(name string) *string {
		s, ok := scalarText(env[name])
		if !ok {
			return nil
		}
		return &s
	}
	ce.SpecVersion, ce.ID, ce.Source, ce.Type = attr("specversion"), attr("id"), attr("source"), attr("type")
	ce.Subject, ce.Time, ce.DataSchema, ce.DataContentType = attr("subject"), attr("time"), attr("dataschema"), attr("datacontenttype")
	if raw := bytes.TrimSpace(env["data"]); len(raw) > 0 && string(raw) != "null" {
		var s string
		if raw[0] == '"' {
			if json.Unmarshal(raw, &s) == nil {
				ce.Data = &s
			}
		} else {
			var buf bytes.Buffer
			if json.Compact(&buf, raw) == nil {
				s = buf.String()
				ce.Data = &s
			}
		}
	}
	for name, raw := range env {
		if coreAttributes[name] {
			continue
		}
		if s, ok := scalarText(raw); ok {
			ce.Extensions[name] = s
		}
	}
	return ce
}

// scalarText returns a string member's value, or a number's or boolean's
// JSON text; false for null, objects, arrays and absent members.
func scalarText(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", false
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return s, true
	case '{', '[', 'n':
		return "", false
	}
	return string(raw), true
}

// AppendStructured appends ce as a structured-mode JSON envelope (the
// attributes that are set, extensions, and data as a JSON string), for
// tests that publish structured events.
func (ce *CloudEvent) AppendStructured(dst []byte) []byte {
	m := map[string]any{}
	for k, v := range ce.Extensions {
		m[k] = v
	}
	set := func(k string, v *string) {
		if v != nil {
			m[k] = *v
		}
	}
	set("specversion", ce.SpecVersion)
	set("id", ce.ID)
	set("source", ce.Source)
	set("type", ce.Type)
	set("subject", ce.Subject)
	set("time", ce.Time)
	set("dataschema", ce.DataSchema)
	set("datacontenttype", ce.DataContentType)
	set("data", ce.Data)
	b, _ := json.Marshal(m) // strings only: cannot fail
	return append(dst, b...)
}

func toValidUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\ufffd")
}

// InvalidCloudEventError is a CloudEvent NimBus refuses: a required
// attribute is missing, the specversion is not 1.0, or the type maps to no
// handler. Its text is NimBus's.
type InvalidCloudEventError struct {
	Text string
}

func (e *InvalidCloudEventError) Error() string { return e.Text }

// Validate checks the required attributes as NimBus's validating handler
// does: id, source and type present and non-empty, specversion exactly
// "1.0". redact replaces attribute values in the text (used when the values
// came from the body).
func (ce *CloudEvent) Validate(redact bool) error {
	for _, a := range []struct {
		name string
		v    *string
	}{{"id", ce.ID}, {"source", ce.Source}, {"type", ce.Type}} {
		if a.v == nil || *a.v == "" {
			return &InvalidCloudEventError{Text: "CloudEvents message missing required attribute '" + a.name + "'."}
		}
	}
	if ce.SpecVersion == nil || *ce.SpecVersion != CloudEventsSpecVersion {
		v := "<null>"
		if ce.SpecVersion != nil {
			v = *ce.SpecVersion
			if redact {
				v = redacted
			}
		}
		return &InvalidCloudEventError{Text: "CloudEvents message has unsupported specversion '" + v + "' (expected '" + CloudEventsSpecVersion + "')."}
	}
	return nil
}

// NoHandlerError is NimBus's text for a CloudEvents type with no handler.
func (ce *CloudEvent) NoHandlerError(redact bool) error {
	t := deref(ce.Type)
	if redact {
		t = redacted
	}
	return &InvalidCloudEventError{Text: "CloudEvents type '" + t + "' maps to no registered event contract."}
}

// redacted stands in for an attribute value read from a structured body,
// which is payload and never logged.
const redacted = "<from the structured body, not logged>"

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
