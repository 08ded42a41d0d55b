package message

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Trace context application properties (W3C Trace Context), which NimBus
// writes on every message it sends.
const (
	PropTraceParent = "traceparent"
	PropTraceState  = "tracestate"
)

// MaxIDLength is the longest MessageId or SessionId Service Bus accepts,
// in characters (UTF-16 code units, as .NET counts them); the .NET SDK
// NimBus sends with refuses a longer one.
const MaxIDLength = 128

// idLength is the length of s in UTF-16 code units.
func idLength(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// Message sizes. Service Bus refuses a message larger than its namespace
// allows (256 KB on Standard; on Premium the entity's maximum, at least 1
// MB), and a batch larger than 256 KB (Standard) or 1 MB (Premium): an
// event is sent in a batch, so the smaller of the two bounds it.
const (
	// DefaultMaxMessageBytes is a Standard namespace's largest message.
	DefaultMaxMessageBytes = 256 << 10
	// MaxMessageBytesLimit is the largest batch any namespace accepts, and
	// so the largest event message this endpoint can send.
	MaxMessageBytesLimit = 1 << 20
)

// ErrInvalidPublication matches every error NewPublishedEvent returns.
var ErrInvalidPublication = errors.New("invalid publication")

// Publication is one event a handler publishes while handling a delivery.
type Publication struct {
	// Endpoint is the publishing endpoint, written as OriginatingFrom
	// ("self" when empty, as NimBus writes a publisher without one).
	Endpoint string
	// EventTypeID is the event type: the To and EventTypeId properties and
	// EventContent.EventTypeId. Required.
	EventTypeID string
	// EventJSON is the event serialized as JSON, carried as the string
	// EventContent.EventJson. It must be valid JSON.
	EventJSON string
	// MessageID is the broker MessageId. Required and deterministic: every
	// later copy of the event must carry the same one, so that the broker's
	// duplicate detection and every downstream inbox recognise it.
	MessageID string
	// SessionID, when not "", is the session the event goes out in instead
	// of the inbound delivery's (NewStartedEvent: required).
	SessionID string
	// CorrelationID is the CorrelationId of an event that starts a
	// workflow (NewStartedEvent, required); a published event takes the
	// delivery's.
	CorrelationID string
	// TraceParent and TraceState are the W3C trace context of the publish,
	// written as the traceparent and tracestate properties when not "".
	// They are fixed when the event is published, so every re-send of it
	// carries the same context.
	TraceParent string
	TraceState  string
	// MaxBytes bounds the event's message (SizeBound); 0 means
	// DefaultMaxMessageBytes.
	MaxBytes int
}

// NewPublishedEvent builds the EventRequest a handler publishes onward
// while handling in, exactly as NimBus's PublisherClient.PublishFromContext
// sends it to the publishing endpoint's own topic (where NimBus's forwarder
// subscriptions fan it out to each consuming endpoint):
//
//   - To = EventTypeId = p.EventTypeID, MessageType EventRequest;
//   - EventId present with an AMQP null (the forwarder stamps a fresh one
//     on each consumer's copy);
//   - OriginatingMessageId = the inbound one, or the inbound MessageId when
//     that is blank or "self" (ignoring case); ParentMessageId = the inbound
//     MessageId;
//   - RetryCount 0 (AMQP int), OriginatingFrom = p.Endpoint;
//   - no From: the forwarder rules match From IS NULL, so a From would stop
//     the event from being forwarded;
//   - traceparent and tracestate from p;
//   - broker MessageId = p.MessageID, SessionId = p.SessionID or the inbound
//     SessionId, CorrelationId = the inbound CorrelationId (the inbound
//     MessageId when the delivery has none: see below);
//   - body {"EventContent":{"EventTypeId":…,"EventJson":…},"ErrorContent":null}
//     as Newtonsoft.Json writes it.
//
// NimBus's MessageHelper also sets ScheduledEnqueueTime to the sender's
// clock (UtcNow) on every send, which asks the broker to enqueue the
// message at once; it is not set here. No NimBus reader uses it, the
// broker's duplicate detection treats scheduled and plain sends alike, a
// sender clock ahead of the broker's would hold the message back by the
// difference, and a stored event re-sent later would carry the time of the
// first attempt.
//
// As PublishFromContext does, it refuses a blank message id and a delivery
// without a MessageId or SessionId; it also refuses a blank event type, a
// payload that is not JSON, a MessageId or SessionId longer than Service
// Bus accepts, a blank SessionID override, and an event whose message
// could be larger than p.MaxBytes (SizeBound). Every error wraps
// ErrInvalidPublication and names the problem, never a value of the
// payload.
//
// A delivery without a CorrelationId (a CloudEvent without the correlation
// extension; NimBus's publishers always set one) is where the workflow
// starts: the event takes the inbound MessageId as its CorrelationId, as
// its OriginatingMessageId does on a first hop, so every event of the
// workflow shares it. PublishFromContext would refuse such a delivery.
func NewPublishedEvent(in *Inbound, p Publication) (*Outgoing, error) {
	if err := checkPublication(in, p); err != nil {
		return nil, err
	}
	sid := p.SessionID
	if sid == "" {
		sid = *in.SessionID
	}
	parent := *in.MessageID
	origin := in.OriginatingMessageID
	if strings.TrimSpace(origin) == "" || strings.EqualFold(origin, Self) {
		origin = parent
	}
	corr := parent
	if in.CorrelationID != nil && strings.TrimSpace(*in.CorrelationID) != "" {
		corr = *in.CorrelationID
	}
	return buildEvent(p, sid, corr, parent, origin)
}

// NewStartedEvent builds the EventRequest that starts a workflow outside
// any delivery, exactly as NimBus's PublisherClient.Publish(event,
// sessionId, correlationId, messageId) sends it to the publishing
// endpoint's own topic: as NewPublishedEvent's, except that there is no
// inbound message to descend from, so ParentMessageId and
// OriginatingMessageId are "self", and SessionId and CorrelationId are
// p.SessionID and p.CorrelationID, both required here (the caller chooses
// them, or new ones, before the event is stored, so every re-send carries
// the same).
//
// It refuses what NewPublishedEvent refuses besides the delivery, and a
// blank SessionID or CorrelationID, a CorrelationID longer than Service
// Bus accepts; every error wraps ErrInvalidPublication.
func NewStartedEvent(p Publication) (*Outgoing, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidPublication, fmt.Sprintf(format, a...))
	}
	switch {
	case strings.TrimSpace(p.SessionID) == "":
		return nil, bad("the session key is empty")
	case strings.TrimSpace(p.CorrelationID) == "":
		return nil, bad("the correlation id is empty")
	case idLength(p.CorrelationID) > MaxIDLength:
		return nil, bad("the correlation id has %d characters; Service Bus accepts at most %d", idLength(p.CorrelationID), MaxIDLength)
	}
	if err := checkEvent(p); err != nil {
		return nil, err
	}
	return buildEvent(p, p.SessionID, p.CorrelationID, Self, Self)
}

