// Package nimbusmsg builds the messages NimBus's own components send to a
// subscriber endpoint, exactly as they put them on the wire: an EventRequest
// as a publisher and the forwarder rule produce it, the Manager's
// ResubmissionRequest and SkipRequest (ManagerClient), the handoff
// settlements HandoffCompletedRequest and HandoffFailedRequest
// (HandoffControlMessageFactory), and the events a NimBus handler publishes
// onward (PublisherClient.PublishFromContext). Each is a [Message]: application
// properties with NimBus's AMQP types (string, int32, int64, nil), the
// broker fields and the body, usable with the Service Bus SDK (send it
// through the local Service Bus) and with hostwire envelopes
// ([Message.Delivery]).
//
// Every message NimBus's MessageHelper writes carries To, MessageType,
// EventId (possibly null), OriginatingMessageId and ParentMessageId ("self"
// when null), RetryCount (AMQP int32, 0 when null), OriginatingFrom ("self"
// when null), From only when non-empty, and EventTypeId (the message's, else
// the body's EventContent.EventTypeId, possibly null). The body is
// MessageContent as Newtonsoft.Json writes it with default settings.
package nimbusmsg

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/google/uuid"

	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// Message is one message as a NimBus component sends it.
type Message struct {
	// ApplicationProperties hold string, int32, int64 or nil values.
	ApplicationProperties map[string]any
	// MessageID is "" when the sender sets none (the broker assigns one).
	MessageID string
	// SessionID is the broker SessionId.
	SessionID string
	// CorrelationID is nil when the sender sets none.
	CorrelationID *string
	Body          []byte
}

// wireOrder is the order NimBus's MessageHelper writes properties in;
// names it does not write follow in name order.
var wireOrder = []string{
	message.PropTo, message.PropMessageType, message.PropEventID, message.PropOriginatingMessageID,
	message.PropParentMessageID, message.PropRetryCount, message.PropOriginatingFrom, message.PropFrom,
	message.PropEventTypeID, message.PropOriginalSessionID, message.PropDeferralSequence,
	message.PropQueueTimeMs, message.PropProcessingTimeMs, message.PropDeadLetterReason,
	message.PropDeadLetterErrorDesc, message.PropHandoffReason, message.PropExternalJobID,
	message.PropExpectedBy, message.PropCloudEventID, message.PropCloudEventSource,
	message.PropCloudEventType, message.PropCloudEventSubject, "traceparent", "tracestate",
}

