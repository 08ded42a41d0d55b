package message

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Broker holds the broker (system) properties of a delivered message that
// NimBus reads. A nil pointer means the property was absent.
type Broker struct {
	MessageID     *string
	SessionID     *string
	CorrelationID *string
	// EnqueuedTime is the zero time when the transport did not say.
	EnqueuedTime  time.Time
	DeliveryCount int
	// ContentType is the AMQP content type ("" when absent); it marks a
	// structured-mode CloudEvent.
	ContentType string
}

// Inbound is a delivered NimBus message, read as NimBus's MessageContext
// reads it.
type Inbound struct {
	Broker

	Type Type
	To   string
	From string
	// EventID may be nil: the property is always written but its value may
	// be null.
	EventID *string
	// EventTypeID is the EventTypeId property, else the body's
	// EventContent.EventTypeId; nil when neither is present.
	EventTypeID          *string
	OriginatingMessageID string
	ParentMessageID      string
	// RetryCount is nil when absent or not an integer.
	RetryCount      *int32
	OriginatingFrom *string
	// InboxMessageID is the source MessageId a stand-in (RetryRequest,
	// parked copy) carries; nil when absent.
	InboxMessageID *string

	// Content is the parsed body; nil when the body is not a MessageContent
	// (ContentErr then says why). For a CloudEvent it is synthesized:
	// EventContent{EventTypeId: the mapped type, EventJson: the data}.
	Content    *Content
	ContentErr error

	// CloudEvent is the detected CloudEvent; nil for a native message (and
	// always when CloudEvents are not enabled).
	CloudEvent *CloudEvent

	props map[string]any
}

// InvalidMessageError reports a message NimBus cannot read: a required
// property is missing or malformed. It never carries the payload.
type InvalidMessageError struct {
	Property string
	Reason   string
}

func (e *InvalidMessageError) Error() string {
	return fmt.Sprintf("invalid NimBus message: application property %s %s", e.Property, e.Reason)
}

// ErrInvalidMessage matches every *InvalidMessageError with errors.Is.
var ErrInvalidMessage = errors.New("invalid NimBus message")

// Is makes errors.Is(err, ErrInvalidMessage) true.
func (e *InvalidMessageError) Is(target error) bool { return target == ErrInvalidMessage }

// Read reads a delivered message. props are the application properties as
// the transport decoded them (strings, numbers as json.Number or Go numbers,
// booleans, nil). Required properties (MessageType, To, From, and the
// EventId key) are checked here; a missing or unparseable one is an
// *InvalidMessageError. A body that is not a MessageContent is not an error
// here: Content is nil and ContentErr says why, because only some paths need
// the body.
func Read(b Broker, props map[string]any, body []byte) (*Inbound, error) {
	return ReadWith(b, props, body, nil)
}

// ReadWith reads a delivered message as Read does and, when ce is not nil,
// detects CloudEvents first. For a detected CloudEvent every property a
// producer outside NimBus does not stamp falls back, only when the native
// property is absent, as NimBus's MessageContext does: MessageType →
// EventRequest; To and EventTypeId → the mapped type; From → source, else
// "external"; EventId → id, else the broker MessageId, else
// "(cloudevent-missing-id)"; OriginatingFrom → source; and of the broker
// properties MessageId → id, else "(cloudevent-missing-id)"; SessionId → the
// mapped session attribute, else id, else "self"; CorrelationId → the mapped
// correlation attribute. The body is not parsed: the content is synthesized
// from the type and data.
func ReadWith(b Broker, props map[string]any, body []byte, ce *CloudEventOptions) (*Inbound, error) {
	in := &Inbound{Broker: b, props: props}
	if ce != nil {
		in.CloudEvent = ce.DetectCloudEvent(b.ContentType, props, body)
	}
	ev := in.CloudEvent
	// prop reads a native property, else the CloudEvents fallback.
	prop := func(name string) (string, bool) {
		if s, ok := propString(props, name); ok || ev == nil {
			return s, ok
		}
		var v *string
		switch name {
		case PropFrom:
			v = ev.Source
			if v == nil {
				v = Ptr(External)
			}
		case PropTo, PropEventTypeID:
			v = ce.MapType(ev.Type)
			if v == nil && name == PropTo {
				// NimBus has no To then; the missing type is reported by
				// validation instead.
				v = Ptr("")
			}
		case PropEventID:
			v = ev.ID
			if v == nil {
				v = b.MessageID
			}
			if v == nil {
				v = Ptr(CloudEventMissingID)
			}
		case PropMessageType:
			v = Ptr(EventRequest.String())
		case PropOriginatingFrom:
			v = ev.Source
		}
		if v == nil {
			return "", false
		}
		return *v, true
	}

	mt, ok := prop(PropMessageType)
	if !ok {
		return nil, &InvalidMessageError{Property: PropMessageType, Reason: "is not defined"}
	}
	t, ok := ParseType(mt)
	if !ok {
		return nil, &InvalidMessageError{Property: PropMessageType, Reason: fmt.Sprintf("cannot be parsed (%d characters)", len(mt))}
	}
	in.Type = t

	if in.To, ok = prop(PropTo); !ok {
		return nil, &InvalidMessageError{Property: PropTo, Reason: "is not defined"}
	}
	if in.From, ok = prop(PropFrom); !ok {
		return nil, &InvalidMessageError{Property: PropFrom, Reason: "is not defined"}
	}
	if ev != nil {
		if s, ok := prop(PropEventID); ok {
			in.EventID = &s
		}
	} else {
		v, present := props[PropEventID]
		if !present {
			return nil, &InvalidMessageError{Property: PropEventID, Reason: "is not defined"}
		}
		if s, ok := valueString(v); ok {
			in.EventID = &s
		}
	}

	in.readOptional(prop)

	if ev != nil {
		in.Content = &Content{EventContent: &EventContent{EventTypeID: ce.MapType(ev.Type), EventJSON: ev.Data}}
		if in.MessageID == nil {
			in.MessageID = ev.ID
			if in.MessageID == nil {
				in.MessageID = Ptr(CloudEventMissingID)
			}
		}
		if in.SessionID == nil {
			in.SessionID = ce.SessionID(ev)
			if in.SessionID == nil {
				in.SessionID = ev.ID
			}
			if in.SessionID == nil {
				in.SessionID = Ptr(Self)
			}
		}
		if in.CorrelationID == nil {
			in.CorrelationID = ce.CorrelationID(ev)
		}
	} else {
		in.Content, in.ContentErr = ParseContent(body)
	}
	in.readEventTypeID(prop)
	return in, nil
}

