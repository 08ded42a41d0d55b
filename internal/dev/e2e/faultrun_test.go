package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// faultSeed seeds the fault run: which events fail, the bursts, and both
// fault injectors.
const faultSeed = 9

// TestFaultRunLosesNothing runs 2,000 events over 50 sessions (200 over
// 10 with -short) through the whole stack while
//   - 20% of the events fail once (the sample's Fail=failed on the original
//     delivery): ErrorResponse, the session blocked, the events behind it
//     parked, a RetryRequest 1 s later (retry policy Default, 3 retries)
//     resolves it and the DeferredProcessor replays what was parked;
//   - 10% of the Cosmos document requests (inbox and session state) fail
//     at the fault proxy: 503, 429, a connection dropped before the request
//     reached Cosmos, or dropped after Cosmos applied it;
//   - 5% of the handler's Service Bus sends (Resolver responses, parked
//     copies, replay requests, scheduled RetryRequests) are refused by the
//     broker with an error the SDK does not retry.
//
// Each session sends its events in seeded bursts of 1–4 and waits until
// the burst is resolved, so failing events meet an unblocked session (an
// event parked behind a failure is replayed, and the sample fails only
// original deliveries). Nothing may be lost (every event has a
// ResolutionResponse or SkipResponse), each session is resolved in send
// order, every original MessageId is recorded, nothing is dead-lettered,
// and an event's handler succeeds more than once only after a run whose
// inbox record failed (the documented window); the re-runs are counted.
func TestFaultRunLosesNothing(t *testing.T) {
	longRun(t)
	sessions, perSession := 50, 40
	total := sessions * perSession
	rng := rand.New(rand.NewPCG(faultSeed, 2))
	s := startChaos(t, chaosConfig{
		sessions: 32,
		cosmosFaults: &testenv.FaultProxyOptions{
			Seed:  faultSeed,
			Rate:  0.10,
			Kinds: []testenv.FaultKind{testenv.FaultUnavailable, testenv.FaultThrottle, testenv.FaultDrop, testenv.FaultDropAfterForward},
			// Document reads and writes: the inbox and the session state
			// (not the container set-up at start).
			Match: func(r *http.Request) bool { return strings.Contains(r.URL.Path, "/docs") },
		},
		sendFaults: &testenv.SendFaults{
			Rate: 0.05, Seed: faultSeed, Entities: []string{endpointID},
			// What the handler sends; the test's own events (To = the
			// endpoint) are not eligible.
			Match: []testenv.Rule{
				{Equals: map[string]string{"To": "Resolver"}},
				{Equals: map[string]string{"To": "Deferred"}},
				{Equals: map[string]string{"To": "DeferredProcessor"}},
				{Equals: map[string]string{"To": "Retry"}},
			},
		},
		settings: map[string]string{
			"NimBus__RetryPolicies__Default__MaxRetries": "3",
			"NimBus__RetryPolicies__Default__BaseDelay":  "00:00:01",
		},
	})

	// 20% of the events, chosen by the seed, fail once.
	fails := map[int]bool{}
	for _, i := range rng.Perm(total)[:total/5] {
		fails[i] = true
	}
	var evs []chaosEvent
	bursts := map[string][][]chaosEvent{}
	for k := range sessions {
		sid := fmt.Sprintf("fault-%02d", k)
		var es []chaosEvent
		for i := range perSession {
			es = append(es, newChaosEvent(sid, i, fails[k*perSession+i]))
		}
		evs = append(evs, es...)
		for len(es) > 0 {
			n := min(len(es), 1+rng.IntN(4))
			bursts[sid] = append(bursts[sid], es[:n])
			es = es[n:]
		}
	}

	res := newResolvedIndex(s.resolver)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for sid, bs := range bursts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, b := range bs {
				for _, e := range b {
					if err := s.sendRetrying(e.message()); err != nil {
						errs <- fmt.Errorf("session %s: %w", sid, err)
						return
					}
				}
				last := b[len(b)-1].EventID
				if !res.wait(last, 3*time.Minute) {
					errs <- fmt.Errorf("session %s: event %s not resolved within 3 minutes", sid, b[len(b)-1].MessageID)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	elapsed := time.Since(start)
	if t.Failed() {
		// Report what the run did before giving up: lost events, order.
		s.checkRun(t, evs)
		s.peekDeferred(t, evs)
		t.FailNow()
	}
	s.quiet(2 * time.Minute)

	rep := s.checkRun(t, evs)
	s.checkRecords(t, evs)
	if dl := s.deadLettered(); len(dl) > 0 {
		t.Errorf("dead-lettered: %v", dl)
	}
	if cuts := s.transport.cuts(); len(cuts) > 0 {
		t.Errorf("%d invocations failed in transport without a kill: %+v", len(cuts), cuts[0])
	}

	// Figures.
	pc := s.proxy.Counts()
	sbFaults := s.sb.InjectedSendFaults()
	sbTotal := 0
	for _, n := range sbFaults {
		sbTotal += n
	}
	lines := s.lines()
	perEvent := map[string]int{}
	var replays, retries, parks, storeFailures, publishFailures int
	for _, l := range lines {
		switch {
		case l.Function == "DeferredProcessor" && l.MessageType == "EventRequest":
			replays++
		case l.MessageType == "RetryRequest":
			retries++
		}
		switch l.Outcome {
		case "deferred":
			parks++
		case "transient_failure", "session_write_failed":
			storeFailures++
		case "publish_failed":
			publishFailures++
		}
	}
	flagged := 0
	for _, e := range evs {
		if e.fails {
			flagged++
		}
		perEvent[e.EventID] = rep.deliveries[e.EventID]
	}
	counts := make([]int, 0, len(perEvent))
	sum := 0
	for _, n := range perEvent {
		counts = append(counts, n)
		sum += n
	}
	sort.Ints(counts)
	if rep.failedEvents < flagged/3 {
		t.Errorf("only %d of %d flagged events failed their original delivery: the run did not exercise blocking", rep.failedEvents, flagged)
	}
	if pc.Unavailable+pc.Throttled+pc.Dropped+pc.DroppedAfterForward == 0 || sbTotal == 0 {
		t.Errorf("no fault injected (Cosmos %+v, Service Bus %v)", pc, sbFaults)
	}
	t.Logf("fault run: %d events over %d sessions in %v (%.0f events/s); %d flagged to fail once, %d failed their original delivery (%d failing runs; the rest were parked behind another failure and replayed)",
		total, sessions, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), flagged, rep.failedEvents, rep.failedRuns)
	t.Logf("Cosmos: %d document requests, %d faults injected (%d × 503, %d × 429, %d dropped before, %d dropped after forwarding); Service Bus: %d sends refused %v",
		pc.Requests, pc.Unavailable+pc.Throttled+pc.Dropped+pc.DroppedAfterForward, pc.Unavailable, pc.Throttled, pc.Dropped, pc.DroppedAfterForward, sbTotal, sbFaults)
	t.Logf("deliveries failed by faults: %d store failures, %d send failures; %d RetryRequests handled, %d parks, %d replays",
		storeFailures, publishFailures, retries, parks, replays)
	t.Logf("handler: %d successful runs, %d re-runs (%d runs whose record failed after them); per event %.2f log lines (deliveries and replays) on average, at most %d",
		rep.runs, rep.reruns, rep.windowLines, float64(sum)/float64(len(counts)), counts[len(counts)-1])
	t.Logf("outcomes: %s", outcomeSummary(rep.outcomes))
	t.Logf("mini hosts: Subscriber %+v, DeferredProcessor %+v; collector: %s", s.host.Stats(), s.replayer.Stats(), s.resolver.problems())
}

// sendRetrying sends m, again after a failure (the test's own sends are not
// the subject of the fault run).
func (s *chaosStack) sendRetrying(m *azservicebus.Message) error {
	var err error
	for range 5 {
		if err = s.sendOne(m); err == nil {
			return nil
		}
	}
	return err
}

func (s *chaosStack) sendOne(m *azservicebus.Message) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.sender.SendMessage(ctx, m, nil)
}

