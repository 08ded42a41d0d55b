// Package netjson writes JSON the way Newtonsoft.Json does with default
// settings, which is how NimBus serializes MessageContent and how the Azure
// Functions host serializes invocation envelopes: its string escaping, its
// double formatting and its DateTime forms.
package netjson

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string escaped the way Newtonsoft.Json's
// default StringEscapeHandling does: quote, backslash and control characters
// are escaped (\b \t \n \f \r in short form, others as \u00xx with lower-case
// hex), as are U+0085, U+2028 and U+2029; everything else, including '<',
// '>', '&' and non-ASCII text, is written as is. Invalid UTF-8 is replaced
// with U+FFFD.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"':
				dst = append(dst, '\\', '"')
			case '\\':
				dst = append(dst, '\\', '\\')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\r':
				dst = append(dst, '\\', 'r')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\ufffd"...)
		case r == 0x85 || r == 0x2028 || r == 0x2029:
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u',
				hexDigits[r>>12&0xf], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendDouble writes a double as Newtonsoft.Json does: .NET's shortest
// round-trip text (fixed notation for exponents -4..14, else d.dddE+XX),
// with ".0" added to integral values; NaN and infinities as strings.
func AppendDouble(b []byte, f float64) []byte {
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

// AppendDateTime writes a date as a JSON string the way Newtonsoft.Json
// writes a DateTime or DateTimeOffset: yyyy-MM-ddTHH:mm:ss.FFFFFFF (trailing
// zeros of the 100 ns fraction dropped) followed by offset ("Z" for a UTC
// DateTime, "+00:00" for a DateTimeOffset or a local DateTime on a UTC
// machine, "" for an unspecified one).
func AppendDateTime(b []byte, t time.Time, offset string) []byte {
	t = t.UTC()
	b = append(b, '"')
	b = t.AppendFormat(b, "2006-01-02T15:04:05")
	if ticks := t.Nanosecond() / 100; ticks != 0 {
		frac := strings.TrimRight(fmt.Sprintf("%07d", ticks), "0")
		b = append(append(b, '.'), frac...)
	}
	return append(append(b, offset...), '"')
}
