package message

import (
	"testing"
)

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
		{"dead letter with exception", NewDeadLetterResponse(in, DeadLetter{Reason: "Failed to handle message.", Description: "System.InvalidOperationException: boom", ErrText: "boom", ErrType: "InvalidOperationException"}, tm),
			responseProps("ErrorResponse", map[string]any{"DeadLetterReason": "Failed to handle message.", "DeadLetterErrorDescription": "System.InvalidOperationException: boom"}),
			`{"EventContent":` + eventContentJSON + `,"ErrorContent":{"ErrorText":"boom","ErrorType":"InvalidOperationException","ExceptionStackTrace":null,"ExceptionSource":null}}`},
		// NimBus's SendDeadLetterResponse_WithoutException_StillCarriesReason:
		// no exception → the description is the reason and the body carries
		// only the event.
		{"dead letter without exception", NewDeadLetterResponse(in, DeadLetter{Reason: "Validation failed: EventId is required"}, tm),
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
	out := NewDeadLetterResponse(in, NewUnreadableBodyDeadLetter(), Timings{QueueTimeMs: -1})
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
