package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// TestCosmosOutageMidRunLosesNothing runs 200 orders over 8 sessions with
// the Cosmos inbox behind the fault proxy. After the first 40 completions,
// every Cosmos request fails (503 or a dropped connection) for 3 seconds
// while the second half of the orders is published; then Cosmos is back.
// Nothing is lost: every message is completed, none is dead-lettered, each
// has exactly one ResolutionResponse (in publish order within its session)
// and an inbox record, and the handler ran once per message, except a second
// time for the messages whose inbox record failed after the handler had run.
//
// Redeliveries are paced at 250ms·2^(n−1), at most 2s: ten deliveries span
// about 14s, so a 3s outage costs a few of them (the production default,
// 1s..60s, spans about four minutes). With the 50ms..500ms pacing the other
// tests use, ten deliveries take 3.3s and a 3s outage can dead-letter.
func TestCosmosOutageMidRunLosesNothing(t *testing.T) {
	longRun(t)
	const (
		messages = 200
		sessions = 8
		outage   = 3 * time.Second
	)
	s := startStack(t, stackConfig{
		faults: &testenv.FaultProxyOptions{
			Seed:     20261130,
			Rate:     1,
			Kinds:    []testenv.FaultKind{testenv.FaultUnavailable, testenv.FaultDrop},
			Disabled: true,
		},
		retryBase: "250ms",
		retryMax:  "2s",
	})
	var evs []event
	for i := range messages {
		evs = append(evs, order(fmt.Sprintf("OrderPlaced-%03d", i), fmt.Sprintf("outage-%d", i%sessions), 100+i, 0))
	}
	half := messages / 2
	s.send(evs[:half]...)
	s.waitUntil(60*time.Second, "the first 40 completions", func() bool { return s.host.Stats().Completes >= 40 })
	before := s.proxy.Counts()
	completedBefore := s.host.Stats().Completes
	s.proxy.SetEnabled(true)
	start := time.Now()
	s.send(evs[half:]...)
	// The outage is a span of wall time: the handler and the broker must
	// live through it by themselves (failing, pacing, redelivering). The
	// test then asserts that it failed Cosmos requests and deliveries, which
	// a too short outage would not.
	time.Sleep(outage - time.Since(start))
	s.proxy.SetEnabled(false)
	during := s.proxy.Counts()
	injected := during.Injected() - before.Injected()
	t.Logf("outage of %v from %d completions: %d Cosmos requests failed (%d answered 503, %d connections dropped)",
		time.Since(start).Round(time.Millisecond), completedBefore, injected, during.Unavailable-before.Unavailable, during.Dropped-before.Dropped)
	if injected == 0 {
		t.Fatal("the outage failed no Cosmos request")
	}

	// Wait for a response per message; a dead-lettered message never gets
	// one, so stop waiting as soon as the dead-letter queue is not empty.
	// Peeking costs a round trip, so check every tenth poll.
	polls := 0
	s.waitUntil(90*time.Second, fmt.Sprintf("a response for each of the %d messages", messages), func() bool {
		if polls++; polls%10 == 0 {
			if dl := s.deadLettered(); len(dl) > 0 {
				t.Fatalf("%d messages dead-lettered (first: %s, %v)", len(dl), dl[0].MessageID, strp(dl[0].DeadLetterReason))
			}
		}
		return len(s.resolver.responsesByRequest()) >= messages
	})
	s.settle(messages, messages, 30*time.Second)

	ivs := s.handler.invocations()
	allowed(t, ivs, "completed", "transient_failure")
	lines := byMessage(ivs)
	responses := s.resolver.responsesByRequest()
	var (
		failures       = map[string]int{} // outcome/operation → count
		rerun          []string           // messages whose record failed after the handler ran
		maxDeliveries  int
		redeliveredIDs int
	)
	for _, e := range evs {
		ls := lines[e.MessageID]
		completed, ran, recordFailed := 0, 0, 0
		for i, iv := range ls {
			if iv.DeliveryCount != i+1 {
				t.Errorf("%s: delivery %d logged DeliveryCount %d", e.MessageID, i+1, iv.DeliveryCount)
			}
			if iv.handlerRan() {
				ran++
			}
			switch {
			case iv.Outcome == "completed":
				completed++
				if iv.Inbox != "new" || i != len(ls)-1 {
					t.Errorf("%s: completed delivery %+v is not the last or not new", e.MessageID, iv)
				}
			default:
				failures[iv.Outcome+"/"+iv.Operation]++
				if iv.Operation == "record" {
					recordFailed++
				}
			}
			maxDeliveries = max(maxDeliveries, iv.DeliveryCount)
		}
		if len(ls) > 1 {
			redeliveredIDs++
		}
		if completed != 1 {
			t.Errorf("%s: completed %d times, want once: %+v", e.MessageID, completed, ls)
		}
		if ran != 1+recordFailed {
			t.Errorf("%s: the handler ran %d times with %d failed records after it, want %d", e.MessageID, ran, recordFailed, 1+recordFailed)
		}
		if recordFailed > 0 {
			rerun = append(rerun, e.MessageID)
		}
		if rs := responses[e.MessageID]; len(rs) != 1 {
			t.Errorf("%s: %d responses, want 1", e.MessageID, len(rs))
		} else {
			checkResponse(t, rs[0], e, "ResolutionResponse", e.body(), nil, s.firstSent(e.MessageID))
		}
	}
	var fk []string
	for k, v := range failures {
		fk = append(fk, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(fk)
	t.Logf("failed deliveries: %s; %d messages redelivered, at most %d deliveries; the handler ran twice for %d messages whose record failed after it: %v",
		strings.Join(fk, " "), redeliveredIDs, maxDeliveries, len(rerun), rerun)
	if len(failures) == 0 {
		t.Error("no delivery failed during the outage: the test did not exercise it")
	}

	st := s.host.Stats()
	nFailed := int64(len(ivs) - messages)
	if st.Completes != messages || st.Abandons != nFailed || st.SettleErrors != 0 {
		t.Errorf("mini host stats %+v, want %d completions and %d abandons", st, messages, nFailed)
	}
	for sid := range sessions {
		sid := fmt.Sprintf("outage-%d", sid)
		var want, got []string
		for _, e := range evs {
			if e.SessionID == sid {
				want = append(want, e.MessageID)
			}
		}
		for _, r := range s.resolver.sessionResponses(sid) {
			got = append(got, r.correlationID())
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("session %s: responses for\n%v\nwant publish order\n%v", sid, got, want)
			for _, iv := range ivs {
				if iv.SessionID == sid {
					t.Logf("  %s dc=%d %s/%s seq=%d", iv.MessageID, iv.DeliveryCount, iv.Outcome, iv.Operation, iv.Seq)
				}
			}
		}
	}
	recorded := map[string]bool{}
	for _, e := range evs {
		recorded[e.MessageID] = true
	}
	checkRecorded(t, s, evs, recorded)
	if dl := s.deadLettered(); len(dl) != 0 {
		t.Errorf("%d messages dead-lettered", len(dl))
	}
}
