package resolverapp

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/tracking"
)

// PropThrottleRetryCount is the application property on which the Resolver
// counts its own scheduled re-sends of a message.
const PropThrottleRetryCount = "ThrottleRetryCount"

// Delivery is one message from the Resolver subscription.
type Delivery struct {
	Broker message.Broker
	// ContentType and Subject are the broker properties, copied onto a
	// scheduled re-send.
	ContentType string
	Subject     string
	// Properties are the application properties as the transport decoded
	// them (strings, numbers, booleans, nil).
	Properties map[string]any
	Body       []byte
}

// ErrInvalid matches every error the Resolver reports for a message it
// cannot read (errors.Is).
var ErrInvalid = errors.New("resolver: invalid message")

// invalid builds an ErrInvalid error naming what is wrong; it never quotes
// a value.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// received is a Resolver message read as NimBus's MessageContext reads it.
type received struct {
	d            *Delivery
	messageID    string
	sessionID    string
	typ          message.Type
	eventID      string
	eventTypeID  *string
	to, from     *string
	content      *message.Content
	throttleRetr int
}

// isRequest reports the request types, whose endpoint is To; every other
// type is a response, attributed to From.
func isRequest(t message.Type) bool {
	switch t {
	case message.EventRequest, message.ContinuationRequest, message.RetryRequest, message.ResubmissionRequest,
		message.SkipRequest, message.HandoffCompletedRequest, message.HandoffFailedRequest:
		return true
	}
	return false
}

func (r *received) prop(name string) *string {
	if s, ok := message.PropertyString(r.d.Properties, name); ok {
		return &s
	}
	return nil
}

// read checks what NimBus requires of a Resolver message: MessageId,
// SessionId, a parseable MessageType, EventId, To on requests, From on
// responses, and a MessageContent body. The heartbeat check needs only the
// event type, so read reports it before the other checks fail.
func read(d *Delivery) (r *received, heartbeat bool, err error) {
	r = &received{d: d}
	r.content, _ = message.ParseContent(d.Body)
	r.eventTypeID = r.prop(message.PropEventTypeID)
	if r.eventTypeID == nil && r.content != nil && r.content.EventContent != nil {
		r.eventTypeID = r.content.EventContent.EventTypeID
	}
	if r.eventTypeID != nil && strings.EqualFold(*r.eventTypeID, message.HeartbeatEventTypeID) {
		return r, true, nil
	}
	if d.Broker.MessageID == nil || *d.Broker.MessageID == "" {
		return nil, false, invalid("the message has no MessageId")
	}
	r.messageID = *d.Broker.MessageID
	if d.Broker.SessionID == nil || *d.Broker.SessionID == "" {
		return nil, false, invalid("the message has no SessionId")
	}
	r.sessionID = *d.Broker.SessionID
	mt := r.prop(message.PropMessageType)
	if mt == nil {
		return nil, false, invalid("application property %s is not defined", message.PropMessageType)
	}
	t, ok := message.ParseType(*mt)
	if !ok {
		return nil, false, invalid("application property %s cannot be parsed (%d characters)", message.PropMessageType, len(*mt))
	}
	r.typ = t
	ev := r.prop(message.PropEventID)
	if ev == nil || *ev == "" {
		return nil, false, invalid("application property %s is missing or empty", message.PropEventID)
	}
	r.eventID = *ev
	r.to, r.from = r.prop(message.PropTo), r.prop(message.PropFrom)
	if isRequest(t) && (r.to == nil || *r.to == "") {
		return nil, false, invalid("request %s has no %s", t, message.PropTo)
	}
	if !isRequest(t) && (r.from == nil || *r.from == "") {
		return nil, false, invalid("response %s has no %s (the Resolver fan-out subscription stamps it)", t, message.PropFrom)
	}
	if r.content == nil {
		return nil, false, invalid("the body is not a MessageContent JSON object")
	}
	if s := r.prop(PropThrottleRetryCount); s != nil {
		if n, err := strconv.Atoi(strings.TrimSpace(*s)); err == nil && n > 0 {
			r.throttleRetr = n
		}
	}
	return r, false, nil
}

// endpoint is the endpoint a message is tracked under: To for requests,
// From for responses (stamped by the fan-out rule from-<endpoint>).
func (r *received) endpoint() string {
	if isRequest(r.typ) {
		return *r.to
	}
	return *r.from
}

// key is the tracking row the message projects onto.
func (r *received) key() tracking.Key {
	return tracking.Key{EndpointID: r.endpoint(), EventID: r.eventID, SessionID: r.sessionID}
}

// int64Prop reads a numeric property; nil when absent or not an integer.
func (r *received) int64Prop(name string) *int64 {
	s := r.prop(name)
	if s == nil {
		return nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(*s), 10, 64)
	if err != nil {
		return nil
	}
	return &n
}

// timeProp reads a round-trip (ISO 8601) time; nil when absent or
// unparseable, as NimBus reads ExpectedBy.
func (r *received) timeProp(name string) *time.Time {
	s := r.prop(name)
	if s == nil {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(*s))
	if err != nil {
		return nil
	}
	t = t.UTC()
	return &t
}

// int32Props and int64Props are the numeric application properties NimBus
// writes as AMQP int and long. The Functions host hands every number over
// as JSON, so a re-send restores these types by name.
var (
	int32Props = map[string]bool{message.PropRetryCount: true, "RetryLimit": true, PropThrottleRetryCount: true}
	int64Props = map[string]bool{message.PropQueueTimeMs: true, message.PropProcessingTimeMs: true, message.PropDeferralSequence: true}
)

// restoreTypes copies props with the AMQP types a Service Bus send accepts
// (string, int32, int64, nil): NimBus's numeric properties get their own
// type back; another integer becomes a long; any other value is sent as the
// text NimBus would read from it.
func restoreTypes(props map[string]any) map[string]any {
	out := make(map[string]any, len(props)+1)
	for k, v := range props {
		switch x := v.(type) {
		case nil, string, int32, int64:
			out[k] = x
			continue
		}
		s, _ := message.PropertyString(props, k)
		n, err := strconv.ParseInt(s, 10, 64)
		switch {
		case err != nil:
			out[k] = s
		case int32Props[k] && n >= -1<<31 && n < 1<<31:
			out[k] = int32(n)
		default:
			out[k] = n
		}
	}
	for k, v := range out {
		// A property NimBus writes as int that arrived as a long keeps its
		// type too.
		if n, ok := v.(int64); ok && int32Props[k] && n >= -1<<31 && n < 1<<31 {
			out[k] = int32(n)
		}
		if n, ok := v.(int32); ok && int64Props[k] {
			out[k] = int64(n)
		}
	}
	return out
}
