package main

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/nimbus"
	"github.com/nimbus-go/functions-subscriber/nimbustest"
)

// paymentsApp stands in for the payment provider of the sample's workflow:
// it takes InvoiceRequested and announces the customer's payment of it.
func paymentsApp() *nimbus.App {
	a := nimbus.New()
	nimbus.HandleEvent(a, "InvoiceRequested", func(_ context.Context, ev *nimbus.Event, in InvoiceRequested) (nimbus.Result, error) {
		return nimbus.Completed(), ev.Publish(nimbus.Publication{
			EventTypeID: "PaymentReceived", MessageID: "PaymentReceived-" + in.OrderID,
			Payload: PaymentReceived{PaymentID: "pay-" + in.OrderID, CustomerID: in.CustomerID, AmountCents: int64(math.Round(in.Amount * 100))},
		})
	})
	return a
}

// sampleWorkflow runs the sample app twice, as the shop (its PlaceOrder
// front door publishes OrderPlaced) and as BillingEndpoint (its
// handlers), with the payment provider between them; the forwarding
// subscriptions are those a Bicep deployment of the three would declare.
func sampleWorkflow(t *testing.T) (w *nimbustest.Workflow, shop, payments *nimbus.App) {
	shop, billing, payments := nimbus.New(), nimbus.New(), paymentsApp()
	registerHandlers(shop)
	registerHandlers(billing)
	w = nimbustest.New(t, nimbustest.Options{Endpoints: []nimbustest.Endpoint{
		{Name: "ShopEndpoint", App: shop, Publishes: map[string][]string{"OrderPlaced": {"BillingEndpoint"}}},
		{Name: "BillingEndpoint", App: billing, Publishes: map[string][]string{"InvoiceRequested": {"PaymentsEndpoint"}}},
		{Name: "PaymentsEndpoint", App: payments, Publishes: map[string][]string{"PaymentReceived": {"BillingEndpoint"}}},
	}})
	return w, shop, payments
}

func outcomes(t *testing.T, w *nimbustest.Workflow, endpoint string, want ...string) {
	t.Helper()
	if got := w.Outcomes(endpoint); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s's outcomes:\n got  %q\n want %q", endpoint, got, want)
	}
}

// document returns the document id of endpoint's container c, nil when
// there is none.
func document(t *testing.T, w *nimbustest.Workflow, endpoint string, c nimbus.Container, id string) map[string]any {
	t.Helper()
	for _, raw := range w.Documents(endpoint, c) {
		var d map[string]any
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		if d["id"] == id {
			return d
		}
	}
	return nil
}

// The sample's workflow end to end: POST /api/orders commits the order and
// publishes OrderPlaced; BillingEndpoint's OrderPlaced handler publishes
// InvoiceRequested and OrderAccepted; the payment provider answers the
// invoice with PaymentReceived, which BillingEndpoint's transactional
// handler records in the ledger, publishing PaymentRecorded. Every event
// shows Completed in the Resolver.
func TestSampleWorkflow(t *testing.T) {
	w, _, _ := sampleWorkflow(t)
	req := httptest.NewRequest(http.MethodPost, "/api/orders", strings.NewReader(`{"OrderId":"O-1","CustomerId":"C-1","Amount":42.5}`))
	req.Header.Set("X-Correlation-Id", "corr-1")
	resp := w.Call("ShopEndpoint", req)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated || string(body) != `{"messageId":"OrderPlaced-O-1","orderId":"O-1"}` {
		t.Fatalf("POST /api/orders = %d %s", resp.StatusCode, body)
	}
	w.MustRun()

	outcomes(t, w, "BillingEndpoint", "OrderPlaced completed", "PaymentReceived completed")
	outcomes(t, w, "PaymentsEndpoint", "InvoiceRequested completed")
	for _, e := range []struct{ endpoint, messageID string }{
		{"BillingEndpoint", "OrderPlaced-O-1"}, {"PaymentsEndpoint", "InvoiceRequested-O-1"}, {"BillingEndpoint", "PaymentReceived-O-1"},
	} {
		if got := w.Status(e.endpoint, e.messageID); got != "Completed" {
			t.Errorf("the Resolver shows %s on %s %q, want Completed", e.messageID, e.endpoint, got)
		}
	}
	// What BillingEndpoint published, in order, in the order's session and
	// correlation, each the child of the event it handled.
	var published []string
	for _, m := range w.Topic("BillingEndpoint") {
		if m.Type() != "EventRequest" || m.Prop("From") != "" {
			continue
		}
		published = append(published, m.MessageID+" parent="+m.Prop("ParentMessageId")+" session="+m.SessionID+" correlation="+m.CorrelationID)
	}
	want := []string{
		"InvoiceRequested-O-1 parent=OrderPlaced-O-1 session=O-1 correlation=corr-1",
		"OrderAccepted-O-1 parent=OrderPlaced-O-1 session=O-1 correlation=corr-1",
		"PaymentRecorded-pay-O-1 parent=PaymentReceived-O-1 session=O-1 correlation=corr-1",
	}
	if strings.Join(published, "\n") != strings.Join(want, "\n") {
		t.Fatalf("BillingEndpoint published:\n got  %q\n want %q", published, want)
	}
	if d := document(t, w, "ShopEndpoint", orders, "order-O-1"); d == nil || d["amount"] != 42.5 {
		t.Fatalf("the shop's order document: %v", d)
	}
	if d := document(t, w, "BillingEndpoint", ledger, "balance-C-1"); d == nil || d["balanceCents"] != 4250.0 || d["payments"] != 1.0 {
		t.Fatalf("the ledger's balance: %v", d)
	}
}

