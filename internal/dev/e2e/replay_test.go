package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
)

// unblock is how the scenario lifts the block of the failed event 2.
type unblock int

const (
	byResubmission unblock = iota // the Manager's ResubmissionRequest
	byRetry                       // the scheduled RetryRequest of a retry policy
	bySkip                        // the Manager's SkipRequest
)

// scenario is the outcome of runBlockedSession, for the callers' own
// assertions and figures.
type scenario struct {
	s        *stack
	sid      string
	evs      []event // events 1..8 (index 0..7)
	replies  []received
	unblock  received            // the response that lifted the block
	parkedID map[string]string   // event MessageId → its parked copy's MessageId
	sentAt   time.Time           // when the unblocking request was sent (resubmission, skip) or the failure answered (retry)
	replayed map[string]received // event MessageId → the response of its replayed copy
}

// runBlockedSession runs one session of 6 events where event 2 fails:
// ErrorResponse for 2, events 3–6 parked with DeferralResponses; then how
// lifts the block, events 7–8 are sent at once (while the replay runs),
// and every event is answered, in order. It checks the wire format of
// every response, the parked copies, the inbox records, the handler runs
// and the metrics, and returns what happened.
func runBlockedSession(t testing.TB, s *stack, sid string, how unblock) *scenario {
	t.Helper()
	sc := &scenario{s: s, sid: sid, parkedID: map[string]string{}, replayed: map[string]received{}}
	for i := 1; i <= 8; i++ {
		fields := ""
		if i == 2 {
			fields = `"Fail":"failed"` // fails on the original delivery only
		}
		sc.evs = append(sc.evs, orderWith(fmt.Sprintf("OrderPlaced-%s-%d", sid, i), sid, 100+i, fields))
	}
	ev := func(i int) event { return sc.evs[i-1] }
	m0 := s.handler.metrics(t)
	drains0 := len(s.handler.lines("DeferredProcessor"))
	s.send(sc.evs[:6]...)

	// 1 is answered, 2 fails, 3–6 are parked.
	want := []string{"ResolutionResponse:" + ev(1).MessageID, "ErrorResponse:" + ev(2).MessageID}
	for i := 3; i <= 6; i++ {
		want = append(want, "DeferralResponse:"+ev(i).MessageID)
	}
	first := s.waitReplies(sid, 60*time.Second, "the first 6 responses", func(rs []received) bool { return len(rs) >= len(want) })
	if got := labels(first[:len(want)]); !slices.Equal(got, want) {
		t.Fatalf("first responses\n got %v\nwant %v", got, want)
	}
	errResp := first[1]

	if how != byRetry {
		// The parked copies, as NimBus's SendToDeferredSubscription writes
		// them, in order, with consecutive DeferralSequences.
		ps := s.peekDeferred(sid)
		if len(ps) != 4 {
			t.Fatalf("%d parked copies on the Deferred subscription, want 4", len(ps))
		}
		for k, p := range ps {
			e := ev(k + 3)
			sc.parkedID[e.MessageID] = p.MessageID
			checkParked(t, p, e, ps[0].Sequence+int32(k))
		}
	}

	// Lift the block.
	var unblockLabel string
	switch how {
	case byResubmission:
		sc.sentAt = time.Now()
		s.sendNimBus(nimbusmsg.Resubmission(errorResponseOf(errResp), endpointID, orderPlaced, ev(2).EventJSON))
		unblockLabel = "ResolutionResponse:" + ev(2).MessageID
	case bySkip:
		sc.sentAt = time.Now()
		s.sendNimBus(nimbusmsg.Skip(errorResponseOf(errResp), endpointID, orderPlaced))
		unblockLabel = "SkipResponse:" + ev(2).MessageID
	case byRetry:
		sc.sentAt = errResp.at
		unblockLabel = "ResolutionResponse:" + ev(2).MessageID
	}
	rs := s.waitReplies(sid, 60*time.Second, "the response that lifts the block", func(rs []received) bool {
		return len(rs) > 6 && countLabel(rs[6:], unblockLabel) >= 1
	})
	for _, r := range rs[6:] {
		if r.label() == unblockLabel {
			sc.unblock = r
			break
		}
	}
	// 7 and 8 arrive while the parked copies are being replayed.
	s.send(ev(7), ev(8))
	sc.replies = s.waitReplies(sid, 90*time.Second, "the answer to event 8", func(rs []received) bool {
		return countLabel(rs, "ResolutionResponse:"+ev(8).MessageID) >= 1
	})
	waitSettled(t, s)
	sc.replies = s.resolver.replies(sid)

	// The order: the prefix as above, the unblocking answer, then 3..8
	// resolved in order; 7 and 8 may be parked behind the replay (a
	// DeferralResponse before their resolution).
	got := labels(sc.replies)
	if len(got) < 7 || !slices.Equal(got[:6], want) || got[6] != unblockLabel {
		t.Fatalf("responses\n got %v\nwant %v, %s, then 3..8 resolved", got, want, unblockLabel)
	}
	var resolved []string
	for i, l := range got[7:] {
		switch {
		case strings.HasPrefix(l, "ResolutionResponse:"):
			resolved = append(resolved, l)
		case l == "DeferralResponse:"+ev(7).MessageID || l == "DeferralResponse:"+ev(8).MessageID:
			id := strings.TrimPrefix(l, "DeferralResponse:")
			if slices.Contains(resolved, "ResolutionResponse:"+id) {
				t.Errorf("response %d: %s after its resolution", 7+i, l)
			}
		default:
			t.Errorf("response %d: unexpected %s", 7+i, l)
		}
	}
	var wantResolved []string
	for i := 3; i <= 8; i++ {
		wantResolved = append(wantResolved, "ResolutionResponse:"+ev(i).MessageID)
	}
	if !slices.Equal(resolved, wantResolved) {
		t.Errorf("after the block was lifted, resolved\n got %v\nwant %v (strict order)", resolved, wantResolved)
	}

	// Every response in NimBus's format.
	parkedCount := 0
	for _, r := range sc.replies {
		e, ok := sc.event(r.prop("OriginatingMessageId"))
		if !ok {
			t.Errorf("a response for an unknown event: %s", r.label())
			continue
		}
		sent := s.firstSent(e.MessageID)
		switch {
		case r.label() == "ErrorResponse:"+ev(2).MessageID:
			checkResponse(t, r, e, "ErrorResponse", e.errorBody(sampleFailedText, "Error"), nil, sent)
		case r.messageType() == "DeferralResponse":
			parkedCount++
			text := blockedText(sid, ev(2).EventID)
			if e.MessageID == ev(7).MessageID || e.MessageID == ev(8).MessageID {
				// Parked behind the replay, not behind a block: NimBus's
				// text names what the session waits for.
				text = r.deferralText()
				if !strings.HasPrefix(text, "Session "+sid+" is blocked by ") {
					t.Errorf("DeferralResponse for %s: ErrorText %q", e.MessageID, text)
				}
			}
			checkResponse(t, r, e, "DeferralResponse", e.errorBody(text, "SessionBlockedException"), nil, sent)
		case r.msg.MessageID == sc.unblock.msg.MessageID:
			checkUnblock(t, sc, r, ev(2), how)
		case r.correlationID() != e.MessageID:
			// The response of a replayed parked copy: CorrelationId and
			// ParentMessageId are the copy's MessageId, OriginatingMessageId
			// the event's.
			sc.replayed[e.MessageID] = r
			if id, ok := sc.parkedID[e.MessageID]; ok && r.correlationID() != id {
				t.Errorf("replayed %s: CorrelationId %q, want the parked copy's MessageId %q", e.MessageID, r.correlationID(), id)
			}
			if !brokerMessageID.MatchString(r.correlationID()) {
				t.Errorf("replayed %s: CorrelationId %q is not a broker-assigned MessageId", e.MessageID, r.correlationID())
			}
			in := e
			in.MessageID = r.correlationID()
			checkResponse(t, r, in, "ResolutionResponse", e.body(), map[string]any{"OriginatingMessageId": e.MessageID}, sent)
		default:
			checkResponse(t, r, e, "ResolutionResponse", e.body(), nil, sent)
		}
	}
	for i := 3; i <= 6; i++ {
		if _, ok := sc.replayed[ev(i).MessageID]; !ok {
			t.Errorf("event %d was not answered from its parked copy", i)
		}
	}

	// Each event's handler completed exactly once (event 2 not at all when
	// skipped); the failure ran once. The handler writes its lines to a pipe
	// the test reads on its own: a line may still be on its way after the
	// host settled, so the count waits for every event's first line.
	var completed map[string]int
	var failed int
	count := func() bool {
		completed, failed = map[string]int{}, 0
		for _, l := range s.handler.lines("") {
			if l.Str("sessionId") != sid {
				continue
			}
			if l.Str("outcome") == "completed" && l.Fields["handlerRan"] == true {
				completed[l.Str("eventId")]++
			}
			if l.Str("outcome") == "event_failed" {
				failed++
			}
		}
		for i, e := range sc.evs {
			if completed[e.EventID] == 0 && !(i == 1 && how == bySkip) {
				return false
			}
		}
		return failed > 0
	}
	if !count() {
		s.waitUntil(10*time.Second, "a completed line of every event and the failure's line", count)
	}
	if failed != 1 {
		t.Errorf("%d event_failed lines, want 1", failed)
	}
	for i, e := range sc.evs {
		want := 1
		if i == 1 && how == bySkip {
			want = 0
		}
		if completed[e.EventID] != want {
			t.Errorf("event %d: handler completed %d times, want %d", i+1, completed[e.EventID], want)
		}
	}

	// The inbox holds every handled event under its own MessageId (a
	// replayed copy records the id it stands in for; a resubmission and a
	// retry record the failed delivery's).
	var ids []string
	for _, e := range sc.evs {
		ids = append(ids, e.MessageID)
	}
	recs := s.inboxRecords(ids...)
	for i, id := range ids {
		_, ok := recs[id]
		if want := !(i == 1 && how == bySkip); ok != want {
			t.Errorf("event %d (%s): recorded in the inbox = %v, want %v", i+1, id, ok, want)
		}
	}

	// The counters at /_nimbus/metrics match what happened.
	m := s.handler.metrics(t)
	if got := m["nimbus.deferred.parked"] - m0["nimbus.deferred.parked"]; got != float64(parkedCount) {
		t.Errorf("nimbus.deferred.parked went up by %v, want %d (the DeferralResponses)", got, parkedCount)
	}
	if got := m["nimbus.deferred.replayed"] - m0["nimbus.deferred.replayed"]; got != float64(len(sc.replayed)) {
		t.Errorf("nimbus.deferred.replayed went up by %v, want %d (the replayed copies answered)", got, len(sc.replayed))
	}

	// The DeferredProcessor's invocation lines carry the RU charge (the
	// stores are on Cosmos).
	// Each replayed message's line carries its own share of the
	// invocation's charge: the shares add up to at most the invocation's
	// (which also pays for the session-state reads and writes of the
	// replay itself), and each share is below it.
	drains := s.handler.lines("DeferredProcessor")[drains0:]
	nDrained := 0
	shares := map[string]float64{} // invocationId → sum of its replay lines' charges
	totals := map[string]float64{}
	for _, l := range drains {
		ru, ok := l.Fields["requestCharge"].(float64)
		if !ok {
			t.Errorf("DeferredProcessor line without requestCharge: %s", l.Raw)
			continue
		}
		if l.Str("outcome") != "drained" {
			if l.Str("messageType") == "EventRequest" {
				shares[l.Str("invocationId")] += ru
			}
			continue
		}
		nDrained++
		totals[l.Str("invocationId")] = ru
		if n, _ := l.Fields["replayed"].(float64); n > 0 && ru <= 0 {
			t.Errorf("a replay of %v messages charged %v RU", n, ru)
		}
	}
	for inv, share := range shares {
		if share > totals[inv] || share == 0 {
			t.Errorf("DeferredProcessor invocation %s: its replay lines charge %v RU in all, its own line %v", inv, share, totals[inv])
		}
	}
	if nDrained == 0 {
		t.Errorf("no DeferredProcessor invocation drained the session; lines: %d", len(drains))
	}
	if dl := s.deadLettered(); len(dl) != 0 {
		t.Errorf("%d messages dead-lettered", len(dl))
	}
	return sc
}

