package message

// Failure texts and .NET type names NimBus reports on error, deferral and
// discard responses.
const (
	// ErrorTypeSessionBlocked is the ErrorType of a DeferralResponse.
	ErrorTypeSessionBlocked = "SessionBlockedException"
	// ErrorTypeHandoffFailed is the ErrorType of the ErrorResponse that
	// answers a HandoffFailedRequest: NimBus wraps the operator's text in a
	// HandoffFailedException and reports that type, not the inbound
	// ErrorType.
	ErrorTypeHandoffFailed = "HandoffFailedException"
	// HandoffFailedDefaultText is the ErrorText when a HandoffFailedRequest
	// carries no ErrorContent.ErrorText.
	HandoffFailedDefaultText = "Handoff failed."

	// DefaultDiscardClassifier is the full type name of NimBus's default
	// failure-disposition classifier, named in a Discard SkipResponse.
	DefaultDiscardClassifier = "NimBus.Core.Messages.DefaultFailureDispositionClassifier"
)

// errorContent is ResponseService.CreateErrorContent: ErrorText, ErrorType
// (nil when ""), null stack trace and source, and the inbound EventContent.
func (in *Inbound) errorContent(errText, errType string) *Content {
	ec := &ErrorContent{ErrorText: Ptr(errText)}
	if errType != "" {
		ec.ErrorType = Ptr(errType)
	}
	return &Content{EventContent: in.eventContent(), ErrorContent: ec}
}

// NewErrorResponse builds the ErrorResponse NimBus's
// ResponseService.SendErrorResponse sends for a failed event:
// ErrorContent{ErrorText: errText, ErrorType: errType (null when ""),
// ExceptionStackTrace: null, ExceptionSource: null} with the inbound
// EventContent, and the common response properties (see NewResponse).
func NewErrorResponse(in *Inbound, errText, errType string, t Timings) *Outgoing {
	props := make(map[string]any, 13)
	props[PropTo] = ResolverID
	props[PropMessageType] = ErrorResponse.String()
	return finish(in, props, t, in.errorContent(errText, errType).AppendJSON(make([]byte, 0, 256)))
}

// NewDeadLetterResponse builds the ErrorResponse NimBus's
// SendDeadLetterResponse sends before a message is dead-lettered:
// DeadLetterReason = d.Reason and DeadLetterErrorDescription =
// d.Description (d.Reason when d.Description is ""), each written only when
// non-empty. The description is bounded by TruncateDeadLetterDescription:
// NimBus applies that bound on the broker's dead-letter call, and a custom
// handler cannot make that call, so this notification is where the bounded
// text is reported. The body is the error content of d.ErrText and
// d.ErrType (as NewErrorResponse) when d.ErrText is not "" (NimBus: an
// exception was given), else {EventContent: inbound, ErrorContent: null}.
func NewDeadLetterResponse(in *Inbound, d DeadLetter, t Timings) *Outgoing {
	props := make(map[string]any, 15)
	props[PropTo] = ResolverID
	props[PropMessageType] = ErrorResponse.String()
	var c *Content
	if d.ErrText != "" {
		c = in.errorContent(d.ErrText, d.ErrType)
	} else {
		c = &Content{EventContent: in.eventContent()}
	}
	description := d.Description
	if description == "" {
		description = d.Reason
	}
	description = TruncateDeadLetterDescription(description)
	if d.Reason != "" {
		props[PropDeadLetterReason] = d.Reason
	}
	if description != "" {
		props[PropDeadLetterErrorDesc] = description
	}
	return finish(in, props, t, c.AppendJSON(make([]byte, 0, 256)))
}

// SessionBlockedText is the message of NimBus's SessionBlockedException:
// "Session {SessionId} is blocked by {blockedBy}" (an absent SessionId is
// empty, as .NET interpolates null).
func SessionBlockedText(in *Inbound, blockedBy string) string {
	sid := ""
	if in.SessionID != nil {
		sid = *in.SessionID
	}
	return "Session " + sid + " is blocked by " + blockedBy
}

// NewDeferralResponse builds the DeferralResponse NimBus sends when it
// parks a message behind a blocked session: ErrorText "Session {SessionId}
// is blocked by {blockedBy}", ErrorType "SessionBlockedException", the
// inbound EventContent.
func NewDeferralResponse(in *Inbound, blockedBy string, t Timings) *Outgoing {
	props := make(map[string]any, 13)
	props[PropTo] = ResolverID
	props[PropMessageType] = DeferralResponse.String()
	c := in.errorContent(SessionBlockedText(in, blockedBy), ErrorTypeSessionBlocked)
	return finish(in, props, t, c.AppendJSON(make([]byte, 0, 256)))
}

// NewDiscardResponse builds the SkipResponse NimBus's SendDiscardResponse
// sends for a failure classified Discard: ErrorText "{errType}: {msg}
// Classified as Discard by {classifier}.", ErrorType errType, the inbound
// EventContent. The session is not blocked.
func NewDiscardResponse(in *Inbound, errType, msg, classifier string, t Timings) *Outgoing {
	props := make(map[string]any, 13)
	props[PropTo] = ResolverID
	props[PropMessageType] = SkipResponse.String()
	text := errType + ": " + msg + " Classified as Discard by " + classifier + "."
	return finish(in, props, t, in.errorContent(text, errType).AppendJSON(make([]byte, 0, 256)))
}

// NewSkipResponse builds the answer to an operator SkipRequest
// (SendSkipResponse): a SkipResponse whose body is the empty content
// {"EventContent":null,"ErrorContent":null}.
func NewSkipResponse(in *Inbound, t Timings) *Outgoing {
	props := make(map[string]any, 13)
	props[PropTo] = ResolverID
	props[PropMessageType] = SkipResponse.String()
	return finish(in, props, t, (&Content{}).AppendJSON(make([]byte, 0, 48)))
}

// HandoffError returns the ErrorText and ErrorType of the ErrorResponse
// NimBus sends for a HandoffFailedRequest: the inbound
// ErrorContent.ErrorText, or "Handoff failed." when absent, and
// "HandoffFailedException" (NimBus reports its synthetic wrapper's type,
// not the operator's ErrorType).
func HandoffError(in *Inbound) (errText, errType string) {
	errText = HandoffFailedDefaultText
	if in.Content != nil && in.Content.ErrorContent != nil && in.Content.ErrorContent.ErrorText != nil {
		errText = *in.Content.ErrorContent.ErrorText
	}
	return errText, ErrorTypeHandoffFailed
}
