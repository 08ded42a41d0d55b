package message

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

const testBody = `{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1\"}"},"ErrorContent":null}`

// failedEvent is an EventRequest as a forwarder rule delivers it, with
// RetryCount absent unless rc is given.
func failedEvent(t *testing.T, extra map[string]any) *Inbound {
	t.Helper()
	props := map[string]any{
		"To": "billing", "From": "shop", "MessageType": "EventRequest", "EventId": "ev-1",
		"OriginatingMessageId": "self", "ParentMessageId": "self", "OriginatingFrom": "shop",
		"EventTypeId": "OrderPlaced",
	}
	for k, v := range extra {
		if v == nil {
			delete(props, k)
			continue
		}
		props[k] = v
	}
	in, err := Read(Broker{MessageID: Ptr("m-1"), SessionID: Ptr("s-1"), CorrelationID: Ptr("c-1")}, props, []byte(testBody))
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// checkProps compares every property: name, Go (AMQP) type and value.
func checkProps(t *testing.T, got, want map[string]any) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("property %s missing; want %T %#v", k, w, w)
			continue
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("property %s = %T %#v; want %T %#v", k, g, g, w, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected property %s = %T %#v", k, g, g)
		}
	}
}

// responseProps are the common response properties for failedEvent with
// Timings{QueueTimeMs: 5, ProcessingTimeMs: 7}.
func responseProps(mt string, extra map[string]any) map[string]any {
	p := map[string]any{
		"To": "Resolver", "MessageType": mt, "EventId": "ev-1", "OriginatingMessageId": "m-1",
		"ParentMessageId": "m-1", "RetryCount": int32(0), "OriginatingFrom": "shop", "EventTypeId": "OrderPlaced",
		"QueueTimeMs": int64(5), "ProcessingTimeMs": int64(7),
	}
	for k, v := range extra {
		p[k] = v
	}
	return p
}

var tm = Timings{QueueTimeMs: 5, ProcessingTimeMs: 7}

const eventContentJSON = `{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1\"}"}`