// event returns the scenario's event whose MessageId is id.
func (sc *scenario) event(id string) (event, bool) {
	for _, e := range sc.evs {
		if e.MessageID == id {
			return e, true
		}
	}
	return event{}, false
}

// deferralText is the ErrorText of a DeferralResponse.
func (r received) deferralText() string {
	var c struct {
		ErrorContent struct{ ErrorText string }
	}
	if err := json.Unmarshal(r.msg.Body, &c); err != nil {
		return ""
	}
	return c.ErrorContent.ErrorText
}

// checkParked checks a parked copy of e against NimBus's
// SendToDeferredSubscription.
func checkParked(t testing.TB, p parked, e event, seq int32) {
	t.Helper()
	want := map[string]any{
		"To": "Deferred", "MessageType": "EventRequest", "EventId": e.EventID, "OriginatingMessageId": e.MessageID,
		"ParentMessageId": e.MessageID, "RetryCount": int32(0), "OriginatingFrom": producerID, "From": producerID,
		"EventTypeId": e.EventTypeID, "OriginalSessionId": e.SessionID, "DeferralSequence": seq, "InboxMessageId": e.MessageID,
	}
	for k, v := range want {
		if got := p.Properties[k]; fmt.Sprintf("%T", got) != fmt.Sprintf("%T", v) || got != v {
			t.Errorf("parked copy of %s: %s = %#v (%T), want %#v (%T)", e.MessageID, k, got, got, v, v)
		}
	}
	for k := range p.Properties {
		if _, ok := want[k]; !ok && k != "traceparent" && k != "tracestate" {
			t.Errorf("parked copy of %s: unexpected property %s = %#v", e.MessageID, k, p.Properties[k])
		}
	}
	if p.Body != e.body() {
		t.Errorf("parked copy of %s: body %s, want the inbound body", e.MessageID, p.Body)
	}
	if p.Correlation != guidFor("correlation/"+e.MessageID) {
		t.Errorf("parked copy of %s: CorrelationId %q, want the inbound's", e.MessageID, p.Correlation)
	}
	if !brokerMessageID.MatchString(p.MessageID) {
		t.Errorf("parked copy of %s: MessageId %q, want one the broker assigned", e.MessageID, p.MessageID)
	}
}

