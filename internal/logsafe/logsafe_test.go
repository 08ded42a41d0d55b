package logsafe

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

func units(s string) int { return len(utf16.Encode([]rune(s))) }

func TestBound(t *testing.T) {
	cases := []struct {
		name  string
		in    string
		whole bool
	}{
		{"empty", "", true},
		{"short", "m-1", true},
		{"exactly the limit", strings.Repeat("a", MaxUnits), true},
		{"one over", strings.Repeat("a", MaxUnits+1), false},
		{"two-byte runes at the limit", strings.Repeat("é", MaxUnits), true},
		{"astral runes count two units", strings.Repeat("😀", MaxUnits/2+1), false},
		{"one megabyte", strings.Repeat("x", 1<<20), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Bound(c.in)
			if c.whole {
				if got != c.in {
					t.Fatalf("changed a string within the limit")
				}
				return
			}
			head, marker, ok := strings.Cut(got, "…[truncated: ")
			if !ok || !strings.HasSuffix(marker, " bytes]") {
				t.Fatalf("no truncation marker: %.80q", got)
			}
			if units(head) > MaxUnits || !strings.HasPrefix(c.in, head) {
				t.Fatalf("kept %d units (max %d), prefix %v", units(head), MaxUnits, strings.HasPrefix(c.in, head))
			}
			if len(got) > 4*MaxUnits+40 {
				t.Fatalf("bounded string is %d bytes", len(got))
			}
		})
	}
}

func TestBoundNeverSplitsAPairOrEmitsInvalidUTF8(t *testing.T) {
	in := strings.Repeat("a", MaxUnits-1) + "😀" + "tail"
	got := Bound(in)
	if !utf8.ValidString(got) || strings.Contains(got, "\ufffd") {
		t.Fatalf("invalid result %q", got[len(got)-40:])
	}
	if !strings.HasPrefix(got, strings.Repeat("a", MaxUnits-1)+"…") {
		t.Fatalf("a surrogate pair was split or kept past the limit")
	}
	if bad := Bound("ab\xffc"); !utf8.ValidString(bad) {
		t.Fatalf("invalid UTF-8 passed through: %q", bad)
	}
}

func TestStack(t *testing.T) {
	if s := Stack([]byte("goroutine 1")); s != "goroutine 1" {
		t.Fatalf("short stack changed: %q", s)
	}
	long := []byte(strings.Repeat("é", MaxStack))
	got := Stack(long)
	if !utf8.ValidString(got) || !strings.Contains(got, "[truncated: ") || len(got) > MaxStack+40 {
		t.Fatalf("long stack not bounded: %d bytes", len(got))
	}
}

func TestRedact(t *testing.T) {
	const secret = "S3cr3tValue"
	for _, c := range []struct{ name, in, keep string }{
		{"url user info", `parse "http://user:` + secret + `@127.0.0.1:1/%zz": invalid URL escape "%zz"`, `http://***@127.0.0.1:1/%zz`},
		{"url query", `Post "https://c.example/v1/traces?code=` + secret + `": EOF`, `https://c.example/v1/traces?***`},
		{"service bus connection string", "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=" + secret, "SharedAccessKeyName=k;SharedAccessKey=***"},
		{"cosmos connection string", "AccountEndpoint=https://a.documents.azure.com:443/;AccountKey=" + secret + ";", "AccountKey=***;"},
		{"header list", `"msg"="parse headers" "input"="api-key=` + secret + `"`, `api-key=***`},
		{"authorization", "Authorization: Bearer " + secret, "Authorization: ***"},
		{"known secret", `"input"="x-token ` + secret + ` %zz"`, `"input"="x-token *** %zz"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Redact(c.in, secret)
			if c.name != "known secret" {
				got = Redact(c.in) // the patterns alone
			}
			if strings.Contains(got, secret) || !strings.Contains(got, c.keep) {
				t.Fatalf("Redact(%q) = %q, want it without the secret and with %q", c.in, got, c.keep)
			}
		})
	}
	if got := Redact(strings.Repeat("x", 1<<16)); units(got) > MaxUnits+40 {
		t.Fatalf("Redact does not bound: %d units", units(got))
	}
	if got := Redact("no credentials here: dial tcp 127.0.0.1:4318: connect: connection refused"); got != "no credentials here: dial tcp 127.0.0.1:4318: connect: connection refused" {
		t.Fatalf("Redact changed a harmless text: %q", got)
	}
}

// JSONError names the offset, or the field, the JSON kind and the Go type,
// and never a value from the input.
func TestJSONError(t *testing.T) {
	var v struct {
		Amount int64
		Inner  struct{ Code bool }
	}
	cases := []struct{ in, want string }{
		{`{"Amount": 12x}`, "the document is not valid JSON (at byte offset 14)"},
		{`{"Amount": 98765.5}`, "field Amount holds a JSON number, which does not fit int64"},
		{`{"Inner": {"Code": "secret-value"}}`, "field Inner.Code holds a JSON string, which does not fit bool"},
		{`[7777]`, "field (top level) holds a JSON array, which does not fit struct { Amount int64; Inner struct { Code bool } }"},
	}
	for _, c := range cases {
		err := json.Unmarshal([]byte(c.in), &v)
		if err == nil {
			t.Fatalf("%s decoded", c.in)
		}
		got := JSONError("the document", err)
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.in, got, c.want)
		}
		for _, secret := range []string{"98765", "secret-value", "7777"} {
			if strings.Contains(got, secret) {
				t.Errorf("%s: %q quotes %s", c.in, got, secret)
			}
		}
	}
	if got := JSONError("the event", errors.New("other")); got != "the event JSON could not be decoded" {
		t.Errorf("other error: %q", got)
	}
}
