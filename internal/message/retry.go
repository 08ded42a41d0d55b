package message

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
