package e2e

import (
	"bytes"
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

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// txnCrashSeed seeds TestTransactionalPaymentsSurviveKillsAndBatchFaults:
// the amounts, the re-sent payments, the kill points and the faults.
const txnCrashSeed = 20261201

// sbCutRate is the share of the handler's transfers of a NimBus message at
// which TestTransactionalPaymentsSurviveKillsAndBatchFaults cuts its
// Service Bus connection. A cut fails every send in flight on the
// connection, so the share of send attempts that fail on a cut connection
// is several times higher (the test prints it).
const sbCutRate = 0.03

// killPoint is where, around a delivery's transactional batch and the mark
// that its events were dispatched, the handler process is killed.
type killPoint int

const (
	// killBeforeBatch: the handler ran and sent its batch; the process
	// dies before the batch reaches Cosmos, which never sees it.
	killBeforeBatch killPoint = iota
	// killDuringBatch: Cosmos applied the batch; the process dies before
	// it has the answer.
	killDuringBatch
	// killBeforeSend: the process has the batch's answer and dies before
	// it sends the events and the Resolver response (and before its
	// answer to the host).
	killBeforeSend
	// killAfterSend: the events and the response were sent; the process
	// dies as its dispatched mark leaves for Cosmos, which never sees it.
	killAfterSend
	// killDuringMark: Cosmos applied the mark; the process dies before it
	// has the answer (and before its answer to the host).
	killDuringMark
	killPoints
)

func (k killPoint) String() string {
	return [...]string{"before the batch", "during the batch (applied, unanswered)", "after the batch, before the send",
		"after the send, before the mark", "during the mark (applied, unanswered)"}[k]
}

// batch is the kind of batch request the kill point intercepts.
func (k killPoint) batch() batchKind {
	if k >= killAfterSend {
		return markBatch
	}
	return commitBatch
}

// plannedKill is a kill at the first batch of the point's kind numbered
// at least batch (commits and marks counted together), at a point.
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
	marks   atomic.Int64 // of which dispatched marks

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
			kind := batchKindOf(r)
			if kind == markBatch {
				k.marks.Add(1)
			}
			point, ok := k.take(n, kind)
			if !ok {
				return true
			}
			if point == killBeforeBatch || point == killAfterSend {
				k.kill(point, n)
				return false
			}
			k.mu.Lock()
			k.armed[r] = point
			k.mu.Unlock()
			return true
		},
		BeforeRelay: func(r *http.Request, _ int) bool {
			for _, point := range []killPoint{killDuringBatch, killDuringMark} {
				if k.disarm(r, point) {
					k.kill(point, k.batches.Load())
					return false
				}
			}
			return true
		},
		AfterRelay: func(r *http.Request, _ int) {
			if k.disarm(r, killBeforeSend) {
				k.kill(killBeforeSend, k.batches.Load())
			}
		},
	}
}

