package nimbus_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/nimbus-go/functions-subscriber/nimbus"
)

// A front door commits an API's write and its first event together, and
// answers a retried request from the record of the first.
func ExampleFrontDoor() {
	app := nimbus.New()
	orders := app.FrontDoor(nimbus.Container{DatabaseID: "Sales", ContainerID: "orders", PartitionKeyPath: "/customerId"})

	placeOrder := func(w http.ResponseWriter, r *http.Request) {
		var o struct{ OrderID, CustomerID string }
		if json.NewDecoder(r.Body).Decode(&o) != nil || o.OrderID == "" || o.CustomerID == "" {
			http.Error(w, "OrderID and CustomerID are required", http.StatusBadRequest)
			return
		}
		fingerprint, _ := json.Marshal(o)
		tx := orders.Begin(r.Context(), nimbus.Request{PartitionKey: o.CustomerID, Key: o.OrderID, Fingerprint: fingerprint})
		_ = tx.Create(map[string]string{"id": "order-" + o.OrderID, "customerId": o.CustomerID})
		_ = tx.Publish(nimbus.Publication{EventTypeID: "OrderPlaced", MessageID: "OrderPlaced-" + o.OrderID, SessionID: o.OrderID, Payload: o})
		c, err := orders.Commit(r.Context(), tx, []byte(`{"orderId":"`+o.OrderID+`"}`))
		switch {
		case errors.Is(err, nimbus.ErrKeyReused), errors.Is(err, nimbus.ErrConflict):
			w.WriteHeader(http.StatusConflict)
		case err != nil:
			w.WriteHeader(http.StatusServiceUnavailable) // a retry of the request is safe
		case c.Replayed:
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(c.Answer)
		default:
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(c.Answer)
		}
	}
	_ = placeOrder // served by the code that serves the API
}

// A Go service off Functions publishes and commits as the app does, and
// runs the outbox sweep on its own ticker.
func ExampleService() {
	svc := nimbus.NewService()
	ctx := context.Background()
	if err := svc.Start(ctx, nimbus.Options{}); err != nil {
		return
	}
	defer svc.Close(ctx)
	_ = svc.Publish(ctx, nimbus.Publication{EventTypeID: "JobFound", MessageID: "JobFound-2030-01-01", Payload: map[string]int{"jobs": 3}})
	go func() {
		for range time.Tick(5 * time.Minute) {
			_, _ = svc.Sweep(ctx)
		}
	}()
}
