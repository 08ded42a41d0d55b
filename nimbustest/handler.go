package nimbustest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/handlerlog"
	"github.com/nimbus-go/functions-subscriber/nimbus"
)

// DefaultPublisher is the From of an event NewEvent builds: the endpoint
// that published it.
const DefaultPublisher = "TestPublisher"

// NewEvent returns an event of type eventTypeID as a handler receives it
// on its first delivery, for a test to pass to a handler (or to RunTx):
// JSON is payload encoded with encoding/json without escaping HTML
// characters, as NimBus's serializer writes it (a json.RawMessage is taken
// as it is); MessageID, CorrelationID and EventID are new UUIDs, SessionID
// is the MessageID (NimBus's publisher's default), From is
// DefaultPublisher, DeliveryCount 1, Attempt AttemptOriginal and
// EnqueuedTime the current time. Change any field before use: the
// event's fields are the test's to set.
//
// Publish and Published work on the event as nimbus.Event documents for
// an event the pipeline did not deliver.
//
// NewEvent panics on an empty eventTypeID, a payload encoding/json cannot
// encode, or a json.RawMessage that is not valid JSON: a test's mistake.
func NewEvent(eventTypeID string, payload any) *nimbus.Event {
	if eventTypeID == "" {
		panic("nimbustest: NewEvent with an empty event type")
	}
	raw, err := eventJSON(payload)
	if err != nil {
		panic("nimbustest: NewEvent(" + eventTypeID + "): " + err.Error())
	}
	id := uuid.NewString()
	return &nimbus.Event{
		EventTypeID: eventTypeID, JSON: raw, MessageID: id, SessionID: id,
		CorrelationID: uuid.NewString(), EventID: uuid.NewString(), From: DefaultPublisher,
		DeliveryCount: 1, Attempt: nimbus.AttemptOriginal, EnqueuedTime: time.Now().UTC(),
	}
}

// logTimeHook adds the time to a line as the app's logger writes it (RFC 3339
// with nanoseconds, UTC).
var logTimeHook = zerolog.HookFunc(func(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Str(zerolog.TimestampFieldName, time.Now().UTC().Format(time.RFC3339Nano))
})

// eventJSON is payload's JSON as a publisher writes it.
func eventJSON(payload any) (string, error) {
	if raw, ok := payload.(json.RawMessage); ok {
		if !json.Valid(raw) {
			return "", fmt.Errorf("the json.RawMessage payload is not valid JSON")
		}
		return string(raw), nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(payload); err != nil {
		return "", fmt.Errorf("the payload (%T) cannot be encoded as JSON: %w", payload, err)
	}
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}

// HandlerContext returns a context derived from parent for calling a
// handler on ev directly, and the Logs that collect what it logs: on it,
// nimbus.Logger returns the logger a delivery's handler gets (the same
// JSON lines, bounds and field names, with ev's messageId and
// eventTypeId, and the traceId and spanId of parent's span when it has
// one), recording every level from debug up. The context carries no
// invocation: its records have no function or invocationId.
func HandlerContext(parent context.Context, ev *nimbus.Event) (context.Context, *Logs) {
	logs := &Logs{}
	zl := zerolog.New(&logs.lines).Level(zerolog.DebugLevel).Hook(logTimeHook)
	h := handlerlog.New(zl, "", "", nil).WithFields(parent,
		handlerlog.Field{Key: handlerlog.FieldMessageID, Value: ev.MessageID},
		handlerlog.Field{Key: handlerlog.FieldEventTypeID, Value: ev.EventTypeID})
	return handlerlog.WithContext(parent, h), logs
}
