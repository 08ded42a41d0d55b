package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/dev/minihost"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// paymentOf is a PaymentReceived event for customer, its JSON written by
// encoding/json (so any customer id is valid JSON).
func paymentOf(messageID, paymentID, customer string, cents int) event {
	js, _ := json.Marshal(map[string]any{"PaymentId": paymentID, "CustomerId": customer, "AmountCents": cents})
	return event{MessageID: messageID, SessionID: messageID, EventID: guidFor(messageID), EventTypeID: paymentReceived, EventJSON: string(js)}
}

// openLedgerAnyKey is openLedger through this module's Cosmos adapter,
// whose client sends any partition key value as Cosmos DB takes it (the
// SDK's own client does not for values beyond ASCII's printable range).
func openLedgerAnyKey(tb testing.TB, c *testenv.Cosmos, container string) *ledger {
	tb.Helper()
	acct, err := cosmos.NewAccount(cosmos.Config{ConnectionString: c.ConnectionString(), Retry: cosmos.DefaultRetry})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(acct.Close)
	cc, err := acct.Client().NewContainer(ledgerDatabase, container)
	if err != nil {
		tb.Fatal(err)
	}
	return &ledger{tb: tb, c: cc}
}

// lineOf returns the fields of the last line of messageID with outcome,
// or nil.
func (h *handlerProc) lineOf(messageID, outcome string) map[string]any {
	var out map[string]any
	for _, l := range h.Lines() {
		if l.Fields != nil && l.Str("messageId") == messageID && l.Str("outcome") == outcome {
			out = l.Fields
		}
	}
	return out
}

// Customers whose ids hold characters the Go SDK writes into the
// partition key header with Go escapes (an emoji, CJK Extension B) are
// processed by the real binary on the first delivery, their ledgers
// exact. A customer id over Cosmos DB's partition key limit fails at once
// (permanent, before any request to Cosmos DB), naming the limit, instead
// of ten "unavailable" deliveries.
func TestPartitionKeysBeyondASCII(t *testing.T) {
	longRun(t)
	container := ledgerContainerFor(t)
	s := startStack(t, stackConfig{settings: ledgerSettings(container)})
	led := openLedgerAnyKey(t, s.cosmos, container)
	iv := &minihost.Invoker{BaseURL: s.handler.base}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	customers := []string{"cust-\U0001F642", "cust-\U00020000\U0002A6A5", "\U0001F4B8", "cust-Ünï-日本-\u2028"}
	var wants []ledgerWant
	for i, cust := range customers {
		e := paymentOf("PaymentReceived-pk-"+string(rune('a'+i)), "P-pk-"+string(rune('a'+i)), cust, 100+i)
		res, err := invokeUntilSettled(ctx, iv, e, 3)
		if err != nil {
			t.Errorf("customer %q: %v", cust, err)
			continue
		}
		if len(res) != 1 {
			t.Errorf("customer %q took %d deliveries, want 1", cust, len(res))
		}
		wants = append(wants, ledgerWant{customer: cust, payments: []paymentWant{{"P-pk-" + string(rune('a'+i)), int64(100 + i), []string{e.MessageID}}}})
	}
	rep := checkLedger(t, led, wants)
	t.Logf("%d customers beyond ASCII, %d payments and %d markers as expected", rep.partitions, rep.payments, rep.markers)

	long := strings.Repeat("\U0001F4B8", 513) // 2,052 bytes
	e := paymentOf("PaymentReceived-pk-long", "P-pk-long", long, 1)
	res, err := iv.Invoke(ctx, "Subscriber", e.delivery(1, time.Now().UTC()))
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("a customer id of 2,052 bytes answered %d, want 422 at once", res.StatusCode)
	}
	var line map[string]any
	testenv.WaitUntil(t, 10*time.Second, func() bool {
		line = s.handler.lineOf(e.MessageID, "permanent_failure")
		return line != nil
	}, func() string { return "no permanent_failure line for the long customer id" })
	if msg, _ := line["error"].(string); !strings.Contains(msg, "2048") || strings.Contains(msg, "\U0001F4B8") {
		t.Errorf("the line's error %q does not name the limit, or holds the value", msg)
	}
}

