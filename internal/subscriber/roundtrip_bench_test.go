package subscriber

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// Sequential round trips and requests per message, by kind of delivery.
// A round trip is one wait for the store or the broker; requests made
// concurrently (the inbox check and the session-state read, the parked
// copy and its DeferralResponse, an ErrorResponse and its scheduled
// RetryRequest) are one round trip. NimBus's .NET subscriber makes every
// call in sequence: a fresh success costs it 4 (check, state read, record,
// send).

// roundTripCase prepares a fake NimBus and returns the delivery to measure.
type roundTripCase struct {
	name string
	// prepare builds the fake's state before the measured delivery;
	// measure makes it.
	prepare func(w *fakeNimbus) func() Report
	policy  *testPolicy
	// tx makes OrderPlaced's handler transactional.
	tx bool
}

func roundTripCases() []roundTripCase {
	process := func(w *fakeNimbus, d *Delivery) func() Report {
		return func() Report { return w.p.Process(context.Background(), d) }
	}
	blocked := func(w *fakeNimbus) { w.setState(blockedBy("event-1", "msg-1")) }
	replay := func(copies int) func(w *fakeNimbus) func() Report {
		return func(w *fakeNimbus) func() Report {
			blockedWithParked(w)
			for i := range copies {
				w.deliver(w.event(fmt.Sprintf("msg-p%d", i), fmt.Sprintf("ev-p%d", i)))
			}
			w.deliver(w.resubmit("ev-2"))
			req := w.delivered(w.lastSent("ProcessDeferredRequest"))
			return func() Report {
				r := w.p.Drain(context.Background(), req)
				if len(r.Replays) != copies {
					w.t.Fatalf("replayed %d of %d", len(r.Replays), copies)
				}
				return r
			}
		}
	}
	return []roundTripCase{
		{name: "fresh success", prepare: func(w *fakeNimbus) func() Report { return process(w, w.event("msg-1", "event-1")) }},
		{name: "duplicate", prepare: func(w *fakeNimbus) func() Report {
			w.record("msg-1")
			return process(w, w.event("msg-1", "event-1"))
		}},
		{name: "parked (session blocked)", prepare: func(w *fakeNimbus) func() Report {
			w.setState(blockedBy("event-0", "msg-0"))
			return process(w, w.event("msg-1", "event-1"))
		}},
		{name: "parked (copies being replayed)", prepare: func(w *fakeNimbus) func() Report {
			w.setState(withParked(blockedBy("", ""), 1))
			return process(w, w.event("msg-1", "event-1"))
		}},
		{name: "replayed (a replay of 1 copy)", prepare: replay(1)},
		{name: "replayed (a replay of 10 copies)", prepare: replay(10)},
		{name: "failed", prepare: func(w *fakeNimbus) func() Report {
			w.handle = fail("boom")
			return process(w, w.event("msg-1", "event-1"))
		}},
		{name: "failed, RetryRequest scheduled", policy: &testPolicy{max: 3, delay: time.Minute}, prepare: func(w *fakeNimbus) func() Report {
			w.handle = fail("boom")
			return process(w, w.event("msg-1", "event-1"))
		}},
		{name: "RetryRequest success", prepare: func(w *fakeNimbus) func() Report {
			blocked(w)
			return process(w, w.retry("event-1", "msg-1", 1))
		}},
		{name: "Resubmission success", prepare: func(w *fakeNimbus) func() Report {
			blocked(w)
			return process(w, w.resubmit("event-1"))
		}},
		{name: "SkipRequest", prepare: func(w *fakeNimbus) func() Report {
			blocked(w)
			return process(w, w.skip("event-1"))
		}},
		txFreshCase,
		plainTwoWritesCase,
		publishingCase,
		txPublishingCase,
		txResolvedCase,
	}
}

// costs is what one measured delivery cost, as the fake's stores and
// broker saw it.
type costs struct {
	roundTrips, checks, records, stateReads, stateWrites, sends, messages int
	// txReads and batches are the transactional store's requests.
	txReads, batches int
	outcome          Outcome
}

// roundTripLatency is the time every store and broker call takes while a
// delivery is measured, so that calls the pipeline makes concurrently
// overlap.
const roundTripLatency = time.Millisecond

