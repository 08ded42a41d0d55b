package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/nimbus-go/functions-subscriber/nimbus"
)

// registerHandlers is where this app registers its event handlers, one per
// NimBus EventTypeId. An event type with no handler is answered with an
// UnsupportedResponse.
//
// nimbus.HandleEvent and nimbus.HandleEventTx decode the event into the
// handler's Go type first: an event that does not decode fails permanently
// and the handler does not run.
//
// A handler returns nimbus.Completed() when done, or
// nimbus.PendingHandoff(...) when the outcome will be settled later. A plain
// error (or a panic) fails the event: the Resolver gets an ErrorResponse,
// the session is blocked, and a RetryRequest follows when a retry policy
// applies. nimbus.Transient(err) asks the broker to redeliver,
// nimbus.Permanent(err) sends the message to the dead-letter path,
// nimbus.Discard(err) skips the event (SkipResponse).
//
// PaymentReceived is transactional (nimbus.HandleEventTx): its effects on
// the ledger container and the record that the message was handled commit
// in one Cosmos DB transactional batch, so each payment is applied exactly
// once.
func registerHandlers(app *nimbus.App) {
	nimbus.HandleEvent(app, "OrderPlaced", handleOrderPlaced)
	nimbus.HandleEventTx(app, "PaymentReceived", ledger, paymentPartition, handlePaymentReceived)
	app.HandleHTTP(nimbus.HTTPFunction{Name: "PlaceOrder", Route: "orders", Methods: []string{http.MethodPost}, Handler: placeOrder(app.FrontDoor(orders))})
}

// OrderPlaced is the sample endpoint's (BillingEndpoint's) event. Besides
// the order, it carries switches that drive the sample handler down every
// outcome, for demos and for tests written outside this repository.
type OrderPlaced struct {
	OrderID    string  `json:"OrderId"`
	CustomerID string  `json:"CustomerId"`
	Amount     float64 `json:"Amount"`
	// FailFirstAttempts makes the sample handler fail transiently on the
	// first N deliveries, to show redelivery in the demo. It applies only
	// when the delivery count is known (1 or more): a message delivered
	// without one is handled as if its failures were already behind it,
	// because the sample could not tell a redelivery from the first delivery
	// and would otherwise fail every delivery until the dead-letter.
	FailFirstAttempts int `json:"FailFirstAttempts,omitempty"`
	// Fail makes the handler fail in one of the handler API's ways:
	// "failed" (a plain error: ErrorResponse, session blocked, RetryRequest
	// when a policy applies), "transient" (broker redelivery), "permanent"
	// (dead-letter path), "discard" (SkipResponse) or "panic" (a panic,
	// handled as failed). Empty: no failure. Any other value is a permanent
	// failure (bad data).
	Fail string `json:"Fail,omitempty"`
	// FailOn says when Fail applies: "original" (the default) on the
	// original delivery and its redeliveries only, so a RetryRequest, a
	// resubmission or the replay of a parked copy succeeds; "always" on
	// every attempt. Any other value is a permanent failure.
	FailOn string `json:"FailOn,omitempty"`
	// Handoff forces a pending handoff whatever the amount.
	Handoff bool `json:"Handoff,omitempty"`
}

// Values of OrderPlaced.Fail.
const (
	failFailed    = "failed"
	failTransient = "transient"
	failPermanent = "permanent"
	failDiscard   = "discard"
	failPanic     = "panic"
)

// Values of OrderPlaced.FailOn.
const (
	failOnOriginal = "original"
	failOnAlways   = "always"
)

// approvalLimit is the amount above which the sample bills only after a
// manual approval (a pending handoff).
const approvalLimit = 10000

// ledger is the container of payments and balances, partitioned by
// customer. Its ids are read from the two settings (defaults Billing and
// ledger); it lives in the inbox's Cosmos account, or in memory with
// NimBus__Inbox__Store=InMemory.
var ledger = nimbus.Container{
	DatabaseID:       "Billing",
	ContainerID:      "ledger",
	DatabaseSetting:  "NimBus__Sample__Ledger__DatabaseId",
	ContainerSetting: "NimBus__Sample__Ledger__ContainerId",
	PartitionKeyPath: "/customerId",
}

// PaymentReceived is a payment of AmountCents by a customer (negative for
// a refund). The Fail, FailOn and FailFirstAttempts switches work as
// OrderPlaced's, after the handler has queued its writes and before
// anything is committed.
type PaymentReceived struct {
	PaymentID         string `json:"PaymentId"`
	CustomerID        string `json:"CustomerId"`
	AmountCents       int64  `json:"AmountCents"`
	FailFirstAttempts int    `json:"FailFirstAttempts,omitempty"`
	Fail              string `json:"Fail,omitempty"`
	FailOn            string `json:"FailOn,omitempty"`
}

