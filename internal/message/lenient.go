package message

import "strconv"

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
	in.OriginatingMessageID = Self
	if s, ok := propString(props, PropOriginatingMessageID); ok {
		in.OriginatingMessageID = s
	}
	in.ParentMessageID = Self
	if s, ok := propString(props, PropParentMessageID); ok {
		in.ParentMessageID = s
	}
	if s, ok := propString(props, PropRetryCount); ok {
		if n, err := strconv.ParseInt(trimSpace(s), 10, 32); err == nil {
			rc := int32(n)
			in.RetryCount = &rc
		}
	}
	if s, ok := propString(props, PropOriginatingFrom); ok {
		in.OriginatingFrom = &s
	}
	if s, ok := propString(props, PropInboxMessageID); ok {
		in.InboxMessageID = &s
	}
	in.Content, in.ContentErr = ParseContent(body)
	if s, ok := propString(props, PropEventTypeID); ok {
		in.EventTypeID = &s
	} else if in.Content != nil && in.Content.EventContent != nil {
		in.EventTypeID = in.Content.EventContent.EventTypeID
	}
	return in
}
