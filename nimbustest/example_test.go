package nimbustest_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nimbus-go/functions-subscriber/nimbus"
	"github.com/nimbus-go/functions-subscriber/nimbustest"
)

type orderPlaced struct {
	OrderID string
	Total   int64
}

// acceptOrder is a plain handler: it accepts an order and publishes
// OrderAccepted.
func acceptOrder(ctx context.Context, ev *nimbus.Event) (nimbus.Result, error) {
	var o orderPlaced
	if err := ev.Decode(&o); err != nil {
		return nimbus.Result{}, err
	}
	if o.Total > 1000 {
		nimbus.Logger(ctx).Warn("large order", "orderId", o.OrderID, "total", o.Total)
	}
	return nimbus.Completed(), ev.Publish(nimbus.Publication{EventTypeID: "OrderAccepted", MessageID: "OrderAccepted-" + o.OrderID,
		Payload: map[string]string{"OrderId": o.OrderID}})
}

// A plain handler is called directly on an event NewEvent builds; the
// event keeps what it published.
func ExampleNewEvent() {
	ev := nimbustest.NewEvent("OrderPlaced", orderPlaced{OrderID: "O-1", Total: 40})
	ctx, _ := nimbustest.HandlerContext(context.Background(), ev)
	res, err := acceptOrder(ctx, ev)
	_, pending := res.Handoff()
	fmt.Println("error:", err, "pending:", pending)
	for _, p := range ev.Published() {
		fmt.Println("published", p.EventTypeID, p.MessageID)
	}
	// Output:
	// error: <nil> pending: false
	// published OrderAccepted OrderAccepted-O-1
}

// What a handler logs through nimbus.Logger is in the Logs, read back
// from the JSON lines the app would write, with the event's ids.
func ExampleHandlerContext() {
	ev := nimbustest.NewEvent("OrderPlaced", orderPlaced{OrderID: "O-2", Total: 5000})
	ev.MessageID = "OrderPlaced-O-2"
	ctx, logs := nimbustest.HandlerContext(context.Background(), ev)
	if _, err := acceptOrder(ctx, ev); err != nil {
		fmt.Println(err)
	}
	for _, r := range logs.Records() {
		fmt.Println(r.Level, r.Message, r.Attrs["orderId"], r.Attrs["total"], r.Attrs["messageId"])
	}
	// Output:
	// WARN large order O-2 5000 OrderPlaced-O-2
}

var ledger = nimbus.Container{DatabaseID: "Billing", ContainerID: "accounts", PartitionKeyPath: "/customerId"}

type ledgerAccount struct {
	ID         string `json:"id"`
	CustomerID string `json:"customerId"`
	Balance    int64  `json:"balance"`
}

type paymentReceived struct {
	CustomerID, PaymentID string
	Amount                int64
}

// recordPayment credits the customer's account with a write conditioned
// on the ETag it read, and publishes PaymentRecorded with it.
func recordPayment(ctx context.Context, ev *nimbus.Event, tx *nimbus.Tx) (nimbus.Result, error) {
	var p paymentReceived
	if err := ev.Decode(&p); err != nil {
		return nimbus.Result{}, err
	}
	var acc ledgerAccount
	etag, err := tx.Read(ctx, "acc-"+p.CustomerID, &acc)
	if err != nil {
		return nimbus.Result{}, err
	}
	acc.Balance += p.Amount
	if err := tx.Replace(acc, &nimbus.WriteOptions{IfMatch: etag}); err != nil {
		return nimbus.Result{}, err
	}
	nimbus.Logger(ctx).Info("credited", "balance", acc.Balance)
	return nimbus.Completed(), tx.Publish(nimbus.Publication{EventTypeID: "PaymentRecorded", MessageID: "PaymentRecorded-" + p.PaymentID,
		Payload: map[string]any{"PaymentId": p.PaymentID, "Balance": acc.Balance}})
}

func customerOfPayment(ev *nimbus.Event) (string, error) {
	var p paymentReceived
	err := ev.Decode(&p)
	return p.CustomerID, err
}

// A transactional handler runs on the real pipeline over a seeded
// container: the run shows the commit's writes and the events sent after
// it, and the container holds the result.
func ExampleRunTx() {
	c := nimbustest.NewContainer(ledger)
	if err := c.Seed(ledgerAccount{ID: "acc-C-1", CustomerID: "C-1", Balance: 100}); err != nil {
		fmt.Println(err)
		return
	}
	ev := nimbustest.NewEvent("PaymentReceived", paymentReceived{CustomerID: "C-1", PaymentID: "P-1", Amount: 25})
	run, err := nimbustest.RunTx(context.Background(), c, ev, customerOfPayment, recordPayment)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(run.Outcome, "runs:", run.Runs, "response:", run.Response)
	for _, w := range run.Writes {
		fmt.Println(w.Op, w.PartitionKey, w.ID, string(w.Document))
	}
	for _, p := range run.Published {
		fmt.Println("sent", p.EventTypeID, p.MessageID, string(p.Payload.(json.RawMessage)))
	}
	var acc ledgerAccount
	if found, err := c.Read("C-1", "acc-C-1", &acc); found && err == nil {
		fmt.Println("balance", acc.Balance)
	}
	// Output:
	// completed runs: 1 response: ResolutionResponse
	// replace C-1 acc-C-1 {"balance":125,"customerId":"C-1","id":"acc-C-1"}
	// sent PaymentRecorded PaymentRecorded-P-1 {"Balance":125,"PaymentId":"P-1"}
	// balance 125
}

// A document changed by another writer between the handler's read and
// the commit makes the conditioned write conflict: the pipeline runs the
// handler again on fresh reads, and only the second run's effect is
// committed.
func ExampleChangeAfterRead() {
	c := nimbustest.NewContainer(ledger)
	if err := c.Seed(ledgerAccount{ID: "acc-C-1", CustomerID: "C-1", Balance: 100}); err != nil {
		fmt.Println(err)
		return
	}
	ev := nimbustest.NewEvent("PaymentReceived", paymentReceived{CustomerID: "C-1", PaymentID: "P-2", Amount: 10})
	run, err := nimbustest.RunTx(context.Background(), c, ev, customerOfPayment, recordPayment,
		nimbustest.ChangeAfterRead("acc-C-1", func(doc map[string]any) { doc["balance"] = 500 }))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(run.Outcome, "runs:", run.Runs)
	for _, r := range run.Logs {
		fmt.Println(r.Message, r.Attrs["balance"])
	}
	fmt.Println(string(run.Writes[0].Document))
	// Output:
	// completed runs: 2
	// credited 110
	// credited 510
	// {"balance":510,"customerId":"C-1","id":"acc-C-1"}
}