// An order whose billing fails blocks its session on BillingEndpoint and
// shows Failed; a payment of the order arriving meanwhile is parked behind
// it (Deferred). The operator's resubmission from NimBus's Manager runs the
// handler again, which completes it; the session is unblocked, the parked
// payment replayed and recorded, and the workflow goes on: the payment the
// provider announces for the invoice is the same payment, recorded once.
func TestSampleWorkflowResubmission(t *testing.T) {
	w, shop, payments := sampleWorkflow(t)
	ctx := context.Background()
	if err := shop.Publish(ctx, nimbus.Publication{EventTypeID: "OrderPlaced", MessageID: "OrderPlaced-O-2", SessionID: "O-2",
		Payload: OrderPlaced{OrderID: "O-2", CustomerID: "C-2", Amount: 10, Fail: failFailed}}); err != nil {
		t.Fatal(err)
	}
	if err := payments.Publish(ctx, nimbus.Publication{EventTypeID: "PaymentReceived", MessageID: "PaymentReceived-early-O-2", SessionID: "O-2",
		Payload: PaymentReceived{PaymentID: "pay-O-2", CustomerID: "C-2", AmountCents: 1000}}); err != nil {
		t.Fatal(err)
	}
	w.MustRun()
	outcomes(t, w, "BillingEndpoint", "OrderPlaced event_failed", "PaymentReceived deferred")
	if a, b := w.Status("BillingEndpoint", "OrderPlaced-O-2"), w.Status("BillingEndpoint", "PaymentReceived-early-O-2"); a != "Failed" || b != "Deferred" {
		t.Fatalf("the Resolver shows the order %q and the payment %q, want Failed and Deferred", a, b)
	}

	if err := w.Resubmit("BillingEndpoint", "OrderPlaced-O-2", ""); err != nil {
		t.Fatal(err)
	}
	w.MustRun()
	outcomes(t, w, "BillingEndpoint", "OrderPlaced event_failed", "PaymentReceived deferred",
		"OrderPlaced completed", "PaymentReceived completed", "PaymentReceived completed")
	for _, id := range []string{"OrderPlaced-O-2", "PaymentReceived-early-O-2", "PaymentReceived-O-2"} {
		if got := w.Status("BillingEndpoint", id); got != "Completed" {
			t.Errorf("after the resubmission the Resolver shows %s %q, want Completed", id, got)
		}
	}
	if d := document(t, w, "BillingEndpoint", ledger, "balance-C-2"); d == nil || d["balanceCents"] != 1000.0 || d["payments"] != 1.0 {
		t.Fatalf("the ledger's balance: %v, want one payment of 1000 cents", d)
	}
}

// When the broker refuses the event of a committed order, POST /api/orders
// still answers 201 (the order and its event are committed together); the
// OutboxSweep timer, once the marker is older than
// NimBus__Outbox__MinimumAge (five minutes), sends the event and the
// workflow goes on.
func TestSampleWorkflowOrderSentByTheOutboxSweep(t *testing.T) {
	w, _, _ := sampleWorkflow(t)
	w.Inject(nimbustest.Fault{Endpoint: "ShopEndpoint", Target: nimbustest.FaultSend, Calls: 1})
	resp := w.Call("ShopEndpoint", httptest.NewRequest(http.MethodPost, "/api/orders", strings.NewReader(`{"OrderId":"O-3","CustomerId":"C-3","Amount":7}`)))
	if resp.StatusCode != http.StatusCreated || w.FaultedCalls() != 1 {
		t.Fatalf("POST /api/orders with the send refused = %d (%d sends refused), want 201", resp.StatusCode, w.FaultedCalls())
	}
	w.MustRun()
	if len(w.Deliveries("BillingEndpoint")) != 0 {
		t.Fatalf("BillingEndpoint received %+v before the sweep", w.Deliveries("BillingEndpoint"))
	}

	if d := w.Timer("ShopEndpoint", "OutboxSweep"); d.Status != http.StatusOK {
		t.Fatalf("OutboxSweep = %+v", d)
	}
	w.MustRun()
	if n := len(w.Deliveries("BillingEndpoint")); n != 0 {
		t.Fatalf("a sweep before the minimum age sent the event (%d deliveries)", n)
	}
	w.Advance(5*time.Minute + time.Second)
	if d := w.Timer("ShopEndpoint", "OutboxSweep"); d.Status != http.StatusOK {
		t.Fatalf("OutboxSweep = %+v", d)
	}
	w.MustRun()
	outcomes(t, w, "BillingEndpoint", "OrderPlaced completed", "PaymentReceived completed")
	if got := w.Status("BillingEndpoint", "OrderPlaced-O-3"); got != "Completed" {
		t.Fatalf("the Resolver shows %q, want Completed", got)
	}
}
