package message

import (
	"strconv"
	"strings"
)

// MaxDeadLetterDescription is NimBus's bound on a dead-letter description,
// counted in UTF-16 code units (.NET string length). A longer text is cut
// to MaxDeadLetterDescription-len(TruncationMarker) units and the marker is
// appended, so the result never exceeds the bound.
const MaxDeadLetterDescription = 4096

// TruncationMarker ends a truncated dead-letter description (18 UTF-16
// units: a line feed, "...[TRUNCATED]...").
const TruncationMarker = "\n...[TRUNCATED]..."

// Failure texts and .NET type names NimBus reports.
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

	// DeadLetterReasonUnexpected is the dead-letter reason of every failure
	// NimBus's MessageHandler catches as an unexpected exception: an
	// unsupported MessageType, a Manager-only request from another sender,
	// a message whose properties cannot be read.
	DeadLetterReasonUnexpected = "Failed to handle message."
	// DeadLetterReasonPermanentBare is the reason of a permanent failure
	// without an inner exception.
	DeadLetterReasonPermanentBare = "Permanent failure"

	// DefaultDiscardClassifier is the full type name of NimBus's default
	// failure-disposition classifier, named in a Discard SkipResponse.
	DefaultDiscardClassifier = "NimBus.Core.Messages.DefaultFailureDispositionClassifier"
)

// Full .NET type names of the exceptions behind NimBus's dead-letter
// descriptions (Exception.ToString starts with the full type name).
const (
	TypeUnsupportedMessageTypeException = "NimBus.Core.Messages.Exceptions.UnsupportedMessageTypeException"
	TypeInvalidMessageException         = "NimBus.Core.Messages.Exceptions.InvalidMessageException"
	TypeUnauthorizedAccessException     = "System.UnauthorizedAccessException"
	TypeInvalidOperationException       = "System.InvalidOperationException"
	TypeTransientException              = "NimBus.Core.Messages.Exceptions.TransientException"
	TypePermanentFailureException       = "NimBus.Core.Messages.Exceptions.PermanentFailureException"
)

// DeadLetterReasonPermanent is the dead-letter reason NimBus gives a
// permanent failure: "Permanent failure: {inner simple type}: {message}".
func DeadLetterReasonPermanent(errType, msg string) string {
	return "Permanent failure: " + errType + ": " + msg
}

// UnsupportedMessageTypeText is the message of NimBus's
// UnsupportedMessageTypeException: "Unsupported MessageType: '{t}'." (the
// ordinal for a value NimBus does not define, as .NET prints an enum).
func UnsupportedMessageTypeText(t Type) string {
	return "Unsupported MessageType: '" + t.String() + "'."
}

// UnauthorizedText is the message of the UnauthorizedAccessException NimBus
// throws for a ResubmissionRequest, SkipRequest, HandoffCompletedRequest or
// HandoffFailedRequest whose From is not Manager (compared ignoring case).
func UnauthorizedText(t Type) string {
	return "Only " + ManagerID + " is authorized to send " + t.String() + " messages."
}

// InvalidMessage texts: the messages of NimBus's InvalidMessageException
// for a message its MessageContext cannot read.

// PropertyNotDefinedText is "Message.UserProperties[{name}] is not defined.",
// for a missing To, From, EventId, MessageType or EventTypeId.
func PropertyNotDefinedText(name string) string {
	return "Message.UserProperties[" + name + "] is not defined."
}

// UnparseableMessageTypeText is "Unable to parse MessageType from '{s}'.".
func UnparseableMessageTypeText(s string) string {
	return "Unable to parse MessageType from '" + s + "'."
}

// More InvalidMessageException messages.
const (
	MessageIDNotDefinedText = "MessageId is not defined."
	SessionIDNotDefinedText = "SessionId is not defined."
	// ContentNullText is the message for an absent or unreadable body.
	ContentNullText = "MessageContent is null."
)

