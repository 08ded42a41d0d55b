package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv/handlerproc"
	"github.com/nimbus-go/functions-subscriber/internal/devhost"
)

// The sample's ledger (NimBus__Sample__Ledger__DatabaseId and ContainerId
// defaults); with the in-memory inbox it is in memory, and the handler
// serves its documents at /_nimbus/txn.
const (
	ledgerDatabase  = "Billing"
	ledgerContainer = "ledger"
)

// payment is the sample's PaymentReceived event JSON.
func payment(paymentID, customer string, cents int, extra string) string {
	return fmt.Sprintf(`{"PaymentId":%q,"CustomerId":%q,"AmountCents":%d%s}`, paymentID, customer, cents, extra)
}

// exactlyOnce shows the transactional PaymentReceived handler: its
// effects and its inbox marker commit in one batch, so a redelivery, a
// producer's re-send, concurrent copies and a failure before the commit
// each leave the balance exact.
func (s *script) exactlyOnce(d *proc) error {
	s.section("Exactly-once effects: the transactional PaymentReceived handler (ledger in memory; session customer-C-12)")
	s.println("The handler reads customer C-12's balance and queues the payment document and an increment of the balance; when it")
	s.println("succeeds, the pipeline commits them with the delivery's inbox marker as ONE transactional batch in partition")
	s.println("C-12 of the ledger container: all or nothing. A copy whose marker already exists commits nothing. The event the")
	s.println("handler publishes (PaymentRecorded, with the balance the payment left) is stored in the marker by the same batch.")
	const sid, cust = "customer-C-12", "C-12"
	pay := func(id, paymentID string, cents, delivery int, extra string) ev {
		return ev{id: id, session: sid, eventType: "PaymentReceived", order: payment(paymentID, cust, cents, extra), delivery: delivery}
	}
	recorded := expect{status: 200, outcome: "completed", sends: []string{"EventRequest→PaymentRecorded", "ResolutionResponse"}}
	completed := expect{status: 200, outcome: "completed", sends: []string{"ResolutionResponse"}}
	duplicate := expect{status: 200, outcome: "duplicate", sends: []string{"SkipResponse"}}

	d.event("A payment of 25.00: the payment, the balance, the marker and the PaymentRecorded event the handler publishes commit in one batch; then the event and the ResolutionResponse go out in one send, and the marker is marked dispatched",
		pay("PaymentReceived-0001", "PAY-1", 2500, 1, ""), recorded)
	d.balance(cust, 2500, 1)
	d.event("The same message redelivered (the host lost the lock before completing it): the marker is found before the handler runs, a duplicate; its event is not sent again",
		pay("PaymentReceived-0001", "PAY-1", 2500, 2, ""), duplicate)
	d.balance(cust, 2500, 1)
	d.event("The producer re-sends payment PAY-1 under a new MessageId: the handler finds payment-PAY-1, queues nothing and publishes nothing; only the marker commits",
		pay("PaymentReceived-0001-resent", "PAY-1", 2500, 1, ""), completed)
	d.balance(cust, 2500, 1)
	d.copies("16 copies of one payment of 10.00 delivered at once (as when a session lock is lost while the first copy runs)",
		pay("PaymentReceived-0002", "PAY-2", 1000, 1, ""), 16)
	d.balance(cust, 3500, 2)
	d.event(`A payment of 5.00 with "FailFirstAttempts":1: the handler queues the payment, the balance's increment and PaymentRecorded, then fails on its first delivery, before the batch: its writes and its event are dropped (eventsDropped=1), nothing is committed or sent`,
		pay("PaymentReceived-0003", "PAY-3", 500, 1, `,"FailFirstAttempts":1`), expect{status: 503, outcome: "handler_failed"})
	d.balance(cust, 3500, 2)
	d.event("The broker redelivers it: the handler runs again on fresh reads; the batch commits once and the event goes out",
		pay("PaymentReceived-0003", "PAY-3", 500, 2, `,"FailFirstAttempts":1`), recorded)
	d.balance(cust, 4000, 3)

	s.println("\nThe send after a commit fails: the in-memory sink is asked to refuse the next send holding an event")
	s.println("(POST /_nimbus/resolver/refuse, as Service Bus refusing it would).")
	if err := d.host.Refuse(context.Background(), devhost.Refusal{MessageType: "EventRequest", Count: 1}); err != nil {
		return err
	}
	d.event("A payment of 2.50: the batch commits (payment, balance, marker holding PaymentRecorded and the ResolutionResponse); the send is refused, so the delivery fails after the pause and the broker redelivers it",
		pay("PaymentReceived-0004", "PAY-4", 250, 1, ""), expect{status: 503, outcome: "outbox_send_failed"})
	d.balance(cust, 4250, 4)
	d.marker("PaymentReceived-0004", false)
	d.event("The redelivery finds the marker with its event not dispatched: the handler does not run; the stored PaymentRecorded and ResolutionResponse go out, byte for byte, and the marker is marked dispatched",
		pay("PaymentReceived-0004", "PAY-4", 250, 2, ""), expect{status: 200, outcome: "outbox_dispatched", sends: []string{"EventRequest→PaymentRecorded", "ResolutionResponse"}})
	d.balance(cust, 4250, 4)
	d.marker("PaymentReceived-0004", true)
	d.event("A later copy is a plain duplicate: nothing is sent again",
		pay("PaymentReceived-0004", "PAY-4", 250, 3, ""), duplicate)
	return nil
}

