package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// frontDoorChaosSeed seeds TestFrontDoorOrdersSurviveKillsAndFaults: the
// orders, the kill points and the faults.
const frontDoorChaosSeed = 20261204

// doorOrder is one order of the front-door chaos run and how its client
// sends it.
type doorOrder struct {
	id, customer string
	amount       float64
	// key is the Idempotency-Key header ("": none, the key is the id).
	key string
	// corr is the X-Correlation-Id header ("": none, the app chooses).
	corr    string
	traceID string
	// again: once answered, the client sends the request once more (a
	// client that lost the first answer): 200 with the same body.
	again bool
	// reuse, when set, is another order the client then sends under this
	// order's key, in its partition: 409, never committed.
	reuse *doorOrder
	// invalid: the order's Amount is not above 0: 400, never committed.
	invalid bool
}

// effectiveKey is the order's idempotency key.
func (o *doorOrder) effectiveKey() string {
	if o.key != "" {
		return o.key
	}
	return o.id
}

func (o *doorOrder) amountJSON() string { return strconv.FormatFloat(o.amount, 'f', -1, 64) }

func (o *doorOrder) body() string {
	return fmt.Sprintf(`{"OrderId":%q,"CustomerId":%q,"Amount":%s}`, o.id, o.customer, o.amountJSON())
}

// headers are the request's headers; key is its Idempotency-Key ("":
// none).
func (o *doorOrder) headers(key string) map[string]string {
	h := map[string]string{"traceparent": "00-" + o.traceID + "-00f067aa0ba902b7-01"}
	if key != "" {
		h["Idempotency-Key"] = key
	}
	if o.corr != "" {
		h["X-Correlation-Id"] = o.corr
	}
	return h
}

// attempt is one attempt of a request: its status and answer, or the error
// that left it without one (a kill, a timeout, nobody listening).
type attempt struct {
	status int
	body   string
	err    error
}

func (a attempt) String() string {
	if a.err != nil {
		return "error: " + a.err.Error()
	}
	return fmt.Sprintf("%d %s", a.status, a.body)
}

// failed: the attempt got no answer or a 5xx, and the client sends the
// request again.
func (a attempt) failed() bool { return a.err != nil || a.status >= 500 }

// exchange is a request as its client sent it until it got a 2xx or a
// 4xx: every attempt in order.
type exchange struct {
	attempts []attempt
}

func (e exchange) final() attempt {
	if len(e.attempts) == 0 {
		return attempt{err: fmt.Errorf("never sent")}
	}
	return e.attempts[len(e.attempts)-1]
}

// lostAnswer: an attempt before the last failed (it may have committed
// and its answer was lost).
func (e exchange) lostAnswer() bool {
	for _, a := range e.attempts[:max(len(e.attempts)-1, 0)] {
		if a.failed() {
			return true
		}
	}
	return false
}

func (e exchange) String() string {
	parts := make([]string, len(e.attempts))
	for i, a := range e.attempts {
		parts[i] = a.String()
	}
	return strings.Join(parts, " | ")
}

// doorClient sends requests to the handler, each until it gets a 2xx or a
// 4xx: a connection error, a 5xx or a timeout is sent again, the same
// body and headers, after a short pause.
type doorClient struct {
	client *http.Client
	base   string
	// perTry bounds one attempt (the front door bounds each of its calls
	// at 30 s).
	perTry time.Duration
}

func (c *doorClient) send(ctx context.Context, body string, headers map[string]string) exchange {
	var ex exchange
	for n := 0; ctx.Err() == nil; n++ {
		actx, cancel := context.WithTimeout(ctx, c.perTry)
		st, b, err := postOrder(actx, c.client, c.base, body, headers)
		cancel()
		a := attempt{status: st, body: b, err: err}
		ex.attempts = append(ex.attempts, a)
		if !a.failed() {
			return ex
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(10*time.Millisecond<<min(n, 5), 300*time.Millisecond)):
		}
	}
	return ex
}

// doorTally gives the batch killer the front door's batches only (their
// record's id starts "request-"), among the requests on the orders
// container's documents that the Cosmos fault proxy may fault.
type doorTally struct {
	docsPath string
	killer   *batchKiller

	mu      sync.Mutex
	batches int // front-door batches the proxy forwarded to the hooks
}

