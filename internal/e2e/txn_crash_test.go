package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/testenv"
)

// txnCrashSeed seeds TestTransactionalPaymentsSurviveKillsAndBatchFaults:
// the amounts, the re-sent payments, the kill points and the faults.
const txnCrashSeed = 20261201

// killPoint is where, around one transactional batch, the handler process
// is killed.
type killPoint int

const (
	// killBeforeBatch: the handler ran and sent its batch; the process
	// dies before the batch reaches Cosmos, which never sees it.
	killBeforeBatch killPoint = iota
	// killDuringBatch: Cosmos applied the batch; the process dies before
	// it has the answer.
	killDuringBatch
	// killAfterBatch: the process has the batch's answer and dies before
	// its Resolver response and its answer to the host.
	killAfterBatch
	killPoints
)

func (k killPoint) String() string {
	return [...]string{"before the batch", "during the batch (applied, unanswered)", "after the batch, before the response"}[k]
}

// plannedKill is a kill at the first batch numbered at least batch, at a
// point.
type plannedKill struct {
	batch int64
	point killPoint
}

// batchKiller kills the handler (SIGKILL) at planned points of the batch
// requests that pass the fault proxy, and starts it again on the same port
// while the mini hosts keep delivering. One kill at a time: a planned kill
// that comes due while the handler restarts waits for the next batch.
type batchKiller struct {
	batches atomic.Int64 // batch requests seen

	mu      sync.Mutex
	s       *chaosStack
	plan    []plannedKill // by batch, ascending
	armed   map[*http.Request]killPoint
	busy    bool
	kills   [killPoints]int
	log     []string
	errs    []error
	restart sync.WaitGroup
}

func newBatchKiller(plan []plannedKill) *batchKiller {
	return &batchKiller{plan: plan, armed: map[*http.Request]killPoint{}}
}

// attach gives the killer the stack whose handler it kills.
func (k *batchKiller) attach(s *chaosStack) {
	k.mu.Lock()
	k.s = s
	k.mu.Unlock()
}

// hooks are the fault proxy's hooks for batch requests.
func (k *batchKiller) hooks() *testenv.ForwardHooks {
	return &testenv.ForwardHooks{
		BeforeForward: func(r *http.Request) bool {
			n := k.batches.Add(1)
			point, ok := k.take(n)
			if !ok {
				return true
			}
			if point == killBeforeBatch {
				k.kill(point, n)
				return false
			}
			k.mu.Lock()
			k.armed[r] = point
			k.mu.Unlock()
			return true
		},
		BeforeRelay: func(r *http.Request, _ int) bool {
			if k.disarm(r, killDuringBatch) {
				k.kill(killDuringBatch, k.batches.Load())
				return false
			}
			return true
		},
		AfterRelay: func(r *http.Request, _ int) {
			if k.disarm(r, killAfterBatch) {
				k.kill(killAfterBatch, k.batches.Load())
			}
		},
	}
}

// take pops the next planned kill when batch n reached it and no kill is
// under way; the kill then counts as under way.
func (k *batchKiller) take(n int64) (killPoint, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.s == nil || k.busy || len(k.plan) == 0 || n < k.plan[0].batch {
		return 0, false
	}
	p := k.plan[0]
	k.plan = k.plan[1:]
	k.busy = true
	// The restart is under way from here: finish waits for it.
	k.restart.Add(1)
	return p.point, true
}

// disarm reports whether r was armed for point, forgetting it.
func (k *batchKiller) disarm(r *http.Request, point killPoint) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.armed[r]
	if !ok || p != point {
		return false
	}
	delete(k.armed, r)
	return true
}

// kill kills the running handler now and starts the next one in the
// background.
func (k *batchKiller) kill(point killPoint, batch int64) {
	k.mu.Lock()
	s := k.s
	k.mu.Unlock()
	p := s.current()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := p.Kill(ctx)
	cancel()
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		k.errs = append(k.errs, fmt.Errorf("kill %s at batch %d: %w", point, batch, err))
	}
	k.kills[point]++
	k.log = append(k.log, fmt.Sprintf("batch %d: %s (after %d log lines of that process)", batch, point, len(p.Lines())))
	go func() {
		defer k.restart.Done()
		err := s.launch()
		k.mu.Lock()
		defer k.mu.Unlock()
		if err != nil {
			k.errs = append(k.errs, fmt.Errorf("restart after the kill at batch %d: %w", batch, err))
		}
		k.busy = false
	}()
}