// take pops the next planned kill when batch n, of kind, reached it and no
// kill is under way; the kill then counts as under way. A kill that came
// due waits for a batch of its kind.
func (k *batchKiller) take(n int64, kind batchKind) (killPoint, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.s == nil || k.busy || len(k.plan) == 0 || n < k.plan[0].batch || k.plan[0].point.batch() != kind {
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
// DB server behind the fault proxy, and which reaches Service Bus through
// the AMQP fault proxy. Each payment the handler applies commits its
// PaymentRecorded in its marker, sends it with the ResolutionResponse and
// marks the marker dispatched (a second batch). Meanwhile
//   - 10% of the transactional batch requests (commits and dispatched
//     marks) fail at the proxy: 503, 429, the connection dropped before
//     the batch reached Cosmos, or dropped after Cosmos applied it;
//   - the handler's Service Bus connection is cut at 3% of its transfers
//     of a NimBus message (events with their response, responses, parked
//     copies), before the broker got the message or after the broker
//     stored it and before the handler heard so; every send in flight on
//     the connection fails with it, 9–13% of the send attempts in all
//     (the SDK sends them again on a new connection, and a message stored
//     before the cut is then stored twice); and the broker refuses 10% of
//     the sends carrying a PaymentRecorded (not retried: the delivery
//     fails, outbox_send_failed, and its redelivery sends the stored
//     event);
//   - the handler is killed (SIGKILL) 10 times at seeded batches, twice at
//     each point: before the batch reaches Cosmos; after Cosmos applied it,
//     before the handler has the answer; after the answer, before the send
//     of the event and the response; after the send, as the dispatched mark
//     leaves (Cosmos never sees it); after Cosmos applied the mark, before
//     the handler has the answer. Each time it is started again on the same
//     port while the hosts abandon the invocations the kill cut.
//
// After the redeliveries every event is resolved (a ResolutionResponse or
// SkipResponse; several ResolutionResponses only as re-sends of the stored
// one). Only a payment whose every delivery failed after its commit may be
// dead-lettered, and only such a payment's marker may be left with its
// events undispatched (a delivery completes only once they are marked).
// With the faults off, the OutboxSweep timer function runs once
// (NimBus__Outbox__MinimumAge 2 s): it finishes every marker left
// undispatched (counted beforehand straight from Cosmos) and leaves none. The ledger is exact: every payment
// document present once, every balance the sum of its customer's payments,
// one inbox marker per MessageId, dispatched, and nothing else. Read from
// the endpoint's topic, every payment is announced with its id
// (PaymentRecorded-<PaymentId>) at least once, every copy the same message
// (body, properties, trace context), the first as NimBus writes it with the
// balance the payment left (its customer's payments up to it, in send
// order), and nothing else is announced (a re-sent payment applies nothing
// and publishes nothing). The test prints the re-send rate.
func TestTransactionalPaymentsSurviveKillsAndBatchFaults(t *testing.T) {
	longRun(t)
	const (
		customers   = 40
		perCustomer = 25
		kills       = 2 * int(killPoints)
	)
	rng := rand.New(rand.NewPCG(txnCrashSeed, 3))
	total := customers * perCustomer
	// About two batches per payment: its commit and its mark.
	killer := newBatchKiller(planKills(rng, kills, 40, int64(total)*16/10))
	container := ledgerContainerFor(t)
	settings := ledgerSettings(container)
	settings["NimBus__Outbox__MinimumAge"] = "00:00:02"
	s := startChaos(t, chaosConfig{
		sessions: 32,
		cosmosFaults: &testenv.FaultProxyOptions{
			Seed:  txnCrashSeed,
			Rate:  0.10,
			Kinds: []testenv.FaultKind{testenv.FaultUnavailable, testenv.FaultThrottle, testenv.FaultDrop, testenv.FaultDropAfterForward},
			Match: testenv.IsBatchRequest,
			Hooks: killer.hooks(),
		},
		sbFaults: &testenv.AMQPFaultOptions{Seed: txnCrashSeed, Rate: sbCutRate, Match: carriesNimBusMessage},
		sendFaults: &testenv.SendFaults{Rate: 0.10, Seed: txnCrashSeed, Entities: []string{endpointID},
			Match: []testenv.Rule{{Equals: map[string]string{"EventTypeId": "PaymentRecorded"}}}},
		topology: withRecordedTap,
		settings: settings,
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
	s.waitUntil(6*time.Minute, fmt.Sprintf("all %d events resolved", len(evs)), func() bool {
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

	// The faults end. Markers whose events no delivery marked dispatched
	// are the sweep's.
	s.proxy.SetEnabled(false)
	s.sbProxy.SetEnabled(false)
	s.sb.SetSendFaults(t, nil)
	c, err := s.cosmosClient(t).NewContainer(ledgerDatabase, container)
	if err != nil {
		t.Fatal(err)
	}
	// A delivery completes only once its events are marked dispatched:
	// only a message dead-lettered after its commit leaves its marker
	// pending.
	pending := pendingMarkers(t, c)
	dead := s.deadLetteredIDs(endpointID)
	for _, p := range pending {
		if !contains(dead, p.messageID) {
			t.Errorf("the marker of %s is undispatched although the message was not dead-lettered", p.messageID)
		}
	}
	for _, p := range pending {
		if wait := time.Until(p.created.Add(2*time.Second + 100*time.Millisecond)); wait > 0 {
			// The sweep takes markers older than its minimum age.
			time.Sleep(wait)
		}
	}
	sweep := runSweep(t, s.base(), s.current().Lines)
	if sweep.Outcome != "swept" || sweep.Found != len(pending) || sweep.Dispatched != len(pending) || sweep.Left != 0 {
		t.Errorf("the sweep reported %+v; %d markers were left undispatched (%v): want each found and dispatched, none left", sweep, len(pending), pending)
	}
	if still := pendingMarkers(t, c); len(still) > 0 {
		t.Errorf("after the sweep %d markers are still undispatched: %v", len(still), still)
	}

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
	// body. A re-sent payment (a new MessageId for a payment already
	// recorded) commits its marker with no event and no stored response: a
	// copy that finds that marker answers with a new ResolutionResponse,
	// whose timings are its own.
	again := 0
	for _, e := range evs {
		rs := resolutions[e.EventID]
		timed := strings.HasSuffix(e.MessageID, "-resent")
		for _, r := range rs[min(1, len(rs)):] {
			again++
			if !sameStoredResponse(rs[0], r, timed) {
				t.Errorf("%s: a second ResolutionResponse that is not the stored one sent again:\n%v\n%v", e.MessageID, rs[0].msg.ApplicationProperties, r.msg.ApplicationProperties)
				break
			}
		}
	}

	// The announcements, from the endpoint's topic: every payment's, each
	// copy the first again, with the balance it left.
	recorded := byMessageID(drainRecorded(t, s.sb.Client(t), 2*time.Second))
	announced := map[string]bool{}
	copiesPerPayment := map[int]int{} // copies → payments
	resends, copiesSeen := 0, 0
	for c, w := range wants {
		var balance int64
		for i, p := range w.payments {
			balance += p.cents
			id := "PaymentRecorded-" + p.paymentID
			announced[id] = true
			cs := recorded[id]
			copiesPerPayment[len(cs)]++
			if len(cs) == 0 {
				t.Errorf("payment %s was applied and never announced", p.paymentID)
				continue
			}
			copiesSeen += len(cs)
			resends += len(cs) - 1
			checkAnnounced(t, cs, perSession[c][i], p.paymentID, w.customer, p.cents, balance)
		}
	}
	for _, id := range sortedKeys(recorded) {
		if !announced[id] {
			t.Errorf("an announcement of no payment: %s (%d copies)", id, len(recorded[id]))
		}
	}

	// A message whose every delivery failed after its commit (its sends
	// cut or refused, its invocations cut by kills) is dead-lettered by
	// the broker; its payment was applied (checked above) and announced by
	// a later copy or by the sweep. Nothing else may be dead-lettered.
	for _, id := range dead {
		if !contains(messageIDs(evs), id) {
			t.Errorf("dead-lettered %q, which is none of the payments", id)
		}
	}
	for sub, n := range s.deadLettered() {
		if sub != endpointID {
			t.Errorf("%d messages dead-lettered on %s", n, sub)
		}
	}
	ran := checkKillsAndFaults(t, s, killer, kills, left, "PaymentRecorded")
	pc, sc := ran.cosmos, ran.sb

	outcomes := map[string]int{}
	for _, l := range s.lines() {
		if l.Function == "Subscriber" {
			outcomes[l.Outcome+"/"+l.Inbox]++
		}
	}
	cuts := len(s.transport.cuts())
	t.Logf("txn crash run: %d payments + %d re-sent under a new MessageId = %d events over %d customers (sessions) in %v (%.0f events/s)",
		total, resent, len(evs), customers, elapsed.Round(time.Millisecond), float64(len(evs))/elapsed.Seconds())
	t.Logf("kills: %d (%s), cutting %d invocations: %s", ran.done, ran.perPoint(), cuts, strings.Join(ran.log, "; "))
	t.Logf("batch requests: %d (%d dispatched marks), %d faults injected (%d × 503, %d × 429, %d dropped before Cosmos, %d dropped after Cosmos applied it)",
		killer.batches.Load()+pc.Injected(), killer.marks.Load(), pc.Injected(), pc.Unavailable, pc.Throttled, pc.Dropped, pc.DroppedAfterForward)
	t.Logf("Service Bus: %d transfers of a NimBus message by the handler over %d connections; %d of them (%.1f%%) failed on a cut connection: %d faulted before the broker got them, %d after it stored them (%d unsettled), %d in flight with them; %d sends of a PaymentRecorded refused by the broker",
		sc.Eligible, sc.Connections, sc.Affected(), 100*float64(sc.Affected())/float64(max(sc.Eligible, 1)), sc.CutBefore, sc.CutAfter, sc.CutAfterUnsettled, sc.InFlightCut, ran.refused)
	t.Logf("dead-lettered after their commit: %d %v", len(dead), dead)
	t.Logf("OutboxSweep at the end: %d markers left undispatched by the deliveries; the sweep %+v", len(pending), sweep)
	t.Logf("PaymentRecorded: %d payments announced, %d copies on the topic: %d re-sends, %.1f%% of the payments (payments by copies: %v)",
		len(announced), copiesSeen, resends, 100*float64(resends)/float64(total), copiesPerPayment)
	t.Logf("ledger: %d partitions, %d payment documents, %d markers, %d exact balances; Resolver: ResolutionResponses for %d events (%d more sent again from an outbox), %d SkipResponses",
		rep.partitions, rep.payments, rep.markers, rep.exact, len(resolutions), again, skips)
	t.Logf("Subscriber outcomes (outcome/inbox): %s", outcomeSummary(outcomes))
	t.Logf("mini hosts: Subscriber %+v; collector: %s", s.host.Stats(), s.resolver.problems())
}

// carriesNimBusMessage matches the transfers that carry a NimBus message
// (every message the endpoint sends has the MessageType property), not the
// SDK's authorization requests.
func carriesNimBusMessage(frameBody []byte) bool {
	return bytes.Contains(frameBody, []byte("MessageType"))
}

// pendingMarker is a marker whose events are not dispatched.
type pendingMarker struct {
	messageID string
	created   time.Time
}

func (p pendingMarker) String() string { return p.messageID }

// pendingMarkers queries the ledger straight from Cosmos for the markers
// holding events not yet dispatched.
func pendingMarkers(tb testing.TB, c *azcosmos.ContainerClient) []pendingMarker {
	tb.Helper()
	type row struct {
		MessageID string `json:"messageId"`
		Created   string `json:"createdAtUtc"`
	}
	var out []pendingMarker
	for _, m := range queryAll[row](tb, c, azcosmos.NewPartitionKey(),
		"SELECT c.messageId, c.createdAtUtc FROM c WHERE c.type = @type AND IS_DEFINED(c.outbox) AND IS_NULL(c.dispatchedAtUtc)",
		azcosmos.QueryParameter{Name: "@type", Value: markerType}) {
		at, err := time.Parse(time.RFC3339Nano, m.Created)
		if err != nil {
			tb.Fatalf("marker of %s: createdAtUtc %q: %v", m.MessageID, m.Created, err)
		}
		out = append(out, pendingMarker{m.MessageID, at})
	}
	return out
}

// sameStoredResponse reports whether b is a re-send of the response a:
// the same session, correlation, body and properties but the trace context
// each send adds; with timed, also but the timings (ProcessingTimeMs,
// QueueTimeMs) of a response built again rather than stored.
func sameStoredResponse(a, b received, timed bool) bool {
	if deref(a.msg.SessionID) != deref(b.msg.SessionID) || a.correlationID() != b.correlationID() || string(a.msg.Body) != string(b.msg.Body) {
		return false
	}
	strip := func(p map[string]any) map[string]any {
		out := map[string]any{}
		for k, v := range p {
			if k != "traceparent" && k != "tracestate" && (!timed || k != "ProcessingTimeMs" && k != "QueueTimeMs") {
				out[k] = v
			}
		}
		return out
	}
	return reflect.DeepEqual(strip(a.msg.ApplicationProperties), strip(b.msg.ApplicationProperties))
}