// TypeMismatchText is the message of the InvalidOperationException NimBus's
// dispatcher wraps in a permanent failure when the body's
// EventContent.EventTypeId is non-empty and differs (ordinal) from the
// EventTypeId property.
func TypeMismatchText(property, body string) string {
	return "Message EventTypeId mismatch: authoritative context value '" + property +
		"' does not match body value '" + body + "'."
}

// ExceptionString renders what .NET's Exception.ToString gives for an
// exception of the full type name typeName with message msg and no stack
// trace or inner exception: "{typeName}: {msg}", or typeName alone when msg
// is empty. NimBus's DeadLetterErrorDescription is Exception.ToString; a
// thrown .NET exception would add its stack-trace lines, which a Go
// subscriber has no equivalent for, so they are left out.
func ExceptionString(typeName, msg string) string {
	if msg == "" {
		return typeName
	}
	return typeName + ": " + msg
}

// SimpleTypeName returns the part of a full .NET type name after its last
// dot, as Type.Name gives it (ErrorType carries the simple name).
func SimpleTypeName(fullName string) string {
	if i := strings.LastIndexByte(fullName, '.'); i >= 0 {
		return fullName[i+1:]
	}
	return fullName
}

// DeadLetter is everything a dead-letter notification reports: the reason
// and description properties and the ErrorContent of its body.
type DeadLetter struct {
	Reason      string
	Description string
	ErrText     string
	ErrType     string
}

// PermanentDeadLetter is what NimBus reports when a handler failure (or a
// dispatch check) is a PermanentFailureException around an inner exception
// of full type name typeName and message msg: reason "Permanent failure:
// {simple type}: {msg}", description the inner exception's ToString,
// ErrorText msg and ErrorType the simple type name.
func PermanentDeadLetter(typeName, msg string) DeadLetter {
	simple := SimpleTypeName(typeName)
	return DeadLetter{
		Reason:      DeadLetterReasonPermanent(simple, msg),
		Description: ExceptionString(typeName, msg),
		ErrText:     msg,
		ErrType:     simple,
	}
}

// UnexpectedDeadLetter is what NimBus reports for an exception its
// MessageHandler catches as unexpected (catch (Exception)): reason "Failed
// to handle message.", description the exception's ToString, ErrorText its
// message and ErrorType its simple type name.
func UnexpectedDeadLetter(typeName, msg string) DeadLetter {
	return DeadLetter{
		Reason:      DeadLetterReasonUnexpected,
		Description: ExceptionString(typeName, msg),
		ErrText:     msg,
		ErrType:     SimpleTypeName(typeName),
	}
}

// DeadLetterUnsupportedType reports a MessageType the subscriber does not
// accept (an undefined ordinal, a response type, ProcessDeferredRequest on
// the main subscription): NimBus's HandleDefault throws
// UnsupportedMessageTypeException, caught as unexpected.
func DeadLetterUnsupportedType(t Type) DeadLetter {
	return UnexpectedDeadLetter(TypeUnsupportedMessageTypeException, UnsupportedMessageTypeText(t))
}

// DeadLetterUnauthorized reports a Manager-only request from another
// sender: UnauthorizedAccessException, caught as unexpected.
func DeadLetterUnauthorized(t Type) DeadLetter {
	return UnexpectedDeadLetter(TypeUnauthorizedAccessException, UnauthorizedText(t))
}

// DeadLetterInvalidMessage reports a message whose properties NimBus's
// MessageContext cannot read (InvalidMessageException with text, e.g.
// PropertyNotDefinedText(PropEventID)), caught as unexpected.
func DeadLetterInvalidMessage(text string) DeadLetter {
	return UnexpectedDeadLetter(TypeInvalidMessageException, text)
}

// DeadLetterUnreadableBody reports an EventRequest whose body is not a
// MessageContent: NimBus's dispatcher wraps the InvalidMessageException
// "MessageContent is null." in a permanent failure.
func DeadLetterUnreadableBody() DeadLetter {
	return PermanentDeadLetter(TypeInvalidMessageException, ContentNullText)
}