// finish drops the kills not yet taken, waits for the restart of those
// taken and returns the number dropped.
func (k *batchKiller) finish() int {
	k.mu.Lock()
	left := len(k.plan)
	k.plan = nil
	k.mu.Unlock()
	k.restart.Wait()
	return left
}

// planKills spreads n kills over batches [from, to), cycling through the
// kill points, at seeded positions.
func planKills(rng *rand.Rand, n int, from, to int64) []plannedKill {
	plan := make([]plannedKill, n)
	for i := range plan {
		plan[i] = plannedKill{batch: from + rng.Int64N(to-from), point: killPoint(i % int(killPoints))}
	}
	sort.Slice(plan, func(i, j int) bool { return plan[i].batch < plan[j].batch })
	return plan
}

// TestTransactionalPaymentsSurviveKillsAndBatchFaults streams 1,000
// PaymentReceived events (40 customers, a session each, 25 payments per
// customer, seeded amounts) plus a re-send of 2% of them under a new
// MessageId (a producer's retry: the payment must not be applied again)
// through the whole stack: the mini hosts feed the real handler binary,
// whose ledger, inbox markers and session state live in the local Cosmos
// DB server behind the fault proxy. Meanwhile
//   - 10% of the transactional batch requests fail at the proxy: 503, 429,
//     the connection dropped before the batch reached Cosmos, or dropped
//     after Cosmos applied it;
//   - the handler is killed (SIGKILL) 9 times at seeded batches, three at
//     each point: before the batch reaches Cosmos, after Cosmos applied it
//     but before the handler has the answer, and after the answer, before
//     the Resolver response; each time it is started again on the same
//     port while the hosts abandon the invocations the kill cut.
//
// After the redeliveries every event is resolved (a ResolutionResponse or
// SkipResponse, at most one ResolutionResponse), nothing is dead-lettered,
// and the ledger is exact: every payment document present once, every
// balance the sum of its customer's payments, one inbox marker per
// MessageId and nothing else.
func TestTransactionalPaymentsSurviveKillsAndBatchFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("a 1,000-payment crash and fault run; skipped with -short")
	}
	const (
		customers   = 40
		perCustomer = 25
		kills       = 9
	)
	rng := rand.New(rand.NewPCG(txnCrashSeed, 3))
	total := customers * perCustomer
	killer := newBatchKiller(planKills(rng, kills, 40, int64(total)*8/10))
	container := ledgerContainerFor(t)
	s := startChaos(t, chaosConfig{
		sessions: 32,
		cosmosFaults: &testenv.FaultProxyOptions{
			Seed:  txnCrashSeed,
			Rate:  0.10,
			Kinds: []testenv.FaultKind{testenv.FaultUnavailable, testenv.FaultThrottle, testenv.FaultDrop, testenv.FaultDropAfterForward},
			Match: testenv.IsBatchRequest,
			Hooks: killer.hooks(),
		},
		settings: ledgerSettings(container),
	})
	killer.attach(s)
	t.Logf("seed %d", txnCrashSeed)

	// The stream: each customer's payments in order in its session; 2% of
	// the payments are sent again later under a new MessageId.
	wants := make([]ledgerWant, customers)
	perSession := make([][]event, customers)
	for c := range customers {
		cust := fmt.Sprintf("cust-%02d", c)
		wants[c].customer = cust
		for i := range perCustomer {
			pid := fmt.Sprintf("P-%02d-%03d", c, i)
			cents := 100 + rng.IntN(100_000)
			e := payment(fmt.Sprintf("PaymentReceived-%02d-%03d", c, i), cust, pid, cust, cents, "")
			perSession[c] = append(perSession[c], e)
			wants[c].payments = append(wants[c].payments, paymentWant{pid, int64(cents), []string{e.MessageID}})
		}
	}
	resent := 0
	for _, idx := range rng.Perm(total)[:total/50] {
		c, i := idx/perCustomer, idx%perCustomer
		p := &wants[c].payments[i]
		orig := perSession[c][i]
		again := payment(orig.MessageID+"-resent", orig.SessionID, p.paymentID, wants[c].customer, int(p.cents), "")
		p.messageIDs = append(p.messageIDs, again.MessageID)
		perSession[c] = append(perSession[c], again)
		resent++
	}
	var evs []event
	for _, es := range perSession {
		evs = append(evs, es...)
	}

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, customers)
	for _, es := range perSession {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, e := range es {
				if err := s.sendRetrying(e.message()); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	res := newResolvedIndex(s.resolver)
	s.waitUntil(4*time.Minute, fmt.Sprintf("all %d events resolved", len(evs)), func() bool {
		for _, e := range evs {
			if !res.has(e.EventID) {
				return false
			}
		}
		return true
	})
	elapsed := time.Since(start)
	left := killer.finish()
	s.quiet(2 * time.Minute)

	led := openLedger(t, s.cosmos, container)
	rep := checkLedger(t, led, wants)
	resolutions, skips := map[string][]received{}, 0
	for _, r := range s.resolver.responses() {
		switch r.messageType() {
		case "ResolutionResponse":
			resolutions[r.eventID()] = append(resolutions[r.eventID()], r)
		case "SkipResponse":
			skips++
		}
	}
	// A payment's PaymentRecorded and ResolutionResponse are stored in its
	// marker with the batch: every copy that finds them undispatched (after
	// a kill or a fault between the commit and the mark) sends them again.
	// So an event may have several ResolutionResponses, but only the stored
	// one, again: the same properties (the send's trace context aside) and
	// body.
	again := 0
	for _, e := range evs {
		rs := resolutions[e.EventID]
		for _, r := range rs[min(1, len(rs)):] {
			again++
			if !sameStoredResponse(rs[0], r) {
				t.Errorf("%s: a second ResolutionResponse that is not the stored one sent again:\n%v\n%v", e.MessageID, rs[0].msg.ApplicationProperties, r.msg.ApplicationProperties)
				break
			}
		}
	}
	if dl := s.deadLettered(); len(dl) > 0 {
		t.Errorf("dead-lettered: %v", dl)
	}
	killer.mu.Lock()
	kinds, killLog, killErrs := killer.kills, killer.log, killer.errs
	killer.mu.Unlock()
	for _, err := range killErrs {
		t.Error(err)
	}
	done := 0
	for _, n := range kinds {
		done += n
	}
	if done != kills || left != 0 {
		t.Errorf("%d kills done (%v), %d planned ones left: the run ended before every kill point", done, kinds, left)
	}
	pc := s.proxy.Counts()
	if pc.Unavailable == 0 || pc.Throttled == 0 || pc.Dropped == 0 || pc.DroppedAfterForward == 0 {
		t.Errorf("not every fault kind was injected: %+v", pc)
	}

	outcomes := map[string]int{}
	for _, l := range s.lines() {
		if l.Function == "Subscriber" {
			outcomes[l.Outcome+"/"+l.Inbox]++
		}
	}
	cuts := len(s.transport.cuts())
	t.Logf("txn crash run: %d payments + %d re-sent under a new MessageId = %d events over %d customers (sessions) in %v (%.0f events/s)",
		total, resent, len(evs), customers, elapsed.Round(time.Millisecond), float64(len(evs))/elapsed.Seconds())
	t.Logf("kills: %d (%d %s, %d %s, %d %s), cutting %d invocations: %s", done,
		kinds[killBeforeBatch], killBeforeBatch, kinds[killDuringBatch], killDuringBatch, kinds[killAfterBatch], killAfterBatch, cuts, strings.Join(killLog, "; "))
	t.Logf("batch requests: %d, %d faults injected (%d × 503, %d × 429, %d dropped before Cosmos, %d dropped after Cosmos applied it)",
		killer.batches.Load()+pc.Injected(), pc.Injected(), pc.Unavailable, pc.Throttled, pc.Dropped, pc.DroppedAfterForward)
	t.Logf("ledger: %d partitions, %d payment documents, %d markers, %d exact balances; Resolver: ResolutionResponses for %d events (%d more sent again from an outbox), %d SkipResponses",
		rep.partitions, rep.payments, rep.markers, rep.exact, len(resolutions), again, skips)
	t.Logf("Subscriber outcomes (outcome/inbox): %s", outcomeSummary(outcomes))
	t.Logf("mini hosts: Subscriber %+v; collector: %s", s.host.Stats(), s.resolver.problems())
}

// sameStoredResponse reports whether b is a re-send of the response a:
// the same session, correlation, body and properties but the trace context
// each send adds.
func sameStoredResponse(a, b received) bool {
	if deref(a.msg.SessionID) != deref(b.msg.SessionID) || a.correlationID() != b.correlationID() || string(a.msg.Body) != string(b.msg.Body) {
		return false
	}
	strip := func(p map[string]any) map[string]any {
		out := map[string]any{}
		for k, v := range p {
			if k != "traceparent" && k != "tracestate" {
				out[k] = v
			}
		}
		return out
	}
	return reflect.DeepEqual(strip(a.msg.ApplicationProperties), strip(b.msg.ApplicationProperties))
}
