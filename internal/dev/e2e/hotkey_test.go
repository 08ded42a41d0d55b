package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/dev/minihost"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// TestHotCustomerPaymentsAllComplete delivers 64 different
// PaymentReceived messages of one customer to the handler binary at once
// (direct invocations, each in a session of its own, all released
// together), in 3 trials of a new customer each, with 20 ms of latency
// added to every Cosmos DB request by the fault proxy and the stack's paced
// redeliveries. The sample announces each payment with the balance it left,
// so it increments the balance under the ETag it read: of the batches that
// read one version of the balance, one commits and the others conflict
// (the first payments, which read "no balance", conflict on its creation).
// Each of those runs its handler again within its invocation, on fresh
// reads, as long as its re-runs last; the rest go back to the broker, whose
// redelivery runs them again. In the last trial the proxy holds the batches
// until all 64 have arrived, so every payment read "no balance". Every
// payment completes within the delivery limit (none comes near the
// dead-letter), the ledger is exact, and the batches the proxy saw are two
// committed batches per payment (the batch, then the mark that its event
// was dispatched) plus one conflicted batch per handler re-run the
// invocation lines report (txnReruns) and per delivery that ended in a
// conflict (txn_conflict).
func TestHotCustomerPaymentsAllComplete(t *testing.T) {
	longRun(t)
	const (
		payments      = 64
		trials        = 3
		maxDeliveries = 10
		latency       = 20 * time.Millisecond
	)
	// The batches' answers, by status: 200 committed, 207 one operation
	// failed (here a conflict).
	var committed, failed, other atomic.Int64
	// While held is set, batches wait until held of them have arrived.
	var held, arrived atomic.Int64
	var release chan struct{}
	container := ledgerContainerFor(t)
	s := startStack(t, stackConfig{
		faults: &testenv.FaultProxyOptions{
			Latency: latency,
			Match:   testenv.IsBatchRequest,
			Hooks: &testenv.ForwardHooks{BeforeForward: func(*http.Request) bool {
				n := held.Load()
				if n == 0 {
					return true
				}
				switch k := arrived.Add(1); {
				case k == n:
					close(release)
				case k < n:
					select {
					case <-release:
					case <-time.After(time.Minute):
					}
				}
				return true
			}, AfterRelay: func(_ *http.Request, status int) {
				switch status {
				case http.StatusOK:
					committed.Add(1)
				case http.StatusMultiStatus:
					failed.Add(1)
				default:
					other.Add(1)
				}
			}},
		},
		settings: ledgerSettings(container),
	})
	led := openLedger(t, s.cosmos, container)
	iv := concurrentInvoker(s.handler.base, payments)

	// Warm up connections, the container check and the ledger container
	// with a payment of another customer.
	warm := payment("PaymentReceived-hot-warm", "cust-hot-warm", "P-hot-warm", "cust-hot-warm", 1, "")
	if _, err := invokeUntilSettled(context.Background(), iv, warm, maxDeliveries); err != nil {
		t.Fatal(err)
	}
	wants := []ledgerWant{{customer: "cust-hot-warm", payments: []paymentWant{{"P-hot-warm", 1, []string{warm.MessageID}}}}}
	// The proxy counts a batch once its answer has reached the handler,
	// which may already have answered the invocation: wait for the
	// warm-up's batch and mark to be counted before counting anew.
	settle(func() bool { return committed.Load() >= 2 })
	committed.Store(0)
	failed.Store(0)
	other.Store(0)

	firstStatus := map[int]int{}
	deliveries := map[int]int{} // deliveries a payment took to complete
	var trialTimes []time.Duration
	hot := map[string]bool{}
	for trial := range trials {
		cust := fmt.Sprintf("cust-hot-%d", trial)
		want := ledgerWant{customer: cust}
		evs := make([]event, payments)
		for i := range evs {
			mid := fmt.Sprintf("PaymentReceived-hot-%d-%02d", trial, i)
			pid := fmt.Sprintf("P-hot-%d-%02d", trial, i)
			evs[i] = payment(mid, mid, pid, cust, 100+i, "")
			want.payments = append(want.payments, paymentWant{pid, int64(100 + i), []string{mid}})
			hot[mid] = true
		}
		wants = append(wants, want)
		if trial == trials-1 {
			release = make(chan struct{})
			held.Store(payments)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		runs := make([][]*minihost.Result, payments)
		errs := make([]error, payments)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range evs {
			wg.Go(func() {
				<-start
				runs[i], errs[i] = invokeUntilSettled(ctx, iv, evs[i], maxDeliveries)
			})
		}
		t0 := time.Now()
		close(start)
		wg.Wait()
		trialTimes = append(trialTimes, time.Since(t0))
		cancel()
		held.Store(0)
		for i, err := range errs {
			if err != nil {
				t.Errorf("trial %d: %v (it would be dead-lettered)", trial, err)
			}
			if len(runs[i]) > 0 {
				firstStatus[runs[i][0].StatusCode]++
			}
			deliveries[len(runs[i])]++
		}
	}

	rep := checkLedger(t, led, wants)

	// The invocation lines: one per payment, completed, with its re-runs.
	outcomes := map[string]int{}
	reruns, maxReruns, lines, conflicted := 0, 0, 0, 0
	perPayment := map[int]int{}
	trialReruns := make([]int, trials)
	for _, l := range s.handler.invocations() {
		if !hot[l.MessageID] {
			continue
		}
		lines++
		outcomes[l.Outcome]++
		reruns += l.TxnReruns
		var trial int
		if _, err := fmt.Sscanf(l.MessageID, "PaymentReceived-hot-%d-", &trial); err == nil && trial < trials {
			trialReruns[trial] += l.TxnReruns
		}
		maxReruns = max(maxReruns, l.TxnReruns)
		perPayment[l.TxnReruns]++
		switch l.Outcome {
		case "completed":
		case "txn_conflict":
			// Its re-runs spent, the delivery went back to the broker.
			conflicted++
		default:
			t.Errorf("%s: outcome %s on delivery %d", l.MessageID, l.Outcome, l.DeliveryCount)
		}
	}
	if completed := outcomes["completed"]; completed != payments*trials || lines != completed+conflicted {
		t.Errorf("%d invocation lines, %d completed, for %d payments", lines, completed, payments*trials)
	}
	if got := trialReruns[trials-1]; got < payments-1 {
		t.Errorf("the trial whose payments all read no balance: %d re-runs, want at least %d (every creation but one conflicts)", got, payments-1)
	}
	settle(func() bool {
		return committed.Load() >= int64(2*payments*trials) && failed.Load() >= int64(reruns+conflicted)
	})
	if committed.Load() != int64(2*payments*trials) || failed.Load() != int64(reruns+conflicted) || other.Load() != 0 {
		t.Errorf("batches: %d committed, %d conflicted, %d other; want %d committed (each payment's batch and its dispatched mark) and one conflicted batch per reported re-run or conflict (%d)",
			committed.Load(), failed.Load(), other.Load(), 2*payments*trials, reruns+conflicted)
	}

	sort.Slice(trialTimes, func(i, j int) bool { return trialTimes[i] < trialTimes[j] })
	t.Logf("hot key: %d trials × %d concurrent payments of one customer, %v added to every Cosmos request; trial times %v",
		trials, payments, latency, trialTimes)
	t.Logf("hot key: first-delivery statuses %v; deliveries per payment %v; outcomes %s; ledger %d payments, %d markers, %d exact balances",
		firstStatus, deliveries, outcomeSummary(outcomes), rep.payments, rep.markers, rep.exact)
	t.Logf("hot key: %d handler re-runs in all, by trial %v (the last with every batch held until all arrived); at most %d for one payment; payments by re-runs %v; batches %d committed, %d conflicted",
		reruns, trialReruns, maxReruns, perPayment, committed.Load(), failed.Load())
}

// settle waits, for at most 10 seconds, until cond holds: the fault proxy
// counts a batch after relaying its answer, so the last counts can come a
// moment after the invocations that caused them were answered.
func settle(cond func() bool) {
	deadline := time.Now().Add(10 * time.Second)
	for !cond() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}