// checkUnblock checks the response that lifted event 2's block.
func checkUnblock(t testing.TB, sc *scenario, r received, e2 event, how unblock) {
	t.Helper()
	in := e2
	in.MessageID = r.correlationID()
	sent := sc.sentAt
	switch how {
	case byResubmission:
		// ManagerClient.Resubmit: From=Manager, OriginatingMessageId = the
		// failed delivery's; the response answers the resubmission.
		audit, ok := sc.s.resolver.auditOf(sc.sid, "ResubmissionRequest")
		if !ok || audit.msg.MessageID != r.correlationID() {
			t.Errorf("the resubmission's response answers %q, want the ResubmissionRequest's MessageId", r.correlationID())
		}
		checkResponse(t, r, in, "ResolutionResponse", e2.body(),
			map[string]any{"OriginatingMessageId": e2.MessageID, "OriginatingFrom": "Manager"}, sent)
	case bySkip:
		audit, ok := sc.s.resolver.auditOf(sc.sid, "SkipRequest")
		if !ok || audit.msg.MessageID != r.correlationID() {
			t.Errorf("the SkipResponse answers %q, want the SkipRequest's MessageId", r.correlationID())
		}
		checkResponse(t, r, in, "SkipResponse", `{"EventContent":null,"ErrorContent":null}`,
			map[string]any{"OriginatingMessageId": e2.MessageID, "OriginatingFrom": "Manager"}, sent)
	case byRetry:
		// The RetryRequest (To=Retry, RetryCount 1) came back through the
		// retry rule (From=Retry); its response answers it.
		// Scheduling gives the RetryRequest a MessageId (the SDK assigns
		// one); the response answers it.
		retried := false
		for _, l := range sc.s.handler.lines("Subscriber") {
			if l.Str("messageType") == "RetryRequest" && l.Str("messageId") == r.correlationID() && l.Str("outcome") == "completed" {
				retried = true
			}
		}
		if !retried || r.correlationID() == e2.MessageID {
			t.Errorf("the retry's response answers %q, want the MessageId of the completed RetryRequest", r.correlationID())
		}
		checkResponse(t, r, in, "ResolutionResponse", e2.body(),
			map[string]any{"OriginatingMessageId": e2.MessageID, "OriginatingFrom": "Retry", "RetryCount": int32(1)}, time.Time{})
	}
}