// DeadLetterTypeMismatch reports a body whose EventTypeId disagrees with
// the property: a permanent failure around an InvalidOperationException.
func DeadLetterTypeMismatch(property, body string) DeadLetter {
	return PermanentDeadLetter(TypeInvalidOperationException, TypeMismatchText(property, body))
}

// TruncateDeadLetterDescription bounds s as NimBus's
// FormatExceptionForDeadLetter does, counting UTF-16 code units: a text of
// at most MaxDeadLetterDescription units is returned unchanged; otherwise
// the first 4,078 units are kept, cut back to the last line feed when the
// text's first line feed lies inside them (at an index above 0) and a later
// one does too, and TruncationMarker is appended. A surrogate pair split by
// the cut leaves a lone surrogate in .NET, which its UTF-8 encoder writes as
// U+FFFD; so does this function.
func TruncateDeadLetterDescription(s string) string {
	// A string of at most 4,096 bytes has at most 4,096 units.
	if len(s) <= MaxDeadLetterDescription {
		return s
	}
	n := 0
	for _, r := range s {
		n += utf16Units(r)
	}
	if n <= MaxDeadLetterDescription {
		return s
	}
	avail := MaxDeadLetterDescription - len(TruncationMarker)
	units, firstNL, lastNL, lastNLByte := 0, -1, -1, 0
	cut, split := len(s), false
	for i, r := range s {
		w := utf16Units(r)
		if units+w > avail {
			cut, split = i, units < avail
			break
		}
		if r == '\n' {
			if firstNL < 0 {
				firstNL = units
			}
			lastNL, lastNLByte = units, i
		}
		units += w
	}
	if firstNL > 0 && lastNL > firstNL {
		return s[:lastNLByte] + TruncationMarker
	}
	if split {
		return s[:cut] + "\uFFFD" + TruncationMarker
	}
	return s[:cut] + TruncationMarker
}

// utf16Units is the number of UTF-16 code units of r in a .NET string.
func utf16Units(r rune) int {
	if r >= 0x10000 {
		return 2
	}
	return 1
}

