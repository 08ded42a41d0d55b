package message

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Stored is an outgoing message as a store keeps it to send it again later
// byte for byte: the broker fields, every application property with its
// AMQP type, and the body. Its JSON form is what sits in a Cosmos DB
// document:
//
//	{"messageId":"PaymentRecorded-P-1","sessionId":"customer-1","correlationId":"c-1",
//	 "applicationProperties":{"To":"PaymentRecorded","EventId":null,"RetryCount":{"int":0},
//	                          "QueueTimeMs":{"long":"12"}},
//	 "body":"{\"EventContent\":…}"}
//
// A string property is a JSON string and an AMQP null is JSON null; an AMQP
// int is {"int":n} and an AMQP long is {"long":"n"}, its digits in a string
// because Cosmos DB and JavaScript readers hold numbers as doubles, which
// lose digits beyond 2^53. The body is a JSON string when it is valid UTF-8
// (every body this package builds is), else "bodyBase64" holds it in
// standard base64. Names and string values are JSON strings, which hold
// Unicode text: a byte that is not valid UTF-8 (no AMQP string has one)
// reads back as U+FFFD. An entry whose body and properties were cleared
// keeps the other fields and reads back with neither.
type Stored struct {
	MessageID     string
	SessionID     string
	CorrelationID *string
	// ApplicationProperties hold string, int32, int64 or nil values.
	ApplicationProperties map[string]any
	Body                  []byte
}

// ErrUnsupportedProperty is returned for an application property value
// that is not a string, int32, int64 or nil: the only AMQP types NimBus
// writes.
var ErrUnsupportedProperty = errors.New("unsupported application property type")

// StoredOf returns o as a store keeps it. The property map and the body are
// copied; a property of a type NimBus does not write is refused with
// ErrUnsupportedProperty, before anything is stored.
func StoredOf(o *Outgoing) (Stored, error) {
	if o == nil {
		return Stored{}, errors.New("message: storing a nil message")
	}
	props, err := copyProperties(o.ApplicationProperties)
	if err != nil {
		return Stored{}, err
	}
	s := Stored{MessageID: o.MessageID, SessionID: o.SessionID, ApplicationProperties: props}
	if o.CorrelationID != nil {
		c := *o.CorrelationID
		s.CorrelationID = &c
	}
	if o.Body != nil {
		s.Body = bytes.Clone(o.Body)
	}
	return s, nil
}

// Outgoing returns the message s keeps, ready to be sent again: the same
// broker fields, properties (copied) and body.
func (s *Stored) Outgoing() *Outgoing {
	o := &Outgoing{MessageID: s.MessageID, SessionID: s.SessionID, Body: bytes.Clone(s.Body)}
	if s.CorrelationID != nil {
		c := *s.CorrelationID
		o.CorrelationID = &c
	}
	if s.ApplicationProperties != nil {
		o.ApplicationProperties = make(map[string]any, len(s.ApplicationProperties))
		for k, v := range s.ApplicationProperties {
			o.ApplicationProperties[k] = v
		}
	}
	return o
}

func copyProperties(props map[string]any) (map[string]any, error) {
	if props == nil {
		return nil, nil
	}
	out := make(map[string]any, len(props))
	for k, v := range props {
		switch v.(type) {
		case string, int32, int64, nil:
			out[k] = v
		default:
			return nil, fmt.Errorf("message: %w: %s is %T", ErrUnsupportedProperty, k, v)
		}
	}
	return out, nil
}

// storedJSON is the JSON form of Stored.
type storedJSON struct {
	MessageID             string                     `json:"messageId"`
	SessionID             string                     `json:"sessionId"`
	CorrelationID         *string                    `json:"correlationId"`
	ApplicationProperties map[string]json.RawMessage `json:"applicationProperties"`
	Body                  *string                    `json:"body,omitempty"`
	BodyBase64            []byte                     `json:"bodyBase64,omitempty"`
}

