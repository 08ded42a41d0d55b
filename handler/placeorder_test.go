package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/devhost"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/scaffold"
	"github.com/nimbus-go/functions-subscriber/internal/sleep"
	"github.com/nimbus-go/functions-subscriber/nimbus"
)

// request sends body to the app's url with the headers (name, value pairs)
// and returns the status and the answer's body.
func request(t *testing.T, method, url, body string, headers ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// sentOrders returns the OrderPlaced events the app's in-memory sink kept.
func sentOrders(t *testing.T, base string) []devhost.SentResponse {
	t.Helper()
	sent, err := (&devhost.Client{BaseURL: base}).Sent(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var out []devhost.SentResponse
	for _, m := range sent {
		if m.Properties["EventTypeId"].Value == "OrderPlaced" {
			out = append(out, m)
		}
	}
	return out
}

// The sample app serves PlaceOrder at POST /api/orders, as the Functions
// host forwards it: the order is committed with its OrderPlaced event
// (NimBus's Publish wire: session OrderId, the request's correlation id),
// a retry is answered from the record without a second event, another
// body under the same key is a conflict, a bad body names its field, and
// another method is refused; in memory and on Cosmos DB.
func TestPlaceOrderServedByTheApp(t *testing.T) {
	for _, store := range []string{"InMemory", "Cosmos"} {
		t.Run(store, func(t *testing.T) {
			var cos *testenv.Cosmos
			conn := ""
			if store == "Cosmos" {
				cos = testenv.StartCosmos(t, testenv.CosmosOptions{Consistency: "Strong"})
				conn = cos.ConnectionString()
			}
			base, _ := startLedgerApp(t, conn)
			url := base + "/api/orders"
			const order = `{"OrderId":"O-7","CustomerId":"C-7","Amount":42.5}`
			const created = `{"messageId":"OrderPlaced-O-7","orderId":"O-7"}`
			if code, body := request(t, http.MethodPost, url, order, "X-Correlation-Id", "corr-7"); code != 201 || body != created {
				t.Fatalf("POST = %d %s, want 201 %s", code, body, created)
			}
			if code, body := request(t, http.MethodPost, url, order, "X-Correlation-Id", "corr-7"); code != 200 || body != created {
				t.Fatalf("retry = %d %s, want 200 %s", code, body, created)
			}
			if code, _ := request(t, http.MethodPost, url, `{"OrderId":"O-7","CustomerId":"C-7","Amount":43}`); code != 409 {
				t.Fatalf("same key, another body = %d, want 409", code)
			}
			if code, body := request(t, http.MethodPost, url, `{"OrderId":"O-8","CustomerId":"","Amount":1}`); code != 400 || !strings.Contains(body, "CustomerId") || strings.Contains(body, "O-8") {
				t.Fatalf("empty CustomerId = %d %s, want 400 naming the field and quoting no value", code, body)
			}
			if code, _ := request(t, http.MethodGet, url, ""); code != 405 {
				t.Fatalf("GET = %d, want 405", code)
			}

			sent := sentOrders(t, base)
			if len(sent) != 1 {
				t.Fatalf("%d OrderPlaced sent, want 1", len(sent))
			}
			m := sent[0]
			if m.MessageID != "OrderPlaced-O-7" || m.SessionID != "O-7" || m.CorrelationID == nil || *m.CorrelationID != "corr-7" {
				t.Fatalf("sent %s session %s correlation %v", m.MessageID, m.SessionID, m.CorrelationID)
			}
			for k, want := range map[string]any{"MessageType": "EventRequest", "To": "OrderPlaced", "OriginatingFrom": "BillingEndpoint",
				"ParentMessageId": "self", "OriginatingMessageId": "self"} {
				if got := m.Properties[k].Value; got != want {
					t.Errorf("%s = %v, want %v", k, got, want)
				}
			}
			for _, k := range []string{"From", "EventId"} {
				if v, ok := m.Properties[k]; ok && v.Value != nil {
					t.Errorf("%s = %v, want none", k, v.Value)
				}
			}
			var content struct{ EventContent struct{ EventJson string } }
			if err := json.Unmarshal([]byte(m.Body), &content); err != nil {
				t.Fatal(err)
			}
			if content.EventContent.EventJson != `{"OrderId":"O-7","CustomerId":"C-7","Amount":42.5}` {
				t.Fatalf("EventJson %s", content.EventContent.EventJson)
			}

			if cos == nil {
				return
			}
			c, err := cos.Client(t).NewContainer("Sales", "orders")
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.ReadItem(context.Background(), azcosmos.NewPartitionKeyString("C-7"), "order-O-7", nil)
			if err != nil {
				t.Fatalf("the order document: %v", err)
			}
			var doc map[string]any
			if err := json.Unmarshal(resp.Value, &doc); err != nil {
				t.Fatal(err)
			}
			if doc["customerId"] != "C-7" || doc["orderId"] != "O-7" || doc["amount"] != 42.5 {
				t.Fatalf("document %v", doc)
			}
		})
	}
}

// A store that fails answers 503 and writes nothing; the client's retry
// of the same request then commits once. A commit whose send failed is
// answered 201 all the same, and the OutboxSweep timer sends its event.
func TestPlaceOrderStoreOutageAndFailedSend(t *testing.T) {
	cos := testenv.StartCosmos(t, testenv.CosmosOptions{Consistency: "Strong"})
	proxy := testenv.StartFaultProxy(t, cos.Endpoint, testenv.FaultProxyOptions{Rate: 1, Kinds: []testenv.FaultKind{testenv.FaultUnavailable},
		Match: testenv.IsBatchRequest, Disabled: true})
	base, _ := startLedgerApp(t, "AccountEndpoint="+proxy.URL+";AccountKey="+cos.Key+";", "NimBus__Outbox__MinimumAge=00:00:01")
	url := base + "/api/orders"
	const order = `{"OrderId":"O-9","CustomerId":"C-9","Amount":5}`

	proxy.SetEnabled(true)
	if code, _ := request(t, http.MethodPost, url, order); code != 503 {
		t.Fatalf("POST with the store failing = %d, want 503", code)
	}
	proxy.SetEnabled(false)
	if n := len(sentOrders(t, base)); n != 0 {
		t.Fatalf("%d events sent for an order never committed", n)
	}
	if code, _ := request(t, http.MethodPost, url, order); code != 201 {
		t.Fatalf("retry after the outage = %d, want 201", code)
	}
	if n := len(sentOrders(t, base)); n != 1 {
		t.Fatalf("%d events sent, want 1", n)
	}

	dh := &devhost.Client{BaseURL: base}
	if err := dh.Refuse(t.Context(), devhost.Refusal{MessageType: "EventRequest", Count: 1}); err != nil {
		t.Fatal(err)
	}
	if code, _ := request(t, http.MethodPost, url, `{"OrderId":"O-10","CustomerId":"C-9","Amount":6}`); code != 201 {
		t.Fatalf("POST whose send fails = %d, want 201", code)
	}
	if n := len(sentOrders(t, base)); n != 1 {
		t.Fatalf("%d events sent, want 1 (the second send was refused)", n)
	}
	// The sweep takes markers older than NimBus__Outbox__MinimumAge (1 s
	// here): the timer fires until it has sent the event.
	deadline := time.Now().Add(20 * time.Second)
	for {
		now := time.Now().UTC()
		inv := hostwire.BuildTimer(hostwire.Timer{FunctionName: "OutboxSweep", Last: now.Add(-5 * time.Minute), Next: now, LastUpdated: now, UtcNow: now, RandGUID: "g"})
		if code, _ := request(t, http.MethodPost, base+"/OutboxSweep", string(inv)); code != 200 {
			t.Fatalf("OutboxSweep = %d, want 200", code)
		}
		sent := sentOrders(t, base)
		if len(sent) == 2 {
			if sent[1].MessageID != "OrderPlaced-O-10" {
				t.Fatalf("the sweep sent %s", sent[1].MessageID)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sweep did not send the refused event in 20 s (%d sent)", len(sent))
		}
		sleep.For(t.Context(), 200*time.Millisecond)
	}
}

// The repository's host files agree with what the sample registers:
// nimbus-func check, given the sample's own description (NIMBUS_DESCRIBE),
// finds functions/PlaceOrder/function.json to match its HandleHTTP, and its
// settings to be ones the sample reads.
func TestRepositoryFilesMatchTheSampleRegistrations(t *testing.T) {
	app := nimbus.New()
	registerHandlers(app)
	var out strings.Builder
	if err := app.Run(t.Context(), nimbus.Options{Environ: []string{"NIMBUS_DESCRIBE=1"}, Stdout: &out, Stderr: io.Discard}); err != nil {
		t.Fatal(err)
	}
	var d struct {
		Settings      []string                 `json:"settings"`
		Transactional []string                 `json:"transactionalEventTypes"`
		HTTP          []scaffold.DescribedHTTP `json:"httpFunctions"`
	}
	if err := json.Unmarshal([]byte(out.String()), &d); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(d.HTTP) != 1 || d.HTTP[0].Name != "PlaceOrder" {
		t.Fatalf("the sample describes HTTP functions %+v, want PlaceOrder", d.HTTP)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	describe := func() (scaffold.AppDescription, error) {
		return scaffold.AppDescription{Settings: d.Settings, Transactional: d.Transactional, HTTPFunctions: d.HTTP}, nil
	}
	if problems := scaffold.Check(root, scaffold.CheckOptions{Resolver: true, App: describe}); len(problems) != 0 {
		t.Fatalf("nimbus-func check of the repository: %q", problems)
	}
}