// buildEvent builds an EventRequest of p with the given session,
// correlation and lineage; p is checked.
func buildEvent(p Publication, sid, corr, parent, origin string) (*Outgoing, error) {
	from := p.Endpoint
	if from == "" {
		from = Self
	}
	props := make(map[string]any, 10)
	props[PropTo] = p.EventTypeID
	props[PropMessageType] = EventRequest.String()
	props[PropEventID] = nil
	props[PropOriginatingMessageID] = origin
	props[PropParentMessageID] = parent
	props[PropRetryCount] = int32(0)
	props[PropOriginatingFrom] = from
	props[PropEventTypeID] = p.EventTypeID
	if p.TraceParent != "" {
		props[PropTraceParent] = p.TraceParent
	}
	if p.TraceState != "" {
		props[PropTraceState] = p.TraceState
	}
	c := Content{EventContent: &EventContent{EventTypeID: &p.EventTypeID, EventJSON: &p.EventJSON}}
	body := c.AppendJSON(make([]byte, 0, len(p.EventJSON)+len(p.EventTypeID)+96))
	out := &Outgoing{MessageID: p.MessageID, SessionID: sid, CorrelationID: &corr, ApplicationProperties: props, Body: body}
	limit := p.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxMessageBytes
	}
	if n := out.SizeBound(); n > limit {
		return nil, fmt.Errorf("%w: the event's message takes up to %d bytes (a payload of %d bytes, carried as a JSON string); Service Bus accepts at most %d here", ErrInvalidPublication, n, len(p.EventJSON), limit)
	}
	return out, nil
}

