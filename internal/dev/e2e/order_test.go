package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestSessionOrderIsKeptAcrossARedelivery sends 10 orders in each of 4
// sessions, interleaved. In session ordered-1 the fifth order fails its
// first two deliveries. Every session is handled, and answered on the
// Resolver, in publish order: the failing order is redelivered before its
// successors, and the other sessions keep going meanwhile.
func TestSessionOrderIsKeptAcrossARedelivery(t *testing.T) {
	t.Parallel()
	const (
		sessions   = 4
		perSession = 10
		blocked    = "ordered-1"
		failAt     = 4
	)
	s := startStack(t, stackConfig{sessions: sessions, retryBase: "200ms", retryMax: "1s"})
	var evs []event
	for i := range perSession {
		for k := range sessions {
			sid := fmt.Sprintf("ordered-%d", k)
			fail := 0
			if sid == blocked && i == failAt {
				fail = 2
			}
			evs = append(evs, order(fmt.Sprintf("OrderPlaced-%d-%02d", k, i), sid, 50+i, fail))
		}
	}
	s.send(evs...)
	s.waitResponses(len(evs), 90*time.Second)
	s.settle(len(evs), len(evs), 30*time.Second)

	ivs := s.handler.invocations()
	allowed(t, ivs, "completed", "handler_failed")
	if st := s.host.Stats(); st.Completes != int64(len(evs)) || st.Abandons != 2 || st.SettleErrors != 0 {
		t.Errorf("mini host stats %+v, want %d completions and 2 abandons", st, len(evs))
	}
	for k := range sessions {
		sid := fmt.Sprintf("ordered-%d", k)
		var want []string // the expected invocation sequence of the session
		var published []event
		for _, e := range evs {
			if e.SessionID != sid {
				continue
			}
			published = append(published, e)
			if strings.Contains(e.EventJSON, "FailFirstAttempts") {
				want = append(want, e.MessageID+"#1:handler_failed", e.MessageID+"#2:handler_failed", e.MessageID+"#3:completed")
			} else {
				want = append(want, e.MessageID+"#1:completed")
			}
		}
		var got []string
		for _, iv := range ivs {
			if iv.SessionID == sid {
				got = append(got, fmt.Sprintf("%s#%d:%s", iv.MessageID, iv.DeliveryCount, iv.Outcome))
			}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("session %s was handled as\n%s\nwant\n%s", sid, strings.Join(got, " "), strings.Join(want, " "))
		}
		rs := s.resolver.sessionResponses(sid)
		if len(rs) != len(published) {
			t.Errorf("session %s: %d responses, want %d", sid, len(rs), len(published))
			continue
		}
		for i, e := range published {
			if rs[i].correlationID() != e.MessageID {
				t.Errorf("session %s: response %d answers %s, want %s (publish order)", sid, i, rs[i].correlationID(), e.MessageID)
				continue
			}
			checkResponse(t, rs[i], e, "ResolutionResponse", e.body(), nil, s.firstSent(e.MessageID))
		}
	}

	// While the blocked session waited for its redeliveries, the others
	// were handled: their lines fall between its first failure and the
	// failing order's completion.
	first, last := -1, -1
	for _, iv := range ivs {
		if iv.SessionID == blocked && iv.MessageID == fmt.Sprintf("OrderPlaced-1-%02d", failAt) {
			if first < 0 {
				first = iv.Seq
			}
			last = iv.Seq
		}
	}
	others := 0
	for _, iv := range ivs {
		if iv.SessionID != blocked && iv.Seq > first && iv.Seq < last {
			others++
		}
	}
	t.Logf("%d invocations of other sessions ran while %s waited for its redeliveries", others, blocked)
	if others == 0 {
		t.Errorf("no other session was handled while %s waited for its redeliveries", blocked)
	}
}
