package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
)

// TestResolverTracksTheGoEndpointFailedDeferredCompleted deploys the binary
// as the endpoint (with its DeferredProcessor) and as the Resolver. In one
// session, event 2 fails and 3–4 are parked: the Resolver's rows read
// Failed for 2 and Deferred for 3–4. The Manager's resubmission, built from
// the Failed row as ManagerClient builds it (the ErrorResponse's MessageId
// is the row's LastMessageId), resolves 2; the endpoint replays 3–4 and
// handles 5, sent meanwhile, after them; every row ends Completed, and the
// Resolver recorded each row's Failed/Deferred → Completed transition.
func TestResolverTracksTheGoEndpointFailedDeferredCompleted(t *testing.T) {
	t.Parallel()
	s := startResolverStack(t, resolverStackConfig{})
	startDeferredHost(t, s.sb.Client(t), s.endpoint.base)
	const sid = "resolver-blocked"
	var evs []event
	for i := 1; i <= 5; i++ {
		fields := ""
		if i == 2 {
			fields = `"Fail":"failed"`
		}
		evs = append(evs, orderWith(fmt.Sprintf("OrderPlaced-%s-%d", sid, i), sid, 200+i, fields))
	}
	s.send(evs[:4]...)

	s.waitRow(evs[0], 60*time.Second, "Completed", func(r *trackedRow) bool { return r.Status == "Completed" })
	failed := s.waitRow(evs[1], 60*time.Second, "Failed", func(r *trackedRow) bool { return r.Status == "Failed" })
	if failed.MessageType != "ErrorResponse" || failed.LastMessageID == nil || failed.EndpointID != endpointID {
		t.Fatalf("the failed event's row %+v, want the ErrorResponse from %s", failed, endpointID)
	}
	for _, e := range evs[2:4] {
		r := s.waitRow(e, 60*time.Second, "Deferred", func(r *trackedRow) bool { return r.Status == "Deferred" })
		if r.MessageType != "DeferralResponse" {
			t.Errorf("%s: row %+v, want written by the DeferralResponse", e.MessageID, r)
		}
	}

	// The Manager resubmits from what the Resolver stored.
	er := nimbusmsg.ErrorResponse{MessageID: *failed.LastMessageID, CorrelationID: evs[1].MessageID, EventID: evs[1].EventID,
		SessionID: sid, OriginatingMessageID: evs[1].MessageID}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.sender.SendMessage(ctx, sbMessage(nimbusmsg.Resubmission(er, endpointID, orderPlaced, evs[1].EventJSON)), nil); err != nil {
		t.Fatal(err)
	}
	s.send(evs[4])
	for _, e := range evs {
		r := s.waitRow(e, 60*time.Second, "Completed", func(r *trackedRow) bool { return r.Status == "Completed" })
		if r.MessageType != "ResolutionResponse" {
			t.Errorf("%s: final row %+v, want written by a ResolutionResponse", e.MessageID, r)
		}
	}

	// The Resolver saw each event's transitions in order: for 2 Failed then
	// Completed, for 3–4 Deferred then Completed.
	statuses := map[string][]string{}
	for _, l := range s.resolverLines() {
		if l["sessionId"] != sid || l["outcome"] != "written" {
			continue
		}
		id, _ := l["eventId"].(string)
		st, _ := l["status"].(string)
		statuses[id] = append(statuses[id], st)
	}
	for i, want := range map[int]string{1: "Failed", 2: "Deferred", 3: "Deferred"} {
		got := statuses[evs[i].EventID]
		at := -1
		for k, st := range got {
			if st == want {
				at = k
			}
		}
		if at < 0 || got[len(got)-1] != "Completed" {
			t.Errorf("event %d: the Resolver wrote %v, want %s and then Completed", i+1, got, want)
		}
	}
	if st := s.resHost.Stats(); st.Abandons != 0 || st.Failures != 0 {
		t.Errorf("Resolver host %+v", st)
	}
}
