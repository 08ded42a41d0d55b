package message

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

func TestDeadLetterTexts(t *testing.T) {
	cases := []struct {
		name string
		got  DeadLetter
		want DeadLetter
	}{
		{"unsupported response type", NewUnsupportedTypeDeadLetter(ResolutionResponse), DeadLetter{
			"Failed to handle message.",
			"NimBus.Core.Messages.Exceptions.UnsupportedMessageTypeException: Unsupported MessageType: 'ResolutionResponse'.",
			"Unsupported MessageType: 'ResolutionResponse'.", "UnsupportedMessageTypeException"}},
		{"undefined ordinal", NewUnsupportedTypeDeadLetter(Type(42)), DeadLetter{
			"Failed to handle message.",
			"NimBus.Core.Messages.Exceptions.UnsupportedMessageTypeException: Unsupported MessageType: '42'.",
			"Unsupported MessageType: '42'.", "UnsupportedMessageTypeException"}},
		{"resubmission not from Manager", NewUnauthorizedDeadLetter(ResubmissionRequest), DeadLetter{
			"Failed to handle message.",
			"System.UnauthorizedAccessException: Only Manager is authorized to send ResubmissionRequest messages.",
			"Only Manager is authorized to send ResubmissionRequest messages.", "UnauthorizedAccessException"}},
		{"missing EventId", NewInvalidMessageDeadLetter(PropertyNotDefinedText(PropEventID)), DeadLetter{
			"Failed to handle message.",
			"NimBus.Core.Messages.Exceptions.InvalidMessageException: Message.UserProperties[EventId] is not defined.",
			"Message.UserProperties[EventId] is not defined.", "InvalidMessageException"}},
		{"unparseable type", NewInvalidMessageDeadLetter(UnparseableMessageTypeText("Nope")), DeadLetter{
			"Failed to handle message.",
			"NimBus.Core.Messages.Exceptions.InvalidMessageException: Unable to parse MessageType from 'Nope'.",
			"Unable to parse MessageType from 'Nope'.", "InvalidMessageException"}},
		{"type mismatch", NewTypeMismatchDeadLetter("A", "B"), DeadLetter{
			"Permanent failure: InvalidOperationException: Message EventTypeId mismatch: authoritative context value 'A' does not match body value 'B'.",
			"System.InvalidOperationException: Message EventTypeId mismatch: authoritative context value 'A' does not match body value 'B'.",
			"Message EventTypeId mismatch: authoritative context value 'A' does not match body value 'B'.", "InvalidOperationException"}},
		{"handler permanent", NewPermanentDeadLetter("Shop.Billing.CardDeclinedException", "declined"), DeadLetter{
			"Permanent failure: CardDeclinedException: declined",
			"Shop.Billing.CardDeclinedException: declined", "declined", "CardDeclinedException"}},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s:\n got %#v\nwant %#v", c.name, c.got, c.want)
		}
	}
	if ExceptionString("System.Exception", "") != "System.Exception" {
		t.Error(".NET prints the type alone for an empty message")
	}
	if DeadLetterReasonPermanent("X", "y") != "Permanent failure: X: y" || DeadLetterReasonUnexpected != "Failed to handle message." {
		t.Error("reason texts")
	}
	if UnsupportedMessageTypeText(ProcessDeferredRequest) != "Unsupported MessageType: 'ProcessDeferredRequest'." {
		t.Error("ProcessDeferredRequest text")
	}
}

func utf16Len(s string) int { return len(utf16.Encode([]rune(s))) }

