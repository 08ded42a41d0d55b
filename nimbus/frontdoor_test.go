package nimbus

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

var ordersContainer = Container{DatabaseID: "Sales", ContainerID: "orders", PartitionKeyPath: "/customerId"}

func startService(t *testing.T) (*Service, *FrontDoor) {
	t.Helper()
	svc := NewService()
	door := svc.FrontDoor(ordersContainer)
	err := svc.Start(context.Background(), Options{Stdout: io.Discard, Environ: []string{
		"NimBus__Endpoint=SalesEndpoint", "NimBus__Inbox__Enabled=true", "NimBus__Inbox__Store=InMemory", "NimBus__Resolver__Sink=InMemory",
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close(context.Background()) })
	return svc, door
}

// sent reads the in-memory sink through the app's local view.
func sent(t *testing.T, svc *Service) string {
	t.Helper()
	rec := httptest.NewRecorder()
	svc.app.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/_nimbus/resolver", nil))
	return rec.Body.String()
}

func TestServiceFrontDoorCommitsOnceAndAnswersRetries(t *testing.T) {
	svc, door := startService(t)
	ctx := context.Background()
	place := func(key, body string) (Committed, error) {
		tx := door.Begin(ctx, Request{PartitionKey: "C-1", Key: key, Fingerprint: []byte(body)})
		if err := tx.Create(map[string]any{"id": "order-O-1", "customerId": "C-1", "amount": 5}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Publish(Publication{EventTypeID: "OrderPlaced", MessageID: "OrderPlaced-O-1", SessionID: "O-1",
			Payload: json.RawMessage(`{"OrderId":"O-1"}`)}); err != nil {
			t.Fatal(err)
		}
		return door.Commit(ctx, tx, []byte(`{"orderId":"O-1"}`))
	}
	first, err := place("O-1", "a")
	if err != nil || first.Replayed || !first.Sent {
		t.Fatalf("first = %+v, %v", first, err)
	}
	again, err := place("O-1", "a")
	if err != nil || !again.Replayed || string(again.Answer) != `{"orderId":"O-1"}` {
		t.Fatalf("retry = %+v, %v", again, err)
	}
	if _, err := place("O-1", "b"); !errors.Is(err, ErrKeyReused) {
		t.Fatalf("other body: %v, want ErrKeyReused", err)
	}
	if _, err := place("other-key", "a"); !errors.Is(err, ErrConflict) {
		t.Fatalf("other key, same order: %v, want ErrConflict", err)
	}
	if got := sent(t, svc); strings.Count(got, "OrderPlaced-O-1") != 1 || !strings.Contains(got, `"self"`) {
		t.Fatalf("sink = %s", got)
	}
	if _, err := svc.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestServicePublishAndNotStarted(t *testing.T) {
	if err := NewService().Publish(context.Background(), Publication{EventTypeID: "X", MessageID: "m"}); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("before Start: %v", err)
	}
	svc, _ := startService(t)
	if err := svc.Publish(context.Background(), Publication{EventTypeID: "JobFound", MessageID: "JobFound-1", Payload: map[string]int{"n": 1}}); err != nil {
		t.Fatal(err)
	}
	if err := svc.Publish(context.Background(), Publication{EventTypeID: "JobFound", Payload: 1}); KindOf(err) != KindPermanent {
		t.Fatalf("no message id: %v", err)
	}
	if got := sent(t, svc); !strings.Contains(got, "JobFound-1") {
		t.Fatalf("sink = %s", got)
	}
}
