package message

import "time"

// Outgoing is a message the subscriber sends to its own endpoint topic.
// ApplicationProperties values are string, int32, int64 or nil (an AMQP
// null), exactly the AMQP types NimBus writes; a sender passes them on
// unchanged.
type Outgoing struct {
	// MessageID is the broker MessageId. Responses and control messages
	// leave it "" and the broker (or, in a batch, the SDK) assigns one; a
	// published event carries its deterministic id.
	MessageID string
	SessionID string
	// CorrelationID is nil when the inbound message had no MessageId.
	CorrelationID         *string
	ApplicationProperties map[string]any
	Body                  []byte
}

// Type returns the MessageType property of o.
func (o *Outgoing) Type() string {
	s, _ := o.ApplicationProperties[PropMessageType].(string)
	return s
}

// Handoff describes a pending handoff: the handler started work elsewhere
// and the outcome will be settled later by the Manager.
type Handoff struct {
	Reason        string
	ExternalJobID string
	// ExpectedBy is the zero time when no deadline was given.
	ExpectedBy time.Time
}

// Timings are the figures NimBus reports on every response.
type Timings struct {
	// QueueTimeMs is enqueue → handler entry; negative means unknown and
	// the property is not written.
	QueueTimeMs int64
	// ProcessingTimeMs is handler entry → response build.
	ProcessingTimeMs int64
}

// ResponseKind selects the outcome a response reports.
type ResponseKind int

// The responses this subscriber sends.
const (
	// Resolution reports a completed event (ResolutionResponse, inbound
	// content as is).
	Resolution ResponseKind = iota
	// Duplicate reports a recorded redelivery (SkipResponse,
	// ErrorText DuplicateDetected).
	Duplicate
	// Unsupported reports an event type with no handler
	// (UnsupportedResponse, inbound content as is).
	Unsupported
	// PendingHandoff reports a handoff (PendingHandoffResponse with the
	// handoff properties, inbound content as is).
	PendingHandoff
)

// NewResponse builds the Resolver response for in, following NimBus's
// ResponseService.CreateResponse: To=Resolver, no From, no MessageId,
// CorrelationId = ParentMessageId = the inbound MessageId, the
// OriginatingMessageId rule, RetryCount as int32 and the timings as int64.
// handoff is used only for PendingHandoff.
func NewResponse(in *Inbound, kind ResponseKind, t Timings, handoff *Handoff) *Outgoing {
	props := make(map[string]any, 13)
	props[PropTo] = ResolverID
	var body []byte
	switch kind {
	case Resolution:
		props[PropMessageType] = ResolutionResponse.String()
		body = in.contentOrEmpty().AppendJSON(make([]byte, 0, 256))
	case Duplicate:
		props[PropMessageType] = SkipResponse.String()
		c := Content{EventContent: in.eventContent(), ErrorContent: &ErrorContent{ErrorText: Ptr(DuplicateDetected)}}
		body = c.AppendJSON(make([]byte, 0, 256))
	case Unsupported:
		props[PropMessageType] = UnsupportedResponse.String()
		body = in.contentOrEmpty().AppendJSON(make([]byte, 0, 256))
	case PendingHandoff:
		props[PropMessageType] = PendingHandoffResponse.String()
		body = in.contentOrEmpty().AppendJSON(make([]byte, 0, 256))
		if handoff != nil {
			if handoff.Reason != "" {
				props[PropHandoffReason] = handoff.Reason
			}
			if handoff.ExternalJobID != "" {
				props[PropExternalJobID] = handoff.ExternalJobID
			}
			if !handoff.ExpectedBy.IsZero() {
				props[PropExpectedBy] = FormatRoundTrip(handoff.ExpectedBy)
			}
		}
	}
	return finish(in, props, t, body)
}

// NewHeartbeatResponse answers NimBus's liveness probe: a ResolutionResponse
// whose EventJson is the inbound heartbeat with ForwardReceivedTime and
// BackwardSendTime set to now, Endpoint = the inbound To and SdkVersion =
// version. Unlike every other response it carries From = the inbound To.
func NewHeartbeatResponse(in *Inbound, t Timings, now time.Time, version string) *Outgoing {
	props := make(map[string]any, 13)
	props[PropTo] = ResolverID
	props[PropFrom] = in.To
	props[PropMessageType] = ResolutionResponse.String()
	var prior string
	if in.Content != nil && in.Content.EventContent != nil && in.Content.EventContent.EventJSON != nil {
		prior = *in.Content.EventContent.EventJSON
	}
	ev := heartbeatJSON(prior, now, in.To, version)
	c := Content{EventContent: &EventContent{EventTypeID: Ptr(HeartbeatEventTypeID), EventJSON: &ev}}
	return finish(in, props, t, c.AppendJSON(nil))
}

// finish adds the properties every response carries (see NewResponse), the
// timings and the CloudEvent identity to props and returns the response.
func finish(in *Inbound, props map[string]any, t Timings, body []byte) *Outgoing {
	props[PropEventID] = in.eventIDValue()
	props[PropOriginatingMessageID] = in.originatingMessageID()
	props[PropParentMessageID] = in.parentMessageID()
	props[PropRetryCount] = in.retryCount()
	props[PropOriginatingFrom] = in.From
	props[PropEventTypeID] = in.eventTypeIDValue()
	if t.QueueTimeMs >= 0 {
		props[PropQueueTimeMs] = t.QueueTimeMs
	}
	props[PropProcessingTimeMs] = max(t.ProcessingTimeMs, 0)
	in.addCloudEventIdentity(props)

	return &Outgoing{SessionID: in.sessionID(), CorrelationID: in.MessageID, ApplicationProperties: props, Body: body}
}

// addCloudEventIdentity writes CloudEventId, CloudEventSource,
// CloudEventType and CloudEventSubject when non-empty: each is the inbound
// property of that name if present, else the detected CloudEvent's
// attribute. A native message has neither, so its responses are unchanged.
func (in *Inbound) addCloudEventIdentity(props map[string]any) {
	for _, a := range []struct {
		name string
		attr func(*CloudEvent) *string
	}{
		{PropCloudEventID, func(c *CloudEvent) *string { return c.ID }},
		{PropCloudEventSource, func(c *CloudEvent) *string { return c.Source }},
		{PropCloudEventType, func(c *CloudEvent) *string { return c.Type }},
		{PropCloudEventSubject, func(c *CloudEvent) *string { return c.Subject }},
	} {
		v, ok := in.Property(a.name)
		if !ok && in.CloudEvent != nil {
			if p := a.attr(in.CloudEvent); p != nil {
				v = *p
			}
		}
		if v != "" {
			props[a.name] = v
		}
	}
}

func (in *Inbound) contentOrEmpty() *Content {
	if in.Content == nil {
		return &Content{}
	}
	return in.Content
}

// FormatRoundTrip formats t as .NET's DateTime "o" format in UTC:
// 2026-08-01T10:00:00.0000000Z.
func FormatRoundTrip(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.0000000Z")
}
