package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/dev/minihost"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
)

// The sample endpoint's transactional handler, as its contract states it:
// a PaymentReceived event {"PaymentId","CustomerId","AmountCents"} commits,
// in one transactional batch of partition CustomerId of the ledger
// container (partition key /customerId), the payment document
// payment-<PaymentId>, the balance document balance-<CustomerId> (balanceCents
// and payments increased by the payment) and the inbox marker of the
// delivery. The tests read the ledger straight from Cosmos with azcosmos.
const (
	paymentReceived = "PaymentReceived"
	ledgerDatabase  = "Billing" // NimBus__Sample__Ledger__DatabaseId's default
	markerType      = "nimbus.inbox"
)

// ledgerSettings are the handler settings that put the sample's ledger in
// container of the inbox's account.
func ledgerSettings(container string) map[string]string {
	return map[string]string{
		"NimBus__Sample__Ledger__DatabaseId":  ledgerDatabase,
		"NimBus__Sample__Ledger__ContainerId": container,
	}
}

// ledgerContainerFor returns a container id of tb's own, derived from its
// name and unique in the test binary: the ledger database outlives a test,
// and a second run of it (-count=2) must not find the first run's payments.
func ledgerContainerFor(tb testing.TB) string {
	return "ledger-" + testenv.UniqueDatabase(tb)
}

// payment returns a PaymentReceived event; extra is appended to its JSON
// (the sample's Fail, FailOn and FailFirstAttempts switches).
func payment(messageID, session, paymentID, customer string, cents int, extra string) event {
	js := fmt.Sprintf(`{"PaymentId":%q,"CustomerId":%q,"AmountCents":%d%s}`, paymentID, customer, cents, extra)
	return event{MessageID: messageID, SessionID: session, EventID: guidFor(messageID), EventTypeID: paymentReceived, EventJSON: js}
}

// delivery is e as the Functions host hands it to the Subscriber function
// on delivery deliveryCount: the envelope a host POSTs.
func (e event) delivery(deliveryCount int, enqueued time.Time) []byte {
	m := e.message()
	d := nimbusmsg.Message{
		ApplicationProperties: m.ApplicationProperties, MessageID: e.MessageID, SessionID: e.SessionID,
		CorrelationID: m.CorrelationID, Body: m.Body,
	}.Delivery("Subscriber", "", deliveryCount, enqueued)
	d.ContentType = hostwire.S("application/json")
	d.Namespace = "sb-e2e.servicebus.windows.net"
	d.UtcNow = time.Now().UTC()
	d.RandGUID = minihost.NewGUID()
	return hostwire.ServiceBus(d)
}

// ledgerDoc is any document of the ledger container: a payment, a balance
// or an inbox marker.
type ledgerDoc struct {
	ID           string `json:"id"`
	Type         string `json:"type"`
	CustomerID   string `json:"customerId"`
	MessageID    string `json:"messageId"`
	EndpointID   string `json:"endpointId"`
	CreatedAtUTC string `json:"createdAtUtc"`
	AmountCents  int64  `json:"amountCents"`
	BalanceCents int64  `json:"balanceCents"`
	Payments     int64  `json:"payments"`
	TTL          *int64 `json:"ttl"`
}

// ledger reads the sample's ledger container straight from Cosmos (not
// through a proxy).
type ledger struct {
	tb testing.TB
	c  *azcosmos.ContainerClient
}

func openLedger(tb testing.TB, cosmos *testenv.Cosmos, container string) *ledger {
	tb.Helper()
	c, err := cosmos.Client(tb).NewContainer(ledgerDatabase, container)
	if err != nil {
		tb.Fatal(err)
	}
	return &ledger{tb: tb, c: c}
}