func newDoorTally(database, container string, killer *batchKiller) *doorTally {
	return &doorTally{docsPath: "/dbs/" + database + "/colls/" + container + "/docs", killer: killer}
}

// frontDoorBatch reads r's body (and puts it back) and reports whether r
// is a transactional batch that creates or patches a front door's record.
func frontDoorBatch(r *http.Request) bool {
	if !testenv.IsBatchRequest(r) {
		return false
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(b))
	var ops []struct {
		ID           string `json:"id"`
		ResourceBody struct {
			ID string `json:"id"`
		} `json:"resourceBody"`
	}
	if json.Unmarshal(b, &ops) != nil {
		return false
	}
	for _, op := range ops {
		if strings.HasPrefix(op.ResourceBody.ID, "request-") || strings.HasPrefix(op.ID, "request-") {
			return true
		}
	}
	return false
}

// match is the fault proxy's Match: the orders container's document
// requests (the front door's batches, reads of its records).
func (d *doorTally) match(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, d.docsPath) }

// hooks are the proxy's hooks: the killer's, for front-door batches only.
func (d *doorTally) hooks() *testenv.ForwardHooks {
	k := d.killer.hooks()
	return &testenv.ForwardHooks{
		BeforeForward: func(r *http.Request) bool {
			if !frontDoorBatch(r) {
				return true
			}
			d.mu.Lock()
			d.batches++
			d.mu.Unlock()
			return k.BeforeForward(r)
		},
		BeforeRelay: k.BeforeRelay,
		AfterRelay:  k.AfterRelay,
	}
}

// queryAll runs query in partition pk of c (azcosmos.NewPartitionKey():
// across the partitions) with params and decodes every item.
func queryAll[T any](tb testing.TB, c *azcosmos.ContainerClient, pk azcosmos.PartitionKey, query string, params ...azcosmos.QueryParameter) []T {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pager := c.NewQueryItemsPager(query, pk, &azcosmos.QueryOptions{QueryParameters: params})
	var out []T
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			tb.Fatalf("querying %q: %v", query, err)
		}
		for _, raw := range page.Items {
			var v T
			if err := json.Unmarshal(raw, &v); err != nil {
				tb.Fatal(err)
			}
			out = append(out, v)
		}
	}
	return out
}

// chaosFaults is what a chaos run's kills and faults did.
type chaosFaults struct {
	kills  [killPoints]int // kills per point
	done   int             // kills in all
	log    []string        // the kills, in order
	cosmos testenv.FaultCounts
	sb     testenv.AMQPFaultCounts
	// refused are the sends the broker refused.
	refused int
}

// perPoint lists the kills per point.
func (f chaosFaults) perPoint() string {
	parts := make([]string, killPoints)
	for p := range killPoints {
		parts[p] = fmt.Sprintf("%d %s", f.kills[p], p)
	}
	return strings.Join(parts, ", ")
}

// checkKillsAndFaults asserts that a chaos run reached what it planned:
// the planned kills all done (none left when the run ended) and each
// without an error, every kind of Cosmos fault injected (503, 429, dropped
// before and after forwarding), and on Service Bus connections cut before
// and after the broker had a transfer, sends in flight cut with them, and
// sends of eventType refused. It returns the counts.
func checkKillsAndFaults(t *testing.T, s *chaosStack, killer *batchKiller, planned, left int, eventType string) chaosFaults {
	t.Helper()
	killer.mu.Lock()
	f := chaosFaults{kills: killer.kills, log: killer.log}
	errs := killer.errs
	killer.mu.Unlock()
	for _, err := range errs {
		t.Error(err)
	}
	for _, n := range f.kills {
		f.done += n
	}
	if f.done != planned || left != 0 {
		t.Errorf("%d kills done (%v), %d planned ones left: the run ended before every kill point", f.done, f.kills, left)
	}
	f.cosmos = s.proxy.Counts()
	if pc := f.cosmos; pc.Unavailable == 0 || pc.Throttled == 0 || pc.Dropped == 0 || pc.DroppedAfterForward == 0 {
		t.Errorf("not every Cosmos fault kind was injected: %+v", pc)
	}
	f.sb, f.refused = s.sbProxy.Counts(), s.sb.InjectedSendFaults()[eventType]
	if sc := f.sb; sc.CutBefore == 0 || sc.CutAfter == 0 || sc.InFlightCut == 0 || f.refused == 0 {
		t.Errorf("not every Service Bus fault kind was injected: %+v, %d sends refused", sc, f.refused)
	}
	return f
}

