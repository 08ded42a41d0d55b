package servicebus

import (
	"errors"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// ErrUnsupportedProperty is returned for an application property value that
// is not a string, int32, int64 or nil: NimBus's wire types are exact and
// the SDK would silently pick another AMQP type for, say, an int.
var ErrUnsupportedProperty = errors.New("servicebus: unsupported application property type")

// Message is a message to send. Empty string fields are not set on the
// wire; CorrelationID is a pointer because an empty correlation id is a
// value that must round-trip (NimBus copies the inbound MessageId into it).
type Message struct {
	// Body is sent as the AMQP data section, unchanged.
	Body []byte
	// ApplicationProperties hold string, int32, int64 or nil values only
	// (AMQP string, int, long, null); the map is copied on send.
	ApplicationProperties map[string]any
	// SessionID is the session (AMQP group-id); "" sends none.
	SessionID string
	// CorrelationID is sent when non-nil.
	CorrelationID *string
	// MessageID is sent when non-empty; otherwise the broker assigns one.
	MessageID string
	// Subject (AMQP subject, "Label") is sent when non-empty.
	Subject string
	// To (AMQP to) is sent when non-empty. NimBus routes on the To
	// application property, not on this field.
	To string
	// ContentType (AMQP content-type) is sent when non-empty.
	ContentType string
}

// CheckProperties reports the first application property whose value has
// a type other than string, int32, int64 or nil, wrapping
// [ErrUnsupportedProperty]. Send and Schedule call it before any I/O.
func CheckProperties(props map[string]any) error {
	for k, v := range props {
		switch v.(type) {
		case string, int32, int64, nil:
		default:
			return fmt.Errorf("%w: %s is %T", ErrUnsupportedProperty, k, v)
		}
	}
	return nil
}

// sdkMessage is an SDK message together with the strings its optional
// fields point to, so that converting a Message costs one allocation and
// the caller's Message does not escape.
type sdkMessage struct {
	msg                                            azservicebus.Message
	sessionID, messageID, subject, to, contentType string
}

// toSDK checks m and converts it. The SDK copies the property map when it
// encodes the message; m's own map is not changed.
func (m *Message) toSDK() (*azservicebus.Message, error) {
	if m == nil {
		return nil, errors.New("servicebus: nil message")
	}
	if err := CheckProperties(m.ApplicationProperties); err != nil {
		return nil, err
	}
	w := &sdkMessage{
		msg: azservicebus.Message{
			Body:                  m.Body,
			ApplicationProperties: m.ApplicationProperties,
			CorrelationID:         m.CorrelationID,
		},
		sessionID: m.SessionID, messageID: m.MessageID, subject: m.Subject, to: m.To, contentType: m.ContentType,
	}
	if w.sessionID != "" {
		w.msg.SessionID = &w.sessionID
	}
	if w.messageID != "" {
		w.msg.MessageID = &w.messageID
	}
	if w.subject != "" {
		w.msg.Subject = &w.subject
	}
	if w.to != "" {
		w.msg.To = &w.to
	}
	if w.contentType != "" {
		w.msg.ContentType = &w.contentType
	}
	return &w.msg, nil
}

// Received is a message received through a [SessionReceiver]. Settle it
// with the receiver that returned it.
type Received struct {
	Body []byte
	// ApplicationProperties are decoded with their AMQP types (int → int32,
	// long → int64, string → string, null → nil).
	ApplicationProperties map[string]any
	MessageID             string
	SessionID             string
	CorrelationID         *string
	Subject               string
	To                    string
	// SequenceNumber is the broker's sequence number of the message.
	SequenceNumber int64
	// DeliveryCount counts this delivery (1 on the first).
	DeliveryCount uint32
	// EnqueuedTime is when the broker accepted the message (zero if unknown).
	EnqueuedTime time.Time

	raw *azservicebus.ReceivedMessage
}

func fromSDK(m *azservicebus.ReceivedMessage) *Received {
	r := &Received{
		Body:                  m.Body,
		ApplicationProperties: m.ApplicationProperties,
		MessageID:             m.MessageID,
		CorrelationID:         m.CorrelationID,
		DeliveryCount:         m.DeliveryCount,
		raw:                   m,
	}
	if m.SessionID != nil {
		r.SessionID = *m.SessionID
	}
	if m.Subject != nil {
		r.Subject = *m.Subject
	}
	if m.To != nil {
		r.To = *m.To
	}
	if m.SequenceNumber != nil {
		r.SequenceNumber = *m.SequenceNumber
	}
	if m.EnqueuedTime != nil {
		r.EnqueuedTime = *m.EnqueuedTime
	}
	return r
}