// waitSettled waits until both mini hosts have nothing in flight.
func waitSettled(t testing.TB, s *stack) {
	t.Helper()
	s.waitUntil(60*time.Second, "both mini hosts settled", func() bool {
		a, d := s.host.Stats(), s.deferredStats()
		return a.Invocations == a.Completes+a.Abandons+a.SettleErrors && d.Invocations == d.Completes+d.Abandons+d.SettleErrors
	})
}

// TestBlockedSessionReplaysInOrderAfterResubmission: one session of 6
// events where event 2 fails. The Resolver gets an ErrorResponse for 2 and
// a DeferralResponse for each of 3–6, which are parked; the Manager's
// ResubmissionRequest (as ManagerClient builds it from the ErrorResponse)
// resolves 2; 3–6 are replayed in order by the DeferredProcessor; 7–8,
// sent during the replay, are answered after 6.
func TestBlockedSessionReplaysInOrderAfterResubmission(t *testing.T) {
	longRun(t) // under -short the Skip variant below runs the same replay
	s := startStack(t, stackConfig{deferred: true})
	sc := runBlockedSession(t, s, "blocked-resubmit", byResubmission)
	sc.report(t)
}

// TestBlockedSessionReplaysInOrderAfterRetry: the same with a retry policy
// (MaxRetries 2, 1 s): the scheduled RetryRequest succeeds (the sample
// fails the original delivery only) and the parked events replay in order.
func TestBlockedSessionReplaysInOrderAfterRetry(t *testing.T) {
	longRun(t) // under -short the Skip variant below runs the same replay
	s := startStack(t, stackConfig{deferred: true, settings: map[string]string{
		"NimBus__RetryPolicies__Default__MaxRetries": "2",
		"NimBus__RetryPolicies__Default__BaseDelay":  "00:00:01",
	}})
	sc := runBlockedSession(t, s, "blocked-retry", byRetry)
	// The RetryRequest was scheduled a second after the failure.
	var failLine map[string]any
	for _, l := range s.handler.lines("Subscriber") {
		if l.Str("outcome") == "event_failed" {
			failLine = l.Fields
		}
	}
	if d, _ := failLine["retryDelayMs"].(float64); d != 1000 {
		t.Errorf("the failure's retryDelayMs = %v, want 1000 (BaseDelay 1 s, first retry)", failLine["retryDelayMs"])
	}
	if gap := sc.unblock.at.Sub(sc.replies[1].at); gap < 900*time.Millisecond {
		t.Errorf("the retry was answered %v after the ErrorResponse, before its scheduled time", gap)
	}
	sc.report(t)
}

