package message

import (
	"strconv"
)

// Well-known addresses and values of the NimBus platform.
const (
	// ResolverID is the To address of every response a subscriber sends.
	ResolverID = "Resolver"
	// ManagerID is the From of operator (Manager) requests.
	ManagerID = "Manager"
	// Self is the value written for a missing OriginatingMessageId,
	// ParentMessageId or OriginatingFrom.
	Self = "self"
	// HeartbeatEventTypeID is the event type of NimBus's liveness probe.
	HeartbeatEventTypeID = "NimBus.Platform.Heartbeat"
	// DuplicateDetected is the ErrorText of the SkipResponse sent for a
	// delivery the inbox has already recorded.
	DuplicateDetected = "DuplicateDetected"
)

// Application property names. The wire name equals NimBus's
// UserPropertyName enum member name (case-sensitive).
const (
	PropTo                   = "To"
	PropFrom                 = "From"
	PropMessageType          = "MessageType"
	PropEventID              = "EventId"
	PropOriginatingMessageID = "OriginatingMessageId"
	PropParentMessageID      = "ParentMessageId"
	PropRetryCount           = "RetryCount"
	PropOriginatingFrom      = "OriginatingFrom"
	PropEventTypeID          = "EventTypeId"
	PropOriginalSessionID    = "OriginalSessionId"
	PropDeferralSequence     = "DeferralSequence"
	PropQueueTimeMs          = "QueueTimeMs"
	PropProcessingTimeMs     = "ProcessingTimeMs"
	PropDeadLetterReason     = "DeadLetterReason"
	PropDeadLetterErrorDesc  = "DeadLetterErrorDescription"
	PropHandoffReason        = "HandoffReason"
	PropExternalJobID        = "ExternalJobId"
	PropExpectedBy           = "ExpectedBy"
	PropInboxMessageID       = "InboxMessageId"
)

// Type is NimBus's MessageType. The numbers are the C# ordinals; on the wire
// the type is always written as its name.
type Type int32

// The MessageType values, in NimBus's declaration order.
const (
	Unknown Type = iota
	EventRequest
	ErrorResponse
	ResolutionResponse
	DeferralResponse
	SkipResponse
	ResubmissionRequest
	SkipRequest
	RetryRequest
	ContinuationRequest
	UnsupportedResponse
	ProcessDeferredRequest
	PendingHandoffResponse
	HandoffCompletedRequest
	HandoffFailedRequest
)

var typeNames = [...]string{
	Unknown:                 "Unknown",
	EventRequest:            "EventRequest",
	ErrorResponse:           "ErrorResponse",
	ResolutionResponse:      "ResolutionResponse",
	DeferralResponse:        "DeferralResponse",
	SkipResponse:            "SkipResponse",
	ResubmissionRequest:     "ResubmissionRequest",
	SkipRequest:             "SkipRequest",
	RetryRequest:            "RetryRequest",
	ContinuationRequest:     "ContinuationRequest",
	UnsupportedResponse:     "UnsupportedResponse",
	ProcessDeferredRequest:  "ProcessDeferredRequest",
	PendingHandoffResponse:  "PendingHandoffResponse",
	HandoffCompletedRequest: "HandoffCompletedRequest",
	HandoffFailedRequest:    "HandoffFailedRequest",
}

// String returns the wire name, or the decimal ordinal for a value NimBus
// does not define (as .NET's Enum.ToString does).
func (t Type) String() string {
	if t >= 0 && int(t) < len(typeNames) {
		return typeNames[t]
	}
	return strconv.Itoa(int(t))
}

// Defined reports whether t is one of the declared MessageType values.
func (t Type) Defined() bool { return t >= 0 && int(t) < len(typeNames) }

// ParseType parses a MessageType the way .NET's Enum.TryParse does for
// NimBus: names are case-sensitive, and a numeric string is accepted as an
// ordinal (even one NimBus does not define). Surrounding white space is
// ignored.
func ParseType(s string) (Type, bool) {
	s = trimSpace(s)
	if s == "" {
		return Unknown, false
	}
	for i, n := range typeNames {
		if n == s {
			return Type(i), true
		}
	}
	if c := s[0]; c == '-' || c == '+' || (c >= '0' && c <= '9') {
		n, err := strconv.ParseInt(s, 10, 32)
		if err == nil {
			return Type(n), true
		}
	}
	return Unknown, false
}

func trimSpace(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t' || s[0] == '\n' || s[0] == '\r') {
		s = s[1:]
	}
	for len(s) > 0 {
		c := s[len(s)-1]
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}

// Addresses NimBus's subscriber writes in the To property of the control
// messages it sends to its own endpoint topic, and the tolerance property
// a deferred-processor trigger falls back to.
const (
	// DeferredAddress routes a parked copy to the endpoint topic's
	// session-enabled Deferred subscription.
	DeferredAddress = "Deferred"
	// DeferredProcessorAddress routes a ProcessDeferredRequest to the
	// DeferredProcessor subscription (the replay trigger).
	DeferredProcessorAddress = "DeferredProcessor"
	// RetryAddress routes a scheduled RetryRequest; the endpoint
	// subscription's retry rule rewrites To to the endpoint and From to
	// Retry.
	RetryAddress = "Retry"
	// ContinuationAddress is the legacy ContinuationRequest address.
	ContinuationAddress = "Continuation"
	// PropSessionID is an application property NimBus never writes but its
	// deferred dispatcher reads when a trigger's broker SessionId is empty.
	PropSessionID = "SessionId"
)
