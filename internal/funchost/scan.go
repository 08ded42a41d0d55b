package funchost

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// A single-pass JSON scanner for the invocation envelope. It validates the
// whole document as encoding/json does, so a malformed envelope is still an
// error, but it materializes only the values the handler reads. A
// differential fuzz test keeps it equivalent to encoding/json.

var errSyntax = errors.New("invalid JSON")

// maxDepth mirrors encoding/json's nesting limit.
const maxDepth = 10000

type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next skips white space and returns the next byte, or 0 at the end.
func (s *scanner) next() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// str scans a string at the opening quote. It returns the content span and
// whether the content is plain: printable ASCII without escapes, so the
// bytes are the value.
func (s *scanner) str() (start, end int, plain bool, err error) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return 0, 0, false, errSyntax
	}
	s.i++
	start, plain = s.i, true
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			end = s.i
			s.i++
			return start, end, plain, nil
		case c == '\\':
			plain = false
			s.i++
			if s.i >= len(s.b) {
				return 0, 0, false, errSyntax
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				if s.i+4 >= len(s.b) {
					return 0, 0, false, errSyntax
				}
				for _, h := range s.b[s.i+1 : s.i+5] {
					if !isHex(h) {
						return 0, 0, false, errSyntax
					}
				}
				s.i += 5
			default:
				return 0, 0, false, errSyntax
			}
		case c < 0x20:
			return 0, 0, false, errSyntax
		default:
			if c >= utf8.RuneSelf {
				plain = false
			}
			s.i++
		}
	}
	return 0, 0, false, errSyntax
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (s *scanner) number() error {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return errSyntax
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return errSyntax
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return errSyntax
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	s.i = i
	return nil
}

func (s *scanner) literal(lit string) error {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return errSyntax
	}
	s.i += len(lit)
	return nil
}

// skip validates one value; depth is the nesting level of its container.
func (s *scanner) skip(depth int) error {
	switch c := s.next(); {
	case c == '{':
		return s.object(depth+1, func(int, int, bool) error { return s.skip(depth + 1) })
	case c == '[':
		if depth+1 > maxDepth {
			return errSyntax
		}
		s.i++
		if s.next() == ']' {
			s.i++
			return nil
		}
		for {
			if err := s.skip(depth + 1); err != nil {
				return err
			}
			switch s.next() {
			case ',':
				s.i++
			case ']':
				s.i++
				return nil
			default:
				return errSyntax
			}
		}
	case c == '"':
		_, _, _, err := s.str()
		return err
	case c == '-' || isDigit(c):
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return errSyntax
}

// object scans an object whose own nesting level is depth, calling member
// with each key's content span; member must consume the value.
func (s *scanner) object(depth int, member func(start, end int, plain bool) error) error {
	if depth > maxDepth {
		return errSyntax
	}
	if s.next() != '{' {
		return errSyntax
	}
	s.i++
	if s.next() == '}' {
		s.i++
		return nil
	}
	for {
		s.ws()
		start, end, plain, err := s.str()
		if err != nil {
			return err
		}
		if s.next() != ':' {
			return errSyntax
		}
		s.i++
		if err := member(start, end, plain); err != nil {
			return err
		}
		switch s.next() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return errSyntax
		}
	}
}

// span scans a value and returns its bytes (white space trimmed).
func (s *scanner) span(depth int) ([]byte, error) {
	s.ws()
	start := s.i
	if err := s.skip(depth); err != nil {
		return nil, err
	}
	return s.b[start:s.i], nil
}

// keyIs reports whether the key (content span, plain or not) equals name
// under encoding/json's case-insensitive field matching.
func (s *scanner) keyIs(start, end int, plain bool, name string) bool {
	if plain {
		return bytes.EqualFold(s.b[start:end], []byte(name))
	}
	k, ok := unquote(s.b[start-1 : end+1])
	return ok && bytes.EqualFold([]byte(k), []byte(name))
}

// keyString returns the key's value.
func (s *scanner) keyString(start, end int, plain bool) string {
	if plain {
		return string(s.b[start:end])
	}
	k, _ := unquote(s.b[start-1 : end+1])
	return k
}

// unquote decodes a JSON string literal (quotes included) with
// encoding/json's rules; plain literals take a copy-only fast path.
func unquote(lit []byte) (string, bool) {
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return "", false
	}
	if content := lit[1 : len(lit)-1]; isPlain(content) {
		return string(content), true
	}
	var s string
	if err := jsonUnmarshal(lit, &s); err != nil {
		return "", false
	}
	return s, true
}