// readOptional reads the properties NimBus's MessageContext reads leniently
// (a missing or unreadable one takes its default, never an error):
// OriginatingMessageId and ParentMessageId ("self"), RetryCount (nil unless
// an integer), OriginatingFrom (through prop, which may fall back to a
// CloudEvent's source) and InboxMessageId.
func (in *Inbound) readOptional(prop func(string) (string, bool)) {
	in.OriginatingMessageID = Self
	if s, ok := propString(in.props, PropOriginatingMessageID); ok {
		in.OriginatingMessageID = s
	}
	in.ParentMessageID = Self
	if s, ok := propString(in.props, PropParentMessageID); ok {
		in.ParentMessageID = s
	}
	if s, ok := propString(in.props, PropRetryCount); ok {
		if n, err := strconv.ParseInt(trimSpace(s), 10, 32); err == nil {
			rc := int32(n)
			in.RetryCount = &rc
		}
	}
	if s, ok := prop(PropOriginatingFrom); ok {
		in.OriginatingFrom = &s
	}
	if s, ok := propString(in.props, PropInboxMessageID); ok {
		in.InboxMessageID = &s
	}
}

// readEventTypeID reads EventTypeId: the property (through prop), else the
// body's EventContent.EventTypeId; an empty property falls back to the
// body, as a missing one does. The body must be read first.
func (in *Inbound) readEventTypeID(prop func(string) (string, bool)) {
	if s, ok := prop(PropEventTypeID); ok && s != "" {
		in.EventTypeID = &s
	} else if in.Content != nil && in.Content.EventContent != nil && in.Content.EventContent.EventTypeID != nil {
		in.EventTypeID = in.Content.EventContent.EventTypeID
	}
}

// Property returns an application property as NimBus reads it (the .NET
// ToString of the value) and whether it was present with a non-null value.
func (in *Inbound) Property(name string) (string, bool) { return propString(in.props, name) }

// IsHeartbeat reports whether the message is NimBus's liveness probe
// (EventTypeId equal to NimBus.Platform.Heartbeat, ignoring case).
func (in *Inbound) IsHeartbeat() bool {
	return in.EventTypeID != nil && strings.EqualFold(*in.EventTypeID, HeartbeatEventTypeID)
}

func propString(props map[string]any, name string) (string, bool) {
	v, ok := props[name]
	if !ok {
		return "", false
	}
	return valueString(v)
}

// valueString renders a property value as .NET's ToString would for the
// AMQP types NimBus writes. nil is "absent".
func valueString(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	case bool:
		if x {
			return "True", true
		}
		return "False", true
	case int:
		return strconv.Itoa(x), true
	case int32:
		return strconv.FormatInt(int64(x), 10), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	default:
		return fmt.Sprint(x), true
	}
}

// PropertyString returns an application property of props as NimBus reads
// it (the .NET ToString of the value) and whether it was present with a
// non-null value.
func PropertyString(props map[string]any, name string) (string, bool) {
	return propString(props, name)
}
