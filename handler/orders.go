package main

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"

	"github.com/nimbus-go/functions-subscriber/nimbus"
)

// orders is the container of the orders PlaceOrder takes, partitioned by
// customer (defaults Sales and orders).
var orders = nimbus.Container{
	DatabaseID:       "Sales",
	ContainerID:      "orders",
	DatabaseSetting:  "NimBus__Sample__Orders__DatabaseId",
	ContainerSetting: "NimBus__Sample__Orders__ContainerId",
	PartitionKeyPath: "/customerId",
}

// placeOrderRequest is PlaceOrder's body.
type placeOrderRequest struct {
	OrderID    string          `json:"OrderId"`
	CustomerID string          `json:"CustomerId"`
	Amount     json.RawMessage `json:"Amount"`
}

// orderDoc is an order as the container keeps it.
type orderDoc struct {
	ID         string  `json:"id"`
	CustomerID string  `json:"customerId"`
	OrderID    string  `json:"orderId"`
	Amount     float64 `json:"amount"`
}

// placeOrder answers POST /api/orders: it commits the order and its
// OrderPlaced event through door in one unit of work, keyed by the
// Idempotency-Key header (the OrderId without one).
func placeOrder(door *nimbus.FrontDoor) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			answer(w, http.StatusMethodNotAllowed, map[string]string{"error": "use POST"})
			return
		}
		var in placeOrderRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&in); err != nil {
			answer(w, http.StatusBadRequest, map[string]string{"error": "the body is not a JSON order"})
			return
		}
		amount, err := strconv.ParseFloat(string(in.Amount), 64)
		switch {
		case in.OrderID == "":
			answer(w, http.StatusBadRequest, map[string]string{"error": "OrderId is missing or empty"})
			return
		case in.CustomerID == "":
			answer(w, http.StatusBadRequest, map[string]string{"error": "CustomerId is missing or empty"})
			return
		case err != nil || !(amount > 0) || math.IsInf(amount, 0):
			answer(w, http.StatusBadRequest, map[string]string{"error": "Amount is not a number above 0"})
			return
		}
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			key = in.OrderID
		}
		event := OrderPlaced{OrderID: in.OrderID, CustomerID: in.CustomerID, Amount: amount}
		fingerprint, _ := json.Marshal(event)
		tx := door.Begin(r.Context(), nimbus.Request{PartitionKey: in.CustomerID, Key: key, Fingerprint: fingerprint})
		messageID := "OrderPlaced-" + in.OrderID
		if err := errors.Join(
			tx.Create(orderDoc{ID: "order-" + in.OrderID, CustomerID: in.CustomerID, OrderID: in.OrderID, Amount: amount}),
			tx.Publish(nimbus.Publication{EventTypeID: "OrderPlaced", MessageID: messageID, SessionID: in.OrderID,
				CorrelationID: r.Header.Get("X-Correlation-Id"), Payload: event}),
		); err != nil {
			answer(w, http.StatusBadRequest, map[string]string{"error": "the order cannot be stored as given"})
			return
		}
		body, _ := json.Marshal(map[string]string{"orderId": in.OrderID, "messageId": messageID})
		c, err := door.Commit(r.Context(), tx, body)
		switch {
		case errors.Is(err, nimbus.ErrKeyReused), errors.Is(err, nimbus.ErrConflict):
			answer(w, http.StatusConflict, map[string]string{"error": "the idempotency key or the order was used by another request"})
		case nimbus.KindOf(err) == nimbus.KindPermanent:
			answer(w, http.StatusBadRequest, map[string]string{"error": "the order cannot be stored as given"})
		case err != nil:
			answer(w, http.StatusServiceUnavailable, map[string]string{"error": "the order store is unavailable; retry the request"})
		case c.Replayed:
			writeJSON(w, http.StatusOK, c.Answer)
		default:
			writeJSON(w, http.StatusCreated, c.Answer)
		}
	})
}

func answer(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	writeJSON(w, status, b)
}

func writeJSON(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
