package message

// ReadLenient builds an Inbound from whatever of a delivered message is
// readable, for the dead-letter notification of a message Read refuses
// (a missing or unparseable MessageType, To, From or EventId key). It never
// fails: a readable message gives what Read gives; otherwise an unreadable
// MessageType is Unknown, a missing To or From is "", a missing or null
// EventId is nil, and every other field is read as Read reads it (defaults
// "self", RetryCount nil when not an integer, the body parsed leniently).
// CloudEvents are not detected. props and body are not changed; props may
// be nil.
func ReadLenient(b Broker, props map[string]any, body []byte) *Inbound {
	if in, err := Read(b, props, body); err == nil {
		return in
	}
	in := &Inbound{Broker: b, props: props}
	if s, ok := propString(props, PropMessageType); ok {
		if t, ok := ParseType(s); ok {
			in.Type = t
		}
	}
	in.To, _ = propString(props, PropTo)
	in.From, _ = propString(props, PropFrom)
	if s, ok := propString(props, PropEventID); ok {
		in.EventID = &s
	}
	own := func(name string) (string, bool) { return propString(props, name) }
	in.readOptional(own)
	in.Content, in.ContentErr = ParseContent(body)
	in.readEventTypeID(own)
	return in
}