// TestBlockedSessionReplaysInOrderAfterSkip: the same with the Manager's
// SkipRequest: SkipResponse (empty content), event 2 neither handled nor
// recorded, 3–8 in order.
func TestBlockedSessionReplaysInOrderAfterSkip(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackConfig{deferred: true})
	sc := runBlockedSession(t, s, "blocked-skip", bySkip)
	sc.report(t)
}

// figures are a scenario's measurements: from the unblocking request to
// its response, to event 6's answer (the last parked before the unblock)
// and to event 8's (the last sent during the replay); and the time from the
// unblocking response to event 8's answer (events 3–8 handled).
func (sc *scenario) figures() (toUnblock, to6, to8, replay time.Duration) {
	var last6, last8 time.Time
	for _, r := range sc.replies {
		switch r.label() {
		case "ResolutionResponse:" + sc.evs[5].MessageID:
			last6 = r.at
		case "ResolutionResponse:" + sc.evs[7].MessageID:
			last8 = r.at
		}
	}
	return sc.unblock.at.Sub(sc.sentAt), last6.Sub(sc.sentAt), last8.Sub(sc.sentAt), last8.Sub(sc.unblock.at)
}

// report logs the scenario's figures.
func (sc *scenario) report(t *testing.T) {
	u, a, c, r := sc.figures()
	t.Logf("FIGURES %s: unblocking request → its response %v; → event 6 answered %v; → event 8 answered %v; "+
		"events 3–8 answered in %v after the unblocking response = %.1f events/s; %d answered from parked copies",
		sc.sid, u.Round(time.Millisecond), a.Round(time.Millisecond), c.Round(time.Millisecond), r.Round(time.Millisecond),
		6/r.Seconds(), len(sc.replayed))
}

