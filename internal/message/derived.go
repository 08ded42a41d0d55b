package message

// The values every message derived from an inbound one (a response, a parked
// copy, a RetryRequest, a ProcessDeferredRequest) takes from it.

import "strings"

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

// eventIDValue is the inbound EventId, nil (an AMQP null) when absent.
func (in *Inbound) eventIDValue() any {
	if in.EventID != nil {
		return *in.EventID
	}
	return nil
}

// eventTypeIDValue is the inbound EventTypeId, nil (an AMQP null) when
// absent.
func (in *Inbound) eventTypeIDValue() any {
	if in.EventTypeID != nil {
		return *in.EventTypeID
	}
	return nil
}

// sessionID is the inbound SessionId, "" when absent.
func (in *Inbound) sessionID() string {
	if in.SessionID != nil {
		return *in.SessionID
	}
	return ""
}

// retryCount is the inbound RetryCount, 0 when absent.
func (in *Inbound) retryCount() int32 {
	if in.RetryCount != nil {
		return *in.RetryCount
	}
	return 0
}

// eventContent is the inbound EventContent, nil when the body is absent or
// unreadable.
func (in *Inbound) eventContent() *EventContent {
	if in.Content == nil {
		return nil
	}
	return in.Content.EventContent
}
