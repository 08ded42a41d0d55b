// Package logsafe bounds the strings that go into log lines. Every logged
// string that did not come from this program (message ids, property values,
// headers, error texts that may quote them) passes through Bound, so one
// oversized value can never make an oversized log line.
package logsafe

import (
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxUnits is the longest string Bound keeps whole, in UTF-16 code units
// (the unit .NET and Application Insights count in).
const MaxUnits = 512

// MaxStack bounds a logged goroutine stack, in bytes.
const MaxStack = 8 << 10

// Bound returns s when it is at most MaxUnits UTF-16 units long; otherwise
// its first MaxUnits units (never splitting a character) followed by a
// marker that says it was truncated and how long it was. Invalid UTF-8 is
// replaced, so the result is always valid UTF-8.
func Bound(s string) string {
	return bound(s, MaxUnits)
}

func bound(s string, max int) string {
	units, cut := 0, -1
	valid := true
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				valid = false
			}
		}
		n := 1
		if r > 0xFFFF {
			n = 2
		}
		if units+n > max && cut < 0 {
			cut = i
		}
		units += n
	}
	if cut < 0 {
		if valid {
			return s
		}
		return toValidUTF8(s)
	}
	return toValidUTF8(s[:cut]) + "…[truncated: " + strconv.Itoa(len(s)) + " bytes]"
}

func toValidUTF8(s string) string {
	b := make([]rune, 0, len(s))
	for _, r := range s {
		b = append(b, r)
	}
	return string(b)
}

// Stack returns a goroutine stack for a log line: at most MaxStack bytes,
// marked when cut.
func Stack(b []byte) string {
	if len(b) <= MaxStack {
		return toValidUTF8(string(b))
	}
	cut := MaxStack
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return toValidUTF8(string(b[:cut])) + "…[truncated: " + strconv.Itoa(len(b)) + " bytes]"
}

// BoundTo is Bound with a limit of max UTF-16 units, for composed lines
// (made of bounded parts) that need a bound of their own.
func BoundTo(s string, max int) string {
	return bound(s, max)
}

// Patterns of credentials that error texts from libraries may quote: the
// user info and query of a URL, and the secret parts of a connection string
// or header list.
var (
	userInfo  = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://)[^/?#@\s"']*@`)
	urlQuery  = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://[^?#\s"']*)\?[^#\s"']*`)
	authValue = regexp.MustCompile(`(?i)\b(Bearer|Basic|SharedAccessSignature)\s+[^\s"',;]+`)
	secretKey = regexp.MustCompile(`(?i)\b(AccountKey|SharedAccessKey|SharedAccessSignature|Password|Pwd|ClientSecret|Secret|Token|Sig|Signature|api[-_]?key|Authorization)(\s*[=:]\s*)("[^"]*"|[^;,&\s"']*)`)
)

// Redacted replaces every credential Redact removes.
const Redacted = "***"

// Redact removes from s what may be a credential: a URL's user info and
// query, the values of connection-string keys (AccountKey,
// SharedAccessKey, …) and of key-like fields (api-key, token, password,
// Authorization), and every occurrence of each of secrets (values known to
// be credentials, such as configured header values); then bounds it. Use it
// on any text that a library wrote and that may quote a setting.
func Redact(s string, secrets ...string) string {
	for _, v := range secrets {
		if len(v) >= 3 {
			s = strings.ReplaceAll(s, v, Redacted)
		}
	}
	s = userInfo.ReplaceAllString(s, "${1}"+Redacted+"@")
	s = urlQuery.ReplaceAllString(s, "${1}?"+Redacted)
	s = authValue.ReplaceAllString(s, "${1} "+Redacted)
	s = secretKey.ReplaceAllString(s, "${1}${2}"+Redacted)
	return Bound(s)
}
