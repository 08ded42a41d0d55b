package nimbustest

import (
	"context"
	"fmt"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
	"github.com/nimbus-go/functions-subscriber/internal/tracking"
)

// EventStatus is one event as NimBus's Manager lists it for an endpoint:
// the Resolver's row of it.
type EventStatus struct {
	Endpoint    string
	EventID     string
	SessionID   string
	EventTypeID string
	// MessageID is the event's broker MessageId on the endpoint.
	MessageID string
	// Status is the Resolver's status: Pending, Deferred, Failed,
	// DeadLettered, Unsupported, Completed, Skipped; "" when the Resolver
	// has no row for the event.
	Status string
	// LastMessageType is the MessageType of the message that wrote the row
	// (EventRequest, ResolutionResponse, ErrorResponse, ...).
	LastMessageType string
}

// Events returns the Resolver's view of every event delivered to
// endpoint (each copy forwarded to it or sent to it by the Manager keeps
// its EventId), in the order the events arrived.
func (w *Workflow) Events(endpoint string) []EventStatus {
	w.t.Helper()
	w.endpoint(endpoint)
	seen := map[string]bool{}
	var out []EventStatus
	for _, m := range w.Topic(endpoint) {
		if m.Prop(message.PropTo) != endpoint || m.Type() != message.EventRequest.String() {
			continue
		}
		id := m.Prop(message.PropEventID)
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		out = append(out, w.status(endpoint, id, m))
	}
	return out
}

func (w *Workflow) status(endpoint, eventID string, m Message) EventStatus {
	s := EventStatus{Endpoint: endpoint, EventID: eventID, SessionID: m.SessionID, EventTypeID: m.EventTypeID(), MessageID: m.MessageID}
	row, err := w.resolver.tracking.GetEvent(context.Background(), tracking.EventKey{EndpointID: endpoint, EventID: eventID})
	if err != nil {
		w.t.Fatalf("nimbustest: the Resolver's row of event %s on %s: %v", eventID, endpoint, err)
	}
	if row != nil {
		s.Status, s.LastMessageType = row.ResolutionStatus.String(), row.MessageType.String()
	}
	return s
}

// Status returns the Resolver's status of the event endpoint received
// under messageID (see [EventStatus.Status]); "" when the endpoint
// received no event under that MessageId or the Resolver has no row.
func (w *Workflow) Status(endpoint, messageID string) string {
	w.t.Helper()
	for _, s := range w.Events(endpoint) {
		if s.MessageID == messageID {
			return s.Status
		}
	}
	return ""
}

// failedEvent finds the event endpoint received under messageID and the
// last ErrorResponse the endpoint sent for it, as the Resolver stored it.
func (w *Workflow) failedEvent(endpoint, messageID string) (Message, nimbusmsg.ErrorResponse, error) {
	var event *Message
	for _, m := range w.Topic(endpoint) {
		if m.MessageID == messageID && m.Prop(message.PropTo) == endpoint && m.Type() == message.EventRequest.String() {
			event = &m
			break
		}
	}
	if event == nil {
		return Message{}, nimbusmsg.ErrorResponse{}, fmt.Errorf("nimbustest: %s received no event under MessageId %s", endpoint, messageID)
	}
	eventID := event.Prop(message.PropEventID)
	var er *nimbusmsg.ErrorResponse
	for _, m := range w.Topic(endpoint) {
		if m.Type() == message.ErrorResponse.String() && m.Prop(message.PropEventID) == eventID {
			e := nimbusmsg.ErrorResponse{MessageID: m.MessageID, CorrelationID: m.CorrelationID, EventID: eventID,
				SessionID: m.SessionID, OriginatingMessageID: m.Prop(message.PropOriginatingMessageID)}
			er = &e
		}
	}
	if er == nil {
		return Message{}, nimbusmsg.ErrorResponse{}, fmt.Errorf("nimbustest: %s sent no ErrorResponse for event %s (MessageId %s): the Manager resubmits or skips a failed event", endpoint, eventID, messageID)
	}
	return *event, *er, nil
}

// Resubmit sends the ResubmissionRequest NimBus's Manager sends for the
// failed event endpoint received under messageID, with eventJSON as the
// event ("" resubmits it unchanged), to the endpoint's topic. The next
// [Workflow.Run] delivers it: the handler runs again and, when it
// completes, the session is unblocked and its parked messages replayed.
func (w *Workflow) Resubmit(endpoint, messageID, eventJSON string) error {
	event, er, err := w.failedEvent(endpoint, messageID)
	if err != nil {
		return err
	}
	if eventJSON == "" {
		eventJSON = event.EventJSON()
	}
	w.managerSend(endpoint, nimbusmsg.Resubmission(er, endpoint, event.EventTypeID(), eventJSON))
	return nil
}

// Skip sends the SkipRequest NimBus's Manager sends for the failed event
// endpoint received under messageID: the event is not handled, the
// Resolver shows it Skipped, and the session goes on with its parked
// messages.
func (w *Workflow) Skip(endpoint, messageID string) error {
	event, er, err := w.failedEvent(endpoint, messageID)
	if err != nil {
		return err
	}
	w.managerSend(endpoint, nimbusmsg.Skip(er, endpoint, event.EventTypeID()))
	return nil
}

func (w *Workflow) managerSend(endpoint string, nm nimbusmsg.Message) {
	m := &Message{MessageID: nm.MessageID, SessionID: nm.SessionID, correlation: nm.CorrelationID, Body: nm.Body, Properties: map[string]any{}}
	if nm.CorrelationID != nil {
		m.CorrelationID = *nm.CorrelationID
	}
	for k, v := range nm.ApplicationProperties {
		m.Properties[k] = v
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sendLocked(endpoint, m, w.now)
}

// Retry enqueues now the RetryRequest the endpoint scheduled for the
// failed event it received under messageID (its retry policy's next
// attempt), instead of at its time: the operator's "retry now". NimBus's
// Manager has no retry message of its own; a failed event with no
// RetryRequest waiting (its policy exhausted, or none) is retried by
// resubmitting it unchanged ([Workflow.Resubmit] with ""), and Retry says
// so in its error.
func (w *Workflow) Retry(endpoint, messageID string) error {
	event, _, err := w.failedEvent(endpoint, messageID)
	if err != nil {
		return err
	}
	eventID := event.Prop(message.PropEventID)
	w.mu.Lock()
	found := false
	for _, s := range w.scheduled {
		if s.topic == endpoint && s.msg.Type() == message.RetryRequest.String() && s.msg.Prop(message.PropEventID) == eventID {
			s.at, found = w.now, true
		}
	}
	w.mu.Unlock()
	if !found {
		return fmt.Errorf("nimbustest: %s has no RetryRequest waiting for event %s (MessageId %s): resubmit it unchanged instead", endpoint, eventID, messageID)
	}
	w.enqueueDue()
	return nil
}
