package main

import (
	"context"
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

func orderEvent(json string, deliveryCount int) *subscriber.Event {
	return &subscriber.Event{EventTypeID: "OrderPlaced", JSON: json, MessageID: "m-1", DeliveryCount: deliveryCount}
}

// handoff reports whether r is a pending handoff (anything but Completed).
func handoff(r subscriber.Result) bool { return r != subscriber.Completed() }

func TestHandleOrderPlaced(t *testing.T) {
	type want int
	const (
		completed want = iota
		pending
		transient
		permanent
	)
	cases := []struct {
		name  string
		json  string
		count int
		want  want
	}{
		{"plain order, first delivery", `{"OrderId":"o-1","Amount":10}`, 1, completed},
		{"plain order, count missing", `{"OrderId":"o-1","Amount":10}`, 0, completed},
		{"over the approval limit", `{"OrderId":"o-1","Amount":10000.01}`, 1, pending},
		{"at the approval limit", `{"OrderId":"o-1","Amount":10000}`, 1, completed},
		{"fail first 2, delivery 1", `{"OrderId":"o-1","FailFirstAttempts":2}`, 1, transient},
		{"fail first 2, delivery 2", `{"OrderId":"o-1","FailFirstAttempts":2}`, 2, transient},
		{"fail first 2, delivery 3", `{"OrderId":"o-1","FailFirstAttempts":2}`, 3, completed},
		{"fail first 2, count missing", `{"OrderId":"o-1","FailFirstAttempts":2}`, 0, completed},
		{"fail first 2, count negative", `{"OrderId":"o-1","FailFirstAttempts":2}`, -1, completed},
		{"fail first 0, count missing", `{"OrderId":"o-1","FailFirstAttempts":0}`, 0, completed},
		{"fail first -3", `{"OrderId":"o-1","FailFirstAttempts":-3}`, 1, completed},
		{"fail first 1, then over the limit", `{"OrderId":"o-1","FailFirstAttempts":1,"Amount":20000}`, 2, pending},
		{"no OrderId", `{"Amount":10}`, 1, permanent},
		{"null event", `null`, 1, permanent},
		{"not JSON", `{"OrderId":`, 1, permanent},
		{"wrong type", `{"OrderId":"o-1","FailFirstAttempts":"two"}`, 1, permanent},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := handleOrderPlaced(context.Background(), orderEvent(c.json, c.count))
			switch c.want {
			case completed:
				if err != nil || handoff(res) {
					t.Fatalf("want completed, got handoff=%v err=%v", handoff(res), err)
				}
			case pending:
				if err != nil || !handoff(res) {
					t.Fatalf("want a pending handoff, got handoff=%v err=%v", handoff(res), err)
				}
			case transient:
				if err == nil || subscriber.IsPermanent(err) || !strings.Contains(err.Error(), "busy") {
					t.Fatalf("want a transient failure, got %v", err)
				}
			case permanent:
				if err == nil || !subscriber.IsPermanent(err) {
					t.Fatalf("want a permanent failure, got %v", err)
				}
			}
		})
	}
}

// Redelivered with the count the broker gives, a FailFirstAttempts message
// succeeds on delivery N+1; without a count it never fails at all.
func TestFailFirstAttemptsEnds(t *testing.T) {
	const json = `{"OrderId":"o-1","FailFirstAttempts":3}`
	failures := 0
	for count := 1; count <= 10; count++ {
		_, err := handleOrderPlaced(context.Background(), orderEvent(json, count))
		if err == nil {
			break
		}
		failures++
	}
	if failures != 3 {
		t.Errorf("%d failed deliveries, want 3", failures)
	}
	for i := 0; i < 10; i++ {
		if _, err := handleOrderPlaced(context.Background(), orderEvent(json, 0)); err != nil {
			t.Fatalf("delivery %d without a count failed: %v", i+1, err)
		}
	}
}
