package message

// TEMPORARY (lead): minimal builders so the pipeline compiles while the exact
// wire builders are written on another branch; replaced at merge.

import (
	"strconv"
)

const (
	DeferredAddress            = "Deferred"
	DeferredProcessorAddress   = "DeferredProcessor"
	RetryAddress               = "Retry"
	PropSessionID              = "SessionId"
	MaxDeadLetterDescription   = 4096
	DeadLetterReasonUnexpected = "Failed to handle message."
)

func errorBody(in *Inbound, text, typ string) []byte {
	c := Content{ErrorContent: &ErrorContent{ErrorText: Ptr(text)}}
	if typ != "" {
		c.ErrorContent.ErrorType = Ptr(typ)
	}
	if in.Content != nil {
		c.EventContent = in.Content.EventContent
	}
	return c.AppendJSON(nil)
}

func NewErrorResponse(in *Inbound, errText, errType string, t Timings) *Outgoing {
	return finish(in, map[string]any{PropTo: ResolverID, PropMessageType: ErrorResponse.String()}, t, errorBody(in, errText, errType))
}

func NewDeadLetterResponse(in *Inbound, reason, description, errText, errType string, t Timings) *Outgoing {
	props := map[string]any{PropTo: ResolverID, PropMessageType: ErrorResponse.String(), PropDeadLetterReason: reason, PropDeadLetterErrorDesc: description}
	return finish(in, props, t, errorBody(in, errText, errType))
}

func NewDeferralResponse(in *Inbound, blockedBy string, t Timings) *Outgoing {
	sid := ""
	if in.SessionID != nil {
		sid = *in.SessionID
	}
	return finish(in, map[string]any{PropTo: ResolverID, PropMessageType: DeferralResponse.String()}, t,
		errorBody(in, "Session "+sid+" is blocked by "+blockedBy, "SessionBlockedException"))
}

func NewDiscardResponse(in *Inbound, errType, msg, classifier string, t Timings) *Outgoing {
	return finish(in, map[string]any{PropTo: ResolverID, PropMessageType: SkipResponse.String()}, t,
		errorBody(in, errType+": "+msg+" Classified as Discard by "+classifier+".", errType))
}

func NewSkipResponse(in *Inbound, t Timings) *Outgoing {
	return finish(in, map[string]any{PropTo: ResolverID, PropMessageType: SkipResponse.String()}, t, (&Content{}).AppendJSON(nil))
}

func NewParkedCopy(in *Inbound, body []byte, seq int32, inboxMessageID string) *Outgoing {
	props := map[string]any{}
	for k, v := range in.props {
		props[k] = v
	}
	props[PropTo] = DeferredAddress
	props[PropFrom] = in.From
	if in.SessionID != nil {
		props[PropOriginalSessionID] = *in.SessionID
	}
	props[PropDeferralSequence] = seq
	if inboxMessageID != "" {
		props[PropInboxMessageID] = inboxMessageID
	}
	out := &Outgoing{ApplicationProperties: props, Body: body, CorrelationID: in.CorrelationID}
	if in.SessionID != nil {
		out.SessionID = *in.SessionID
	}
	return out
}

func NewProcessDeferredRequest(in *Inbound) *Outgoing {
	out := &Outgoing{ApplicationProperties: map[string]any{PropTo: DeferredProcessorAddress, PropMessageType: ProcessDeferredRequest.String()}, Body: (&Content{}).AppendJSON(nil)}
	if in.SessionID != nil {
		out.SessionID = *in.SessionID
	}
	return out
}

func NewRetryRequest(in *Inbound, body []byte, inboxMessageID string) *Outgoing {
	props := map[string]any{PropTo: RetryAddress, PropMessageType: RetryRequest.String()}
	out := finish(in, props, Timings{QueueTimeMs: -1}, body)
	var rc int32
	if in.RetryCount != nil {
		rc = *in.RetryCount
	}
	out.ApplicationProperties[PropRetryCount] = rc + 1
	delete(out.ApplicationProperties, PropQueueTimeMs)
	delete(out.ApplicationProperties, PropProcessingTimeMs)
	if inboxMessageID != "" {
		out.ApplicationProperties[PropInboxMessageID] = inboxMessageID
	}
	return out
}

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

func DeferralSequenceOf(props map[string]any) (int64, bool) {
	s, ok := PropertyString(props, PropDeferralSequence)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

func ReadLenient(b Broker, props map[string]any, body []byte) *Inbound {
	in := &Inbound{Broker: b, props: props}
	in.To, _ = propString(props, PropTo)
	in.From, _ = propString(props, PropFrom)
	if s, ok := propString(props, PropEventID); ok {
		in.EventID = &s
	}
	if s, ok := propString(props, PropEventTypeID); ok {
		in.EventTypeID = &s
	}
	in.OriginatingMessageID, in.ParentMessageID = Self, Self
	in.Content, in.ContentErr = ParseContent(body)
	return in
}

func HandoffError(in *Inbound) (string, string) {
	text := "Handoff failed."
	if in.Content != nil && in.Content.ErrorContent != nil && in.Content.ErrorContent.ErrorText != nil {
		text = *in.Content.ErrorContent.ErrorText
	}
	return text, "HandoffFailedException"
}

func DeadLetterReasonPermanent(errType, msg string) string {
	return "Permanent failure: " + errType + ": " + msg
}
