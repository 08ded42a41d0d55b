package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testlog"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
	"github.com/nimbus-go/functions-subscriber/internal/txn/cosmostxn"
	"github.com/nimbus-go/functions-subscriber/nimbus"
)

// invocationLine is what the test reads of an invocation's log line.
type invocationLine struct {
	Outcome         string  `json:"outcome"`
	MessageID       string  `json:"messageId"`
	EventsPublished int     `json:"eventsPublished"`
	EventsDropped   int     `json:"eventsDropped"`
	TxnReruns       int     `json:"txnReruns"`
	RequestCharge   float64 `json:"requestCharge"`
	CosmosRequests  int64   `json:"cosmosRequests"`
}

// invocations are the invocation lines written to logs.
func invocations(logs *testlog.Buffer) []invocationLine {
	return testlog.Decode(logs, func(l invocationLine) bool { return l.Outcome != "" })
}

// paymentInvocation is the host's envelope of a PaymentReceived message.
func paymentInvocation(msgID, paymentID, customerID string, cents int) string {
	return paymentDelivery(msgID, paymentID, customerID, cents, 1, "")
}

// paymentDelivery is paymentInvocation on delivery count, with extra JSON
// fields (the switches) in the event.
func paymentDelivery(msgID, paymentID, customerID string, cents, count int, extra string) string {
	event := fmt.Sprintf(`{"PaymentId":%q,"CustomerId":%q,"AmountCents":%d%s}`, paymentID, customerID, cents, extra)
	ev, _ := json.Marshal(event)
	body := `{"EventContent":{"EventTypeId":"PaymentReceived","EventJson":` + string(ev) + `},"ErrorContent":null}`
	return `{"Data":{"message":"` + base64.StdEncoding.EncodeToString([]byte(body)) + `"},` +
		`"Metadata":{"DeliveryCount":"` + fmt.Sprint(count) + `","MessageId":"\"` + msgID + `\"","SessionId":"\"` + customerID + `\"",` +
		`"CorrelationId":"\"corr-` + msgID + `\"",` +
		`"ApplicationProperties":{"To":"BillingEndpoint","From":"Shop","MessageType":"EventRequest","EventId":"e-` + paymentID + `","EventTypeId":"PaymentReceived"}}}`
}

// The sample's PaymentReceived handler through the real app, with the
// ledger in memory and on the local Cosmos DB stand-in: the payment, the
// balance and the marker commit in one batch (on Cosmos, the ledger
// container is created with /customerId and time to live on); a
// redelivery is a duplicate; a producer's re-send under a new MessageId
// commits only its marker; a second payment increments the balance under
// its ETag; a switched failure commits nothing before its redelivery
// succeeds. Each payment applied is announced once, with PaymentRecorded
// and the balance it left; the re-send and the failed delivery announce
// nothing.
// On Cosmos the test logs each invocation's request charge and requests as
// the local server reports them.
func TestPaymentReceived(t *testing.T) {
	for _, store := range []string{"InMemory", "Cosmos"} {
		t.Run(store, func(t *testing.T) { testPaymentReceived(t, store) })
	}
}

