package message

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// contentCases pin ParseContent's contract: case-insensitive names (with
// encoding/json's folding), the last duplicate wins, unknown members are
// ignored, invalid UTF-8 and lone surrogates become U+FFFD, and anything
// that is not one JSON object of the right shape is ErrInvalidContent. want
// is the body as AppendJSON writes the result; "" means ErrInvalidContent.
var contentCases = []struct{ in, want string }{
	{`{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1\"}"},"ErrorContent":null}`,
		`{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1\"}"},"ErrorContent":null}`},
	{`{"EventContent":{"EventTypeId":"T","EventJson":null},"ErrorContent":{"ErrorText":"DuplicateDetected","ErrorType":null,"ExceptionStackTrace":null,"ExceptionSource":null}}`,
		`{"EventContent":{"EventTypeId":"T","EventJson":null},"ErrorContent":{"ErrorText":"DuplicateDetected","ErrorType":null,"ExceptionStackTrace":null,"ExceptionSource":null}}`},
	{`{"eventcontent":{"eventtypeid":"a"},"EventContent":{"EventJson":"b"}}`,
		`{"EventContent":{"EventTypeId":"a","EventJson":"b"},"ErrorContent":null}`},
	{`{"EventContent":{"EventTypeId":"a"},"EventContent":null}`, `{"EventContent":null,"ErrorContent":null}`},
	{`{"EventContent":{"EventTypeId":5}}`, ""},
	{`{"EventContent":[]}`, ""},
	{`{"ErrorContent":{"ErrorText":true}}`, ""},
	{`{"EventContent":{"EventTypeId":"\u00e9\ud83d\ude00","X":{"y":[1,{"z":null}]}},"Other":1}`,
		`{"EventContent":{"EventTypeId":"é😀","EventJson":null},"ErrorContent":null}`},
	{`{"EventContent":{"EventTypeId":"\ud800"}}`, `{"EventContent":{"EventTypeId":"\ufffd","EventJson":null},"ErrorContent":null}`},
	{"{\"EventContent\":{\"EventTypeId\":\"\xff\"}}", `{"EventContent":{"EventTypeId":"\ufffd","EventJson":null},"ErrorContent":null}`},
	{`{"EventContent":{}} trailing`, ""},
	{`{"EventContent":{},}`, ""},
	{`{}`, `{"EventContent":null,"ErrorContent":null}`},
	{` {"EventContent":null} `, `{"EventContent":null,"ErrorContent":null}`},
	{`{"Ev\u0065ntContent":{"EventJson":"k"}}`, `{"EventContent":{"EventTypeId":null,"EventJson":"k"},"ErrorContent":null}`},
	{"{}\x00", ""},
	{"{\"EventContent\":null}\x00 ", ""},
	{`{"EventContent":{"EventTypeId":"a","EventTypeId":null}}`, `{"EventContent":{"EventTypeId":null,"EventJson":null},"ErrorContent":null}`},
	{`{"EventContent":{"EventTypeId":"a"},"eventContent":{"EventJson":"b"}}`, `{"EventContent":{"EventTypeId":"a","EventJson":"b"},"ErrorContent":null}`},
}

func TestParseContentCases(t *testing.T) {
	for _, c := range contentCases {
		got, err := ParseContent([]byte(c.in))
		if c.want == "" {
			if got != nil || !errors.Is(err, ErrInvalidContent) {
				t.Errorf("ParseContent(%q) = %+v, %v; want ErrInvalidContent", c.in, got, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseContent(%q): %v", c.in, err)
			continue
		}
		// The expected texts spell U+FFFD as an escape for readability.
		if s, want := string(got.AppendJSON(nil)), strings.ReplaceAll(c.want, `\ufffd`, "\ufffd"); s != want {
			t.Errorf("ParseContent(%q) = %s, want %s", c.in, s, want)
		}
	}
}

// TestParseContentDepthLimit checks the boundary of Newtonsoft's MaxDepth:
// 32 nested levels are read, 33 are refused, brackets inside strings do
// not count.
func TestParseContentDepthLimit(t *testing.T) {
	nest := func(levels int) string {
		return strings.Repeat(`{"a":`, levels-1) + `{"EventContent":null,"s":"[[[[{{{{"}` + strings.Repeat(`}`, levels-1)
	}
	if _, err := ParseContent([]byte(nest(32))); err != nil {
		t.Errorf("32 levels: %v", err)
	}
	if _, err := ParseContent([]byte(nest(33))); !errors.Is(err, ErrInvalidContent) {
		t.Errorf("33 levels: err = %v, want ErrInvalidContent", err)
	}
}

// FuzzParseContent checks that ParseContent never panics, fails only with
// ErrInvalidContent, and that what it accepts survives a round trip through
// AppendJSON unchanged.
func FuzzParseContent(f *testing.F) {
	for _, c := range contentCases {
		f.Add([]byte(c.in))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := ParseContent(body)
		if err != nil {
			if c != nil || !errors.Is(err, ErrInvalidContent) {
				t.Fatalf("ParseContent(%q) = %+v, %v", body, c, err)
			}
			return
		}
		out := c.AppendJSON(nil)
		again, err := ParseContent(out)
		if err != nil {
			t.Fatalf("AppendJSON output %s does not parse: %v", out, err)
		}
		if !reflect.DeepEqual(c, again) {
			t.Fatalf("round trip of %q changed it: %+v, then %+v", body, c, again)
		}
	})
}