// A cold instance whose first reads of the account's metadata fail for
// about three seconds (the SDK's reads: refused with 503, or the
// connection dropped) after its own consistency read succeeded serves
// deliveries again within seconds of the fault ending, not after the
// SDK's 5-minute refresh interval.
func TestColdStartMetadataFailureRecovers(t *testing.T) {
	longRun(t)
	const faultFor = 3 * time.Second
	var first atomic.Int64
	var faulted atomic.Int64
	// The SDK's account reads, for faultFor from the first one; the
	// adapter's consistency read (User-Agent azsdk-go-nimbus-cosmos) goes
	// through.
	match := func(r *http.Request) bool {
		if r.Method != http.MethodGet || r.URL.Path != "/" || strings.Contains(r.Header.Get("User-Agent"), "nimbus-cosmos") {
			return false
		}
		now := time.Now().UnixNano()
		first.CompareAndSwap(0, now)
		if time.Duration(now-first.Load()) >= faultFor {
			return false
		}
		faulted.Add(1)
		return true
	}
	s := startStack(t, stackConfig{faults: &testenv.FaultProxyOptions{
		Seed: 7, Rate: 1, Kinds: []testenv.FaultKind{testenv.FaultUnavailable, testenv.FaultDrop}, Match: match,
	}})
	iv := &minihost.Invoker{BaseURL: s.handler.base}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Deliveries of one message, as the broker redelivers an abandoned
	// one, until one succeeds; the handler paces each failure (50 ms
	// doubling to 500 ms here).
	e := order("OrderPlaced-cold-1", "cold-1", 1, 0)
	enqueued := time.Now().UTC()
	var results []*minihost.Result
	var okAt time.Time
	const bound = 90 * time.Second // far below 5 minutes, far above what a loaded machine needs
	for dc := 1; ; dc++ {
		res, err := iv.Invoke(ctx, "Subscriber", e.delivery(dc, enqueued))
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, res)
		if res.Succeeded {
			okAt = time.Now()
			break
		}
		if f := first.Load(); f != 0 && time.Since(time.Unix(0, f)) > faultFor+bound {
			t.Fatalf("deliveries still fail %v after the fault ended (%d deliveries, last status %d)", bound, dc, res.StatusCode)
		}
	}
	if faulted.Load() == 0 || len(results) < 2 {
		t.Fatalf("the fault never hit: %d metadata reads faulted, %d deliveries", faulted.Load(), len(results))
	}
	faultEnd := time.Unix(0, first.Load()).Add(faultFor)
	t.Logf("%d SDK metadata reads faulted over %v; %d deliveries; the first success came %v after the fault ended",
		faulted.Load(), faultFor, len(results), okAt.Sub(faultEnd).Round(time.Millisecond))
	for _, iv := range s.handler.invocations() {
		if iv.MessageID == e.MessageID && iv.Outcome != "transient_failure" && iv.Outcome != "completed" {
			t.Errorf("delivery %d: outcome %s", iv.DeliveryCount, iv.Outcome)
		}
	}
}

// A read-only data role on a transactional handler's container (reads and
// the marker check succeed, the batch is refused 403) is an operator
// error with pauses, as on the plain inbox: 503 after the pause, the line
// naming the role to assign, nothing dead-lettered; once the role is
// fixed, the delivery commits.
func TestBatchForbiddenIsAnOperatorError(t *testing.T) {
	longRun(t)
	container := ledgerContainerFor(t)
	s := startStack(t, stackConfig{
		settings: ledgerSettings(container),
		faults:   &testenv.FaultProxyOptions{Seed: 3, Rate: 1, Kinds: []testenv.FaultKind{testenv.FaultForbidden}, Match: testenv.IsBatchRequest},
	})
	led := openLedgerAnyKey(t, s.cosmos, container)
	iv := &minihost.Invoker{BaseURL: s.handler.base}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := paymentOf("PaymentReceived-ro-1", "P-ro-1", "cust-ro", 250)
	enqueued := time.Now().UTC()
	for dc := 1; dc <= 3; dc++ {
		t0 := time.Now()
		res, err := iv.Invoke(ctx, "Subscriber", e.delivery(dc, enqueued))
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("delivery %d answered %d, want 503", dc, res.StatusCode)
		}
		// The redelivery pause: 50 ms doubling (the stack's pace), drawn
		// between half of it and all of it.
		if pause := 25 * time.Millisecond << (dc - 1); time.Since(t0) < pause {
			t.Errorf("delivery %d answered after %v, before its shortest pause %v", dc, time.Since(t0), pause)
		}
	}
	var line map[string]any
	testenv.WaitUntil(t, 10*time.Second, func() bool {
		line = s.handler.lineOf(e.MessageID, "transient_failure")
		return line != nil
	}, func() string { return "no transient_failure line" })
	msg, _ := line["error"].(string)
	if !strings.Contains(msg, "misconfigured") || !strings.Contains(msg, "Cosmos DB Built-in Data Contributor") || !strings.Contains(msg, "403") {
		t.Errorf("the line's error %q does not name the role", msg)
	}
	if c := s.proxy.Counts(); c.Forbidden != 3 {
		t.Errorf("%d batches refused, want 3", c.Forbidden)
	}
	s.proxy.SetEnabled(false) // the role fixed
	res, err := iv.Invoke(ctx, "Subscriber", e.delivery(4, enqueued))
	if err != nil || !res.Succeeded {
		t.Fatalf("after the fix: %+v, %v", res, err)
	}
	checkLedger(t, led, []ledgerWant{{customer: "cust-ro", payments: []paymentWant{{"P-ro-1", 250, []string{e.MessageID}}}}})
}