func testPaymentReceived(t *testing.T, store string) {
	var cos *testenv.Cosmos
	conn := ""
	if store == "Cosmos" {
		cos = testenv.StartCosmos(t, testenv.CosmosOptions{Consistency: "Strong"})
		conn = cos.ConnectionString()
	}
	base, logs := startLedgerApp(t, conn)
	post := func(inv string) int { return postInvocation(t, base, inv) }
	steps := []struct {
		inv     string
		status  int
		outcome string
	}{
		{paymentInvocation("m-1", "p-1", "c-1", 1250), 200, "completed"},
		{paymentInvocation("m-1", "p-1", "c-1", 1250), 200, "duplicate"},
		{paymentInvocation("m-2", "p-1", "c-1", 1250), 200, "completed"},
		{paymentInvocation("m-3", "p-2", "c-1", 750), 200, "completed"},
		{paymentDelivery("m-4", "p-3", "c-1", 100, 1, `,"FailFirstAttempts":1`), 503, "handler_failed"},
		{paymentDelivery("m-4", "p-3", "c-1", 100, 2, `,"FailFirstAttempts":1`), 200, "completed"},
	}
	for i, s := range steps {
		if code := post(s.inv); code != s.status {
			t.Fatalf("step %d: status %d, want %d", i, code, s.status)
		}
	}
	lines := invocations(logs)
	if len(lines) != len(steps) {
		t.Fatalf("%d invocation lines, want %d", len(lines), len(steps))
	}
	for i, l := range lines {
		if l.Outcome != steps[i].outcome {
			t.Errorf("step %d (%s): outcome %s, want %s", i, l.MessageID, l.Outcome, steps[i].outcome)
		}
		if pub, drop := l.EventsPublished, l.EventsDropped; (i == 0 || i == 3 || i == 5) != (pub == 1) || (i == 4) != (drop == 1) {
			t.Errorf("step %d (%s): %d events published, %d dropped", i, l.MessageID, pub, drop)
		}
		if cos != nil {
			t.Logf("%s %s: %.2f RU in %d Cosmos requests", l.MessageID, l.Outcome, l.RequestCharge, l.CosmosRequests)
		}
	}

	read := ledgerReader(t, base, cos)
	var bal balance
	if !read("balance-c-1", &bal) || bal.BalanceCents != 2100 || bal.Payments != 3 {
		t.Fatalf("balance %+v, want 2100 cents in 3 payments", bal)
	}
	var pay payment
	if !read("payment-p-1", &pay) || pay.MessageID != "m-1" || pay.AmountCents != 1250 {
		t.Fatalf("payment %+v", pay)
	}
	for _, m := range []string{"m-1", "m-2", "m-3", "m-4"} {
		var marker map[string]any
		if !read(txn.MarkerID("BillingEndpoint", m), &marker) {
			t.Fatalf("no marker for %s", m)
		}
		if marker["type"] != txn.MarkerType || marker["customerId"] != "c-1" || marker["messageId"] != m || marker["ttl"] == nil {
			t.Fatalf("marker %v", marker)
		}
	}
	want := []string{
		`PaymentRecorded-p-1 m-1 {"PaymentId":"p-1","CustomerId":"c-1","AmountCents":1250,"BalanceCents":1250}`,
		`PaymentRecorded-p-2 m-3 {"PaymentId":"p-2","CustomerId":"c-1","AmountCents":750,"BalanceCents":2000}`,
		`PaymentRecorded-p-3 m-4 {"PaymentId":"p-3","CustomerId":"c-1","AmountCents":100,"BalanceCents":2100}`,
	}
	if got := publishedEvents(t, base, "PaymentRecorded"); !slices.Equal(got, want) {
		t.Fatalf("published\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// publishedEvents lists the events of type typ the app sent, from its
// in-memory sink, as "MessageId ParentMessageId EventJson".
func publishedEvents(t *testing.T, base, typ string) []string {
	t.Helper()
	resp, err := http.Get(base + "/_nimbus/resolver")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sent []struct {
		MessageID  string `json:"messageId"`
		Properties map[string]struct {
			Value any `json:"value"`
		} `json:"applicationProperties"`
		Body string `json:"body"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&sent); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range sent {
		if m.Properties["EventTypeId"].Value != typ || m.Properties["MessageType"].Value != "EventRequest" {
			continue
		}
		var c struct{ EventContent struct{ EventJson string } }
		if err := json.Unmarshal([]byte(m.Body), &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %v %s", m.MessageID, m.Properties["ParentMessageId"].Value, c.EventContent.EventJson))
	}
	return out
}

// startLedgerApp runs the sample app with its ledger in memory, or on the
// Cosmos DB account of connection string conn, until the test ends; it
// returns the app's base URL and its log. extra are further settings.
func startLedgerApp(t *testing.T, conn string, extra ...string) (string, *testlog.Buffer) {
	t.Helper()
	settings := []string{
		"NimBus__Endpoint=BillingEndpoint", "NimBus__Resolver__Sink=InMemory",
		"NimBus__Inbox__Enabled=true", "NimBus__Inbox__Store=InMemory",
		"NimBus__Sample__Ledger__DatabaseId=Payments",
	}
	if conn != "" {
		settings[3] = "NimBus__Inbox__Store=Cosmos"
		settings = append(settings, "NimBus__Inbox__Cosmos__ConnectionString="+conn)
	}
	settings = append(settings, extra...)
	app := nimbus.New()
	registerHandlers(app)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	ctx, stop := context.WithCancel(context.Background())
	exit := make(chan error, 1)
	go func() {
		exit <- app.Run(ctx, nimbus.Options{Environ: settings, Listener: ln, Stdout: logs, Stderr: io.Discard})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-exit; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return "http://" + ln.Addr().String(), logs
}

// postInvocation posts the host's invocation inv to the Subscriber
// function and returns the status.
func postInvocation(t *testing.T, base, inv string) int {
	t.Helper()
	resp, err := http.Post(base+"/Subscriber", "application/json", strings.NewReader(inv))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// Payments of one customer that run at once each announce the balance they
// left: the balance is incremented under the ETag each handler read, so of
// the batches that read the same version one commits and the others
// conflict; each of those runs again (within its invocation, or on the
// broker's redelivery, which the test plays by posting the message again)
// on a fresh read. A proxy in front of the Cosmos DB stand-in holds the
// first batches until every handler has sent its own, so every one of them
// read the same version of the balance. In the end every payment is applied
// once, and the balances announced are the running balance, each once.
func TestConcurrentPaymentsOfOneCustomerAnnounceTheirBalance(t *testing.T) {
	const n = 4
	cos := testenv.StartCosmos(t, testenv.CosmosOptions{Consistency: "Strong"})
	var hold atomic.Bool
	proxy, _ := holdBatches(t, cos, n, hold.Load)
	base, logs := startLedgerApp(t, "AccountEndpoint="+proxy.URL+";AccountKey="+cos.Key+";")
	if code := postInvocation(t, base, paymentDelivery("m-0", "p-0", "c-1", 100, 1, "")); code != 200 {
		t.Fatalf("first payment: status %d", code)
	}
	hold.Store(true)
	codes := make(chan int, n)
	for i := range n {
		go func() {
			// The broker redelivers a conflicted payment: so does the test.
			code := 0
			for count := 1; count <= 10 && code != 200; count++ {
				code = postInvocation(t, base, paymentDelivery(fmt.Sprintf("m-%d", i+1), fmt.Sprintf("p-%d", i+1), "c-1", 1000, count, ""))
			}
			codes <- code
		}()
	}
	for range n {
		if code := <-codes; code != 200 {
			t.Errorf("concurrent payment: status %d after 10 deliveries", code)
		}
	}
	for _, l := range invocations(logs) {
		if l.Outcome != "completed" && l.Outcome != "txn_conflict" {
			t.Errorf("%s: outcome %s", l.MessageID, l.Outcome)
		}
	}
	var bal balance
	if !ledgerReader(t, base, cos)("balance-c-1", &bal) || bal.BalanceCents != 100+n*1000 || bal.Payments != n+1 {
		t.Fatalf("balance %+v, want %d cents in %d payments", bal, 100+n*1000, n+1)
	}
	balances := announcedBalances(t, base)
	if want := []int64{100, 1100, 2100, 3100, 4100}; !slices.Equal(balances, want) {
		t.Fatalf("announced balances %v, want %v: the running balance, each once", balances, want)
	}
}

// The first payments of a customer that run at once all complete on their
// first delivery: each creates the balance, one of those batches commits and
// the others conflict (409), and each of those is run again within its
// invocation on fresh reads, finds the balance and increments it under the
// ETag it read (so a re-run that read a balance another re-run changed
// conflicts again and runs once more). A proxy in front of the Cosmos DB
// stand-in holds the first batches until every handler has sent its own, so
// every one of them read "no balance". Each payment announces the balance
// it left: the running balance, each once.
func TestConcurrentFirstPaymentsOfACustomerAllComplete(t *testing.T) {
	const n = 4
	cos := testenv.StartCosmos(t, testenv.CosmosOptions{Consistency: "Strong"})
	proxy, batches := holdBatches(t, cos, n, func() bool { return true })
	base, logs := startLedgerApp(t, "AccountEndpoint="+proxy.URL+";AccountKey="+cos.Key+";")
	codes := make(chan int, n)
	for i := range n {
		go func() {
			codes <- postInvocation(t, base, paymentDelivery(fmt.Sprintf("m-%d", i), fmt.Sprintf("p-%d", i), "c-1", 1000*(i+1), 1, ""))
		}()
	}
	for range n {
		if code := <-codes; code != 200 {
			t.Errorf("first payment: status %d, want 200 on the first delivery", code)
		}
	}
	reruns := 0
	for _, l := range invocations(logs) {
		if l.Outcome != "completed" {
			t.Errorf("%s: outcome %s", l.MessageID, l.Outcome)
		}
		reruns += l.TxnReruns
	}
	if reruns < n-1 {
		t.Errorf("%d re-runs, want at least %d: one creation commits, every other batch conflicts at least once", reruns, n-1)
	}
	var bal balance
	if !ledgerReader(t, base, cos)("balance-c-1", &bal) || bal.BalanceCents != 10000 || bal.Payments != n {
		t.Fatalf("balance %+v, want 10000 cents in %d payments", bal, n)
	}
	// Sorted, the announced balances are the running balance of the order
	// the payments committed in: each step is one payment's amount.
	running := announcedBalances(t, base)
	var steps []int64
	for i, b := range running {
		if i == 0 {
			steps = append(steps, b)
		} else {
			steps = append(steps, b-running[i-1])
		}
	}
	slices.Sort(steps)
	if !slices.Equal(steps, []int64{1000, 2000, 3000, 4000}) {
		t.Fatalf("announced balances %v: not the running balance of the %d payments, each once", running, n)
	}
	t.Logf("%d concurrent first payments of one customer: %d handler re-runs, %d batches (commits, conflicts and dispatched marks)", n, reruns, batches.Load())
}

// An amount beyond 2^53-1 cents cannot be stored exactly (Cosmos DB's
// numbers are doubles): it fails permanently and commits nothing; 2^53-1
// is stored exactly.
func TestPaymentBeyondExactDoublesIsPermanent(t *testing.T) {
	base, logs := startLedgerApp(t, "")
	const limit = 1<<53 - 1
	for _, c := range []struct {
		msg, pay string
		cents    int
		status   int
		outcome  string
	}{
		{"m-1", "p-1", limit + 1, 422, "permanent_failure"},
		{"m-2", "p-2", -limit - 1, 422, "permanent_failure"},
		{"m-3", "p-3", limit, 200, "completed"},
		{"m-4", "p-4", 1, 422, "permanent_failure"}, // the balance would pass the limit
	} {
		if code := postInvocation(t, base, paymentDelivery(c.msg, c.pay, "c-1", c.cents, 1, "")); code != c.status {
			t.Errorf("%d cents: status %d, want %d", c.cents, code, c.status)
		}
	}
	lines := invocations(logs)
	for i, want := range []string{"permanent_failure", "permanent_failure", "completed", "permanent_failure"} {
		if i >= len(lines) || lines[i].Outcome != want {
			t.Fatalf("outcomes %+v, want %s at %d", lines, want, i)
		}
	}
	read := ledgerReader(t, base, nil)
	var bal balance
	if !read("balance-c-1", &bal) || bal.BalanceCents != limit || bal.Payments != 1 {
		t.Fatalf("balance %+v, want %d cents in 1 payment", bal, limit)
	}
	var pay payment
	for _, id := range []string{"payment-p-1", "payment-p-2", "payment-p-4"} {
		if read(id, &pay) {
			t.Errorf("%s was recorded", id)
		}
	}
}

// ledgerReader reads documents of customer c-1 of the ledger: through
// /_nimbus/txn when it is in memory (cos nil), else from Cosmos.
func ledgerReader(t *testing.T, base string, cos *testenv.Cosmos) func(id string, into any) bool {
	decode := func(body []byte, into any) {
		if err := json.Unmarshal(body, into); err != nil {
			t.Fatal(err)
		}
	}
	if cos == nil {
		return func(id string, into any) bool {
			t.Helper()
			resp, err := http.Get(base + "/_nimbus/txn?database=Payments&container=ledger")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var docs []json.RawMessage
			if err := json.NewDecoder(resp.Body).Decode(&docs); err != nil {
				t.Fatal(err)
			}
			for _, d := range docs {
				var doc struct{ ID string }
				decode(d, &doc)
				if doc.ID == id {
					decode(d, into)
					return true
				}
			}
			return false
		}
	}
	account, err := cosmos.NewAccount(cosmos.Config{ConnectionString: cos.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	store, err := cosmostxn.New(account, cosmostxn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	target := txn.Target{DatabaseID: "Payments", ContainerID: "ledger", PartitionKeyPath: "/customerId"}
	return func(id string, into any) bool {
		t.Helper()
		body, _, found, err := store.Read(context.Background(), target, "c-1", id)
		if err != nil {
			t.Fatal(err)
		}
		if found {
			decode(body, into)
		}
		return found
	}
}

// holdBatches starts a proxy in front of cos that, while armed reports
// true, holds the batch requests until n of them have arrived, so that the
// handlers that sent them all read the partition before any committed; it
// returns the proxy and the count of batch requests (held or not).
func holdBatches(t *testing.T, cos *testenv.Cosmos, n int64, armed func() bool) (*testenv.FaultProxy, *atomic.Int64) {
	var batches, held atomic.Int64
	all := make(chan struct{})
	proxy := testenv.StartFaultProxy(t, cos.Endpoint, testenv.FaultProxyOptions{
		Match: testenv.IsBatchRequest,
		Hooks: &testenv.ForwardHooks{BeforeForward: func(*http.Request) bool {
			batches.Add(1)
			if !armed() {
				return true
			}
			switch k := held.Add(1); {
			case k == n:
				close(all)
			case k < n:
				select {
				case <-all:
				case <-time.After(20 * time.Second):
				}
			}
			return true
		}},
	})
	return proxy, &batches
}

// announcedBalances returns the BalanceCents of every PaymentRecorded the
// app sent, sorted.
func announcedBalances(t *testing.T, base string) []int64 {
	t.Helper()
	var out []int64
	for _, e := range publishedEvents(t, base, "PaymentRecorded") {
		var p PaymentRecorded
		if err := json.Unmarshal([]byte(e[strings.LastIndex(e, " {")+1:]), &p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p.BalanceCents)
	}
	slices.Sort(out)
	return out
}