// SizeBound is at least the bytes o takes in a Service Bus batch of its
// own, as the SDK counts them against the batch's limit, and at most a few
// hundred bytes more. The SDK counts the message's AMQP encoding and,
// again, a copy of it without the body (the batch's envelope): every
// property is counted twice, the body once.
func (o *Outgoing) SizeBound() int {
	meta := sizeOverhead + amqpString(o.MessageID) + amqpString(o.SessionID)
	if o.CorrelationID != nil {
		meta += amqpString(*o.CorrelationID)
	}
	for k, v := range o.ApplicationProperties {
		meta += amqpString(k)
		switch v := v.(type) {
		case string:
			meta += amqpString(v)
		case []byte:
			meta += amqpString(string(v))
		default:
			// null, a boolean, a number, a timestamp or a UUID: at most
			// 17 bytes with its constructor.
			meta += 17
		}
	}
	return 2*meta + 8 + len(o.Body)
}

// sizeOverhead bounds the AMQP framing of one message besides its
// strings: the header, properties and application properties sections,
// their descriptors, list and map lengths, and the empty properties (about
// 40 bytes as the SDK encodes an event, measured against its batch).
const sizeOverhead = 64

// amqpString is the size of s encoded as an AMQP string: a constructor and
// a 1-byte length up to 255 bytes, a 4-byte length above.
func amqpString(s string) int {
	if len(s) < 256 {
		return 2 + len(s)
	}
	return 5 + len(s)
}

func checkPublication(in *Inbound, p Publication) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidPublication, fmt.Sprintf(format, a...))
	}
	switch {
	case in == nil:
		return bad("there is no inbound delivery")
	case in.MessageID == nil || strings.TrimSpace(*in.MessageID) == "":
		return bad("the inbound delivery has no MessageId")
	case p.SessionID == "" && (in.SessionID == nil || strings.TrimSpace(*in.SessionID) == ""):
		return bad("the inbound delivery has no SessionId")
	}
	return checkEvent(p)
}

// checkEvent checks what every published event needs: a message id and
// an event type, ids Service Bus accepts, a JSON payload.
func checkEvent(p Publication) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidPublication, fmt.Sprintf(format, a...))
	}
	switch {
	case strings.TrimSpace(p.MessageID) == "":
		return bad("the message id is empty; a deterministic message id is required")
	case !utf8.ValidString(p.MessageID):
		return bad("the message id is not valid UTF-8; Service Bus carries it as text")
	case idLength(p.MessageID) > MaxIDLength:
		return bad("the message id has %d characters; Service Bus accepts at most %d", idLength(p.MessageID), MaxIDLength)
	case strings.TrimSpace(p.EventTypeID) == "":
		return bad("the event type is empty")
	case !utf8.ValidString(p.EventTypeID):
		return bad("the event type is not valid UTF-8; Service Bus carries it as text")
	case p.SessionID != "" && strings.TrimSpace(p.SessionID) == "":
		return bad("the session key is blank")
	case !utf8.ValidString(p.SessionID):
		return bad("the session key is not valid UTF-8; Service Bus carries it as text")
	case idLength(p.SessionID) > MaxIDLength:
		return bad("the session key has %d characters; Service Bus accepts at most %d", idLength(p.SessionID), MaxIDLength)
	case !json.Valid([]byte(p.EventJSON)):
		return bad("the event payload is not valid JSON (%d bytes)", len(p.EventJSON))
	}
	return nil
}
