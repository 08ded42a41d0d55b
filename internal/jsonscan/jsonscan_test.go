package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"
)

// valid reports whether the scanner accepts b as one JSON document.
func valid(b []byte) bool {
	s := New(b)
	return s.Skip(0) == nil && s.Done()
}

var seeds = []string{
	`{}`, `[]`, `null`, `true`, `false`, `0`, `-0.5e+10`, `"a\u00e9\n"`, `{"a":[1,{"b":null}],"c":"\ud83d\ude00"}`,
	`{"a":1,}`, `[1,]`, `01`, `1.`, `.5`, `-`, `1e`, `"\x"`, `"\u12"`, "\"\x01\"", `{"a"}`, `{a:1}`, `[1 2]`,
	"{}\x00", ` [ ] `, `tru`, `nul`, `"unterminated`, `{"a":1}}`, `[[]]]`,
}

func TestSkipAgreesWithJSONValid(t *testing.T) {
	for _, s := range seeds {
		if got, want := valid([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("%q: scanner %v, encoding/json %v", s, got, want)
		}
	}
}

func TestNestingLimit(t *testing.T) {
	ok := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	deep := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	if !valid([]byte(ok)) || valid([]byte(deep)) {
		t.Fatal("nesting limit differs from encoding/json's")
	}
	if json.Valid([]byte(deep)) {
		t.Fatal("encoding/json's limit changed")
	}
}

func TestUnquoteAndKeys(t *testing.T) {
	for lit, want := range map[string]string{`"plain"`: "plain", `"a\"b"`: `a"b`, `"\u00e9"`: "é", "\"\xff\"": "\ufffd"} {
		if got, ok := Unquote([]byte(lit)); !ok || got != want {
			t.Errorf("Unquote(%q) = %q, %v", lit, got, ok)
		}
	}
	s := New([]byte(`{"Me\u0073sageId":1,"SESSIONID":2}`))
	var keys []string
	err := s.Object(1, func(ks, ke int, plain bool) error {
		switch {
		case s.KeyIs(ks, ke, plain, "MessageId"):
			keys = append(keys, "MessageId:"+s.KeyString(ks, ke, plain))
		case s.KeyIs(ks, ke, plain, "SessionId"):
			keys = append(keys, "SessionId:"+s.KeyString(ks, ke, plain))
		}
		return s.Skip(1)
	})
	if err != nil || strings.Join(keys, ",") != "MessageId:MessageId,SessionId:SESSIONID" {
		t.Fatalf("keys %v, err %v", keys, err)
	}
}

func FuzzSkipAgreesWithJSONValid(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := valid(b), json.Valid(b); got != want {
			t.Fatalf("%q: scanner %v, encoding/json %v", b, got, want)
		}
	})
}