// payment is the ledger's document of one payment.
type payment struct {
	ID          string `json:"id"`
	CustomerID  string `json:"customerId"`
	AmountCents int64  `json:"amountCents"`
	MessageID   string `json:"messageId"`
}

// balance is the ledger's document of a customer's balance.
type balance struct {
	ID           string `json:"id"`
	CustomerID   string `json:"customerId"`
	BalanceCents int64  `json:"balanceCents"`
	Payments     int64  `json:"payments"`
}

// paymentPartition is the ledger partition of a payment: its customer.
func paymentPartition(p PaymentReceived) (string, error) {
	if p.CustomerID == "" {
		return "", errors.New("PaymentReceived has no CustomerId")
	}
	return p.CustomerID, nil
}

// maxExactCents is the largest amount of cents the ledger keeps exactly:
// Cosmos DB stores every JSON number as a double, whose integers are exact
// up to 2^53-1.
const maxExactCents = 1<<53 - 1

// handlePaymentReceived records the payment and adds it to the customer's
// balance, in one batch with the inbox marker, and announces it:
// PaymentRecorded (message id PaymentRecorded-<PaymentId>) with the
// customer's balance after this payment, stored in the marker with the
// batch and sent once the batch committed. A payment already recorded (a
// producer's re-send under a new MessageId) is not applied again and
// publishes nothing: only the marker is committed.
//
// The balance the event announces must be the balance this payment left,
// so the increment is conditioned on the balance's ETag as read: a
// payment of the same customer committed in between makes this batch
// conflict, and the pipeline runs the handler again on fresh reads (or
// the broker redelivers it) instead of announcing a balance that was not.
// Only the first payment of a customer creates the balance; a concurrent
// first payment conflicts in the same way.
func handlePaymentReceived(ctx context.Context, ev *nimbus.Event, tx *nimbus.Tx, p PaymentReceived) (nimbus.Result, error) {
	if p.PaymentID == "" {
		return nimbus.Result{}, nimbus.Permanent(errors.New("PaymentReceived has no PaymentId"))
	}
	if p.AmountCents > maxExactCents || p.AmountCents < -maxExactCents {
		return nimbus.Result{}, nimbus.Permanent(errors.New("PaymentReceived.AmountCents is beyond 2^53-1 cents, which Cosmos DB's numbers (doubles) cannot hold exactly"))
	}
	payID, balID := "payment-"+p.PaymentID, "balance-"+p.CustomerID
	// The two reads run at once.
	var (
		bal            balance
		balTag         nimbus.ETag
		payErr, balErr error
		wg             sync.WaitGroup
	)
	wg.Go(func() { _, payErr = tx.Read(ctx, payID, nil) })
	wg.Go(func() { balTag, balErr = tx.Read(ctx, balID, &bal) })
	wg.Wait()
	paid, hasBal := payErr == nil, balErr == nil
	if err := errors.Join(notFoundIsNil(payErr), notFoundIsNil(balErr)); err != nil {
		return nimbus.Result{}, err
	}
	if !paid {
		after := bal.BalanceCents + p.AmountCents
		if after > maxExactCents || after < -maxExactCents {
			return nimbus.Result{}, nimbus.Permanent(errors.New("the balance would go beyond 2^53-1 cents, which Cosmos DB's numbers (doubles) cannot hold exactly"))
		}
		if err := tx.Create(payment{ID: payID, CustomerID: p.CustomerID, AmountCents: p.AmountCents, MessageID: ev.MessageID}); err != nil {
			return nimbus.Result{}, err
		}
		var err error
		if hasBal {
			err = tx.Patch(balID, new(nimbus.Patch).Increment("/balanceCents", p.AmountCents).Increment("/payments", 1), &nimbus.WriteOptions{IfMatch: balTag})
		} else {
			err = tx.Create(balance{ID: balID, CustomerID: p.CustomerID, BalanceCents: p.AmountCents, Payments: 1})
		}
		if err != nil {
			return nimbus.Result{}, err
		}
		if err := tx.Publish(nimbus.Publication{
			EventTypeID: "PaymentRecorded", MessageID: "PaymentRecorded-" + p.PaymentID,
			Payload: PaymentRecorded{PaymentID: p.PaymentID, CustomerID: p.CustomerID, AmountCents: p.AmountCents, BalanceCents: after},
		}); err != nil {
			return nimbus.Result{}, err
		}
	}
	// The switches act after the writes and the event are queued: a failure
	// here drops them, and nothing is committed or sent.
	if err := switches(p.Fail, p.FailOn, p.FailFirstAttempts, ev, "ledger busy"); err != nil {
		return nimbus.Result{}, err
	}
	return nimbus.Completed(), nil
}

// PaymentRecorded announces a payment the ledger applied, with the
// customer's balance after it.
type PaymentRecorded struct {
	PaymentID    string `json:"PaymentId"`
	CustomerID   string `json:"CustomerId"`
	AmountCents  int64  `json:"AmountCents"`
	BalanceCents int64  `json:"BalanceCents"`
}

