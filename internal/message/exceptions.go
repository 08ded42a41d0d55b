package message

import "strings"

// Full .NET type names of the exceptions behind NimBus's dead-letter
// descriptions (Exception.ToString starts with the full type name).
const (
	TypeUnsupportedMessageTypeException = "NimBus.Core.Messages.Exceptions.UnsupportedMessageTypeException"
	TypeInvalidMessageException         = "NimBus.Core.Messages.Exceptions.InvalidMessageException"
	TypeUnauthorizedAccessException     = "System.UnauthorizedAccessException"
	TypeInvalidOperationException       = "System.InvalidOperationException"
)

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

// ContentNullText is the message of NimBus's InvalidMessageException for
// an absent or unreadable body.
const ContentNullText = "MessageContent is null."

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
