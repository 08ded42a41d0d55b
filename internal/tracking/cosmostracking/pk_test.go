package cosmostracking_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmostest"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/tracking"
	"github.com/nimbus-go/functions-subscriber/internal/tracking/cosmostracking"
)

// EventIds and SessionIds come from the messages the Resolver tracks, and
// are partition key values of its containers: every character works,
// those beyond the Basic Multilingual Plane, control characters and DEL
// included.
func TestPartitionKeysFromMessagesWork(t *testing.T) {
	t.Parallel()
	e := cosmostest.NewEnv(t, "Strong")
	s := newStore(t, e, cosmostracking.Options{})
	values := map[string]string{
		"emoji":     "\U0001F642",
		"cjk-ext-b": "\U00020000",
		"del":       "\x7f",
		"mixed":     "\"é\\\u2028\U0001F600",
	}
	for c := rune(0); c < 0x20; c++ {
		values[fmt.Sprintf("control-%02x", c)] = string(c)
	}
	for name, v := range values {
		t.Run(name, func(t *testing.T) {
			eventID, sessionID := "ev-"+v, "s-"+v
			key := tracking.Key{EndpointID: "billing", EventID: eventID, SessionID: sessionID}
			mustUpload(t, s, key, tracking.Pending, row("billing", eventID, sessionID, message.EventRequest, "m-1", ""), true)
			got, err := s.GetPendingEvent(ctx, key)
			if err != nil || got == nil || got.EventID != eventID || got.SessionID != sessionID {
				t.Fatalf("GetPendingEvent = %+v, %v", got, err)
			}
			if err := s.StoreMessage(ctx, tracking.MessageEntity{EventID: eventID, MessageID: "m-1", SessionID: &sessionID, EnqueuedTimeUtc: time.Now().UTC()}); err != nil {
				t.Fatalf("StoreMessage: %v", err)
			}
			m, err := s.GetMessage(ctx, eventID, "m-1")
			if err != nil || m == nil || m.EventID != eventID {
				t.Fatalf("GetMessage = %+v, %v", m, err)
			}
			h, err := s.GetEventHistory(ctx, eventID)
			if err != nil || len(h) != 1 {
				t.Fatalf("GetEventHistory = %d messages, %v", len(h), err)
			}
			if err := s.StoreMessageAudit(ctx, key.Event(), tracking.MessageAudit{AuditTimestamp: time.Now().UTC(), AuditType: tracking.AuditType(0)}, "OrderPlaced"); err != nil {
				t.Fatalf("StoreMessageAudit: %v", err)
			}
			a, err := s.GetMessageAudits(ctx, eventID)
			if err != nil || len(a) != 1 {
				t.Fatalf("GetMessageAudits = %d audits, %v", len(a), err)
			}
		})
	}
}