// partition returns every document of customer's partition, by id.
func (l *ledger) partition(customer string) []ledgerDoc {
	l.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The filter repeats the partition key: the local server does not
	// scope a query to the partition the request names.
	pager := l.c.NewQueryItemsPager("SELECT * FROM c WHERE c.customerId = @pk", azcosmos.NewPartitionKeyString(customer), &azcosmos.QueryOptions{
		PageSizeHint: 200, QueryParameters: []azcosmos.QueryParameter{{Name: "@pk", Value: customer}},
	})
	var out []ledgerDoc
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			l.tb.Fatalf("reading the ledger partition %s: %v", customer, err)
		}
		for _, raw := range page.Items {
			var d ledgerDoc
			if err := json.Unmarshal(raw, &d); err != nil {
				l.tb.Fatalf("ledger document in %s: %v", customer, err)
			}
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// paymentWant is what one payment must have left in the ledger.
type paymentWant struct {
	paymentID string
	cents     int64
	// messageIDs are the MessageIds that carried the payment; each has
	// exactly one marker. The payment document names one of them.
	messageIDs []string
}

// ledgerWant is what customer's partition must hold: the payments, each
// applied once.
type ledgerWant struct {
	customer string
	payments []paymentWant
}

// ledgerReport counts what checkLedger read.
type ledgerReport struct {
	partitions, payments, markers int
	exact                         int // balances that match their payments
}

// checkLedger asserts that every partition holds exactly: one payment
// document per payment (its amount, the customer, one of its MessageIds),
// one balance document whose balanceCents and payments are the sums of
// those payments, and one inbox marker per MessageId (the inbox identity
// hash as id, type nimbus.inbox, the endpoint, the MessageId, the customer
// at the partition key path and a positive ttl), and nothing else.
func checkLedger(tb testing.TB, l *ledger, wants []ledgerWant) ledgerReport {
	tb.Helper()
	var rep ledgerReport
	problems := 0
	errorf := func(format string, a ...any) {
		tb.Helper()
		if problems++; problems <= 20 {
			tb.Errorf(format, a...)
		}
	}
	for _, w := range wants {
		rep.partitions++
		docs := map[string]ledgerDoc{}
		for _, d := range l.partition(w.customer) {
			docs[d.ID] = d
		}
		var sum, count int64
		for _, p := range w.payments {
			sum += p.cents
			count++
			id := "payment-" + p.paymentID
			d, ok := docs[id]
			delete(docs, id)
			if !ok {
				errorf("customer %s: payment %s missing", w.customer, p.paymentID)
			} else {
				rep.payments++
				if d.AmountCents != p.cents || d.CustomerID != w.customer || !contains(p.messageIDs, d.MessageID) {
					errorf("customer %s: payment document %+v, want amountCents %d and one of the MessageIds %v", w.customer, d, p.cents, p.messageIDs)
				}
			}
			for _, mid := range p.messageIDs {
				id := inboxID(endpointID, mid)
				m, ok := docs[id]
				delete(docs, id)
				if !ok {
					errorf("customer %s: no inbox marker for %s", w.customer, mid)
					continue
				}
				rep.markers++
				if m.Type != markerType || m.EndpointID != endpointID || m.MessageID != mid || m.CustomerID != w.customer || m.TTL == nil || *m.TTL <= 0 {
					errorf("customer %s: marker of %s is %+v", w.customer, mid, m)
				}
				if _, err := time.Parse(time.RFC3339Nano, m.CreatedAtUTC); err != nil {
					errorf("customer %s: marker of %s: createdAtUtc %q: %v", w.customer, mid, m.CreatedAtUTC, err)
				}
			}
		}
		id := "balance-" + w.customer
		b, ok := docs[id]
		delete(docs, id)
		switch {
		case !ok:
			errorf("customer %s: no balance document", w.customer)
		case b.BalanceCents != sum || b.Payments != count || b.CustomerID != w.customer:
			errorf("customer %s: balance %d cents over %d payments, want %d over %d", w.customer, b.BalanceCents, b.Payments, sum, count)
		default:
			rep.exact++
		}
		for id, d := range docs {
			errorf("customer %s: unexpected document %s: %+v", w.customer, id, d)
		}
	}
	if problems > 20 {
		tb.Errorf("… %d ledger problems in all", problems)
	}
	return rep
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

// invokeUntilSettled delivers e to the handler as the broker does until
// the host would complete it: each failed invocation (the handler paces a
// transient failure before answering) is followed by the next delivery,
// DeliveryCount+1, up to maxDeliveries. It returns the answers in order.
func invokeUntilSettled(ctx context.Context, iv *minihost.Invoker, e event, maxDeliveries int) ([]*minihost.Result, error) {
	var out []*minihost.Result
	enqueued := time.Now().UTC().Add(-time.Second)
	for dc := 1; dc <= maxDeliveries; dc++ {
		res, err := iv.Invoke(ctx, "Subscriber", e.delivery(dc, enqueued))
		if err != nil {
			return out, fmt.Errorf("%s delivery %d: %w", e.MessageID, dc, err)
		}
		out = append(out, res)
		if res.Succeeded {
			return out, nil
		}
	}
	return out, fmt.Errorf("%s: not settled after %d deliveries (last status %d)", e.MessageID, maxDeliveries, out[len(out)-1].StatusCode)
}

// concurrentInvoker is an invoker whose client keeps a connection per
// concurrent copy, so the copies reach the handler at once.
func concurrentInvoker(base string, copies int) *minihost.Invoker {
	return &minihost.Invoker{BaseURL: base, Client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: copies, MaxConnsPerHost: copies}}}
}
