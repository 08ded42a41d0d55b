package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// ordersDatabase is NimBus__Sample__Orders__DatabaseId's default.
const ordersDatabase = "Sales"

// ordersSettings puts the sample's orders in container of the Sales
// database.
func ordersSettings(container string) map[string]string {
	return map[string]string{
		"NimBus__Sample__Orders__DatabaseId":  ordersDatabase,
		"NimBus__Sample__Orders__ContainerId": container,
	}
}

// placeOrderBody is PlaceOrder's request body for an order.
func placeOrderBody(orderID, customerID string, amount float64) string {
	return fmt.Sprintf(`{"OrderId":%q,"CustomerId":%q,"Amount":%v}`, orderID, customerID, amount)
}

// isOrderAnswer reports whether body is PlaceOrder's answer to the
// committed order orderID: {"orderId","messageId"} and nothing else, in any
// key order.
func isOrderAnswer(body, orderID string) bool {
	var got map[string]any
	if json.Unmarshal([]byte(body), &got) != nil {
		return false
	}
	return len(got) == 2 && got["orderId"] == orderID && got["messageId"] == "OrderPlaced-"+orderID
}

// postOrder posts body to the binary's /api/orders with headers and
// returns the status and the answer's body (status 0 and the error when
// the request got no answer).
func postOrder(ctx context.Context, client *http.Client, base, body string, headers map[string]string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/orders", strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err
	}
	return resp.StatusCode, string(bytes.TrimSpace(b)), nil
}

// orderPlacedWant is the application properties NimBus's
// Publish(event, sessionId, correlationId, messageId) writes for an
// OrderPlaced sent outside a delivery, with their AMQP types.
func orderPlacedWant() map[string]any {
	return map[string]any{
		"To":                   "OrderPlaced",
		"MessageType":          "EventRequest",
		"EventId":              nil,
		"OriginatingMessageId": "self",
		"ParentMessageId":      "self",
		"RetryCount":           int32(0),
		"OriginatingFrom":      endpointID,
		"EventTypeId":          "OrderPlaced",
	}
}

// readOrders returns the documents of customer's orders in the orders
// container, read straight from the Cosmos server, without the store's
// own fields.
func readOrders(tb testing.TB, c *azcosmos.ContainerClient, customer string) []map[string]any {
	tb.Helper()
	docs := queryAll[map[string]any](tb, c, azcosmos.NewPartitionKeyString(customer),
		"SELECT * FROM c WHERE c.customerId = @customer AND STARTSWITH(c.id, 'order-')", azcosmos.QueryParameter{Name: "@customer", Value: customer})
	for i, d := range docs {
		docs[i] = orderFields(d)
	}
	return docs
}

// orderFields keeps the order's own fields of a stored document (not the
// store's _rid, _etag, _ts and the like): readOrders returns these.
func orderFields(d map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range d {
		if !strings.HasPrefix(k, "_") {
			out[k] = v
		}
	}
	return out
}

// TestPlaceOrderPublishesOverAMQP posts an order to the real binary's
// POST /api/orders with a correlation id and a traceparent: the answer is
// 201 with the order's id and message id, the order document is in Cosmos
// with the order's fields, and the endpoint's topic gets OrderPlaced with
// NimBus's Publish wire, property by property with its AMQP type, in the
// request's trace.
func TestPlaceOrderPublishesOverAMQP(t *testing.T) {
	t.Parallel()
	container := "orders-" + testenv.UniqueDatabase(t)
	s := startStack(t, stackConfig{topology: publishingTopology("OrderPlaced"), settings: ordersSettings(container)})
	const (
		traceID = "5bf92f3577b34da6a3ce929d0e0e4736"
		orderID = "O-wire-1"
		corr    = "corr-wire-1"
	)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	status, answer, err := postOrder(ctx, http.DefaultClient, s.handler.base, placeOrderBody(orderID, "C-wire", 12.5),
		map[string]string{"X-Correlation-Id": corr, "traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"})
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusCreated || !isOrderAnswer(answer, orderID) {
		t.Fatalf("POST /api/orders answered %d %s, want 201 with the order's id and message id", status, answer)
	}

	tapped := testenv.ReceiveSession(t, s.sb.Client(t), endpointID, tapSub, orderID, 1, 30*time.Second)
	checkPublished(t, "OrderPlaced", tapped[0], orderPlacedWant(), traceID, "OrderPlaced-"+orderID, orderID, corr,
		eventBody("OrderPlaced", `{"OrderId":"O-wire-1","CustomerId":"C-wire","Amount":12.5}`))
	if _, ok := tapped[0].ApplicationProperties["From"]; ok {
		t.Errorf("OrderPlaced carries a From property: %v", tapped[0].ApplicationProperties["From"])
	}

	c, err := s.cosmosClient(t).NewContainer(ordersDatabase, container)
	if err != nil {
		t.Fatal(err)
	}
	docs := readOrders(t, c, "C-wire")
	want := map[string]any{"id": "order-" + orderID, "customerId": "C-wire", "orderId": orderID, "amount": 12.5}
	if len(docs) != 1 || fmt.Sprint(docs[0]) != fmt.Sprint(want) {
		t.Errorf("the orders of C-wire in Cosmos: %v, want one %v", docs, want)
	}
	if t.Failed() {
		t.Log(s.handler.Output(30))
	}
}

