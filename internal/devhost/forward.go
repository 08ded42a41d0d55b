package devhost

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
)

// Why Forward finds no event to forward.
var (
	// ErrNoSuchMessage: the app sent no message with that MessageId.
	ErrNoSuchMessage = errors.New("the app sent no message with that MessageId")
	// ErrNotAnEvent: the message is not an EventRequest.
	ErrNotAnEvent = errors.New("the message is not an EventRequest")
	// ErrAlreadyForwarded: the message carries From, so it is not an event
	// as its publisher sent it (the forwarder's rule matches From IS NULL).
	ErrAlreadyForwarded = errors.New("the message carries From: it is not an event as its publisher sent it, and the forwarder matches only From IS NULL")
)

// Forward finds, among the messages an app sent (as Client.Sent returns
// them), the event with MessageId messageID as its publisher sent it (an
// EventRequest without From), and returns it as NimBus's forwarder
// delivers it to endpoint: From = publisher ("" is the event's
// OriginatingFrom, the publishing endpoint), a new EventId, To = endpoint,
// everything else kept (the MessageId, SessionId and CorrelationId, the
// lineage, the trace context, the body). When the app published the
// event more than once (a redelivered handler publishes the same ids
// again), the first copy is forwarded.
func Forward(sent []SentResponse, messageID, publisher, endpoint string) (nimbusmsg.Message, error) {
	var found []SentResponse
	for _, s := range sent {
		if s.MessageID == messageID {
			found = append(found, s)
		}
	}
	if len(found) == 0 {
		return nimbusmsg.Message{}, fmt.Errorf("%w (it sent %s)", ErrNoSuchMessage, publishedIDs(sent))
	}
	var err error
	for _, s := range found {
		m, e := published(s)
		if e != nil {
			err = e
			continue
		}
		if publisher == "" {
			publisher, _ = m.ApplicationProperties[message.PropOriginatingFrom].(string)
			if publisher == "" || strings.EqualFold(publisher, message.Self) {
				return nimbusmsg.Message{}, fmt.Errorf("the event's OriginatingFrom is %q, not the publishing endpoint: give the endpoint whose topic it was published on", logsafe.BoundTo(publisher, 64))
			}
		}
		return nimbusmsg.Forwarded(m, publisher, endpoint, ""), nil
	}
	return nimbusmsg.Message{}, err
}

// published returns s as a message, if it is an event as its publisher
// sent it.
func published(s SentResponse) (nimbusmsg.Message, error) {
	t, _ := s.Properties[message.PropMessageType].Value.(string)
	if t != message.EventRequest.String() {
		return nimbusmsg.Message{}, fmt.Errorf("%w: it is a %s", ErrNotAnEvent, logsafe.BoundTo(t, 64))
	}
	if from, ok := s.Properties[message.PropFrom]; ok {
		return nimbusmsg.Message{}, fmt.Errorf("%w (From %v, To %v)", ErrAlreadyForwarded, logsafe.BoundTo(fmt.Sprint(from.Value), 64),
			logsafe.BoundTo(fmt.Sprint(s.Properties[message.PropTo].Value), 64))
	}
	props := make(map[string]any, len(s.Properties))
	for k, v := range s.Properties {
		pv, err := v.value()
		if err != nil {
			return nimbusmsg.Message{}, fmt.Errorf("property %s: %w", logsafe.BoundTo(k, 64), err)
		}
		props[k] = pv
	}
	return nimbusmsg.Message{ApplicationProperties: props, MessageID: s.MessageID, SessionID: s.SessionID,
		CorrelationID: s.CorrelationID, Body: []byte(s.Body)}, nil
}

// value is v with its AMQP type, as the sink held it: JSON numbers become
// int32 ("int") or int64 ("long").
func (v TypedValue) value() (any, error) {
	switch v.Type {
	case "null":
		return nil, nil
	case "string":
		if s, ok := v.Value.(string); ok {
			return s, nil
		}
	case "int", "long":
		f, ok := v.Value.(float64)
		if !ok || f != math.Trunc(f) {
			break
		}
		if v.Type == "int" {
			if f < math.MinInt32 || f > math.MaxInt32 {
				break
			}
			return int32(f), nil
		}
		return int64(f), nil
	}
	return nil, fmt.Errorf("a %s value that is not one", logsafe.BoundTo(v.Type, 32))
}

// publishedIDs names the MessageIds of the events in sent (at most ten),
// or says there are none.
func publishedIDs(sent []SentResponse) string {
	var ids []string
	n := 0
	for _, s := range sent {
		if s.MessageID == "" {
			continue
		}
		if n++; n <= 10 {
			ids = append(ids, logsafe.BoundTo(s.MessageID, 128))
		}
	}
	switch {
	case n == 0:
		return "no message with a MessageId of its own: no published event"
	case n > 10:
		return fmt.Sprintf("%d messages with a MessageId of their own; the first ten: %s", n, strings.Join(ids, ", "))
	}
	return "these MessageIds: " + strings.Join(ids, ", ")
}
