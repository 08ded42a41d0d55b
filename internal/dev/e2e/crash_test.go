package e2e

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// crashSeed seeds the kill points of TestCrashDuringBlockAndReplayLosesNothing.
const crashSeed = 20261130

// TestCrashDuringBlockAndReplayLosesNothing kills the handler process with
// SIGKILL at seeded points of blocked-and-replayed sessions and starts it
// again on the same port each time, while the mini hosts keep running (an
// invocation the kill cut fails and its message is redelivered):
//
//   - 6 sessions of 10 events; event 1 of each fails (the sample's
//     Fail=failed on the original delivery), blocking its session, and
//     events 2–9 are parked; kill 1 lands while they are being parked;
//   - the Manager's ResubmissionRequest for each failed event (built from
//     its ErrorResponse, as NimBus's ManagerClient builds it); kill 2 lands
//     right after they are sent;
//   - the resubmissions resolve the failed events, the DeferredProcessor
//     replays the parked copies; 4 more events per session are sent during
//     the replay; kills 3 and 4 land mid-replay.
//
// Then every event has a ResolutionResponse or SkipResponse (nothing
// lost), each session's events are resolved in send order, every original
// MessageId is recorded in the inbox, nothing is dead-lettered, and a
// handler ran twice only in the documented window: its record had not
// become durable (a failed record logged after the run, or a run the kill
// cut).
func TestCrashDuringBlockAndReplayLosesNothing(t *testing.T) {
	longRun(t)
	const (
		sessions = 6
		first    = 10 // events sent before the resubmission
		late     = 4  // events sent during the replay
		failAt   = 1
	)
	rng := rand.New(rand.NewPCG(crashSeed, 1))
	start := time.Now()
	s := startChaos(t, chaosConfig{sessions: sessions})
	t.Logf("seed %d", crashSeed)

	var evs []chaosEvent
	perSession := map[string][]chaosEvent{}
	for i := range first + late {
		for k := range sessions {
			sid := fmt.Sprintf("crash-%d", k)
			e := newChaosEvent(sid, i, i == failAt)
			perSession[sid] = append(perSession[sid], e)
		}
	}
	for k := range sessions {
		evs = append(evs, perSession[fmt.Sprintf("crash-%d", k)]...)
	}
	var firstMsgs, lateMsgs []*azservicebus.Message
	for i := range first + late {
		for k := range sessions {
			e := perSession[fmt.Sprintf("crash-%d", k)][i]
			if i < first {
				firstMsgs = append(firstMsgs, e.message())
			} else {
				lateMsgs = append(lateMsgs, e.message())
			}
		}
	}

	// Phase 1: block and park; kill while parking.
	parks := sessions * (first - failAt - 1)
	s.send(firstMsgs...)
	killAt := 1 + rng.IntN(parks/2)
	s.waitUntil(60*time.Second, fmt.Sprintf("%d parked messages", killAt), func() bool {
		return countParked(s) >= killAt
	})
	s.crash(fmt.Sprintf("while parking, after %d parks", killAt))
	s.waitUntil(90*time.Second, fmt.Sprintf("all %d parked, an ErrorResponse per session", parks), func() bool {
		if countParked(s) < parks {
			return false
		}
		for _, es := range perSession {
			if s.errorResponse(es[failAt].EventID) == nil {
				return false
			}
		}
		return true
	})

	// Phase 2: the Manager resubmits each failed event; kill right after.
	for k := range sessions {
		e := perSession[fmt.Sprintf("crash-%d", k)][failAt]
		s.send(resubmission(*s.errorResponse(e.EventID), e))
	}
	time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond) // the seeded kill point, not a wait for a result
	s.crash("right after the resubmissions")

	// Phase 3: the replay; more events arrive meanwhile; kill mid-replay.
	resolvedParked := func() int {
		n, r := 0, s.resolved()
		for _, es := range perSession {
			for _, e := range es[failAt+1 : first] {
				if r[e.EventID] {
					n++
				}
			}
		}
		return n
	}
	s.send(lateMsgs...)
	k3 := 1 + rng.IntN(parks/3)
	s.waitUntil(90*time.Second, fmt.Sprintf("%d parked events resolved", k3), func() bool { return resolvedParked() >= k3 })
	s.crash(fmt.Sprintf("mid-replay, after %d of %d parked events resolved", resolvedParked(), parks))
	k4 := min(parks, resolvedParked()+1+rng.IntN(parks/3))
	s.waitUntil(90*time.Second, fmt.Sprintf("%d parked events resolved", k4), func() bool { return resolvedParked() >= k4 })
	s.crash(fmt.Sprintf("mid-replay, after %d of %d parked events resolved", resolvedParked(), parks))

	// Finish the run.
	s.waitUntil(3*time.Minute, fmt.Sprintf("all %d events resolved", len(evs)), func() bool {
		r := s.resolved()
		for _, e := range evs {
			if !r[e.EventID] {
				return false
			}
		}
		return true
	})
	s.quiet(2 * time.Minute)
	elapsed := time.Since(start)

	rep := s.checkRun(t, evs)
	s.checkRecords(t, evs)
	// A handler that ran again after its record was durable and its
	// response sent would send a second ResolutionResponse (a duplicate
	// delivery gets a SkipResponse instead).
	resolutions := map[string]int{}
	for _, r := range s.resolver.responses() {
		if r.messageType() == "ResolutionResponse" {
			resolutions[r.eventID()]++
		}
	}
	for _, e := range evs {
		if n := resolutions[e.EventID]; n > 1 {
			t.Errorf("%s: %d ResolutionResponses, want at most 1", e.MessageID, n)
		}
	}
	if dl := s.deadLettered(); len(dl) > 0 {
		t.Errorf("dead-lettered: %v", dl)
	}
	if s.kills != 4 {
		t.Errorf("%d kills, want 4", s.kills)
	}
	cuts := s.transport.cuts()
	cutSummary := map[string]int{}
	// What the redelivery of each cut Subscriber invocation found: a
	// duplicate (the killed run had recorded: no re-run) or a fresh run of
	// the handler (a re-run in the documented window if the killed run had
	// got past the handler, else the first run).
	durable, ranAgain := 0, 0
	lines := s.lines()
	for _, c := range cuts {
		cutSummary[c.Function+"/"+c.Type]++
		if c.Function != "Subscriber" {
			continue
		}
		dup, ran := false, false
		for _, l := range lines {
			if l.MessageID == c.MessageID && l.Function == "Subscriber" {
				dup = dup || l.Inbox == "duplicate"
				ran = ran || (l.HandlerRan && !(l.original() && strings.Contains(l.Outcome, "failed")))
			}
		}
		switch {
		case dup:
			durable++
		case ran:
			ranAgain++
		}
	}
	t.Logf("cut Subscriber invocations: %d redelivered as duplicates (recorded before the kill), %d ran the handler on redelivery (a re-run only if the killed run had passed the handler)", durable, ranAgain)
	t.Logf("crash run: %d events over %d sessions in %v; %d kills cut %d invocations (%s); %d successful handler runs, %d re-runs (%d after a failed record, the rest after a cut invocation), %d failed original runs",
		len(evs), sessions, elapsed.Round(time.Millisecond), s.kills, len(cuts), outcomeSummary(cutSummary), rep.runs, rep.reruns, rep.windowLines, rep.failedRuns)
	t.Logf("outcomes: %s", outcomeSummary(rep.outcomes))
	t.Logf("mini hosts: Subscriber %+v, DeferredProcessor %+v; collector: %s", s.host.Stats(), s.replayer.Stats(), s.resolver.problems())
}

// countParked counts the distinct messages logged as parked.
func countParked(s *chaosStack) int {
	seen := map[string]bool{}
	for _, l := range s.lines() {
		if l.Outcome == "deferred" {
			seen[l.MessageID] = true
		}
	}
	return len(seen)
}