// placedSub is a subscription of the endpoint's topic that keeps every
// OrderPlaced copy the topic receives.
const placedSub = "placed"

// TestConcurrentIdenticalOrdersCommitOnce posts, in each of 20 trials, 32
// copies of one order (the same body, key and correlation id) to the real
// binary at once: exactly one copy is answered 201 and the 31 others 200
// with the same body; Cosmos holds one document of the order; the
// endpoint's topic gets OrderPlaced under one message id, and any copy
// sent again is the same message (properties with their AMQP types, trace
// context and body).
func TestConcurrentIdenticalOrdersCommitOnce(t *testing.T) {
	longRun(t)
	const (
		trials     = 20
		concurrent = 32
	)
	container := "orders-" + testenv.UniqueDatabase(t)
	s := startStack(t, stackConfig{topology: withTap(placedSub, "OrderPlaced"), settings: ordersSettings(container)})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrent, MaxConnsPerHost: concurrent}}
	defer client.CloseIdleConnections()
	c, err := s.cosmosClient(t).NewContainer(ordersDatabase, container)
	if err != nil {
		t.Fatal(err)
	}
	statuses := map[int]int{}
	for trial := range trials {
		orderID, customer := fmt.Sprintf("O-conc-%02d", trial), fmt.Sprintf("C-conc-%02d", trial)
		body := placeOrderBody(orderID, customer, float64(100+trial)+0.25)
		headers := map[string]string{"X-Correlation-Id": "corr-" + orderID}
		type result struct {
			status int
			body   string
			err    error
		}
		results := make([]result, concurrent)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range concurrent {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				st, b, err := postOrder(ctx, client, s.handler.base, body, headers)
				results[i] = result{st, b, err}
			}()
		}
		close(start)
		wg.Wait()
		created, replayed := 0, 0
		for i, r := range results {
			statuses[r.status]++
			switch {
			case r.err != nil:
				t.Errorf("trial %d copy %d: %v", trial, i, r.err)
			case r.status == http.StatusCreated:
				created++
			case r.status == http.StatusOK:
				replayed++
			default:
				t.Errorf("trial %d copy %d: answered %d %s, want 201 or 200", trial, i, r.status, r.body)
			}
			if r.err == nil && (!isOrderAnswer(r.body, orderID) || r.body != results[0].body) {
				t.Errorf("trial %d copy %d: answered %s, want the order's answer, the same for every copy (%s)", trial, i, r.body, results[0].body)
			}
		}
		if created != 1 || replayed != concurrent-1 {
			t.Errorf("trial %d: %d answered 201 and %d 200, want 1 and %d", trial, created, replayed, concurrent-1)
		}
		docs := readOrders(t, c, customer)
		want := map[string]any{"id": "order-" + orderID, "customerId": customer, "orderId": orderID, "amount": float64(100+trial) + 0.25}
		if len(docs) != 1 || fmt.Sprint(docs[0]) != fmt.Sprint(want) {
			t.Errorf("trial %d: the orders of %s in Cosmos: %v, want one %v", trial, customer, docs, want)
		}
	}

	placed := byMessageID(drainTap(t, s.sb.Client(t), placedSub, 2*time.Second))
	resends := 0
	for trial := range trials {
		id := fmt.Sprintf("OrderPlaced-O-conc-%02d", trial)
		cs := placed[id]
		if len(cs) == 0 {
			t.Errorf("trial %d: %s never reached the topic", trial, id)
			continue
		}
		resends += len(cs) - 1
		for _, cp := range cs[1:] {
			if d := copyDiff(cs[0], cp); d != "" {
				t.Errorf("trial %d: a second copy of %s differs: %s", trial, id, d)
			}
		}
		if deref(cs[0].SessionID) != fmt.Sprintf("O-conc-%02d", trial) || deref(cs[0].CorrelationID) != fmt.Sprintf("corr-O-conc-%02d", trial) {
			t.Errorf("trial %d: %s has SessionId %q CorrelationId %q", trial, id, deref(cs[0].SessionID), deref(cs[0].CorrelationID))
		}
		delete(placed, id)
	}
	for id, cs := range placed {
		t.Errorf("an OrderPlaced of no order: %s (%d copies)", id, len(cs))
	}
	t.Logf("%d trials × %d concurrent identical requests: answers %v; %d OrderPlaced copies sent again", trials, concurrent, statuses, resends)
	if t.Failed() {
		t.Log(s.handler.Output(30))
	}
}
