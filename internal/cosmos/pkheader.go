package cosmos

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// HeaderPartitionKey is the request header that carries a request's
// partition key value: a JSON array of the key's components.
const HeaderPartitionKey = "x-ms-documentdb-partitionkey"

// partitionKeyHeader rewrites the partition key header of every request
// into ASCII-only JSON. azcosmos v1.5.0 writes string components with
// strconv.QuoteToASCII, whose Go escapes are not JSON: "\U0001f642" for a
// character beyond the Basic Multilingual Plane, "\x00" and "\a" for
// control characters, "\x7f" for DEL. Cosmos DB reads the header as JSON
// and answers 400 to those, and its front end refuses header bytes that
// are not ASCII, so JSON's own \uXXXX escapes (a surrogate pair beyond the
// Basic Multilingual Plane) are the one encoding it takes for every value,
// as the .NET, Java and JavaScript SDKs send it.
//
// It runs once per call, after the SDK's own per-call policies have set
// the header. A header that is already JSON keeps its meaning; the shared
// key signature does not cover the header, so rewriting it is safe.
type partitionKeyHeader struct{}

// errPartitionKeyHeader reports a partition key header the policy cannot
// read; the request is not sent. Its text never holds the value.
var errPartitionKeyHeader = errors.New("cosmos: the partition key header the SDK wrote is not a readable list of values")

func (partitionKeyHeader) Do(req *policy.Request) (*http.Response, error) {
	h := req.Raw().Header
	if vs := h.Values(HeaderPartitionKey); len(vs) > 0 {
		v, err := asciiJSONPartitionKey(vs[0])
		if err != nil {
			return nil, err
		}
		h.Set(HeaderPartitionKey, v)
	}
	return req.Next()
}

// asciiJSONPartitionKey re-encodes a partition key header, a list of
// components in brackets, with every string component as ASCII-only JSON.
// A string component is read as JSON, else as a Go quoted string (what
// azcosmos writes); other components (numbers, true, false, null, and {}
// for an undefined component) are kept as they are.
func asciiJSONPartitionKey(h string) (string, error) {
	s := strings.TrimSpace(h)
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
		return "", errPartitionKeyHeader
	}
	s = s[1 : len(s)-1]
	var b strings.Builder
	b.Grow(len(h) + 16)
	b.WriteByte('[')
	for first := true; ; first = false {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			if !first {
				return "", errPartitionKeyHeader // a trailing comma
			}
			break
		}
		if !first {
			b.WriteByte(',')
		}
		var rest string
		if s[0] == '"' {
			end := quotedEnd(s)
			if end < 0 {
				return "", errPartitionKeyHeader
			}
			v, ok := unquote(s[:end])
			if !ok {
				return "", errPartitionKeyHeader
			}
			writeASCIIJSONString(&b, v)
			rest = s[end:]
		} else {
			i := strings.IndexByte(s, ',')
			if i < 0 {
				i = len(s)
			}
			tok := strings.TrimSpace(s[:i])
			if tok == "" || strings.ContainsAny(tok, "\"[]") || !isASCIIPrintable(tok) {
				return "", errPartitionKeyHeader
			}
			b.WriteString(tok)
			rest = s[i:]
		}
		rest = strings.TrimLeft(rest, " \t")
		if rest == "" {
			break
		}
		if rest[0] != ',' {
			return "", errPartitionKeyHeader
		}
		s = rest[1:]
	}
	b.WriteByte(']')
	return b.String(), nil
}

// quotedEnd returns the length of the quoted string s starts with (both
// JSON and Go end a string at the first quote no backslash escapes), or
// -1.
func quotedEnd(s string) int {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// unquote reads a quoted string as JSON, else as a Go quoted string. Where
// both read it, they read the same value.
func unquote(q string) (string, bool) {
	// The usual value, printable ASCII without escapes, is its own text.
	if inner := q[1 : len(q)-1]; strings.IndexByte(inner, '\\') < 0 && isASCIIPrintable(inner) {
		return inner, true
	}
	var v string
	if json.Unmarshal([]byte(q), &v) == nil {
		return v, true
	}
	v, err := strconv.Unquote(q)
	return v, err == nil
}

func isASCIIPrintable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

const hexDigits = "0123456789abcdef"

// writeASCIIJSONString writes v as a JSON string of printable ASCII: " and
// \ escaped with a backslash, control characters, DEL and every character
// beyond ASCII as \uXXXX (a surrogate pair beyond the Basic Multilingual
// Plane). A byte that is not UTF-8 becomes U+FFFD, as encoding/json writes
// it in a document, so the header names the partition the document holds.
func writeASCIIJSONString(b *strings.Builder, v string) {
	b.WriteByte('"')
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRuneInString(v[i:])
		i += size
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteByte(byte(r))
		case r >= 0x20 && r < 0x7f:
			b.WriteByte(byte(r))
		case r > 0xffff:
			hi, lo := utf16.EncodeRune(r)
			writeU(b, hi)
			writeU(b, lo)
		default:
			writeU(b, r)
		}
	}
	b.WriteByte('"')
}

func writeU(b *strings.Builder, r rune) {
	b.WriteString(`\u`)
	b.WriteByte(hexDigits[r>>12&0xf])
	b.WriteByte(hexDigits[r>>8&0xf])
	b.WriteByte(hexDigits[r>>4&0xf])
	b.WriteByte(hexDigits[r&0xf])
}
