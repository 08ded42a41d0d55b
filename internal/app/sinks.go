package app

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/nimbus-go/functions-subscriber/internal/devhost"
	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
)

// serveMemorySink answers GET /_nimbus/resolver with every message the
// in-memory sink kept (local runs only).
func (a *endpointApp) serveMemorySink(w http.ResponseWriter, _ *http.Request) {
	sent := a.memory.Sent()
	out := make([]devhost.SentResponse, 0, len(sent))
	for _, m := range sent {
		props := make(map[string]devhost.TypedValue, len(m.ApplicationProperties))
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
			props[k] = devhost.TypedValue{Type: t, Value: v}
		}
		sr := devhost.SentResponse{MessageID: m.MessageID, SessionID: m.SessionID, CorrelationID: m.CorrelationID, Properties: props, Body: string(m.Body)}
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
