// Package jsonscan is a small single-pass JSON scanner. It validates a
// document exactly as encoding/json does (syntax, nesting limit) but lets
// the caller materialize only the values it reads, without reflection. The
// envelope and message decoders built on it are checked against
// encoding/json by differential fuzz tests.
package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// ErrSyntax reports a document that is not valid JSON.
var ErrSyntax = errors.New("invalid JSON")

// MaxDepth mirrors encoding/json's nesting limit.
const MaxDepth = 10000

// Scanner reads one JSON document in place.
type Scanner struct {
	b []byte
	i int
}

// New returns a scanner at the start of b.
func New(b []byte) *Scanner { return &Scanner{b: b} }

// Done skips trailing white space and reports whether the document ends
// there.
func (s *Scanner) Done() bool {
	s.ws()
	return s.i == len(s.b)
}

// Bytes returns b[start:end] of the document.
func (s *Scanner) Bytes(start, end int) []byte { return s.b[start:end] }

func (s *Scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// Next skips white space and returns the next byte, or 0 at the end.
func (s *Scanner) Next() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// Str scans a string at the opening quote. It returns the content span and
// whether the content is plain: printable ASCII without escapes, so the
// bytes are the value.
func (s *Scanner) Str() (start, end int, plain bool, err error) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return 0, 0, false, ErrSyntax
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
				return 0, 0, false, ErrSyntax
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				if s.i+4 >= len(s.b) {
					return 0, 0, false, ErrSyntax
				}
				for _, h := range s.b[s.i+1 : s.i+5] {
					if !isHex(h) {
						return 0, 0, false, ErrSyntax
					}
				}
				s.i += 5
			default:
				return 0, 0, false, ErrSyntax
			}
		case c < 0x20:
			return 0, 0, false, ErrSyntax
		default:
			if c >= utf8.RuneSelf {
				plain = false
			}
			s.i++
		}
	}
	return 0, 0, false, ErrSyntax
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// IsDigit reports whether c is an ASCII digit.
func IsDigit(c byte) bool { return c >= '0' && c <= '9' }

// Number scans a number.
func (s *Scanner) Number() error {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && IsDigit(b[i]) {
			i++
		}
	default:
		return ErrSyntax
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !IsDigit(b[i]) {
			return ErrSyntax
		}
		for i < len(b) && IsDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !IsDigit(b[i]) {
			return ErrSyntax
		}
		for i < len(b) && IsDigit(b[i]) {
			i++
		}
	}
	s.i = i
	return nil
}

// Literal scans the literal lit (true, false, null).
func (s *Scanner) Literal(lit string) error {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return ErrSyntax
	}
	s.i += len(lit)
	return nil
}

// Skip validates one value; depth is the nesting level of its container.
func (s *Scanner) Skip(depth int) error {
	switch c := s.Next(); {
	case c == '{':
		return s.Object(depth+1, func(int, int, bool) error { return s.Skip(depth + 1) })
	case c == '[':
		if depth+1 > MaxDepth {
			return ErrSyntax
		}
		s.i++
		if s.Next() == ']' {
			s.i++
			return nil
		}
		for {
			if err := s.Skip(depth + 1); err != nil {
				return err
			}
			switch s.Next() {
			case ',':
				s.i++
			case ']':
				s.i++
				return nil
			default:
				return ErrSyntax
			}
		}
	case c == '"':
		_, _, _, err := s.Str()
		return err
	case c == '-' || IsDigit(c):
		return s.Number()
	case c == 't':
		return s.Literal("true")
	case c == 'f':
		return s.Literal("false")
	case c == 'n':
		return s.Literal("null")
	}
	return ErrSyntax
}

// Object scans an object whose own nesting level is depth, calling member
// with each key's content span; member must consume the value.
func (s *Scanner) Object(depth int, member func(start, end int, plain bool) error) error {
	if depth > MaxDepth {
		return ErrSyntax
	}
	if s.Next() != '{' {
		return ErrSyntax
	}
	s.i++
	if s.Next() == '}' {
		s.i++
		return nil
	}
	for {
		s.ws()
		start, end, plain, err := s.Str()
		if err != nil {
			return err
		}
		if s.Next() != ':' {
			return ErrSyntax
		}
		s.i++
		if err := member(start, end, plain); err != nil {
			return err
		}
		switch s.Next() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return ErrSyntax
		}
	}
}

// Span scans a value and returns its bytes (white space trimmed).
func (s *Scanner) Span(depth int) ([]byte, error) {
	s.ws()
	start := s.i
	if err := s.Skip(depth); err != nil {
		return nil, err
	}
	return s.b[start:s.i], nil
}

// KeyIs reports whether the key (content span, plain or not) equals name
// under encoding/json's case-insensitive field matching.
func (s *Scanner) KeyIs(start, end int, plain bool, name string) bool {
	if plain {
		return bytes.EqualFold(s.b[start:end], []byte(name))
	}
	k, ok := Unquote(s.b[start-1 : end+1])
	return ok && bytes.EqualFold([]byte(k), []byte(name))
}

// KeyString returns the key's value.
func (s *Scanner) KeyString(start, end int, plain bool) string {
	if plain {
		return string(s.b[start:end])
	}
	k, _ := Unquote(s.b[start-1 : end+1])
	return k
}

// Unquote decodes a JSON string literal (quotes included) with
// encoding/json's rules; plain literals take a copy-only fast path.
func Unquote(lit []byte) (string, bool) {
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return "", false
	}
	if content := lit[1 : len(lit)-1]; IsPlain(content) {
		return string(content), true
	}
	var s string
	if err := json.Unmarshal(lit, &s); err != nil {
		return "", false
	}
	return s, true
}

// IsPlain reports whether b is printable ASCII without quote or backslash:
// its JSON string form is the bytes themselves.
func IsPlain(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// Pos returns the scanner's offset in the document.
func (s *Scanner) Pos() int { return s.i }
