package devhost

import (
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
)

// Event is one NimBus EventRequest delivered to an endpoint.
type Event struct {
	// Endpoint is the receiving endpoint (To; the responses' From).
	Endpoint string
	// Publisher is the publishing endpoint (From, OriginatingFrom).
	Publisher   string
	EventTypeID string
	// EventJSON is the event as JSON (EventContent.EventJson).
	EventJSON string
	// MessageID "" is the publisher's default,
	// "{EventTypeId}-{xxHash64 of EventJSON}": the same event sent twice is
	// the same message.
	MessageID string
	// SessionID "" is the MessageId.
	SessionID string
	// DeliveryCount is the broker's delivery count; 0 means 1.
	DeliveryCount int

	// The lineage of an event further down a workflow, as NimBus's
	// publisher and forwarder set it; each "" keeps what a workflow's first
	// event carries.
	//
	// CorrelationID "" is a new GUID.
	CorrelationID string
	// ParentMessageID and OriginatingMessageID "" are "self".
	ParentMessageID      string
	OriginatingMessageID string
	// OriginatingFrom and From "" are Publisher.
	OriginatingFrom string
	From            string
	// TraceParent is the W3C trace context the publisher sent the event
	// under ("": none); the handler's span continues its trace.
	TraceParent string
}

// EventInvocation returns e as NimBus's publisher and forwarder put it on
// the endpoint subscription, and the invocation envelope of it for
// function (a Service Bus trigger with sessions and dataType binary),
// enqueued a moment before now; seq numbers the deliveries of a run.
func EventInvocation(function string, e Event, seq int64, now time.Time) (nimbusmsg.Message, []byte) {
	if e.MessageID == "" {
		e.MessageID = nimbusmsg.DefaultMessageID(e.EventTypeID, e.EventJSON)
	}
	if e.SessionID == "" {
		e.SessionID = e.MessageID
	}
	m := nimbusmsg.EventRequest(nimbusmsg.Event{
		Publisher: e.Publisher, Endpoint: e.Endpoint, EventTypeID: e.EventTypeID, EventJSON: e.EventJSON,
		SessionID: e.SessionID, MessageID: e.MessageID, CorrelationID: e.CorrelationID,
	})
	for name, v := range map[string]string{
		message.PropParentMessageID: e.ParentMessageID, message.PropOriginatingMessageID: e.OriginatingMessageID,
		message.PropOriginatingFrom: e.OriginatingFrom, message.PropFrom: e.From, message.PropTraceParent: e.TraceParent,
	} {
		if v != "" {
			m.ApplicationProperties[name] = v
		}
	}
	return m, Invocation(function, m, e.DeliveryCount, seq, now)
}

// Invocation returns the invocation envelope of m for function (a Service
// Bus trigger with sessions and dataType binary), delivered for the
// deliveryCount-th time (0 means 1) and enqueued a moment before now; seq
// numbers the deliveries of a run.
func Invocation(function string, m nimbusmsg.Message, deliveryCount int, seq int64, now time.Time) []byte {
	sb := m.Delivery(function, "", max(deliveryCount, 1), now.UTC().Add(-time.Second))
	HostFields(&sb, seq, now)
	return hostwire.ServiceBus(sb)
}
