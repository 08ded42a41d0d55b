package txn_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// benchEvent is a published event with a body of about size bytes.
func benchEvent(id string, size int) message.Stored {
	corr := "corr-1"
	return message.Stored{MessageID: id, SessionID: "customer-1", CorrelationID: &corr,
		ApplicationProperties: map[string]any{"To": "PaymentRecorded", "EventTypeId": "PaymentRecorded", "MessageType": "EventRequest",
			"EventId": nil, "RetryCount": int32(0), "OriginatingFrom": "BillingEndpoint", "ParentMessageId": "m", "OriginatingMessageId": "m",
			"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		Body: []byte(`{"EventContent":{"EventTypeId":"PaymentRecorded","EventJson":"{\"p\":\"` + strings.Repeat("x", size) + `\"}"},"ErrorContent":null}`)}
}

// BenchmarkCommitOutbox measures a commit of one write and its marker on
// the in-memory store, without events and with two events of 1 KiB and the
// response stored in the marker, then the dispatched mark: the cost the
// outbox adds in the process (encoding, size checks, the marker's
// decoding), apart from the store's round trips (one batch and one mark).
func BenchmarkCommitOutbox(b *testing.B) {
	for _, events := range []int{0, 2} {
		b.Run(fmt.Sprintf("events=%d", events), func(b *testing.B) {
			m := txn.NewMemory(nil)
			tg := txn.Target{DatabaseID: "db", ContainerID: "ledger", PartitionKeyPath: "/customerId"}
			ctx := context.Background()
			resp := benchEvent("", 64)
			evs := make([]message.Stored, events)
			for i := range evs {
				evs[i] = benchEvent(fmt.Sprintf("PaymentRecorded-%d", i), 1024)
			}
			requests := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// A partition per delivery: the in-memory store copies a
				// partition per batch.
				pk := fmt.Sprintf("c-%d", i)
				tx := txn.Begin(m, tg, pk, nil)
				u := tx.Unit()
				if err := u.Create(map[string]any{"id": "payment", "customerId": pk, "amount": 12}); err != nil {
					b.Fatal(err)
				}
				for _, e := range evs {
					if err := u.Publish(e); err != nil {
						b.Fatal(err)
					}
				}
				rc, err := tx.Commit(ctx, txn.Marker{EndpointID: "BillingEndpoint", MessageID: "m", Retention: time.Hour, Outbox: true, Response: &resp})
				if err != nil {
					b.Fatal(err)
				}
				requests++
				if rc.Pending != nil {
					if _, err := txn.MarkDispatched(ctx, m, rc.Pending, time.Hour, time.Now()); err != nil {
						b.Fatal(err)
					}
					requests++
				}
			}
			b.ReportMetric(float64(requests)/float64(b.N), "store-requests/op")
		})
	}
}