// BenchmarkBlockedSessionReplay runs the 6+2 scenario of
// TestBlockedSessionReplaysInOrderAfterResubmission once per iteration
// (each in a new session) on the local stand-ins, with all its checks, and
// reports: resubmit-to-unblock-ms (the resubmission's own answer),
// resubmit-to-event6-ms (the last event parked before it is answered from
// its parked copy), resubmit-to-event8-ms (the last event sent during the
// replay is answered), and replay-events/s (events 3–8 answered per second
// after the block was lifted). Run it without -race:
//
//	go test -run '^$' -bench BenchmarkBlockedSessionReplay -benchtime 10x -count 1 ./internal/dev/e2e
func BenchmarkBlockedSessionReplay(b *testing.B) {
	if raceEnabled {
		b.Log("the race detector is on: the figures measure its instrumentation")
	}
	s := startStack(b, stackConfig{deferred: true})
	warm := order("OrderPlaced-warm", "warm", 10, 0)
	s.send(warm)
	s.waitReplies("warm", time.Minute, "the warm-up answer", func(rs []received) bool { return len(rs) >= 1 })
	var toUnblock, to6, to8, replay []float64
	b.ResetTimer()
	for i := range b.N {
		sc := runBlockedSession(b, s, fmt.Sprintf("bench-%d", i), byResubmission)
		u, a, c, r := sc.figures()
		toUnblock = append(toUnblock, float64(u.Microseconds())/1000)
		to6 = append(to6, float64(a.Microseconds())/1000)
		to8 = append(to8, float64(c.Microseconds())/1000)
		replay = append(replay, 6/r.Seconds())
	}
	b.StopTimer()
	for _, xs := range [][]float64{toUnblock, to6, to8, replay} {
		sort.Float64s(xs)
	}
	b.ReportMetric(percentile(toUnblock, 50), "resubmit-to-unblock-ms")
	b.ReportMetric(percentile(to6, 50), "resubmit-to-event6-ms")
	b.ReportMetric(percentile(to8, 50), "resubmit-to-event8-ms")
	b.ReportMetric(percentile(replay, 50), "replay-events/s")
}
