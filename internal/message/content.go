package message

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/nimbus-go/functions-subscriber/internal/netjson"
)

// Content is NimBus's MessageContent body. A nil pointer field is written as
// JSON null, as Newtonsoft.Json does by default.
type Content struct {
	EventContent *EventContent `json:"EventContent"`
	ErrorContent *ErrorContent `json:"ErrorContent"`
}

// EventContent carries the domain event. EventJSON is the event serialized
// as a JSON text, carried as a JSON string.
type EventContent struct {
	EventTypeID *string `json:"EventTypeId"`
	EventJSON   *string `json:"EventJson"`
}

// ErrorContent describes a failure or the reason for a skip.
type ErrorContent struct {
	ErrorText           *string `json:"ErrorText"`
	ErrorType           *string `json:"ErrorType"`
	ExceptionStackTrace *string `json:"ExceptionStackTrace"`
	ExceptionSource     *string `json:"ExceptionSource"`
}

// ErrInvalidContent is returned by ParseContent for a body that is not a
// MessageContent JSON object.
var ErrInvalidContent = errors.New("message body is not a valid MessageContent JSON object")

// maxContentDepth mirrors NimBus's Newtonsoft MaxDepth of 32.
const maxContentDepth = 32

// ParseContent decodes a MessageContent body with encoding/json. Property
// names match case-insensitively and unknown properties are ignored, as with
// Newtonsoft.Json; anything else (not JSON, not an object, nesting deeper
// than 32, a field of the wrong type) is ErrInvalidContent.
func ParseContent(body []byte) (*Content, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' || depth(trimmed) > maxContentDepth {
		return nil, ErrInvalidContent
	}
	var c Content
	if err := json.Unmarshal(trimmed, &c); err != nil {
		return nil, ErrInvalidContent
	}
	return &c, nil
}

// depth returns the deepest nesting of objects and arrays in a JSON text,
// ignoring brackets inside strings.
func depth(b []byte) int {
	d, max := 0, 0
	inString, escaped := false, false
	for _, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			d++
			if d > max {
				max = d
			}
		case '}', ']':
			d--
		}
	}
	return max
}

// AppendJSON appends c serialized as Newtonsoft.Json's default settings
// would write it: declaration order, nulls included, compact.
func (c *Content) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"EventContent":`...)
	dst = c.EventContent.appendJSON(dst)
	dst = append(dst, `,"ErrorContent":`...)
	dst = c.ErrorContent.appendJSON(dst)
	return append(dst, '}')
}

// MarshalJSON implements json.Marshaler with the Newtonsoft-compatible form.
func (c *Content) MarshalJSON() ([]byte, error) { return c.AppendJSON(nil), nil }

func (e *EventContent) appendJSON(dst []byte) []byte {
	if e == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, `{"EventTypeId":`...)
	dst = AppendNullableString(dst, e.EventTypeID)
	dst = append(dst, `,"EventJson":`...)
	dst = AppendNullableString(dst, e.EventJSON)
	return append(dst, '}')
}

func (e *ErrorContent) appendJSON(dst []byte) []byte {
	if e == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, `{"ErrorText":`...)
	dst = AppendNullableString(dst, e.ErrorText)
	dst = append(dst, `,"ErrorType":`...)
	dst = AppendNullableString(dst, e.ErrorType)
	dst = append(dst, `,"ExceptionStackTrace":`...)
	dst = AppendNullableString(dst, e.ExceptionStackTrace)
	dst = append(dst, `,"ExceptionSource":`...)
	dst = AppendNullableString(dst, e.ExceptionSource)
	return append(dst, '}')
}

// AppendNullableString appends null for a nil pointer and the escaped
// string otherwise.
func AppendNullableString(dst []byte, s *string) []byte {
	if s == nil {
		return append(dst, "null"...)
	}
	return netjson.AppendString(dst, *s)
}

// Ptr returns a pointer to s, for building nullable fields.
func Ptr(s string) *string { return &s }