// resolvedIndex follows the collector and tells which events are resolved
// (a ResolutionResponse or SkipResponse arrived), without rescanning
// everything on each question.
type resolvedIndex struct {
	c *collector

	mu       sync.Mutex
	scanned  int
	resolved map[string]bool
}

func newResolvedIndex(c *collector) *resolvedIndex {
	return &resolvedIndex{c: c, resolved: map[string]bool{}}
}

func (x *resolvedIndex) has(eventID string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.c.mu.Lock()
	fresh := x.c.all[x.scanned:]
	x.scanned = len(x.c.all)
	x.c.mu.Unlock()
	for _, r := range fresh {
		if r.isResponse() && r.resolves() {
			x.resolved[r.eventID()] = true
		}
	}
	return x.resolved[eventID]
}

// wait polls until eventID is resolved or timeout passes.
func (x *resolvedIndex) wait(eventID string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for !x.has(eventID) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// peekDeferred logs the mini hosts' counters and the replay requests
// still waiting on the DeferredProcessor subscription (for a failure
// report).
func (s *chaosStack) peekDeferred(t *testing.T, _ []chaosEvent) {
	t.Helper()
	t.Logf("mini hosts: Subscriber %+v, DeferredProcessor %+v (in flight at most %d)", s.host.Stats(), s.replayer.Stats(), s.replayer.MaxInFlight())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := s.client.NewReceiverForSubscription(endpointID, testenv.DeferredProcessorSub, nil)
	if err != nil {
		t.Logf("peeking DeferredProcessor: %v", err)
		return
	}
	defer r.Close(ctx)
	ms, err := r.PeekMessages(ctx, 100, nil)
	var desc []string
	for _, m := range ms {
		desc = append(desc, fmt.Sprintf("%s session=%s dc=%d state=%v", m.MessageID, strp(m.SessionID), m.DeliveryCount, m.State))
	}
	t.Logf("%d replay requests on DeferredProcessor (%v): %s", len(ms), err, strings.Join(desc, "; "))
}
