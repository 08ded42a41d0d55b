package message

// MarshalText writes the MessageType as its wire name (the decimal ordinal
// for a value NimBus does not define), as NimBus's stores persist it with
// Newtonsoft's StringEnumConverter.
func (t Type) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText reads a MessageType name or ordinal as ParseType does; an
// unreadable value is an *InvalidMessageError.
func (t *Type) UnmarshalText(b []byte) error {
	v, ok := ParseType(string(b))
	if !ok {
		return &InvalidMessageError{Property: PropMessageType, Reason: "is not a MessageType name or number"}
	}
	*t = v
	return nil
}
