package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/dev/minihost"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// copyRun is what the deliveries of one concurrent copy got.
type copyRun struct {
	results []*minihost.Result
	err     error
}

// deliverCopies delivers copies copies of e to the handler at once (all
// released together, as a host does when a session lock was lost while the
// first copy ran) and redelivers each copy the host would abandon until it
// settles.
func deliverCopies(iv *minihost.Invoker, e event, copies, maxDeliveries int) []copyRun {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runs := make([]copyRun, copies)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			runs[i].results, runs[i].err = invokeUntilSettled(ctx, iv, e, maxDeliveries)
		}()
	}
	close(start)
	wg.Wait()
	return runs
}

// TestTransactionalCopiesCommitOnce delivers 64 copies of one
// PaymentReceived message (the same MessageId) to the handler at once, in 20
// trials, a customer each (3 under -short), against the local Cosmos DB
// server, and redelivers every copy the host would abandon until each
// settles. In every trial the payment is applied exactly once (balance,
// payment document, one inbox marker in the customer's partition and no
// separate inbox document), one commit batch of the customer's partition
// succeeds (counted at the proxy in front of Cosmos), exactly one copy
// completes with a ResolutionResponse, and every other copy ends as a
// duplicate with a SkipResponse, at once or after a transient conflict
// and its redelivery, or, having found the winner's PaymentRecorded not yet
// marked dispatched, with the stored ResolutionResponse after sending the
// event again.
//
// The announcements are read from the endpoint's topic over AMQP, as every
// consumer's forwarding subscription gets them: per trial exactly one
// PaymentRecorded MessageId (PaymentRecorded-<PaymentId>), sent once by the
// copy that committed and once more by each copy that finished the
// dispatch, every copy the same message (body, broker and application
// properties, trace context included), the first exactly as NimBus's
// PublishFromContext writes it with the balance the payment left. The test
// prints the re-send rate.
//
// For contrast it then does the same (5 trials, 1 under -short) with the
// plain (non-transactional) OrderPlaced handler and reports how often its
// handler ran more than once per message: the plain inbox records a
// MessageId only after the handler returned.
func TestTransactionalCopiesCommitOnce(t *testing.T) {
	const (
		copies        = 64
		maxDeliveries = 10
	)
	trials, plainTrials := 20, 5
	if testing.Short() {
		// Light enough to run beside the other tests.
		t.Parallel()
		trials, plainTrials = 3, 1
	}
	container := ledgerContainerFor(t)
	batches := newBatchTally()
	s := startStack(t, stackConfig{
		settings: ledgerSettings(container),
		topology: withRecordedTap,
		// A counting proxy: no faults, the batches tallied.
		faults: &testenv.FaultProxyOptions{Disabled: true, Match: testenv.IsBatchRequest, Hooks: batches.hooks()},
	})
	led := openLedger(t, s.cosmos, container)
	iv := concurrentInvoker(s.handler.base, copies)

	// Warm up connections, the container check and the ledger container
	// with a payment of another customer.
	warm := payment("PaymentReceived-conc-warm", "cust-conc-warm", "P-conc-warm", "cust-conc-warm", 1, "")
	if _, err := invokeUntilSettled(context.Background(), iv, warm, maxDeliveries); err != nil {
		t.Fatal(err)
	}
	wants := []ledgerWant{{customer: "cust-conc-warm", payments: []paymentWant{{"P-conc-warm", 1, []string{warm.MessageID}}}}}
	expectResponses := map[string]int{warm.MessageID: 1}

	firstStatus := map[int]int{} // status of each copy's first delivery
	deliveries := map[int]int{}  // deliveries a copy took to settle
	var evs []event
	start := time.Now()
	var trialTimes []time.Duration
	for trial := range trials {
		cust := fmt.Sprintf("cust-conc-%02d", trial)
		e := payment(fmt.Sprintf("PaymentReceived-conc-%02d", trial), cust, fmt.Sprintf("P-conc-%02d", trial), cust, 1000+trial, "")
		evs = append(evs, e)
		t0 := time.Now()
		runs := deliverCopies(iv, e, copies, maxDeliveries)
		trialTimes = append(trialTimes, time.Since(t0))
		for _, r := range runs {
			if r.err != nil {
				t.Errorf("trial %d: %v", trial, r.err)
			}
			if len(r.results) > 0 {
				firstStatus[r.results[0].StatusCode]++
			}
			deliveries[len(r.results)]++
		}
		wants = append(wants, ledgerWant{customer: cust, payments: []paymentWant{{fmt.Sprintf("P-conc-%02d", trial), int64(1000 + trial), []string{e.MessageID}}}})
		expectResponses[e.MessageID] = copies
	}
	elapsed := time.Since(start)

	// The ledger: each payment applied once, one marker per message.
	rep := checkLedger(t, led, wants)
	if recs := s.inboxRecords(append([]string{warm.MessageID}, messageIDs(evs)...)...); len(recs) > 0 {
		t.Errorf("%d transactional deliveries wrote a separate inbox document; the marker is the record", len(recs))
	}

	// The log: per message, one completed delivery; every other copy's
	// last delivery is a duplicate: a plain one, or one that found the
	// winner's PaymentRecorded not yet marked dispatched and sent it with
	// the stored ResolutionResponse (outbox_dispatched).
	outcomes := map[string]int{}
	finished := map[string]int{}
	for mid, ivs := range byMessage(s.handler.invocations()) {
		if mid == warm.MessageID {
			continue
		}
		completed, duplicates := 0, 0
		for _, l := range ivs {
			outcomes[l.Outcome+"/"+l.Inbox]++
			switch {
			case l.Outcome == "completed":
				completed++
			case l.Outcome == "duplicate" || l.Inbox == "duplicate":
				duplicates++
			}
			if l.Outcome == "outbox_dispatched" {
				finished[mid]++
			}
		}
		if completed != 1 || duplicates != copies-1 {
			t.Errorf("%s: %d completed and %d duplicate deliveries, want 1 and %d", mid, completed, duplicates, copies-1)
		}
	}

	// The Resolver: one ResolutionResponse and copies-1 SkipResponses
	// (DuplicateDetected) per message. Every response was sent before its
	// invocation answered, so they are all on their way.
	s.waitUntil(60*time.Second, "every copy's response", func() bool {
		by := s.resolver.responsesByRequest()
		for mid, n := range expectResponses {
			if len(by[mid]) < n {
				return false
			}
		}
		return true
	})

	// The contrast: the plain handler, the same shape of delivery.
	plainRuns := make([]int, plainTrials)
	var plain []event
	for trial := range plainTrials {
		e := order(fmt.Sprintf("OrderPlaced-conc-%02d", trial), fmt.Sprintf("cust-plain-%02d", trial), 10+trial, 0)
		plain = append(plain, e)
		for _, r := range deliverCopies(iv, e, copies, maxDeliveries) {
			if r.err != nil {
				t.Errorf("plain trial %d: %v", trial, r.err)
			}
		}
	}
	ivs := byMessage(s.handler.invocations())
	twice := 0
	for i, e := range plain {
		for _, l := range ivs[e.MessageID] {
			if l.handlerRan() {
				plainRuns[i]++
			}
		}
		if plainRuns[i] > 1 {
			twice++
		}
	}

	// Checked after the contrast ran, so that a stray second response of a
	// transactional message has had the time to arrive.
	by := s.resolver.responsesByRequest()
	for _, e := range evs {
		rs := by[e.MessageID]
		var resolutions, skips []received
		for _, r := range rs {
			switch r.messageType() {
			case "ResolutionResponse":
				resolutions = append(resolutions, r)
			case "SkipResponse":
				skips = append(skips, r)
			}
		}
		// Each copy that finished the dispatch answered as the winner did.
		if f := finished[e.MessageID]; len(resolutions) != 1+f || len(skips) != copies-1-f || len(rs) != copies {
			t.Errorf("%s: %d ResolutionResponses, %d SkipResponses, %d responses in all; want %d, %d, %d", e.MessageID, len(resolutions), len(skips), len(rs), 1+f, copies-1-f, copies)
			continue
		}
		if len(skips) == 0 {
			checkResponse(t, resolutions[0], e, "ResolutionResponse", e.body(), nil, time.Time{})
			continue
		}
		checkResponse(t, resolutions[0], e, "ResolutionResponse", e.body(), nil, time.Time{})
		checkResponse(t, skips[0], e, "SkipResponse", e.skipBody(), nil, time.Time{})
	}

	// One commit per trial, at the store.
	for _, e := range evs {
		if n := batches.count(commitBatch, e.SessionID, http.StatusOK); n != 1 {
			t.Errorf("%s: %d commit batches of partition %s succeeded, want 1", e.MessageID, n, e.SessionID)
		}
	}

	// The announcements, from the endpoint's topic. Every send happened
	// before its invocation answered, so they are all there.
	recorded := byMessageID(drainRecorded(t, s.sb.Client(t), time.Second))
	want := map[string]bool{"PaymentRecorded-P-conc-warm": true}
	if cs := recorded["PaymentRecorded-P-conc-warm"]; len(cs) != 1 {
		t.Errorf("the warm-up payment was announced %d times, want 1", len(cs))
	} else {
		checkAnnounced(t, cs, warm, "P-conc-warm", "cust-conc-warm", 1, 1)
	}
	resends, losers := 0, 0
	perTrial := make([]int, len(evs))
	for trial, e := range evs {
		pid := fmt.Sprintf("P-conc-%02d", trial)
		id := "PaymentRecorded-" + pid
		want[id] = true
		cs := recorded[id]
		perTrial[trial] = len(cs)
		if len(cs) == 0 {
			t.Errorf("%s: the payment was never announced", e.MessageID)
			continue
		}
		// The copy that committed sent it, and each copy that finished
		// the dispatch (outbox_dispatched) sent it once more.
		if len(cs) != 1+finished[e.MessageID] {
			t.Errorf("%s: %d copies of %s on the topic, want 1 + %d sent again by the copies that finished the dispatch", e.MessageID, len(cs), id, finished[e.MessageID])
		}
		checkAnnounced(t, cs, e, pid, e.SessionID, int64(1000+trial), int64(1000+trial))
		resends += len(cs) - 1
		losers += copies - 1
	}
	for _, id := range sortedKeys(recorded) {
		if !want[id] {
			t.Errorf("an announcement of no payment: %s (%d copies)", id, len(recorded[id]))
		}
	}

	sort.Slice(trialTimes, func(i, j int) bool { return trialTimes[i] < trialTimes[j] })
	t.Logf("transactional: %d trials × %d concurrent copies in %v (trial p50 %v, max %v): ledger %d payments, %d markers, %d exact balances",
		trials, copies, elapsed.Round(time.Millisecond), trialTimes[len(trialTimes)/2].Round(time.Millisecond), trialTimes[len(trialTimes)-1].Round(time.Millisecond),
		rep.payments, rep.markers, rep.exact)
	t.Logf("transactional: first-delivery statuses %v; deliveries per copy to settle %v; outcomes (outcome/inbox) %s", firstStatus, deliveries, outcomeSummary(outcomes))
	t.Logf("PaymentRecorded: one MessageId per trial; copies sent per trial %v: %d re-sends in %d trials (%.1f per trial beyond the first copy; %d of the %d copies that lost the commit sent it again, %.0f%%)",
		perTrial, resends, trials, float64(resends)/float64(trials), resends, losers, 100*float64(resends)/float64(max(losers, 1)))
	t.Logf("plain inbox: %d of %d trials ran the handler more than once (runs per trial %v)", twice, plainTrials, plainRuns)
}

func messageIDs(evs []event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.MessageID
	}
	return out
}