func TestResponseBuilders(t *testing.T) {
	in := failedEvent(t, nil)
	cases := []struct {
		name  string
		out   *Outgoing
		props map[string]any
		body  string
	}{
		{"error", NewErrorResponse(in, "boom", "InvalidOperationException", tm),
			responseProps("ErrorResponse", nil),
			`{"EventContent":` + eventContentJSON + `,"ErrorContent":{"ErrorText":"boom","ErrorType":"InvalidOperationException","ExceptionStackTrace":null,"ExceptionSource":null}}`},
		{"error without type", NewErrorResponse(in, "boom", "", tm),
			responseProps("ErrorResponse", nil),
			`{"EventContent":` + eventContentJSON + `,"ErrorContent":{"ErrorText":"boom","ErrorType":null,"ExceptionStackTrace":null,"ExceptionSource":null}}`},
		{"deferral", NewDeferralResponse(in, "ev-0", tm),
			responseProps("DeferralResponse", nil),
			`{"EventContent":` + eventContentJSON + `,"ErrorContent":{"ErrorText":"Session s-1 is blocked by ev-0","ErrorType":"SessionBlockedException","ExceptionStackTrace":null,"ExceptionSource":null}}`},
		{"discard", NewDiscardResponse(in, "InvalidOperationException", "no stock", DefaultDiscardClassifier, tm),
			responseProps("SkipResponse", nil),
			`{"EventContent":` + eventContentJSON + `,"ErrorContent":{"ErrorText":"InvalidOperationException: no stock Classified as Discard by NimBus.Core.Messages.DefaultFailureDispositionClassifier.","ErrorType":"InvalidOperationException","ExceptionStackTrace":null,"ExceptionSource":null}}`},
		{"skip", NewSkipResponse(in, tm),
			responseProps("SkipResponse", nil),
			`{"EventContent":null,"ErrorContent":null}`},
		{"dead letter with exception", NewDeadLetterResponse(in, "Failed to handle message.", "System.InvalidOperationException: boom", "boom", "InvalidOperationException", tm),
			responseProps("ErrorResponse", map[string]any{"DeadLetterReason": "Failed to handle message.", "DeadLetterErrorDescription": "System.InvalidOperationException: boom"}),
			`{"EventContent":` + eventContentJSON + `,"ErrorContent":{"ErrorText":"boom","ErrorType":"InvalidOperationException","ExceptionStackTrace":null,"ExceptionSource":null}}`},
		// NimBus's SendDeadLetterResponse_WithoutException_StillCarriesReason:
		// no exception → the description is the reason and the body carries
		// only the event.
		{"dead letter without exception", NewDeadLetterResponse(in, "Validation failed: EventId is required", "", "", "", tm),
			responseProps("ErrorResponse", map[string]any{"DeadLetterReason": "Validation failed: EventId is required", "DeadLetterErrorDescription": "Validation failed: EventId is required"}),
			`{"EventContent":` + eventContentJSON + `,"ErrorContent":null}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkProps(t, c.out.ApplicationProperties, c.props)
			if string(c.out.Body) != c.body {
				t.Errorf("body\n got %s\nwant %s", c.out.Body, c.body)
			}
			if c.out.SessionID != "s-1" || c.out.CorrelationID == nil || *c.out.CorrelationID != "m-1" {
				t.Errorf("session %q correlation %v; want s-1, m-1 (the inbound MessageId)", c.out.SessionID, c.out.CorrelationID)
			}
		})
	}
}

func TestErrorResponseWithoutContentHasNullEvent(t *testing.T) {
	in, err := Read(Broker{MessageID: Ptr("m-1"), SessionID: Ptr("s-1")}, map[string]any{
		"To": "billing", "From": "shop", "MessageType": "EventRequest", "EventId": nil}, []byte("not json"))
	if err != nil {
		t.Fatal(err)
	}
	out := NewDeadLetterResponseFor(in, DeadLetterUnreadableBody(), Timings{QueueTimeMs: -1})
	want := `{"EventContent":null,"ErrorContent":{"ErrorText":"MessageContent is null.","ErrorType":"InvalidMessageException","ExceptionStackTrace":null,"ExceptionSource":null}}`
	if string(out.Body) != want {
		t.Fatalf("body %s", out.Body)
	}
	checkProps(t, out.ApplicationProperties, map[string]any{
		"To": "Resolver", "MessageType": "ErrorResponse", "EventId": nil, "OriginatingMessageId": "m-1",
		"ParentMessageId": "m-1", "RetryCount": int32(0), "OriginatingFrom": "shop", "EventTypeId": nil,
		"ProcessingTimeMs":           int64(0),
		"DeadLetterReason":           "Permanent failure: InvalidMessageException: MessageContent is null.",
		"DeadLetterErrorDescription": "NimBus.Core.Messages.Exceptions.InvalidMessageException: MessageContent is null.",
	})
}

func TestDeadLetterTexts(t *testing.T) {
	cases := []struct {
		name string
		got  DeadLetter
		want DeadLetter
	}{
		{"unsupported response type", DeadLetterUnsupportedType(ResolutionResponse), DeadLetter{
			"Failed to handle message.",
			"NimBus.Core.Messages.Exceptions.UnsupportedMessageTypeException: Unsupported MessageType: 'ResolutionResponse'.",
			"Unsupported MessageType: 'ResolutionResponse'.", "UnsupportedMessageTypeException"}},
		{"undefined ordinal", DeadLetterUnsupportedType(Type(42)), DeadLetter{
			"Failed to handle message.",
			"NimBus.Core.Messages.Exceptions.UnsupportedMessageTypeException: Unsupported MessageType: '42'.",
			"Unsupported MessageType: '42'.", "UnsupportedMessageTypeException"}},
		{"resubmission not from Manager", DeadLetterUnauthorized(ResubmissionRequest), DeadLetter{
			"Failed to handle message.",
			"System.UnauthorizedAccessException: Only Manager is authorized to send ResubmissionRequest messages.",
			"Only Manager is authorized to send ResubmissionRequest messages.", "UnauthorizedAccessException"}},
		{"missing EventId", DeadLetterInvalidMessage(PropertyNotDefinedText(PropEventID)), DeadLetter{
			"Failed to handle message.",
			"NimBus.Core.Messages.Exceptions.InvalidMessageException: Message.UserProperties[EventId] is not defined.",
			"Message.UserProperties[EventId] is not defined.", "InvalidMessageException"}},
		{"unparseable type", DeadLetterInvalidMessage(UnparseableMessageTypeText("Nope")), DeadLetter{
			"Failed to handle message.",
			"NimBus.Core.Messages.Exceptions.InvalidMessageException: Unable to parse MessageType from 'Nope'.",
			"Unable to parse MessageType from 'Nope'.", "InvalidMessageException"}},
		{"type mismatch", DeadLetterTypeMismatch("A", "B"), DeadLetter{
			"Permanent failure: InvalidOperationException: Message EventTypeId mismatch: authoritative context value 'A' does not match body value 'B'.",
			"System.InvalidOperationException: Message EventTypeId mismatch: authoritative context value 'A' does not match body value 'B'.",
			"Message EventTypeId mismatch: authoritative context value 'A' does not match body value 'B'.", "InvalidOperationException"}},
		{"handler permanent", PermanentDeadLetter("Shop.Billing.CardDeclinedException", "declined"), DeadLetter{
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
	out := NewDeadLetterResponse(failedEvent(t, nil), "r", x(5000), "boom", "X", tm)
	if d := out.ApplicationProperties[PropDeadLetterErrorDesc].(string); d != x(4078)+TruncationMarker {
		t.Errorf("response description has %d units", utf16Len(d))
	}
}

func TestOriginatingMessageIDRule(t *testing.T) {
	cases := []struct {
		orig any
		msg  *string
		want string
	}{
		{"self", Ptr("m-1"), "m-1"},
		{"SELF", Ptr("m-1"), "m-1"}, // case-insensitive
		{nil, Ptr("m-1"), "m-1"},    // absent reads as self
		{"o-9", Ptr("m-1"), "o-9"},
		{"self", nil, "self"}, // no MessageId: written as self
	}
	for _, c := range cases {
		props := map[string]any{"To": "billing", "From": "shop", "MessageType": "EventRequest", "EventId": "e"}
		if c.orig != nil {
			props["OriginatingMessageId"] = c.orig
		}
		in, err := Read(Broker{MessageID: c.msg, SessionID: Ptr("s")}, props, []byte(testBody))
		if err != nil {
			t.Fatal(err)
		}
		for name, out := range map[string]*Outgoing{
			"error": NewErrorResponse(in, "x", "", tm), "parked": NewParkedCopy(in, nil, 0, ""),
			"retry": NewRetryRequest(in, nil, ""), "process": NewProcessDeferredRequest(in),
		} {
			if got := out.ApplicationProperties[PropOriginatingMessageID]; got != c.want {
				t.Errorf("%s: orig %v msg %v → %v, want %s", name, c.orig, c.msg, got, c.want)
			}
			wantParent := "self"
			if c.msg != nil {
				wantParent = *c.msg
			}
			if got := out.ApplicationProperties[PropParentMessageID]; got != wantParent {
				t.Errorf("%s: ParentMessageId %v, want %s", name, got, wantParent)
			}
		}
	}
}

func TestNewParkedCopy(t *testing.T) {
	in := failedEvent(t, map[string]any{"RetryCount": "2", "OriginatingMessageId": "o-1"})
	body := []byte(" {\"EventContent\":null} ") // sent unchanged, even when not canonical
	out := NewParkedCopy(in, body, 7, "m-1")
	checkProps(t, out.ApplicationProperties, map[string]any{
		"To": "Deferred", "From": "shop", "MessageType": "EventRequest", "EventId": "ev-1",
		"OriginatingMessageId": "o-1", "ParentMessageId": "m-1", "RetryCount": int32(2), "OriginatingFrom": "shop",
		"EventTypeId": "OrderPlaced", "OriginalSessionId": "s-1", "DeferralSequence": int32(7), "InboxMessageId": "m-1",
	})
	if string(out.Body) != string(body) || out.SessionID != "s-1" || *out.CorrelationID != "c-1" {
		t.Fatalf("body %q session %q correlation %q (want the inbound CorrelationId c-1)", out.Body, out.SessionID, *out.CorrelationID)
	}
	// No stand-in id: no InboxMessageId; RetryCount absent → 0; the
	// MessageType of a control request is kept.
	rs, err := Read(Broker{MessageID: Ptr("m-2"), SessionID: Ptr("s-1")}, map[string]any{
		"To": "billing", "From": "Manager", "MessageType": "ResubmissionRequest", "EventId": "ev-1"}, []byte(testBody))
	if err != nil {
		t.Fatal(err)
	}
	out = NewParkedCopy(rs, []byte(testBody), 0, "")
	checkProps(t, out.ApplicationProperties, map[string]any{
		"To": "Deferred", "From": "Manager", "MessageType": "ResubmissionRequest", "EventId": "ev-1",
		"OriginatingMessageId": "m-2", "ParentMessageId": "m-2", "RetryCount": int32(0), "OriginatingFrom": "Manager",
		"EventTypeId": "OrderPlaced", "OriginalSessionId": "s-1", "DeferralSequence": int32(0),
	})
	if out.CorrelationID != nil {
		t.Fatal("an absent inbound CorrelationId stays absent")
	}
}

func TestNewProcessDeferredRequest(t *testing.T) {
	in := failedEvent(t, map[string]any{"RetryCount": "3"})
	out := NewProcessDeferredRequest(in)
	checkProps(t, out.ApplicationProperties, map[string]any{
		"To": "DeferredProcessor", "MessageType": "ProcessDeferredRequest", "EventId": "ev-1",
		"OriginatingMessageId": "m-1", "ParentMessageId": "m-1", "RetryCount": int32(0), "OriginatingFrom": "self",
		"EventTypeId": "OrderPlaced",
	})
	if string(out.Body) != `{"EventContent":null,"ErrorContent":null}` || out.SessionID != "s-1" || *out.CorrelationID != "m-1" {
		t.Fatalf("body %s session %q correlation %q", out.Body, out.SessionID, *out.CorrelationID)
	}
}

func TestNewRetryRequest(t *testing.T) {
	cases := []struct {
		rc    any
		want  int32
		inbox string
	}{
		{nil, 1, "m-0"},   // absent → 1
		{"x", 1, ""},      // unreadable → null → 1
		{int32(2), 3, ""}, // NimBus's SendRetryResponse_RoutesToRetryWithIncrementedCount
		{"0", 1, "m-0"},
	}
	for _, c := range cases {
		in := failedEvent(t, map[string]any{"RetryCount": c.rc})
		out := NewRetryRequest(in, []byte(testBody), c.inbox)
		want := map[string]any{
			"To": "Retry", "MessageType": "RetryRequest", "EventId": "ev-1", "OriginatingMessageId": "m-1",
			"ParentMessageId": "m-1", "RetryCount": c.want, "OriginatingFrom": "shop", "EventTypeId": "OrderPlaced",
		}
		if c.inbox != "" {
			want["InboxMessageId"] = c.inbox
		}
		checkProps(t, out.ApplicationProperties, want)
		if string(out.Body) != testBody || *out.CorrelationID != "m-1" || out.SessionID != "s-1" {
			t.Fatalf("rc %v: body %s correlation %q", c.rc, out.Body, *out.CorrelationID)
		}
	}
}

func TestReplayedProperties(t *testing.T) {
	parked := NewParkedCopy(failedEvent(t, nil), nil, 4, "m-1").ApplicationProperties
	parked["traceparent"] = "00-abc-def-01"
	parked["deferralsequence"] = "kept: names compare exactly"
	before := fmt.Sprint(parked)
	got := ReplayedProperties(parked, "billing")
	checkProps(t, got, map[string]any{
		"To": "billing", "From": "shop", "MessageType": "EventRequest", "EventId": "ev-1",
		"OriginatingMessageId": "m-1", "ParentMessageId": "m-1", "RetryCount": int32(0), "OriginatingFrom": "shop",
		"EventTypeId": "OrderPlaced", "InboxMessageId": "m-1", "traceparent": "00-abc-def-01",
		"deferralsequence": "kept: names compare exactly",
	})
	if fmt.Sprint(parked) != before {
		t.Fatal("the parked map must not change")
	}
}

func TestDeferralSequenceOf(t *testing.T) {
	cases := []struct {
		v    any
		want int64
		ok   bool
	}{
		{int32(7), 7, true}, {int64(8), 8, true}, {9, 9, true}, {"10", 10, true}, {" 11 ", 11, true},
		{"+12", 12, true}, {"-1", -1, true}, {"2147483648", 0, false}, {int64(1 << 40), 0, false},
		{"x", 0, false}, {nil, 0, false}, {"", 0, false},
	}
	for _, c := range cases {
		got, ok := DeferralSequenceOf(map[string]any{"DeferralSequence": c.v})
		if got != c.want || ok != c.ok {
			t.Errorf("%#v → %d, %v; want %d, %v", c.v, got, ok, c.want, c.ok)
		}
	}
	if got, ok := DeferralSequenceOf(map[string]any{}); got != 0 || ok {
		t.Error("missing must be 0, false")
	}
}

func TestHandoffError(t *testing.T) {
	in, err := Read(Broker{MessageID: Ptr("m")}, map[string]any{"To": "b", "From": "Manager", "MessageType": "HandoffFailedRequest", "EventId": "e"},
		[]byte(`{"EventContent":null,"ErrorContent":{"ErrorText":"ERP rejected","ErrorType":"ErpError","ExceptionStackTrace":null,"ExceptionSource":null}}`))
	if err != nil {
		t.Fatal(err)
	}
	if text, typ := HandoffError(in); text != "ERP rejected" || typ != "HandoffFailedException" {
		t.Fatalf("got %q %q", text, typ)
	}
	in.Content = &Content{}
	if text, typ := HandoffError(in); text != "Handoff failed." || typ != "HandoffFailedException" {
		t.Fatalf("got %q %q", text, typ)
	}
	in.Content = nil
	if text, _ := HandoffError(in); text != "Handoff failed." {
		t.Fatalf("got %q", text)
	}
}

func BenchmarkFailureBuilders(b *testing.B) {
	in, err := Read(Broker{MessageID: Ptr("m-1"), SessionID: Ptr("s-1"), CorrelationID: Ptr("c-1")}, map[string]any{
		"To": "billing", "From": "shop", "MessageType": "EventRequest", "EventId": "ev-1", "EventTypeId": "OrderPlaced"}, []byte(testBody))
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(testBody)
	long := strings.Repeat("at Frame.Method() in File.cs:line 42\n", 200)
	for _, c := range []struct {
		name string
		f    func() *Outgoing
	}{
		{"ErrorResponse", func() *Outgoing { return NewErrorResponse(in, "boom", "X", tm) }},
		{"DeferralResponse", func() *Outgoing { return NewDeferralResponse(in, "ev-0", tm) }},
		{"ParkedCopy", func() *Outgoing { return NewParkedCopy(in, body, 3, "m-1") }},
		{"RetryRequest", func() *Outgoing { return NewRetryRequest(in, body, "m-1") }},
		{"DeadLetterResponse7KB", func() *Outgoing { return NewDeadLetterResponse(in, "r", long, "boom", "X", tm) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if c.f() == nil {
					b.Fatal("nil")
				}
			}
		})
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
