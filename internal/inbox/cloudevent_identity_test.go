package inbox

import (
	"strings"
	"testing"
)

func TestCloudEventMessageID(t *testing.T) {
	p := func(s string) *string { return &s }
	got, reason := CloudEventMessageID(p("/crm"), p("evt-1"))
	if got != "cloudevents\x1f4\x1f/crm\x1fevt-1" || reason != BypassNone {
		t.Fatalf("%q %q", got, reason)
	}
	// The source length makes the split unambiguous.
	a, _ := CloudEventMessageID(p("a\x1f1"), p("b"))
	b, _ := CloudEventMessageID(p("a"), p("1\x1fb"))
	if a == b {
		t.Fatalf("(a\\x1f1, b) and (a, 1\\x1fb) share the key %q", a)
	}
	// UTF-16 length: a rune outside the BMP counts two.
	if got, _ := CloudEventMessageID(p("😀"), p("x")); got != "cloudevents\x1f2\x1f😀\x1fx" {
		t.Fatalf("%q", got)
	}
	for _, c := range []struct{ source, id *string }{{nil, p("x")}, {p("s"), nil}, {p(" "), p("x")}, {p("s"), p("\t")}} {
		if _, reason := CloudEventMessageID(c.source, c.id); reason != BypassMissing {
			t.Errorf("%v: reason %q", c, reason)
		}
	}
	// 11 + 1 + 3 + 1 + 494 + 1 + id: a one-unit id makes exactly 512 (kept), two 513.
	src := strings.Repeat("s", 494)
	if _, reason := CloudEventMessageID(&src, p("0")); reason != BypassNone {
		t.Fatalf("512 units: %q", reason)
	}
	if _, reason := CloudEventMessageID(&src, p("01")); reason != BypassTooLong {
		t.Fatalf("513 units: %q", reason)
	}
}
