package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/nimbus-go/functions-subscriber/nimbus"
)

func startOrders(t *testing.T) http.Handler {
	t.Helper()
	svc := nimbus.NewService()
	door := svc.FrontDoor(orders)
	if err := svc.Start(context.Background(), nimbus.Options{Stdout: io.Discard, Environ: []string{
		"NimBus__Endpoint=BillingEndpoint", "NimBus__Inbox__Enabled=true", "NimBus__Inbox__Store=InMemory", "NimBus__Resolver__Sink=InMemory",
	}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close(context.Background()) })
	return placeOrder(door)
}

func post(h http.Handler, method, key, body string) (int, string) {
	r := httptest.NewRequest(method, "/api/orders", strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

func TestPlaceOrderAnswers(t *testing.T) {
	h := startOrders(t)
	const order = `{"OrderId":"O-1","CustomerId":"C-1","Amount":12.5}`
	const created = `{"messageId":"OrderPlaced-O-1","orderId":"O-1"}`
	if code, body := post(h, http.MethodPost, "", order); code != 201 || body != created {
		t.Fatalf("first: %d %s", code, body)
	}
	if code, body := post(h, http.MethodPost, "", order); code != 200 || body != created {
		t.Fatalf("retry: %d %s", code, body)
	}
	if code, _ := post(h, http.MethodPost, "", `{"OrderId":"O-1","CustomerId":"C-1","Amount":13}`); code != 409 {
		t.Fatalf("same key, other body: %d", code)
	}
	for _, bad := range []string{`nope`, `{"CustomerId":"C","Amount":1}`, `{"OrderId":"O","Amount":1}`, `{"OrderId":"O","CustomerId":"C","Amount":0}`, `{"OrderId":"O","CustomerId":"C","Amount":"1"}`} {
		if code, body := post(h, http.MethodPost, "", bad); code != 400 || strings.Contains(body, `"O"`) {
			t.Errorf("%s: %d %s", bad, code, body)
		}
	}
	if code, _ := post(h, http.MethodGet, "", ""); code != 405 {
		t.Fatalf("GET: %d", code)
	}
}

func TestPlaceOrderConcurrentCopiesOneCreated(t *testing.T) {
	h := startOrders(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _ := post(h, http.MethodPost, "K-1", `{"OrderId":"O-2","CustomerId":"C-2","Amount":1}`)
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes[201] != 1 || codes[200] != 31 {
		t.Fatalf("answers %v", codes)
	}
}