// Properties returns the application properties in NimBus's write order,
// as hostwire properties.
func (m Message) Properties() []hostwire.Property {
	out := make([]hostwire.Property, 0, len(m.ApplicationProperties))
	seen := make(map[string]bool, len(wireOrder))
	for _, n := range wireOrder {
		seen[n] = true
		if v, ok := m.ApplicationProperties[n]; ok {
			out = append(out, hostwire.Property{Name: n, Value: v})
		}
	}
	rest := make([]string, 0)
	for n := range m.ApplicationProperties {
		if !seen[n] {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	for _, n := range rest {
		out = append(out, hostwire.Property{Name: n, Value: m.ApplicationProperties[n]})
	}
	return out
}

// Delivery returns the Service Bus trigger invocation of m for function,
// as the Functions host builds it for a session-enabled trigger: the
// given broker MessageId (the one the broker assigned when m.MessageID is
// ""), delivery count, enqueue time and a session lock one minute later.
func (m Message) Delivery(function, brokerMessageID string, deliveryCount int, enqueued time.Time) hostwire.ServiceBusMessage {
	id := m.MessageID
	if id == "" {
		id = brokerMessageID
	}
	d := hostwire.ServiceBusMessage{
		FunctionName: function, Body: m.Body, MessageID: id, LockToken: uuid.NewString(),
		CorrelationID: m.CorrelationID, DeliveryCount: deliveryCount, SequenceNumber: 1,
		EnqueuedTime: enqueued, SessionLockedUntil: enqueued.Add(time.Minute), Properties: m.Properties(),
	}
	if m.SessionID != "" {
		d.SessionID = &m.SessionID
	}
	return d
}

// FromOutgoing returns what a subscriber's sender puts on the wire for o:
// its MessageId ("" for a response or control message: the broker assigns
// one), session, correlation id, properties and body.
func FromOutgoing(o *message.Outgoing) Message {
	return Message{ApplicationProperties: o.ApplicationProperties, MessageID: o.MessageID, SessionID: o.SessionID,
		CorrelationID: o.CorrelationID, Body: o.Body}
}

// Routed returns m as the endpoint subscription delivers it after a
// routing rule of NimBus's topology: the retry rule (To=Retry → To=endpoint,
// From=Retry) and the continuation rule (To=Continuation → To=endpoint,
// From=Continuation); any other To is left alone. m is not changed.
func (m Message) Routed(endpoint string) Message {
	props := clone(m.ApplicationProperties)
	switch props[message.PropTo] {
	case message.RetryAddress, message.ContinuationAddress:
		props[message.PropFrom] = props[message.PropTo]
		props[message.PropTo] = endpoint
	}
	m.ApplicationProperties = props
	return m
}

// Replayed returns the copy NimBus's DeferredMessageProcessor republishes
// from a parked copy: the same body, SessionId and CorrelationId, the
// properties without OriginalSessionId and DeferralSequence and with
// To=endpoint, and no MessageId.
func Replayed(parked Message, endpoint string) Message {
	return Message{
		ApplicationProperties: message.ReplayedProperties(parked.ApplicationProperties, endpoint),
		SessionID:             parked.SessionID, CorrelationID: parked.CorrelationID, Body: parked.Body,
	}
}

func clone(p map[string]any) map[string]any {
	out := make(map[string]any, len(p)+1)
	for k, v := range p {
		out[k] = v
	}
	return out
}

// base writes the properties every MessageHelper-sent message has. An
// empty string stands for null.
func base(to string, t message.Type, eventID, originating, parent, originatingFrom, from, eventTypeID string) map[string]any {
	p := map[string]any{
		message.PropTo:                   to,
		message.PropMessageType:          t.String(),
		message.PropEventID:              orNil(eventID),
		message.PropOriginatingMessageID: orSelf(originating),
		message.PropParentMessageID:      orSelf(parent),
		message.PropRetryCount:           int32(0),
		message.PropOriginatingFrom:      orSelf(originatingFrom),
		message.PropEventTypeID:          orNil(eventTypeID),
	}
	if from != "" {
		p[message.PropFrom] = from
	}
	return p
}

func orNil(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func orSelf(s string) string {
	if s == "" {
		return message.Self
	}
	return s
}

func ptrOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Event describes a published event and its fan-out to one consumer.
type Event struct {
	// Publisher is the publishing endpoint P (its topic receives the
	// publish; the forwarder stamps From = P).
	Publisher string
	// Endpoint is the consuming endpoint C (the forwarder stamps To = C).
	Endpoint    string
	EventTypeID string
	// EventJSON is the event serialized as JSON (EventContent.EventJson).
	EventJSON string
	SessionID string
	// MessageID "" is the publisher's default
	// "{EventTypeId}-{xxHash64 of EventJSON, 16 lowercase hex digits}".
	MessageID string
	// CorrelationID "" is the publisher's default, a new GUID.
	CorrelationID string
	// EventID "" is a new GUID, as the forwarder's SET user.EventId =
	// newid() gives every fan-out copy. (The broker's newid() is an AMQP
	// uuid; the Functions host hands it to a custom handler as its string,
	// which is what this builder writes.)
	EventID string
}

// DefaultMessageID is the publisher's default MessageId for an event:
// "{eventTypeID}-{xxHash64(UTF-8 eventJSON), seed 0, as 16 lowercase hex}".
func DefaultMessageID(eventTypeID, eventJSON string) string {
	return fmt.Sprintf("%s-%016x", eventTypeID, xxhash.Sum64String(eventJSON))
}

// EventRequest returns e as the consumer's endpoint subscription receives
// it: the publisher's message (To = EventTypeId, MessageType EventRequest,
// EventId null, OriginatingMessageId and ParentMessageId "self",
// RetryCount 0, OriginatingFrom = Publisher, EventTypeId, no From, body
// {EventContent:{EventTypeId, EventJson}, ErrorContent:null}) after the
// forwarder rule's action SET From = Publisher, EventId = newid(),
// To = Endpoint. The broker MessageId, SessionId and CorrelationId are
// kept across the fan-out.
func EventRequest(e Event) Message {
	return Forwarded(Published(e), e.Publisher, e.Endpoint, e.EventID)
}

// Forwarded returns published, an event as its publisher sent it to its
// own topic, as the forwarder subscription of the consuming endpoint
// delivers it: the rule's action SET From = publisher, EventId = eventID
// ("" is a new GUID, as newid() gives), To = endpoint; every other property,
// the broker MessageId, SessionId and CorrelationId and the body are kept.
// published is not changed.
func Forwarded(published Message, publisher, endpoint, eventID string) Message {
	if eventID == "" {
		eventID = uuid.NewString()
	}
	p := clone(published.ApplicationProperties)
	p[message.PropFrom] = publisher
	p[message.PropEventID] = eventID
	p[message.PropTo] = endpoint
	published.ApplicationProperties = p
	return published
}

// Published returns e as the publisher sends it to its own topic, before
// the forwarder: To = EventTypeId, MessageType EventRequest, EventId null,
// OriginatingMessageId and ParentMessageId "self", RetryCount 0,
// OriginatingFrom = Publisher, EventTypeId, no From; e.Endpoint and
// e.EventID are not used.
func Published(e Event) Message {
	if e.MessageID == "" {
		e.MessageID = DefaultMessageID(e.EventTypeID, e.EventJSON)
	}
	if e.CorrelationID == "" {
		e.CorrelationID = uuid.NewString()
	}
	p := base(e.EventTypeID, message.EventRequest, "", "", "", e.Publisher, "", e.EventTypeID)
	c := message.Content{EventContent: &message.EventContent{EventTypeID: ptrOrNil(e.EventTypeID), EventJSON: &e.EventJSON}}
	return Message{ApplicationProperties: p, MessageID: e.MessageID, SessionID: e.SessionID,
		CorrelationID: &e.CorrelationID, Body: c.AppendJSON(nil)}
}

// HandlerContext is what a NimBus handler knows of the delivery it handles
// (IEventHandlerContext), as PublishFromContext reads it, and the trace
// context current when it publishes. An empty string is null.
type HandlerContext struct {
	MessageID            string
	SessionID            string
	CorrelationID        string
	OriginatingMessageID string
	// TraceParent and TraceState are those of the current activity ("":
	// none, and the property is not written).
	TraceParent string
	TraceState  string
}

// PublishedFromContext returns e as NimBus's
// PublisherClient.PublishFromContext(e, ctx, e.MessageID) sends it to the
// publisher's own topic: the message of a publish (To = EventTypeId,
// MessageType EventRequest, EventId null, RetryCount 0, OriginatingFrom =
// e.Publisher or "self", EventTypeId, no From) in ctx's session with ctx's
// correlation id, and the lineage of the delivery: ParentMessageId =
// ctx.MessageID, OriginatingMessageId = ctx.OriginatingMessageID unless it
// is blank or "self" in any case, then ctx.MessageID. traceparent and
// tracestate are written when set. e.SessionID, e.CorrelationID,
// e.Endpoint and e.EventID are not used; e.MessageID is required, as
// PublishFromContext requires it.
func PublishedFromContext(e Event, ctx HandlerContext) Message {
	origin := ctx.OriginatingMessageID
	if strings.TrimSpace(origin) == "" || strings.EqualFold(origin, message.Self) {
		origin = ctx.MessageID
	}
	p := map[string]any{
		"To":                   e.EventTypeID,
		"MessageType":          "EventRequest",
		"EventId":              nil,
		"OriginatingMessageId": origin,
		"ParentMessageId":      ctx.MessageID,
		"RetryCount":           int32(0),
		"OriginatingFrom":      orSelf(e.Publisher),
		"EventTypeId":          e.EventTypeID,
	}
	if ctx.TraceParent != "" {
		p["traceparent"] = ctx.TraceParent
	}
	if ctx.TraceState != "" {
		p["tracestate"] = ctx.TraceState
	}
	c := message.Content{EventContent: &message.EventContent{EventTypeID: &e.EventTypeID, EventJSON: &e.EventJSON}}
	return Message{ApplicationProperties: p, MessageID: e.MessageID, SessionID: ctx.SessionID,
		CorrelationID: ptrOrNil(ctx.CorrelationID), Body: c.AppendJSON(nil)}
}

// ErrorResponse is what the Manager knows of a failed event's
// ErrorResponse: the Resolver's stored message entity. An empty string is
// null.
type ErrorResponse struct {
	// MessageID is the broker-assigned MessageId of the ErrorResponse.
	MessageID string
	// CorrelationID is the ErrorResponse's CorrelationId: the MessageId of
	// the delivery that failed.
	CorrelationID        string
	EventID              string
	SessionID            string
	OriginatingMessageID string
}

// ErrorResponseOf is the ErrorResponse the Resolver stores for resp, a
// response a subscriber sent, once the broker assigned it messageID.
func ErrorResponseOf(resp *message.Outgoing, messageID string) ErrorResponse {
	er := ErrorResponse{MessageID: messageID, SessionID: resp.SessionID}
	if resp.CorrelationID != nil {
		er.CorrelationID = *resp.CorrelationID
	}
	er.EventID, _ = message.PropertyString(resp.ApplicationProperties, message.PropEventID)
	er.OriginatingMessageID, _ = message.PropertyString(resp.ApplicationProperties, message.PropOriginatingMessageID)
	return er
}

// Resubmission returns the ResubmissionRequest ManagerClient.Resubmit
// sends to endpoint for er: To = endpoint, From = Manager, CorrelationId =
// er.CorrelationID, EventId and SessionId of er, OriginatingMessageId =
// er.OriginatingMessageID, else er.MessageID; ParentMessageId =
// er.MessageID, RetryCount 0, OriginatingFrom "self", EventTypeId =
// eventTypeID, body {EventContent:{eventTypeID, eventJSON},
// ErrorContent:null}; no MessageId (the broker assigns one).
func Resubmission(er ErrorResponse, endpoint, eventTypeID, eventJSON string) Message {
	orig := er.OriginatingMessageID
	if orig == "" {
		orig = er.MessageID
	}
	p := base(endpoint, message.ResubmissionRequest, er.EventID, orig, er.MessageID, "", message.ManagerID, eventTypeID)
	c := message.Content{EventContent: &message.EventContent{EventTypeID: ptrOrNil(eventTypeID), EventJSON: &eventJSON}}
	return Message{ApplicationProperties: p, SessionID: er.SessionID, CorrelationID: ptrOrNil(er.CorrelationID), Body: c.AppendJSON(nil)}
}

// Skip returns the SkipRequest ManagerClient.Skip sends to endpoint for
// er: as Resubmission but CorrelationId = er.MessageID (the ErrorResponse's
// own id), MessageType SkipRequest and the empty content
// {"EventContent":null,"ErrorContent":null}.
func Skip(er ErrorResponse, endpoint, eventTypeID string) Message {
	orig := er.OriginatingMessageID
	if orig == "" {
		orig = er.MessageID
	}
	p := base(endpoint, message.SkipRequest, er.EventID, orig, er.MessageID, "", message.ManagerID, eventTypeID)
	return Message{ApplicationProperties: p, SessionID: er.SessionID, CorrelationID: ptrOrNil(er.MessageID),
		Body: (&message.Content{}).AppendJSON(nil)}
}

// Settlement are the coordinates of a pending-handoff row a settlement is
// addressed to (NimBus's HandoffSettlementCoordinates). An empty string is
// null.
type Settlement struct {
	// To is the subscriber endpoint.
	To        string
	EventID   string
	SessionID string
	// CorrelationID is the pending message's CorrelationId.
	CorrelationID string
	// ParentMessageID is the MessageId of the message that went pending.
	ParentMessageID      string
	OriginatingMessageID string
	EventTypeID          string
	// MessageID "" is a new GUID, as the factory assigns.
	MessageID string
}

// SettlementOf addresses a settlement to the pending message in (the
// delivery whose handler handed off), as the handoff client fills the
// coordinates from its audit row.
func SettlementOf(in *message.Inbound) Settlement {
	s := Settlement{To: in.To, OriginatingMessageID: in.OriginatingMessageID}
	if in.EventID != nil {
		s.EventID = *in.EventID
	}
	if in.SessionID != nil {
		s.SessionID = *in.SessionID
	}
	if in.CorrelationID != nil {
		s.CorrelationID = *in.CorrelationID
	}
	if in.MessageID != nil {
		s.ParentMessageID = *in.MessageID
	}
	if in.EventTypeID != nil {
		s.EventTypeID = *in.EventTypeID
	}
	return s
}

func settlement(s Settlement, t message.Type, c *message.Content) Message {
	orig := s.OriginatingMessageID
	if orig == "" {
		orig = s.ParentMessageID
	}
	p := base(s.To, t, s.EventID, orig, s.ParentMessageID, "", message.ManagerID, s.EventTypeID)
	if s.EventTypeID == "" && c.EventContent != nil && c.EventContent.EventTypeID != nil {
		p[message.PropEventTypeID] = *c.EventContent.EventTypeID
	}
	id := s.MessageID
	if id == "" {
		id = uuid.NewString()
	}
	return Message{ApplicationProperties: p, MessageID: id, SessionID: s.SessionID,
		CorrelationID: ptrOrNil(s.CorrelationID), Body: c.AppendJSON(nil)}
}

// HandoffCompleted returns the HandoffCompletedRequest
// HandoffControlMessageFactory.CreateCompleted builds: a fresh GUID
// MessageId, From = Manager, CorrelationId, EventId and SessionId of s,
// OriginatingMessageId = s.OriginatingMessageID else s.ParentMessageID,
// ParentMessageId, EventTypeId, RetryCount 0, OriginatingFrom "self"; the
// body carries detailsJSON as EventContent{EventTypeId, EventJson} when it
// is not "", else the empty content.
func HandoffCompleted(s Settlement, detailsJSON string) Message {
	c := &message.Content{}
	if detailsJSON != "" {
		c.EventContent = &message.EventContent{EventTypeID: ptrOrNil(s.EventTypeID), EventJSON: &detailsJSON}
	}
	return settlement(s, message.HandoffCompletedRequest, c)
}

// HandoffFailed returns the HandoffFailedRequest
// HandoffControlMessageFactory.CreateFailed builds: as HandoffCompleted,
// with the body {EventContent:null, ErrorContent:{ErrorText: errText,
// ErrorType: errType (null when ""), ExceptionStackTrace: null,
// ExceptionSource: null}}.
func HandoffFailed(s Settlement, errText, errType string) Message {
	c := &message.Content{ErrorContent: &message.ErrorContent{ErrorText: &errText, ErrorType: ptrOrNil(errType)}}
	return settlement(s, message.HandoffFailedRequest, c)
}
