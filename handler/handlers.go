package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

// registerHandlers is where this app registers its event handlers, one per
// NimBus EventTypeId. An event type with no handler is answered with an
// UnsupportedResponse.
//
// A handler returns subscriber.Completed() when done, or
// subscriber.PendingHandoff(...) when the outcome will be settled later. An
// error fails the delivery (the broker redelivers it); wrap it with
// subscriber.Permanent when a retry cannot help, subscriber.Transient
// otherwise (the default).
func registerHandlers(r *subscriber.Registry) {
	r.Handle("OrderPlaced", handleOrderPlaced)
}

// OrderPlaced is the sample endpoint's (BillingEndpoint's) event.
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
}

// approvalLimit is the amount above which the sample bills only after a
// manual approval (a pending handoff).
const approvalLimit = 10000

func handleOrderPlaced(ctx context.Context, ev *subscriber.Event) (subscriber.Result, error) {
	var o OrderPlaced
	if err := ev.Decode(&o); err != nil {
		return subscriber.Result{}, err
	}
	if o.OrderID == "" {
		return subscriber.Result{}, subscriber.Permanent(errors.New("OrderPlaced has no OrderId"))
	}
	if failsThisAttempt(o.FailFirstAttempts, ev.DeliveryCount) {
		return subscriber.Result{}, subscriber.Transient(fmt.Errorf("billing system busy (delivery %d; the sample fails the first %d)", ev.DeliveryCount, o.FailFirstAttempts))
	}
	if o.Amount > approvalLimit {
		return subscriber.PendingHandoff(subscriber.Handoff{
			Reason:        "ManualApproval",
			ExternalJobID: "approval-" + o.OrderID,
			ExpectedIn:    24 * time.Hour,
		}), nil
	}
	// A real endpoint would create the invoice here, idempotently keyed by
	// ev.MessageID or o.OrderID.
	return subscriber.Completed(), nil
}

// failsThisAttempt reports whether the sample simulates a failure: only when
// failures were asked for (failFirst > 0) and the delivery count is known
// (> 0: it is 0 when the invocation did not carry one) and within them.
func failsThisAttempt(failFirst, deliveryCount int) bool {
	return failFirst > 0 && deliveryCount > 0 && deliveryCount <= failFirst
}