// notFoundIsNil is err, or nil for nimbus.ErrNotFound.
func notFoundIsNil(err error) error {
	if errors.Is(err, nimbus.ErrNotFound) {
		return nil
	}
	return err
}

func handleOrderPlaced(ctx context.Context, ev *nimbus.Event, o OrderPlaced) (nimbus.Result, error) {
	if o.OrderID == "" {
		return nimbus.Result{}, nimbus.Permanent(errors.New("OrderPlaced has no OrderId"))
	}
	if err := switches(o.Fail, o.FailOn, o.FailFirstAttempts, ev, "billing system busy"); err != nil {
		return nimbus.Result{}, err
	}
	if o.Handoff || o.Amount > approvalLimit {
		return nimbus.PendingHandoff(nimbus.Handoff{
			Reason:        "ManualApproval",
			ExternalJobID: "approval-" + o.OrderID,
			ExpectedIn:    24 * time.Hour,
		}), nil
	}
	// The order continues its workflow: billing is asked for the invoice,
	// then the order is announced as accepted. The events go out only
	// because the handler completes, in this order; their message ids
	// derive from the order, so a redelivery that runs the handler again
	// publishes the same ids, and every downstream inbox recognises them.
	// A delivery without a MessageId cannot be the parent of an event
	// (NimBus refuses to publish from one): the order completes without
	// them.
	if ev.MessageID == "" {
		return nimbus.Completed(), nil
	}
	if err := ev.Publish(nimbus.Publication{
		EventTypeID: "InvoiceRequested", MessageID: "InvoiceRequested-" + o.OrderID,
		Payload: InvoiceRequested{OrderID: o.OrderID, CustomerID: o.CustomerID, Amount: o.Amount},
	}); err != nil {
		return nimbus.Result{}, err
	}
	if err := ev.Publish(nimbus.Publication{
		EventTypeID: "OrderAccepted", MessageID: "OrderAccepted-" + o.OrderID,
		Payload: OrderAccepted{OrderID: o.OrderID},
	}); err != nil {
		return nimbus.Result{}, err
	}
	return nimbus.Completed(), nil
}

// InvoiceRequested is published when an order is accepted: billing is
// asked to invoice it.
type InvoiceRequested struct {
	OrderID    string  `json:"OrderId"`
	CustomerID string  `json:"CustomerId"`
	Amount     float64 `json:"Amount"`
}

// OrderAccepted is published after InvoiceRequested when an order is
// accepted.
type OrderAccepted struct {
	OrderID string `json:"OrderId"`
}

// switches returns the failure the Fail, FailOn and FailFirstAttempts
// switches ask for on this delivery (busy words the transient one), nil
// when none.
func switches(fail, failOn string, failFirst int, ev *nimbus.Event, busy string) error {
	if err := simulatedFailure(fail, failOn, ev.Attempt); err != nil {
		return err
	}
	if failsThisAttempt(failFirst, ev.DeliveryCount) {
		return nimbus.Transient(fmt.Errorf("%s (delivery %d; the sample fails the first %d)", busy, ev.DeliveryCount, failFirst))
	}
	return nil
}

// failsThisAttempt reports whether the sample simulates a failure: only when
// failures were asked for (failFirst > 0) and the delivery count is known
// (> 0: it is 0 when the invocation did not carry one) and within them.
func failsThisAttempt(failFirst, deliveryCount int) bool {
	return failFirst > 0 && deliveryCount > 0 && deliveryCount <= failFirst
}

// simulatedFailure returns the failure the Fail and FailOn switches ask for
// on this attempt (or panics, for Fail=panic), nil when none. Its texts name
// the switch, never a value of the order.
func simulatedFailure(fail, failOn string, attempt nimbus.Attempt) error {
	if fail == "" {
		return nil
	}
	switch failOn {
	case "", failOnOriginal:
		// An attempt the pipeline did not label counts as the original.
		if attempt != nimbus.AttemptOriginal && attempt != "" {
			return nil
		}
	case failOnAlways:
	default:
		return nimbus.Permanent(errors.New(`OrderPlaced.FailOn is not "original" or "always"`))
	}
	switch fail {
	case failFailed:
		return errors.New("billing rejected the order (the sample fails it: Fail=failed)")
	case failTransient:
		return nimbus.Transient(errors.New("billing system busy (the sample fails it: Fail=transient)"))
	case failPermanent:
		return nimbus.Permanent(errors.New("the order cannot be billed (the sample fails it: Fail=permanent)"))
	case failDiscard:
		return nimbus.Discard(errors.New("the order is not billed here (the sample discards it: Fail=discard)"))
	case failPanic:
		panic("the sample handler panics (Fail=panic)")
	}
	return nimbus.Permanent(errors.New(`OrderPlaced.Fail is not one of "failed", "transient", "permanent", "discard", "panic"`))
}
