package e2e

import (
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
)

// TestDeadLetterPathWithoutPacing sends, each in its own session, an order
// whose handler fails permanently, a message of an unknown MessageType and
// a ResubmissionRequest not sent by the Manager. Each is failed at once on
// every delivery (no pacing: the redelivery pause is set to 5 s, so one
// paced delivery would show), the broker dead-letters it after its 10th
// delivery, and exactly one dead-letter ErrorResponse with NimBus's
// DeadLetterReason and DeadLetterErrorDescription reaches the Resolver, on
// the last delivery.
func TestDeadLetterPathWithoutPacing(t *testing.T) {
	t.Parallel()
	const pause = 5 * time.Second
	s := startStack(t, stackConfig{retryBase: pause.String(), retryMax: pause.String()})

	perm := orderWith("OrderPlaced-dl-permanent", "dl-permanent", 1, `"Fail":"permanent"`)
	unknown := order("OrderPlaced-dl-unknown", "dl-unknown", 2, 0)
	unknownMsg := unknown.message()
	unknownMsg.ApplicationProperties["MessageType"] = "FooRequest"
	failed := order("OrderPlaced-dl-resubmit", "dl-resubmit", 3, 0)
	resub := nimbusmsg.Resubmission(nimbusmsg.ErrorResponse{
		MessageID: "0e8e2a1c1b5b4f0a9d3c2b1a09876543", CorrelationID: failed.MessageID, EventID: failed.EventID,
		SessionID: failed.SessionID, OriginatingMessageID: failed.MessageID,
	}, endpointID, orderPlaced, failed.EventJSON)
	resub.ApplicationProperties["From"] = producerID // not the Manager
	resub.MessageID = "resubmission-not-from-manager"

	start := time.Now()
	s.send(perm)
	s.sendRaw(unknown.MessageID, unknownMsg)
	s.sendNimBus(resub)

	cases := []struct {
		name, sid, messageID, eventID string
		want                          message.DeadLetter
	}{
		{"permanent", perm.SessionID, perm.MessageID, perm.EventID, message.NewPermanentDeadLetter("Error", samplePermanentText)},
		{"unknown MessageType", unknown.SessionID, unknown.MessageID, unknown.EventID,
			message.NewInvalidMessageDeadLetter(message.UnparseableMessageTypeText("FooRequest"))},
		{"resubmission not from the Manager", failed.SessionID, resub.MessageID, failed.EventID,
			message.NewUnauthorizedDeadLetter(message.ResubmissionRequest)},
	}
	var deadAt time.Duration
	s.waitUntil(60*time.Second, "3 messages dead-lettered", func() bool {
		if len(s.deadLettered()) < 3 {
			return false
		}
		deadAt = time.Since(start)
		return true
	})
	t.Logf("FIGURES dead-letter path: 3 messages × 10 deliveries dead-lettered %v after sending (one paced delivery would take %v)", deadAt.Round(time.Millisecond), pause)
	if deadAt >= pause {
		t.Errorf("dead-lettered %v after sending: at least one delivery was paced", deadAt)
	}
	s.waitUntil(30*time.Second, "3 dead-letter notices", func() bool {
		n := 0
		for _, c := range cases {
			n += len(s.resolver.replies(c.sid))
		}
		return n >= 3
	})
	waitSettled(t, s)

	dlq := map[string]bool{}
	for _, m := range s.deadLettered() {
		dlq[m.MessageID] = true
	}
	for _, c := range cases {
		if !dlq[c.messageID] {
			t.Errorf("%s: %s not in the dead-letter queue", c.name, c.messageID)
		}
		rs := s.resolver.replies(c.sid)
		if len(rs) != 1 {
			t.Errorf("%s: %d responses, want exactly one dead-letter notice: %v", c.name, len(rs), labels(rs))
			continue
		}
		r := rs[0]
		p := r.msg.ApplicationProperties
		if r.messageType() != "ErrorResponse" || r.correlationID() != c.messageID || p["EventId"] != c.eventID ||
			p["From"] != endpointID || p["ParentMessageId"] != c.messageID {
			t.Errorf("%s: notice %s CorrelationId %q EventId %v From %v ParentMessageId %v", c.name, r.messageType(), r.correlationID(), p["EventId"], p["From"], p["ParentMessageId"])
		}
		if p["DeadLetterReason"] != c.want.Reason || p["DeadLetterErrorDescription"] != c.want.Description {
			t.Errorf("%s: DeadLetterReason %q, DeadLetterErrorDescription %q\nwant %q, %q", c.name, p["DeadLetterReason"], p["DeadLetterErrorDescription"], c.want.Reason, c.want.Description)
		}
		// Failed at once on every delivery; the notice sent on the 10th.
		var deliveries []int
		for _, l := range s.handler.lines("Subscriber") {
			if l.Str("messageId") != c.messageID {
				continue
			}
			deliveries = append(deliveries, int(l.Num("deliveryCount")))
			if reported := l.Fields["deadLetterReported"] == true; reported != (l.Num("deliveryCount") == 10) {
				t.Errorf("%s: delivery %v deadLetterReported = %v", c.name, l.Num("deliveryCount"), reported)
			}
		}
		if len(deliveries) != 10 {
			t.Errorf("%s: %d deliveries %v, want 10", c.name, len(deliveries), deliveries)
		}
	}
	if st := s.host.Stats(); st.Completes != 0 || st.Abandons != 30 {
		t.Errorf("mini host stats %+v, want 30 abandons and no completion", st)
	}
}