// copies delivers n copies of e to the Subscriber function at once and
// redelivers each copy the host would abandon (DeliveryCount+1) until it
// settles, then checks that exactly one copy committed and every other
// one ended as a duplicate with a SkipResponse.
func (d *proc) copies(title string, e ev, n int) {
	const maxDeliveries = 5
	d.title(title)
	d.s.printf("   MessageId %s, SessionId %s, EventTypeId %s, event %s, %d copies\n", e.id, e.session, e.typ(), e.order, n)
	type attempt struct {
		id     string
		status int
		err    error
	}
	// Every envelope is built first (the builder is not safe for
	// concurrent use); a copy's redeliveries differ in DeliveryCount only.
	envs := make([][][]byte, n)
	for c := range envs {
		for dc := 1; dc <= maxDeliveries; dc++ {
			e.delivery = dc
			_, env := d.delivery(e)
			envs[c] = append(envs[c], env)
		}
	}
	runs := make([][]attempt, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for c := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for dc, env := range envs[c] {
				a := attempt{id: fmt.Sprintf("demo-invocation-%04d-copy-%02d-delivery-%d", d.s.step, c+1, dc+1)}
				a.status, a.err = d.post(app.FuncSubscriber, env, a.id)
				runs[c] = append(runs[c], a)
				if a.err != nil || a.status/100 == 2 {
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()

	// The handler logs an invocation's line as it answers: wait for each.
	outcome := map[string]string{}
	for _, run := range runs {
		for _, a := range run {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			l, err := d.proc.WaitLine(ctx, func(l handlerproc.Line) bool { return l.Str("invocationId") == a.id })
			cancel()
			if err == nil {
				outcome[a.id] = l.Str("outcome")
			}
		}
	}
	first, later := map[string]int{}, map[string]int{}
	committed, settled := 0, 0
	for c, run := range runs {
		for i, a := range run {
			o := outcome[a.id]
			switch {
			case a.err != nil:
				d.s.fail("copy %d, delivery %d: %v", c+1, i+1, a.err)
			case o == "":
				d.s.fail("copy %d, delivery %d: no log line", c+1, i+1)
			}
			switch {
			case o == "":
			case i == 0:
				first[o]++
			default:
				later[o]++
			}
			if o == "completed" {
				committed++
			}
		}
		if last := run[len(run)-1]; last.err == nil && last.status/100 == 2 {
			settled++
		}
	}
	d.s.printf("   → first deliveries: %s\n", tally(first))
	if len(later) > 0 {
		d.s.printf("   → redeliveries of the copies answered 503 (after the handler's pause): %s\n", tally(later))
	}
	sent, _ := d.sentSince()
	labels := map[string]int{}
	events := map[string]bool{}
	for _, r := range sent {
		labels[devhost.Label(r)]++
		if r.MessageID != "" {
			events[r.MessageID+" "+r.Body] = true
		}
	}
	d.s.printf("   sent: %s\n", tally(labels))
	if committed != 1 {
		d.s.fail("%d copies committed, expected exactly 1", committed)
	}
	if settled != n {
		d.s.fail("%d of %d copies settled (HTTP 2xx) within %d deliveries", settled, n, maxDeliveries)
	}
	// A copy that found the winner's marker before its event was marked
	// dispatched sent the stored event and response too (outbox_dispatched);
	// every other one answered a duplicate.
	finished := first["outbox_dispatched"] + later["outbox_dispatched"]
	dups := first["duplicate"] + later["duplicate"]
	if finished+dups != n-1 || labels["ResolutionResponse"] != 1+finished || labels["SkipResponse"] != dups ||
		labels["EventRequest→PaymentRecorded"] != 1+finished || len(events) != 1 {
		d.s.fail("sent %s (%d distinct events), expected one event (sent again by each copy that finished the dispatch), one ResolutionResponse each, a SkipResponse per duplicate", tally(labels), len(events))
	}
	if finished > 0 {
		d.s.printf("   → %d copies found the winner's event not yet marked dispatched and sent it again, the same MessageId and body\n", finished)
	}
}

// tally formats counts as "a:1 b:2", in name order.
func tally(m map[string]int) string {
	return strings.TrimSuffix(strings.TrimPrefix(fmt.Sprint(m), "map["), "]")
}

// sentSince returns what the endpoint sent since the last step showed,
// without printing it; false when the in-memory sink could not be read
// (a failure recorded).
func (d *proc) sentSince() ([]devhost.SentResponse, bool) {
	sent, err := d.host.Sent(context.Background())
	if err != nil {
		d.s.fail("read the in-memory sink: %v", err)
		return nil, false
	}
	if len(sent) <= d.seen {
		return nil, true
	}
	fresh := sent[d.seen:]
	d.seen = len(sent)
	return fresh, true
}

// ledgerDoc is a document of the sample's ledger: a payment, a balance or
// an inbox marker.
type ledgerDoc struct {
	ID           string `json:"id"`
	Type         string `json:"type"`
	CustomerID   string `json:"customerId"`
	BalanceCents int64  `json:"balanceCents"`
	Payments     int64  `json:"payments"`
}

// balance prints customer's balance and what its partition holds, read
// from the in-memory ledger, and checks the balance.
func (d *proc) balance(customer string, wantCents, wantPayments int64) {
	var docs []ledgerDoc
	q := url.Values{"database": {ledgerDatabase}, "container": {ledgerContainer}}
	if err := d.getJSON("/_nimbus/txn?"+q.Encode(), &docs); err != nil {
		d.s.fail("read the in-memory ledger: %v", err)
		return
	}
	var bal *ledgerDoc
	payments, markers := 0, 0
	for i, doc := range docs {
		if doc.CustomerID != customer {
			continue
		}
		switch {
		case doc.ID == "balance-"+customer:
			bal = &docs[i]
		case doc.Type == "nimbus.inbox":
			markers++
		case strings.HasPrefix(doc.ID, "payment-"):
			payments++
		}
	}
	if bal == nil {
		d.s.printf("   ledger: no balance for %s\n", customer)
		d.s.fail("no balance document for %s", customer)
		return
	}
	d.s.printf("   ledger: balance-%s = %d.%02d (%d payments); partition %s holds %d payment documents and %d inbox markers\n",
		customer, bal.BalanceCents/100, bal.BalanceCents%100, bal.Payments, customer, payments, markers)
	if bal.BalanceCents != wantCents || bal.Payments != wantPayments || int64(payments) != wantPayments {
		d.s.fail("balance %d cents over %d payments (%d payment documents), expected %d over %d", bal.BalanceCents, bal.Payments, payments, wantCents, wantPayments)
	}
}

// marker prints the outbox of the inbox marker of messageID, read from the
// in-memory ledger, and checks whether it is dispatched.
func (d *proc) marker(messageID string, wantDispatched bool) {
	var docs []struct {
		Type       string                       `json:"type"`
		MessageID  string                       `json:"messageId"`
		Outbox     []struct{ MessageID string } `json:"outbox"`
		Dispatched *string                      `json:"dispatchedAtUtc"`
		TTL        *int64                       `json:"ttl"`
	}
	q := url.Values{"database": {ledgerDatabase}, "container": {ledgerContainer}}
	if err := d.getJSON("/_nimbus/txn?"+q.Encode(), &docs); err != nil {
		d.s.fail("read the in-memory ledger: %v", err)
		return
	}
	for _, doc := range docs {
		if doc.Type != "nimbus.inbox" || doc.MessageID != messageID {
			continue
		}
		ids := make([]string, len(doc.Outbox))
		for i, e := range doc.Outbox {
			ids[i] = e.MessageID
		}
		state := "not dispatched, no ttl: it does not expire until its events are sent"
		if doc.Dispatched != nil {
			state = fmt.Sprintf("dispatched at %s, ttl %d s", *doc.Dispatched, *doc.TTL)
		}
		d.s.printf("   marker of %s: outbox %v, %s\n", messageID, ids, state)
		if (doc.Dispatched != nil) != wantDispatched || (doc.TTL == nil) == wantDispatched {
			d.s.fail("the marker of %s is dispatched: %v, expected %v", messageID, doc.Dispatched != nil, wantDispatched)
		}
		return
	}
	d.s.fail("no marker of %s", messageID)
}
