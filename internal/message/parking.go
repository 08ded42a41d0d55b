package message

import "strconv"

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
	props[PropRetryCount] = in.retryCount()
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
