package inbox

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Limits beyond which an identity cannot be deduplicated. Lengths are
// counted in UTF-16 code units, as .NET's string.Length counts them.
const (
	MaxMessageIDLength  = 512
	MaxEndpointIDLength = 260
)

// Key identifies one logical delivery on one endpoint.
type Key struct {
	EndpointID string
	MessageID  string
	// ID is the NimBus identity hash: upper-case hex SHA-256 of
	// "<UTF-16 length of endpoint>\x1f<endpoint>\x1f<messageId>".
	ID  string
	sum [sha256.Size]byte
}

// NewKey builds the key of (endpointID, messageID) and its identity hash.
func NewKey(endpointID, messageID string) Key {
	sum := identitySum(endpointID, messageID)
	return Key{EndpointID: endpointID, MessageID: messageID, ID: upperHex(sum), sum: sum}
}

// Sum returns the identity hash as bytes.
func (k Key) Sum() [sha256.Size]byte {
	if k.sum != ([sha256.Size]byte{}) {
		return k.sum
	}
	var sum [sha256.Size]byte
	_, _ = hex.Decode(sum[:], []byte(k.ID))
	return sum
}

// IdentityHash returns the NimBus inbox identity: the upper-case hex SHA-256
// of the UTF-8 bytes of decimal(UTF-16 length of endpointID) + U+001F +
// endpointID + U+001F + messageID. Invalid UTF-8 is hashed as U+FFFD, as
// .NET's encoder replaces lone surrogates.
func IdentityHash(endpointID, messageID string) string {
	return upperHex(identitySum(endpointID, messageID))
}

func identitySum(endpointID, messageID string) [sha256.Size]byte {
	var buf [512]byte
	b := strconv.AppendInt(buf[:0], int64(UTF16Len(endpointID)), 10)
	b = append(b, 0x1f)
	b = appendValidUTF8(b, endpointID)
	b = append(b, 0x1f)
	b = appendValidUTF8(b, messageID)
	return sha256.Sum256(b)
}

func upperHex(sum [sha256.Size]byte) string {
	var out [64]byte
	hex.Encode(out[:], sum[:])
	for i, c := range out {
		if c >= 'a' {
			out[i] = c - 'a' + 'A'
		}
	}
	return string(out[:])
}

// UTF16Len returns the number of UTF-16 code units of s (a rune outside the
// Basic Multilingual Plane counts two).
func UTF16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

func appendValidUTF8(b []byte, s string) []byte {
	if utf8.ValidString(s) {
		return append(b, s...)
	}
	return append(b, strings.ToValidUTF8(s, "\ufffd")...)
}

// Bypass reasons: why a delivery cannot be deduplicated.
const (
	BypassNone = ""
	// BypassMissing: MessageId or endpoint is missing or blank.
	BypassMissing = "missing_or_blank"
	// BypassTooLong: MessageId over 512 or endpoint over 260 UTF-16 units.
	BypassTooLong = "too_long"
)

// BypassReason tells whether (endpointID, messageID) can be deduplicated.
// A missing, empty or white-space-only MessageId or endpoint, or one longer
// than the limits, cannot; the handler then runs without the inbox.
func BypassReason(endpointID string, messageID *string) string {
	if messageID == nil || isBlank(*messageID) || isBlank(endpointID) {
		return BypassMissing
	}
	if UTF16Len(*messageID) > MaxMessageIDLength || UTF16Len(endpointID) > MaxEndpointIDLength {
		return BypassTooLong
	}
	return BypassNone
}

// isBlank mirrors .NET's string.IsNullOrWhiteSpace for a non-null string.
func isBlank(s string) bool {
	for _, r := range s {
		if !isDotNetSpace(r) {
			return false
		}
	}
	return true
}

func isDotNetSpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\v', '\f', '\r', 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200A
}

// CloudEventPrefix starts the MessageId side of a key built from a
// CloudEvent's identity.
const CloudEventPrefix = "cloudevents"

// CloudEventMessageID returns the MessageId side of the inbox key for a
// CloudEvent deduplicated by its identity (CloudEvents 1.0: source and id
// identify an event):
//
//	"cloudevents" U+001F decimal(UTF-16 length of source) U+001F source U+001F id
//
// The length makes the split between source and id unambiguous, so no two
// (source, id) pairs share a key. The key is then hashed with the endpoint
// like any MessageId (IdentityHash). It also returns the bypass reason:
// BypassMissing when source or id is missing or blank, BypassTooLong when
// the whole string exceeds MaxMessageIDLength UTF-16 code units: the framing
// takes 14 units plus the digits of the source length, so source and id
// together may have 495 units when the source has 100 to 999.
func CloudEventMessageID(source, id *string) (string, string) {
	if source == nil || id == nil || isBlank(*source) || isBlank(*id) {
		return "", BypassMissing
	}
	s := CloudEventPrefix + "\x1f" + strconv.Itoa(UTF16Len(*source)) + "\x1f" + *source + "\x1f" + *id
	if UTF16Len(s) > MaxMessageIDLength {
		return "", BypassTooLong
	}
	return s, BypassNone
}