type typedInt struct {
	Int *int32 `json:"int"`
}

type typedLong struct {
	Long *string `json:"long"`
}

// MarshalJSON implements json.Marshaler with the form described on Stored.
func (s Stored) MarshalJSON() ([]byte, error) {
	w := storedJSON{MessageID: s.MessageID, SessionID: s.SessionID, CorrelationID: s.CorrelationID}
	if s.ApplicationProperties != nil {
		w.ApplicationProperties = make(map[string]json.RawMessage, len(s.ApplicationProperties))
		for k, v := range s.ApplicationProperties {
			var (
				raw []byte
				err error
			)
			switch x := v.(type) {
			case nil:
				raw = []byte("null")
			case string:
				raw, err = json.Marshal(x)
			case int32:
				raw, err = json.Marshal(typedInt{Int: &x})
			case int64:
				d := strconv.FormatInt(x, 10)
				raw, err = json.Marshal(typedLong{Long: &d})
			default:
				return nil, fmt.Errorf("message: %w: %s is %T", ErrUnsupportedProperty, k, v)
			}
			if err != nil {
				return nil, err
			}
			w.ApplicationProperties[k] = raw
		}
	}
	switch {
	case s.Body == nil:
	case utf8.Valid(s.Body):
		b := string(s.Body)
		w.Body = &b
	default:
		w.BodyBase64 = s.Body
	}
	return json.Marshal(w)
}

// UnmarshalJSON implements json.Unmarshaler. It accepts exactly the form
// MarshalJSON writes: a property of any other shape, an int outside the
// int32 range, a long that is not a decimal int64 and a document with both
// body forms are errors that name the property, never its value.
func (s *Stored) UnmarshalJSON(data []byte) error {
	var w storedJSON
	if err := json.Unmarshal(data, &w); err != nil {
		return fmt.Errorf("message: reading a stored message: %w", err)
	}
	out := Stored{MessageID: w.MessageID, SessionID: w.SessionID, CorrelationID: w.CorrelationID}
	if w.ApplicationProperties != nil {
		out.ApplicationProperties = make(map[string]any, len(w.ApplicationProperties))
		for k, raw := range w.ApplicationProperties {
			v, err := storedValue(raw)
			if err != nil {
				return fmt.Errorf("message: stored application property %q: %w", k, err)
			}
			out.ApplicationProperties[k] = v
		}
	}
	switch {
	case w.Body != nil && w.BodyBase64 != nil:
		return errors.New("message: a stored message has both body and bodyBase64")
	case w.Body != nil:
		out.Body = []byte(*w.Body)
	case w.BodyBase64 != nil:
		out.Body = w.BodyBase64
	}
	*s = out
	return nil
}

// storedValue reads one property written by MarshalJSON.
func storedValue(raw json.RawMessage) (any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, errors.New("no value")
	}
	switch raw[0] {
	case 'n':
		if string(raw) != "null" {
			return nil, errors.New("not a stored value")
		}
		return nil, nil
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, errors.New("malformed string")
		}
		return s, nil
	case '{':
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil || len(fields) != 1 {
			return nil, errors.New(`want {"int":n} or {"long":"n"}`)
		}
		if n, ok := fields["int"]; ok {
			i, err := strconv.ParseInt(string(bytes.TrimSpace(n)), 10, 32)
			if err != nil {
				return nil, errors.New("the int is not a decimal integer in the int32 range")
			}
			return int32(i), nil
		}
		if l, ok := fields["long"]; ok {
			var d string
			if err := json.Unmarshal(l, &d); err != nil {
				return nil, errors.New("the long is not a string of digits")
			}
			n, err := strconv.ParseInt(d, 10, 64)
			if err != nil {
				return nil, errors.New("the long is not a decimal int64")
			}
			return n, nil
		}
		return nil, errors.New(`want {"int":n} or {"long":"n"}`)
	}
	return nil, errors.New("not a stored value")
}