// TestFrontDoorOrdersSurviveKillsAndFaults posts 1,000 orders (40
// customers, seeded amounts; a third with an Idempotency-Key header, the
// others keyed by their OrderId; half with an X-Correlation-Id) to the real
// binary's POST /api/orders from 16 concurrent clients. Each client sends
// its request again, the same body and headers, after a connection error,
// a 5xx or a timeout, until it gets a 2xx or a 4xx. Every tenth order is
// sent once more after its answer (200 expected), and 20 orders are
// followed by another order under their key (409 expected) and 20 orders
// are invalid (Amount not above 0: 400 expected): those 40 are never
// committed. The orders and the records live in the local Cosmos DB server
// behind the fault proxy, and the handler reaches Service Bus through the
// AMQP fault proxy. Meanwhile
//   - 10% of the requests on the orders container's documents (the front
//     door's commit batches and dispatched marks, the reads of a retried
//     request's record) fail at the proxy: 503, 429, the connection dropped
//     before the request reached Cosmos, or dropped after Cosmos applied it;
//   - the handler's Service Bus connection is cut at 3% of its transfers of
//     an OrderPlaced, and the broker refuses 10% of the OrderPlaced sends;
//   - the handler is killed (SIGKILL) 10 times at seeded front-door batches
//     (told from other batches by the record's id, "request-…"), twice at
//     each point: before the commit batch reaches Cosmos; after Cosmos
//     applied it, before the handler has the answer; after the answer,
//     before the send; after the send, as the dispatched mark leaves
//     (Cosmos never sees it); after Cosmos applied the mark, before the
//     handler has the answer. It is started again on the same port each
//     time; requests in flight in the killed process are cut.
//
// With the faults off, the OutboxSweep timer function runs until no record
// is left undispatched. Then: every valid order's document is in Cosmos
// exactly once with its fields, its record (one per key) in its customer's
// partition and dispatched, and nothing else (no document or record of an
// order never committed). Read from the endpoint's topic, every order is
// announced under the one MessageId OrderPlaced-<OrderId>, every copy the
// first again (copyDiff), the first with NimBus's Publish wire in the
// request's trace, its session the OrderId and its correlation the header
// (or one the app chose, the same on every copy); nothing is announced for
// an order never committed. Every valid order's final answer is 201 or 200
// with {"orderId","messageId"}; a sent-again request's is 200 with the same
// body; a reused key's 409; an invalid order's 400. As for 201s: a
// client stops at its first 2xx, so no key can see two from its first
// request, and the request sent again must be answered 200; what is
// asserted besides is that a key whose final answer is 200 lost its 201
// to an earlier attempt that got no answer or a 5xx (a kill, a fault, a
// timeout: that attempt may have committed). Nothing else may answer a
// single request 200: the Cosmos SDK does not send a write again once it
// may have reached the service, so a batch is committed by the attempt
// that sent it, and that attempt answers 201 unless it dies. The test
// prints the kills per stage, the faults, the attempts, the re-send rate
// and the duration.
func TestFrontDoorOrdersSurviveKillsAndFaults(t *testing.T) {
	longRun(t)
	const (
		total     = 1000
		customers = 40
		inFlight  = 16
		reused    = 20
		invalid   = 20
		kills     = 2 * int(killPoints)
	)
	rng := rand.New(rand.NewPCG(frontDoorChaosSeed, 5))
	// About two front-door batches per order: its commit and its mark.
	killer := newBatchKiller(planKills(rng, kills, 40, int64(total)*15/10))
	container := "orders-" + testenv.UniqueDatabase(t)
	tally := newDoorTally(ordersDatabase, container, killer)
	settings := ordersSettings(container)
	settings["NimBus__Outbox__MinimumAge"] = "00:00:02"
	s := startChaos(t, chaosConfig{
		cosmosFaults: &testenv.FaultProxyOptions{
			Seed:  frontDoorChaosSeed,
			Rate:  0.10,
			Kinds: []testenv.FaultKind{testenv.FaultUnavailable, testenv.FaultThrottle, testenv.FaultDrop, testenv.FaultDropAfterForward},
			Match: tally.match,
			Hooks: tally.hooks(),
		},
		sbFaults: &testenv.AMQPFaultOptions{Seed: frontDoorChaosSeed, Rate: sbCutRate, Match: carriesNimBusMessage},
		sendFaults: &testenv.SendFaults{Rate: 0.10, Seed: frontDoorChaosSeed, Entities: []string{endpointID},
			Match: []testenv.Rule{{Equals: map[string]string{"EventTypeId": "OrderPlaced"}}}},
		topology: withTap(placedSub, "OrderPlaced"),
		settings: settings,
	})
	killer.attach(s)
	t.Logf("seed %d", frontDoorChaosSeed)

	// The orders.
	orders := make([]*doorOrder, total)
	for i := range orders {
		o := &doorOrder{
			id: fmt.Sprintf("O-%04d", i), customer: fmt.Sprintf("C-%02d", rng.IntN(customers)),
			amount: float64(100+rng.IntN(100_000)) / 100, traceID: fmt.Sprintf("%032x", 0xf00d0000+i), again: i%10 == 3,
		}
		if i%3 == 0 {
			o.key = fmt.Sprintf("idem-%04d-%08x", i, rng.Uint32())
		}
		if i%2 == 0 {
			o.corr = "corr-" + o.id
		}
		orders[i] = o
	}
	for n, i := range rng.Perm(total)[:reused] {
		o := orders[i]
		o.reuse = &doorOrder{id: fmt.Sprintf("O-reused-%02d", n), customer: o.customer, amount: o.amount + 1, traceID: fmt.Sprintf("%032x", 0xbeef0000+n)}
	}
	jobs := append([]*doorOrder(nil), orders...)
	for n := range invalid {
		o := &doorOrder{id: fmt.Sprintf("O-invalid-%02d", n), customer: fmt.Sprintf("C-%02d", n%customers), amount: -float64(n), invalid: true,
			traceID: fmt.Sprintf("%032x", 0xbad00000+n)}
		jobs = append(jobs, o)
	}
	rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })

	// The clients. No keep-alive: an attempt cut by a kill is one attempt,
	// not one the HTTP client sends again by itself.
	dc := &doorClient{client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, base: s.base(), perTry: 45 * time.Second}
	type outcome struct{ first, again, reuse exchange }
	results := make(map[*doorOrder]*outcome, len(jobs))
	for _, o := range jobs {
		results[o] = &outcome{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	queue := make(chan *doorOrder)
	var wg sync.WaitGroup
	for range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for o := range queue {
				r := results[o]
				r.first = dc.send(ctx, o.body(), o.headers(o.key))
				if o.again && !r.first.final().failed() {
					r.again = dc.send(ctx, o.body(), o.headers(o.key))
				}
				if o.reuse != nil && !r.first.final().failed() {
					r.reuse = dc.send(ctx, o.reuse.body(), o.reuse.headers(o.effectiveKey()))
				}
			}
		}()
	}
	for _, o := range jobs {
		queue <- o
	}
	close(queue)
	wg.Wait()
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		t.Errorf("the clients did not get their answers within 8 minutes")
	}
	left := killer.finish()

	// The answers.
	requests, attempts, connErrs, fiveXX := 0, 0, 0, map[int]int{}
	created, replayed := 0, 0
	// A failure of one kind (its format) is shown 10 times at most.
	bad := map[string]int{}
	report := func(format string, args ...any) {
		if bad[format]++; bad[format] <= 10 {
			t.Errorf(format, args...)
		}
	}
	for _, o := range jobs {
		r := results[o]
		for _, ex := range []exchange{r.first, r.again, r.reuse} {
			if len(ex.attempts) > 0 {
				requests++
			}
			attempts += len(ex.attempts)
			for _, a := range ex.attempts {
				switch {
				case a.err != nil:
					connErrs++
				case a.status >= 500:
					fiveXX[a.status]++
				}
			}
		}
		f := r.first.final()
		switch {
		case o.invalid:
			if f.err != nil || f.status != http.StatusBadRequest {
				report("invalid order %s: answered %s, want 400", o.id, r.first)
			}
			continue
		case f.err != nil || (f.status != http.StatusCreated && f.status != http.StatusOK) || !isOrderAnswer(f.body, o.id):
			report("order %s: answered %s, want 201 or 200 with its id and message id", o.id, r.first)
			continue
		case f.status == http.StatusCreated:
			created++
		default:
			replayed++
			if !r.first.lostAnswer() {
				report("order %s: answered 200 with no attempt before that failed: its 201 went to nobody (%s)", o.id, r.first)
			}
		}
		if o.again {
			if a := r.again.final(); a.err != nil || a.status != http.StatusOK || a.body != f.body {
				report("order %s sent again after its answer %q: answered %s, want 200 with the same body", o.id, f.body, r.again)
			}
		}
		if o.reuse != nil {
			if a := r.reuse.final(); a.err != nil || a.status != http.StatusConflict {
				report("order %s under the key of %s: answered %s, want 409", o.reuse.id, o.id, r.reuse)
			}
		}
	}

	// The faults end; the sweep finishes the records no request did.
	s.proxy.SetEnabled(false)
	s.sbProxy.SetEnabled(false)
	s.sb.SetSendFaults(t, nil)
	c, err := s.cosmosClient(t).NewContainer(ordersDatabase, container)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]*doorOrder{}
	for _, o := range orders {
		keys[o.effectiveKey()] = o
	}
	pending := pendingMarkers(t, c)
	for _, p := range pending {
		if keys[p.messageID] == nil {
			t.Errorf("an undispatched record of key %q, which is no order's", p.messageID)
		}
	}
	var sweeps []sweepLine
	swept := 0
	for still := pending; len(still) > 0 && len(sweeps) < 3; still = pendingMarkers(t, c) {
		for _, p := range still {
			if wait := time.Until(p.created.Add(2*time.Second + 100*time.Millisecond)); wait > 0 {
				// The sweep takes records older than its minimum age.
				time.Sleep(wait)
			}
		}
		sw := runSweep(t, s.base(), s.current().Lines)
		sweeps = append(sweeps, sw)
		swept += sw.Dispatched
		if sw.Outcome != "swept" {
			t.Errorf("sweep %d reported %+v", len(sweeps), sw)
		}
	}
	if still := pendingMarkers(t, c); len(still) > 0 {
		t.Errorf("after %d sweeps %d records are still undispatched: %v", len(sweeps), len(still), still)
	}
	if swept != len(pending) {
		t.Errorf("the sweeps dispatched %d records; %d were left undispatched (%v)", swept, len(pending), sweeps)
	}

	// The documents and the records, straight from Cosmos.
	type orderRow struct {
		ID         string  `json:"id"`
		CustomerID string  `json:"customerId"`
		OrderID    string  `json:"orderId"`
		Amount     float64 `json:"amount"`
	}
	docs := map[string][]orderRow{}
	for _, d := range queryAll[orderRow](t, c, azcosmos.NewPartitionKey(), "SELECT c.id, c.customerId, c.orderId, c.amount FROM c WHERE STARTSWITH(c.id, 'order-')") {
		docs[d.ID] = append(docs[d.ID], d)
	}
	for _, o := range orders {
		want := orderRow{ID: "order-" + o.id, CustomerID: o.customer, OrderID: o.id, Amount: o.amount}
		if got := docs["order-"+o.id]; len(got) != 1 || got[0] != want {
			report("order %s: documents %+v, want one %+v", o.id, got, want)
		}
		delete(docs, "order-"+o.id)
	}
	for id, ds := range docs {
		report("a document of no committed order: %s %+v", id, ds)
	}
	type recordRow struct {
		MessageID  string  `json:"messageId"`
		CustomerID string  `json:"customerId"`
		Dispatched *string `json:"dispatchedAtUtc"`
	}
	records := map[string][]recordRow{}
	for _, r := range queryAll[recordRow](t, c, azcosmos.NewPartitionKey(), "SELECT c.messageId, c.customerId, c.dispatchedAtUtc FROM c WHERE STARTSWITH(c.id, 'request-')") {
		records[r.MessageID] = append(records[r.MessageID], r)
	}
	for key, o := range keys {
		rs := records[key]
		if len(rs) != 1 || rs[0].CustomerID != o.customer || rs[0].Dispatched == nil || *rs[0].Dispatched == "" {
			report("order %s: records of key %q %+v, want one in partition %s, dispatched", o.id, key, rs, o.customer)
		}
		delete(records, key)
	}
	for key, rs := range records {
		report("a record of no committed order's key %q: %+v", key, rs)
	}

	// The announcements, from the endpoint's topic.
	placed := byMessageID(drainTap(t, s.sb.Client(t), placedSub, 2*time.Second))
	resends, copiesSeen := 0, 0
	copiesPerOrder := map[int]int{} // copies → orders
	for _, o := range orders {
		id := "OrderPlaced-" + o.id
		cs := placed[id]
		delete(placed, id)
		copiesPerOrder[len(cs)]++
		if len(cs) == 0 {
			report("order %s was committed and never announced", o.id)
			continue
		}
		copiesSeen += len(cs)
		resends += len(cs) - 1
		corr := o.corr
		if corr == "" {
			if corr = deref(cs[0].CorrelationID); corr == "" {
				report("%s: no CorrelationId (the app chooses one when the request has none)", id)
			}
		}
		checkPublished(t, id, cs[0], orderPlacedWant(), o.traceID, id, o.id, corr,
			eventBody("OrderPlaced", fmt.Sprintf(`{"OrderId":%q,"CustomerId":%q,"Amount":%s}`, o.id, o.customer, o.amountJSON())))
		for i, cp := range cs[1:] {
			if d := copyDiff(cs[0], cp); d != "" {
				report("%s: copy %d is not the first copy again: %s", id, i+2, d)
			}
		}
	}
	for _, id := range sortedKeys(placed) {
		report("an announcement of no committed order: %s (%d copies)", id, len(placed[id]))
	}
	for _, format := range sortedKeys(bad) {
		if n := bad[format]; n > 10 {
			t.Errorf("%d failures %q in all, the first 10 shown", n, format)
		}
	}

	ran := checkKillsAndFaults(t, s, killer, kills, left, "OrderPlaced")
	pc, sc := ran.cosmos, ran.sb
	tally.mu.Lock()
	hooked := tally.batches
	tally.mu.Unlock()
	t.Logf("front-door chaos run: %d orders of %d customers + %d sent again + %d under a reused key + %d invalid, %d clients, in %v (%.0f orders/s)",
		total, customers, total/10, reused, invalid, inFlight, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds())
	t.Logf("kills: %d (%s): %s", ran.done, ran.perPoint(), strings.Join(ran.log, "; "))
	t.Logf("requests: %d attempts for %d requests (%.1f%% sent again): %d without an answer (cut, refused, timed out), 5xx %v",
		attempts, requests, 100*float64(attempts-requests)/float64(max(requests, 1)), connErrs, fiveXX)
	t.Logf("answers: %d orders answered 201, %d 200 after a failed attempt (its 201 lost)", created, replayed)
	t.Logf("Cosmos: %d requests on the orders' documents, %d front-door batches forwarded to the hooks (%d marks); %d faults injected (%d × 503, %d × 429, %d dropped before Cosmos, %d dropped after Cosmos applied it)",
		pc.Requests, hooked, killer.marks.Load(), pc.Injected(), pc.Unavailable, pc.Throttled, pc.Dropped, pc.DroppedAfterForward)
	t.Logf("Service Bus: %d transfers of an OrderPlaced over %d connections; %d (%.1f%%) failed on a cut connection: %d cut before the broker got them, %d after it stored them (%d unsettled), %d in flight with them; %d sends refused by the broker",
		sc.Eligible, sc.Connections, sc.Affected(), 100*float64(sc.Affected())/float64(max(sc.Eligible, 1)), sc.CutBefore, sc.CutAfter, sc.CutAfterUnsettled, sc.InFlightCut, ran.refused)
	t.Logf("OutboxSweep at the end: %d records left undispatched by the requests; sweeps %+v", len(pending), sweeps)
	t.Logf("OrderPlaced: %d copies of %d orders: %d re-sends, a re-send rate of %.3f (orders by copies: %v)",
		copiesSeen, total, resends, float64(resends)/float64(total), copiesPerOrder)
	if t.Failed() {
		for _, o := range jobs {
			if r := results[o]; len(r.first.attempts) > 1 {
				t.Logf("  %s (key %q): %s", o.id, o.effectiveKey(), r.first)
			}
		}
	}
}