// measure prepares c's fake NimBus and measures its delivery, each store and
// broker call taking latency.
func measure(tb testing.TB, c roundTripCase, latency time.Duration) costs {
	w := newFakeNimbus(tb, fakeNimbusOptions{policy: c.policy, tx: c.tx})
	run := c.prepare(w)
	w.mu.Lock()
	w.roundTrips, w.checks, w.records, w.stateReads, w.stateWrites, w.sends = 0, 0, 0, 0, 0, 0
	w.txReads, w.batches = 0, 0
	w.latency = latency
	w.mu.Unlock()
	r := run()
	if !r.Outcome.Completes() {
		tb.Fatalf("%s: %s: %v", c.name, r.Outcome, r.Err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return costs{roundTrips: w.roundTrips, checks: w.checks, records: w.records, stateReads: w.stateReads,
		stateWrites: w.stateWrites, sends: w.sends, messages: max(len(r.Replays), 1), outcome: r.Outcome,
		txReads: w.txReads, batches: w.batches}
}

// measureExact measures c on the fake clock of a synctest bubble: calls
// started together overlap whatever the machine's load, so the round-trip
// count is exact.
func measureExact(t *testing.T, c roundTripCase) (m costs) {
	synctest.Test(t, func(t *testing.T) { m = measure(t, c, roundTripLatency) })
	return m
}

// BenchmarkRoundTrips times the pipeline's own work per delivery (calls
// without latency) and reports the round trips and requests of one
// delivery measured with roundTripLatency per call.
func BenchmarkRoundTrips(b *testing.B) {
	for _, c := range roundTripCases() {
		b.Run(strings.ReplaceAll(c.name, " ", "_"), func(b *testing.B) {
			for b.Loop() {
				measure(b, c, 0)
			}
			last := measure(b, c, roundTripLatency)
			per := func(n int) float64 { return float64(n) / float64(last.messages) }
			b.ReportMetric(per(last.roundTrips), "roundtrips/msg")
			b.ReportMetric(per(last.checks+last.records+last.stateReads+last.stateWrites), "store-requests/msg")
			b.ReportMetric(per(last.checks), "checks/msg")
			b.ReportMetric(per(last.records), "records/msg")
			b.ReportMetric(per(last.stateReads), "state-reads/msg")
			b.ReportMetric(per(last.stateWrites), "state-writes/msg")
			b.ReportMetric(per(last.sends), "sends/msg")
			if c.tx {
				b.ReportMetric(per(last.txReads), "tx-reads/msg")
				b.ReportMetric(per(last.batches), "batches/msg")
			}
		})
	}
}

// A fresh success costs at most 3 sequential round trips (inbox check ∥
// session-state read, record, response send); NimBus needs 4. This is a
// count of waits, not a timing.
func TestFreshSuccessCostsAtMostThreeRoundTrips(t *testing.T) {
	c := measureExact(t, roundTripCases()[0])
	if c.outcome != OutcomeCompleted {
		t.Fatal(c.outcome)
	}
	if c.roundTrips > 3 {
		t.Fatalf("a fresh success took %d sequential round trips, want at most 3", c.roundTrips)
	}
	if c.checks != 1 || c.stateReads != 1 || c.records != 1 || c.stateWrites != 0 || c.sends != 1 {
		t.Fatalf("a fresh success made %+v, want 1 check, 1 state read, 1 record, 1 send", c)
	}
}

// TestRoundTripTable logs the table docs/readme-roundtrips.md reports
// (go test -run TestRoundTripTable -v).
func TestRoundTripTable(t *testing.T) {
	var b strings.Builder
	b.WriteString("| delivery | round trips | checks | records | state reads | state writes | broker sends |\n|---|---|---|---|---|---|---|\n")
	for _, c := range roundTripCases() {
		m := measureExact(t, c)
		f := func(n int) string {
			if m.messages == 1 {
				return fmt.Sprint(n)
			}
			return fmt.Sprintf("%.1f", float64(n)/float64(m.messages))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", c.name, f(m.roundTrips), f(m.checks), f(m.records), f(m.stateReads), f(m.stateWrites), f(m.sends))
	}
	t.Log("\n" + b.String())
}