// errorContent is ResponseService.CreateErrorContent: ErrorText, ErrorType
// (nil when ""), null stack trace and source, and the inbound EventContent.
func (in *Inbound) errorContent(errText, errType string) *Content {
	ec := &ErrorContent{ErrorText: Ptr(errText)}
	if errType != "" {
		ec.ErrorType = Ptr(errType)
	}
	c := &Content{ErrorContent: ec}
	if in.Content != nil {
		c.EventContent = in.Content.EventContent
	}
	return c
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
// DeadLetterReason = reason and DeadLetterErrorDescription = description
// (the reason when description is ""), each written only when non-empty.
// The description is bounded by TruncateDeadLetterDescription: NimBus
// applies that bound on the broker's dead-letter call, and a custom handler
// cannot make that call, so this notification is where the bounded text is
// reported. The body is the error content (as NewErrorResponse) when
// errText is not "" (NimBus: an exception was given), else
// {EventContent: inbound, ErrorContent: null}.
func NewDeadLetterResponse(in *Inbound, reason, description, errText, errType string, t Timings) *Outgoing {
	props := make(map[string]any, 15)
	props[PropTo] = ResolverID
	props[PropMessageType] = ErrorResponse.String()
	var c *Content
	if errText != "" {
		c = in.errorContent(errText, errType)
	} else {
		c = &Content{}
		if in.Content != nil {
			c.EventContent = in.Content.EventContent
		}
	}
	if description == "" {
		description = reason
	}
	description = TruncateDeadLetterDescription(description)
	if reason != "" {
		props[PropDeadLetterReason] = reason
	}
	if description != "" {
		props[PropDeadLetterErrorDesc] = description
	}
	return finish(in, props, t, c.AppendJSON(make([]byte, 0, 256)))
}

// NewDeadLetterResponseFor is NewDeadLetterResponse with the fields of d.
func NewDeadLetterResponseFor(in *Inbound, d DeadLetter, t Timings) *Outgoing {
	return NewDeadLetterResponse(in, d.Reason, d.Description, d.ErrText, d.ErrType, t)
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

// originatingMessageID is NimBus's rule for OriginatingMessageId on every
// message derived from in: the inbound value unless it is "self" (ignoring
// case), then the inbound MessageId; "self" when that is absent.
func (in *Inbound) originatingMessageID() string {
	if !strings.EqualFold(in.OriginatingMessageID, Self) {
		return in.OriginatingMessageID
	}
	if in.MessageID != nil {
		return *in.MessageID
	}
	return Self
}

// parentMessageID is the inbound MessageId, "self" when absent.
func (in *Inbound) parentMessageID() string {
	if in.MessageID != nil {
		return *in.MessageID
	}
	return Self
}

func (in *Inbound) eventIDValue() any {
	if in.EventID != nil {
		return *in.EventID
	}
	return nil
}

func (in *Inbound) eventTypeIDValue() any {
	if in.EventTypeID != nil {
		return *in.EventTypeID
	}
	return nil
}

func (in *Inbound) sessionID() string {
	if in.SessionID != nil {
		return *in.SessionID
	}
	return ""
}

// NewParkedCopy builds the copy NimBus's SendToDeferredSubscription sends
// to park a message behind a blocked session: To=Deferred, From = the
// inbound From (written only when non-empty, so no forwarder rule matches
// it), broker CorrelationId = the inbound CorrelationId, SessionId = the
// inbound SessionId, EventId, OriginatingMessageId (the "self" rule),
// ParentMessageId = the inbound MessageId, RetryCount = the inbound
// RetryCount or 0 (int32), OriginatingFrom = the inbound From, EventTypeId,
// MessageType = the inbound type's name, OriginalSessionId = SessionId
// (written only when non-empty) and DeferralSequence = seq (int32). No
// MessageId (the broker assigns one) and no timings.
//
// body is sent unchanged: the inbound body bytes for a native message (for
// a CloudEvent, the synthesized content's JSON, since NimBus parks a
// MessageContent). inboxMessageID, when not "", is written as
// InboxMessageId: the id a replay records and checks in the inbox.
func NewParkedCopy(in *Inbound, body []byte, seq int32, inboxMessageID string) *Outgoing {
	props := make(map[string]any, 13)
	props[PropTo] = DeferredAddress
	props[PropMessageType] = in.Type.String()
	props[PropEventID] = in.eventIDValue()
	props[PropOriginatingMessageID] = in.originatingMessageID()
	props[PropParentMessageID] = in.parentMessageID()
	var rc int32
	if in.RetryCount != nil {
		rc = *in.RetryCount
	}
	props[PropRetryCount] = rc
	props[PropOriginatingFrom] = in.From
	if in.From != "" {
		props[PropFrom] = in.From
	}
	props[PropEventTypeID] = in.eventTypeIDValue()
	sid := in.sessionID()
	if sid != "" {
		props[PropOriginalSessionID] = sid
	}
	props[PropDeferralSequence] = seq
	if inboxMessageID != "" {
		props[PropInboxMessageID] = inboxMessageID
	}
	return &Outgoing{SessionID: sid, CorrelationID: in.CorrelationID, ApplicationProperties: props, Body: body}
}

// NewProcessDeferredRequest builds the trigger NimBus's
// SendProcessDeferredRequest sends when an unblocked session has parked
// copies: To=DeferredProcessor, broker SessionId = the inbound SessionId
// (the dispatcher reads it), CorrelationId = ParentMessageId = the inbound
// MessageId, EventId, OriginatingMessageId (the "self" rule), EventTypeId,
// RetryCount 0 and OriginatingFrom "self" (NimBus leaves both unset and
// writes these defaults), no From, and the empty content
// {"EventContent":null,"ErrorContent":null}.
func NewProcessDeferredRequest(in *Inbound) *Outgoing {
	props := make(map[string]any, 9)
	props[PropTo] = DeferredProcessorAddress
	props[PropMessageType] = ProcessDeferredRequest.String()
	props[PropEventID] = in.eventIDValue()
	props[PropOriginatingMessageID] = in.originatingMessageID()
	props[PropParentMessageID] = in.parentMessageID()
	props[PropRetryCount] = int32(0)
	props[PropOriginatingFrom] = Self
	props[PropEventTypeID] = in.eventTypeIDValue()
	return &Outgoing{
		SessionID: in.sessionID(), CorrelationID: in.MessageID, ApplicationProperties: props,
		Body: (&Content{}).AppendJSON(make([]byte, 0, 48)),
	}
}

// NewRetryRequest builds NimBus's CreateRetryResponse: To=Retry,
// MessageType RetryRequest, RetryCount = the inbound RetryCount + 1, or 1
// when absent (int32), CorrelationId = ParentMessageId = the inbound
// MessageId, OriginatingMessageId (the "self" rule), OriginatingFrom = the
// inbound From, EventId, EventTypeId, SessionId, no From, no MessageId, no
// timings; body is sent unchanged (the inbound content). inboxMessageID,
// when not "", is written as InboxMessageId. Scheduling it is the
// caller's.
func NewRetryRequest(in *Inbound, body []byte, inboxMessageID string) *Outgoing {
	props := make(map[string]any, 10)
	props[PropTo] = RetryAddress
	props[PropMessageType] = RetryRequest.String()
	props[PropEventID] = in.eventIDValue()
	props[PropOriginatingMessageID] = in.originatingMessageID()
	props[PropParentMessageID] = in.parentMessageID()
	rc := int32(1)
	if in.RetryCount != nil {
		rc = *in.RetryCount + 1
	}
	props[PropRetryCount] = rc
	props[PropOriginatingFrom] = in.From
	props[PropEventTypeID] = in.eventTypeIDValue()
	if inboxMessageID != "" {
		props[PropInboxMessageID] = inboxMessageID
	}
	return &Outgoing{SessionID: in.sessionID(), CorrelationID: in.MessageID, ApplicationProperties: props, Body: body}
}

// ReplayedProperties returns the application properties NimBus's
// DeferredMessageProcessor republishes from a parked copy: every property
// except OriginalSessionId, DeferralSequence and To (names compared
// exactly), then To = endpoint. parked is not changed.
func ReplayedProperties(parked map[string]any, endpoint string) map[string]any {
	out := make(map[string]any, len(parked))
	for k, v := range parked {
		switch k {
		case PropOriginalSessionID, PropDeferralSequence, PropTo:
			continue
		}
		out[k] = v
	}
	out[PropTo] = endpoint
	return out
}

// DeferralSequenceOf reads a parked copy's DeferralSequence as NimBus's
// drain does: an integer value, or a string .NET's int.TryParse accepts
// (an optional sign, decimal digits, surrounding white space, within the
// int32 range). Missing or unreadable is 0 with ok false.
func DeferralSequenceOf(props map[string]any) (seq int64, ok bool) {
	v, present := props[PropDeferralSequence]
	if !present {
		return 0, false
	}
	switch x := v.(type) {
	case int32:
		return int64(x), true
	case int:
		if x >= -1<<31 && x < 1<<31 {
			return int64(x), true
		}
		return 0, false
	case int64:
		if x >= -1<<31 && x < 1<<31 {
			return x, true
		}
		return 0, false
	}
	s, okS := valueString(v)
	if !okS {
		return 0, false
	}
	n, err := strconv.ParseInt(trimSpace(s), 10, 32)
	if err != nil {
		return 0, false
	}
	return n, true
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