// isPlain reports whether b is printable ASCII without quote or backslash:
// its JSON string form is the bytes themselves.
func isPlain(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// sbFields are the Metadata keys the handler reads, in sbRaw order.
var sbFields = [...]string{
	"DeliveryCount", "MessageId", "SessionId", "CorrelationId", "ContentType", "Subject",
	"SequenceNumber", "EnqueuedTimeUtc", "EnqueuedTime", "ApplicationProperties", "UserProperties",
}

const (
	fDeliveryCount = iota
	fMessageID
	fSessionID
	fCorrelationID
	fContentType
	fSubject
	fSequenceNumber
	fEnqueuedTimeUtc
	fEnqueuedTime
	fApplicationProperties
	fUserProperties
)

type dataEntry struct {
	key string
	raw []byte
}

// sbRaw is a scanned Service Bus envelope: raw value spans, as
// json.RawMessage fields and a map[string]json.RawMessage would hold them.
type sbRaw struct {
	data    []dataEntry // nil when Data is absent or null
	hasData bool
	meta    [len(sbFields)][]byte
}

// scanServiceBus scans a whole envelope. It fails where json.Unmarshal into
// {Data map[string]json.RawMessage; Metadata struct{...RawMessage}} fails.
func scanServiceBus(b []byte) (*sbRaw, error) {
	s := &scanner{b: b}
	env := &sbRaw{}
	switch s.next() {
	case 'n':
		if err := s.literal("null"); err != nil {
			return nil, err
		}
	case '{':
		err := s.object(1, func(ks, ke int, plain bool) error {
			switch {
			case s.keyIs(ks, ke, plain, "Data"):
				return s.scanData(env)
			case s.keyIs(ks, ke, plain, "Metadata"):
				return s.scanMetadata(env)
			}
			return s.skip(1)
		})
		if err != nil {
			return nil, err
		}
	default:
		return nil, errSyntax
	}
	if s.next() != 0 {
		return nil, errSyntax
	}
	return env, nil
}

func (s *scanner) scanData(env *sbRaw) error {
	switch s.next() {
	case 'n':
		env.data, env.hasData = nil, false
		return s.literal("null")
	case '{':
	default:
		return errSyntax
	}
	env.hasData = true
	return s.object(2, func(ks, ke int, plain bool) error {
		key := s.keyString(ks, ke, plain)
		raw, err := s.span(2)
		if err != nil {
			return err
		}
		for i := range env.data {
			if env.data[i].key == key {
				env.data[i].raw = raw
				return nil
			}
		}
		env.data = append(env.data, dataEntry{key: key, raw: raw})
		return nil
	})
}

func (s *scanner) scanMetadata(env *sbRaw) error {
	switch s.next() {
	case 'n':
		return s.literal("null")
	case '{':
	default:
		return errSyntax
	}
	return s.object(2, func(ks, ke int, plain bool) error {
		for f, name := range sbFields {
			if s.keyIs(ks, ke, plain, name) {
				raw, err := s.span(2)
				env.meta[f] = raw
				return err
			}
		}
		return s.skip(2)
	})
}

var jsonUnmarshal = json.Unmarshal

// scanProperties decodes a flat ApplicationProperties object (string,
// number, boolean and null values) the way a json.Decoder with UseNumber
// would. ok is false for anything else; the caller then decodes it with
// encoding/json.
func scanProperties(raw []byte) (map[string]any, bool) {
	s := &scanner{b: raw}
	if s.next() != '{' {
		return nil, false
	}
	props := make(map[string]any, 12)
	err := s.object(1, func(ks, ke int, plain bool) error {
		key := s.keyString(ks, ke, plain)
		switch c := s.next(); {
		case c == '"':
			start := s.i
			_, _, _, err := s.str()
			if err != nil {
				return err
			}
			v, ok := unquote(s.b[start:s.i])
			if !ok {
				return errSyntax
			}
			props[key] = v
		case c == '-' || isDigit(c):
			start := s.i
			if err := s.number(); err != nil {
				return err
			}
			props[key] = json.Number(s.b[start:s.i])
		case c == 't':
			props[key] = true
			return s.literal("true")
		case c == 'f':
			props[key] = false
			return s.literal("false")
		case c == 'n':
			props[key] = nil
			return s.literal("null")
		default:
			return errNotFlat
		}
		return nil
	})
	if err != nil || s.next() != 0 {
		return nil, false
	}
	return props, true
}

var errNotFlat = errors.New("not a flat object")