func TestTruncateDeadLetterDescription(t *testing.T) {
	if len(TruncationMarker) != 18 || utf16Len(TruncationMarker) != 18 {
		t.Fatal("marker must be 18 units")
	}
	x := func(n int) string { return strings.Repeat("x", n) }
	for _, n := range []int{4095, 4096} {
		s := x(n)
		if got := TruncateDeadLetterDescription(s); got != s {
			t.Errorf("%d units must stay unchanged", n)
		}
	}
	got := TruncateDeadLetterDescription(x(4097))
	if got != x(4078)+TruncationMarker || utf16Len(got) != 4096 {
		t.Errorf("4097 units: %d units, suffix %q", utf16Len(got), got[len(got)-20:])
	}

	// NimBus counts UTF-16 units, not bytes: 4,096 two-byte characters
	// (8,192 bytes) fit; one more does not.
	e := strings.Repeat("é", 4096)
	if TruncateDeadLetterDescription(e) != e {
		t.Error("4096 two-byte characters must stay unchanged")
	}
	if got := TruncateDeadLetterDescription(e + "é"); got != strings.Repeat("é", 4078)+TruncationMarker {
		t.Errorf("4097 two-byte characters: %d units", utf16Len(got))
	}
	// A supplementary character is two units: 2,048 of them fit exactly.
	g := strings.Repeat("😀", 2048)
	if TruncateDeadLetterDescription(g) != g {
		t.Error("2048 surrogate pairs (4096 units) must stay unchanged")
	}
	// 4,077 units of x then a pair: the cut at 4,078 splits the pair, and
	// .NET's UTF-8 encoder writes the lone high surrogate as U+FFFD.
	split := x(4077) + strings.Repeat("😀", 10)
	if got := TruncateDeadLetterDescription(split); got != x(4077)+"\uFFFD"+TruncationMarker {
		t.Errorf("split pair: suffix %q", got[len(got)-25:])
	}

	// NimBus's DeadLetter_LongException_TruncatesAtNewline: lines are kept
	// whole, cut back to the last line feed before the limit.
	var lines []string
	for i := range 200 {
		lines = append(lines, fmt.Sprintf("Line %d: %s", i, x(30)))
	}
	long := "System.InvalidOperationException: " + strings.Join(lines, "\n")
	got = TruncateDeadLetterDescription(long)
	if utf16Len(got) > 4096 || !strings.HasSuffix(got, "...[TRUNCATED]...") {
		t.Fatalf("long: %d units", utf16Len(got))
	}
	body := strings.TrimSuffix(got, TruncationMarker)
	if !strings.HasPrefix(long, body) || long[len(body)] != '\n' {
		t.Errorf("must cut at a line feed: next char %q", long[len(body)])
	}
	// A first line feed at index 0 does not count: the plain cut applies.
	lf := "\n" + x(5000)
	if got := TruncateDeadLetterDescription(lf); got != lf[:4078]+TruncationMarker {
		t.Error("a leading line feed must not trigger the line cut")
	}
	// Only one line feed (the first) inside the window: plain cut.
	one := x(10) + "\n" + x(5000)
	if got := TruncateDeadLetterDescription(one); got != one[:4078]+TruncationMarker {
		t.Error("a single line feed must not trigger the line cut")
	}
	// The dead-letter response carries the bounded description.
	out := NewDeadLetterResponse(failedEvent(t, nil), DeadLetter{Reason: "r", Description: x(5000), ErrText: "boom", ErrType: "X"}, tm)
	if d := out.ApplicationProperties[PropDeadLetterErrorDesc].(string); d != x(4078)+TruncationMarker {
		t.Errorf("response description has %d units", utf16Len(d))
	}
}

// truncateReference is NimBus's FormatExceptionForDeadLetter written over
// UTF-16 units, line by line, to check the allocation-free version.
func truncateReference(s string) string {
	u := utf16.Encode([]rune(s))
	if len(u) <= MaxDeadLetterDescription {
		return s
	}
	avail := MaxDeadLetterDescription - utf16Len(TruncationMarker)
	first := -1
	for i, v := range u {
		if v == '\n' {
			first = i
			break
		}
	}
	if first > 0 && first < avail {
		t := u[:avail]
		last := -1
		for i := len(t) - 1; i >= 0; i-- {
			if t[i] == '\n' {
				last = i
				break
			}
		}
		if last > first {
			t = t[:last]
		}
		return string(utf16.Decode(t)) + TruncationMarker
	}
	return string(utf16.Decode(u[:avail])) + TruncationMarker
}

func FuzzTruncateDeadLetterDescription(f *testing.F) {
	f.Add("ab\ncd", 2100, 3)
	f.Add("😀\n", 1400, 1)
	f.Add("é", 4097, 0)
	f.Fuzz(func(t *testing.T, unit string, repeat, prefix int) {
		if !utf8.ValidString(unit) || repeat < 0 || repeat > 6000 || prefix < 0 || prefix > 8 {
			t.Skip()
		}
		s := strings.Repeat("x", prefix) + strings.Repeat(unit, repeat)
		if got, want := TruncateDeadLetterDescription(s), truncateReference(s); got != want {
			t.Fatalf("len %d: got %d units, reference %d units", utf16Len(s), utf16Len(got), utf16Len(want))
		}
	})
}
