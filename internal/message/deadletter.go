package message

// MaxDeadLetterDescription is NimBus's bound on a dead-letter description,
// counted in UTF-16 code units (.NET string length). A longer text is cut
// to MaxDeadLetterDescription-len(TruncationMarker) units and the marker is
// appended, so the result never exceeds the bound.
const MaxDeadLetterDescription = 4096

// TruncationMarker ends a truncated dead-letter description (18 UTF-16
// units: a line feed, "...[TRUNCATED]...").
const TruncationMarker = "\n...[TRUNCATED]..."

// DeadLetterReasonUnexpected is the dead-letter reason of every failure
// NimBus's MessageHandler catches as an unexpected exception: an
// unsupported MessageType, a Manager-only request from another sender, a
// message whose properties cannot be read.
const DeadLetterReasonUnexpected = "Failed to handle message."

// DeadLetterReasonPermanent is the dead-letter reason NimBus gives a
// permanent failure: "Permanent failure: {inner simple type}: {message}".
func DeadLetterReasonPermanent(errType, msg string) string {
	return "Permanent failure: " + errType + ": " + msg
}

// DeadLetter is everything a dead-letter notification reports: the reason
// and description properties and the ErrorContent of its body.
type DeadLetter struct {
	Reason      string
	Description string
	ErrText     string
	ErrType     string
}

// NewPermanentDeadLetter returns what NimBus reports when a handler failure (or a
// dispatch check) is a PermanentFailureException around an inner exception
// of full type name typeName and message msg: reason "Permanent failure:
// {simple type}: {msg}", description the inner exception's ToString,
// ErrorText msg and ErrorType the simple type name.
func NewPermanentDeadLetter(typeName, msg string) DeadLetter {
	simple := SimpleTypeName(typeName)
	return DeadLetter{
		Reason:      DeadLetterReasonPermanent(simple, msg),
		Description: ExceptionString(typeName, msg),
		ErrText:     msg,
		ErrType:     simple,
	}
}

// NewUnexpectedDeadLetter returns what NimBus reports for an exception its
// MessageHandler catches as unexpected (catch (Exception)): reason "Failed
// to handle message.", description the exception's ToString, ErrorText its
// message and ErrorType its simple type name.
func NewUnexpectedDeadLetter(typeName, msg string) DeadLetter {
	return DeadLetter{
		Reason:      DeadLetterReasonUnexpected,
		Description: ExceptionString(typeName, msg),
		ErrText:     msg,
		ErrType:     SimpleTypeName(typeName),
	}
}

// NewUnsupportedTypeDeadLetter reports a MessageType the subscriber does not
// accept (an undefined ordinal, a response type, ProcessDeferredRequest on
// the main subscription): NimBus's HandleDefault throws
// UnsupportedMessageTypeException, caught as unexpected.
func NewUnsupportedTypeDeadLetter(t Type) DeadLetter {
	return NewUnexpectedDeadLetter(TypeUnsupportedMessageTypeException, UnsupportedMessageTypeText(t))
}

// NewUnauthorizedDeadLetter reports a Manager-only request from another
// sender: UnauthorizedAccessException, caught as unexpected.
func NewUnauthorizedDeadLetter(t Type) DeadLetter {
	return NewUnexpectedDeadLetter(TypeUnauthorizedAccessException, UnauthorizedText(t))
}

// NewInvalidMessageDeadLetter reports a message whose properties NimBus's
// MessageContext cannot read (InvalidMessageException with text, e.g.
// PropertyNotDefinedText(PropEventID)), caught as unexpected.
func NewInvalidMessageDeadLetter(text string) DeadLetter {
	return NewUnexpectedDeadLetter(TypeInvalidMessageException, text)
}

// NewUnreadableBodyDeadLetter reports an EventRequest whose body is not a
// MessageContent: NimBus's dispatcher wraps the InvalidMessageException
// "MessageContent is null." in a permanent failure.
func NewUnreadableBodyDeadLetter() DeadLetter {
	return NewPermanentDeadLetter(TypeInvalidMessageException, ContentNullText)
}

// NewTypeMismatchDeadLetter reports a body whose EventTypeId disagrees with
// the property: a permanent failure around an InvalidOperationException.
func NewTypeMismatchDeadLetter(property, body string) DeadLetter {
	return NewPermanentDeadLetter(TypeInvalidOperationException, TypeMismatchText(property, body))
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
