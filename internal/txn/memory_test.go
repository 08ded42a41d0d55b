package txn_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
	"github.com/nimbus-go/functions-subscriber/internal/txn/txntest"
)

var memTargets atomic.Int64

func memTarget(pkPath string) txn.Target {
	return txn.Target{DatabaseID: "db", ContainerID: fmt.Sprintf("c%d", memTargets.Add(1)), PartitionKeyPath: pkPath}
}

func TestMemoryConformance(t *testing.T) {
	txntest.Run(t, txntest.Harness{
		New: func(t *testing.T, pkPath string) (txn.Store, txn.Target) {
			return txn.NewMemory(nil), memTarget(pkPath)
		},
		NewTTLOff: func(t *testing.T) (txn.Store, txn.Target) {
			m, tg := txn.NewMemory(nil), memTarget("/tenant")
			if err := m.SetTTL(tg, false); err != nil {
				t.Fatal(err)
			}
			return m, tg
		},
	})
}

func TestMemoryMarkerExpires(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	m := txn.NewMemory(func() time.Time { return now })
	tg := memTarget("/tenant")
	tx := txn.Begin(m, tg, "t", nil)
	if _, err := tx.Commit(context.Background(), txn.Marker{EndpointID: "e", MessageID: "m", Retention: 90 * time.Second}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		after time.Duration
		want  bool
	}{{89 * time.Second, true}, {90 * time.Second, false}} {
		now = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(c.after)
		got, err := txn.HasMarker(context.Background(), m, tg, "t", "e", "m")
		if err != nil || got != c.want {
			t.Errorf("after %v: HasMarker = %v, %v; want %v", c.after, got, err, c.want)
		}
	}
	// An expired marker no longer blocks a new one.
	tx = txn.Begin(m, tg, "t", nil)
	if _, err := tx.Commit(context.Background(), txn.Marker{EndpointID: "e", MessageID: "m", Retention: time.Second}); err != nil {
		t.Fatalf("recreating an expired marker: %v", err)
	}
}

// A marker whose events are not dispatched never expires, however long
// after its retention; once marked dispatched it lives for the retention
// counted from the mark.
func TestMemoryPendingMarkerOutlivesItsRetention(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	clock := func() time.Time { return now }
	m := txn.NewMemory(clock)
	tg := memTarget("/tenant")
	tx := txn.Begin(m, tg, "t", clock)
	if err := tx.Unit().Publish(message.Stored{MessageID: "ev-1", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	rc, err := tx.Commit(context.Background(), txn.Marker{EndpointID: "e", MessageID: "m", Retention: time.Minute, Outbox: true})
	if err != nil {
		t.Fatal(err)
	}
	now = start.Add(365 * 24 * time.Hour)
	st, err := txn.ReadMarker(context.Background(), m, tg, "t", "e", "m")
	if err != nil || st.Pending == nil {
		t.Fatalf("a year later: %+v %v; want the marker still pending", st, err)
	}
	if ok, err := txn.MarkDispatched(context.Background(), m, rc.Pending, time.Minute, now); err != nil || ok != txn.Marked {
		t.Fatalf("MarkDispatched = %v, %v", ok, err)
	}
	for _, c := range []struct {
		after time.Duration
		want  bool
	}{{59 * time.Second, true}, {time.Minute, false}} {
		now = start.Add(365*24*time.Hour + c.after)
		if got, err := txn.HasMarker(context.Background(), m, tg, "t", "e", "m"); err != nil || got != c.want {
			t.Errorf("%v after the mark: HasMarker = %v, %v; want %v", c.after, got, err, c.want)
		}
	}
}

// A marker whose pending outbox does not decode is an operator error,
// never a duplicate that would drop its events, and never quotes it.
func TestReadMarkerUnreadableOutbox(t *testing.T) {
	m := txn.NewMemory(nil)
	tg := memTarget("/tenant")
	id := txn.MarkerID("e", "m")
	for name, doc := range map[string]map[string]any{
		"entry without the event":   {"outbox": []any{map[string]any{"messageId": "x"}}},
		"response of another shape": {"outbox": []any{}, "response": map[string]any{"applicationProperties": map[string]any{"p": []any{"SECRET"}}}},
		"outbox not a list":         {"outbox": "SECRET"},
	} {
		t.Run(name, func(t *testing.T) {
			pk := "t-" + strings.ReplaceAll(name, " ", "-")
			for k, v := range map[string]any{"id": id, "tenant": pk, "type": txn.MarkerType, "endpointId": "e", "messageId": "m",
				"createdAtUtc": "2030-01-01T00:00:00.0000000Z", "dispatchedAtUtc": nil} {
				doc[k] = v
			}
			tx := txn.Begin(m, tg, pk, nil)
			if err := tx.Unit().Create(doc); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Commit(context.Background()); err != nil {
				t.Fatal(err)
			}
			st, err := txn.ReadMarker(context.Background(), m, tg, pk, "e", "m")
			var oe interface{ OperatorMessage() string }
			if !errors.Is(err, txn.ErrUnreadableOutbox) || !errors.As(err, &oe) || st.Found {
				t.Fatalf("ReadMarker = %+v, %v; want an operator error wrapping ErrUnreadableOutbox", st, err)
			}
			if strings.Contains(err.Error(), "SECRET") {
				t.Fatalf("the error quotes the marker: %v", err)
			}
			if found, err := txn.HasMarker(context.Background(), m, tg, pk, "e", "m"); err == nil || found {
				t.Fatalf("HasMarker = %v, %v; want the error", found, err)
			}
		})
	}
}
