package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/testlog"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
	"github.com/nimbus-go/functions-subscriber/internal/txn/cosmostxn"
	"github.com/nimbus-go/functions-subscriber/nimbus"
)

// invocationLine is what the test reads of an invocation's log line.
type invocationLine struct {
	Outcome        string  `json:"outcome"`
	MessageID      string  `json:"messageId"`
	RequestCharge  float64 `json:"requestCharge"`
	CosmosRequests int64   `json:"cosmosRequests"`
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
		`"ApplicationProperties":{"To":"BillingEndpoint","From":"Shop","MessageType":"EventRequest","EventId":"e-` + paymentID + `","EventTypeId":"PaymentReceived"}}}`
}

// The sample's PaymentReceived handler through the real app, with the
// ledger in memory and on the local Cosmos DB stand-in: the payment, the
// balance and the marker commit in one batch (on Cosmos, the ledger
// container is created with /customerId and time to live on); a
// redelivery is a duplicate; a producer's re-send under a new MessageId
// commits only its marker; a second payment replaces the balance under its
// ETag; a switched failure commits nothing before its redelivery succeeds.
// On Cosmos the test logs each invocation's request charge and requests as
// the local server reports them.
func TestPaymentReceived(t *testing.T) {
	for _, store := range []string{"InMemory", "Cosmos"} {
		t.Run(store, func(t *testing.T) { testPaymentReceived(t, store) })
	}
}

func testPaymentReceived(t *testing.T, store string) {
	settings := []string{
		"NimBus__Endpoint=BillingEndpoint", "NimBus__Resolver__Sink=InMemory",
		"NimBus__Inbox__Enabled=true", "NimBus__Inbox__Store=" + store,
		"NimBus__Sample__Ledger__DatabaseId=Payments",
	}
	var cos *testenv.Cosmos
	if store == "Cosmos" {
		cos = testenv.StartCosmos(t, testenv.CosmosOptions{Consistency: "Strong"})
		settings = append(settings, "NimBus__Inbox__Cosmos__ConnectionString="+cos.ConnectionString())
	}
	app := nimbus.New()
	registerHandlers(app)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	logs := &testlog.Buffer{}
	ctx, stop := context.WithCancel(context.Background())
	exit := make(chan int, 1)
	go func() {
		exit <- app.Run(ctx, nimbus.Options{Environ: settings, Listener: ln, Stdout: logs, Stderr: io.Discard})
	}()
	t.Cleanup(func() {
		stop()
		if code := <-exit; code != 0 {
			t.Errorf("exit code %d", code)
		}
	})
	post := func(inv string) int {
		t.Helper()
		resp, err := http.Post(base+"/Subscriber", "application/json", strings.NewReader(inv))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
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
