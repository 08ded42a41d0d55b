package app

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
)

// SentResponse is how /_nimbus/resolver shows a response kept by the
// in-memory sink (local demos only): properties with their AMQP types.
type SentResponse struct {
	// MessageID is set for a message sent with its own MessageId (a
	// published event); the broker assigns the others one.
	MessageID     string                `json:"messageId,omitempty"`
	SessionID     string                `json:"sessionId"`
	CorrelationID *string               `json:"correlationId"`
	Properties    map[string]TypedValue `json:"applicationProperties"`
	Body          string                `json:"body"`
	// ScheduledEnqueueTime is set for a scheduled message (a RetryRequest).
	ScheduledEnqueueTime string `json:"scheduledEnqueueTime,omitempty"`
}

// TypedValue is a property value and its AMQP type name.
type TypedValue struct {
	Type  string `json:"type"`
	Value any    `json:"value"`
}

func (a *endpointApp) serveMemorySink(w http.ResponseWriter, _ *http.Request) {
	sent := a.memory.Sent()
	out := make([]SentResponse, 0, len(sent))
	for _, m := range sent {
		props := make(map[string]TypedValue, len(m.ApplicationProperties))
		for k, v := range m.ApplicationProperties {
			t := "null"
			switch v.(type) {
			case string:
				t = "string"
			case int32:
				t = "int"
			case int64:
				t = "long"
			case nil:
			default:
				t = fmt.Sprintf("%T", v)
			}
			props[k] = TypedValue{Type: t, Value: v}
		}
		sr := SentResponse{MessageID: m.MessageID, SessionID: m.SessionID, CorrelationID: m.CorrelationID, Properties: props, Body: string(m.Body)}
		if at, ok := a.memory.ScheduledAt(m); ok {
			sr.ScheduledEnqueueTime = message.FormatRoundTrip(at)
		}
		out = append(out, sr)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// The Cosmos store and the Service Bus publisher are wired in wiring.go.
var (
	_ inbox.Store        = (*inbox.MemoryStore)(nil)
	_ resolver.Publisher = (*resolver.Memory)(nil)
)
