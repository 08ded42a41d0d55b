package netjson

import (
	"encoding/json"
	"math"
	"testing"
	"time"
)

// Newtonsoft.Json's default escaping, which the Resolver's parser and
// NimBus's own tests were written against.
func TestAppendStringMatchesNewtonsoftEscaping(t *testing.T) {
	cases := map[string]string{
		`plain`:              `"plain"`,
		`quote " back \ `:    `"quote \" back \\ "`,
		"tab\tnl\ncr\r":      `"tab\tnl\ncr\r"`,
		"bs\bff\f":           `"bs\bff\f"`,
		"\x00\x1f\x7f":       `"\u0000\u001f` + "\x7f" + `"`,
		`<a href='x'>&</a>`:  `"<a href='x'>&</a>"`,
		"ünï 日本 😀":           `"ünï 日本 😀"`,
		"\u0085\u2028\u2029": `"\u0085\u2028\u2029"`,
		"bad \xff utf8":      "\"bad \ufffd utf8\"",
	}
	for in, want := range cases {
		if got := string(AppendString(nil, in)); got != want {
			t.Errorf("AppendString(%q) = %s, want %s", in, got, want)
		}
		var back string
		if err := json.Unmarshal(AppendString(nil, in), &back); err != nil {
			t.Errorf("AppendString(%q) is not valid JSON: %v", in, err)
		}
	}
}

func TestAppendDoubleMatchesNewtonsoft(t *testing.T) {
	cases := map[float64]string{
		42.5: "42.5", 2: "2.0", 0: "0.0", -1.25: "-1.25", 1e14: "100000000000000.0", 1e15: "1E+15",
		1.5e-5: "1.5E-05", 0.0001: "0.0001", 123456789.123: "123456789.123", 0.1: "0.1", -2: "-2.0",
		123456789012345680: "1.2345678901234568E+17", 0.00001: "1E-05", -1.5e20: "-1.5E+20",
		math.NaN(): `"NaN"`, math.Inf(1): `"Infinity"`, math.Inf(-1): `"-Infinity"`,
	}
	for in, want := range cases {
		if got := string(AppendDouble(nil, in)); got != want {
			t.Errorf("AppendDouble(%v) = %s, want %s", in, got, want)
		}
	}
}

func TestAppendDateTime(t *testing.T) {
	ts := time.Date(2025, 1, 15, 10, 15, 0, 6123400, time.UTC)
	if got := string(AppendDateTime(nil, ts, "+00:00")); got != `"2025-01-15T10:15:00.0061234+00:00"` {
		t.Errorf("got %s", got)
	}
	if got := string(AppendDateTime(nil, ts.Truncate(time.Second), "Z")); got != `"2025-01-15T10:15:00Z"` {
		t.Errorf("got %s", got)
	}
}
