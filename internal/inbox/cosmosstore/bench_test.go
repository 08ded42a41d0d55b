package cosmosstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmostest"
	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/inbox/cosmosstore"
	"github.com/nimbus-go/functions-subscriber/internal/inbox/inboxtest"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

var benchSeq atomic.Int64

// Cosmos HTTP requests per delivery, counted at the transport after the
// store's one-time initialization: a fresh delivery is a check (point read,
// 404) plus a record (create); a duplicate is a check only. RU/delivery is
// the request charge the server reported, summed as the handler sums it
// per invocation (the local server charges a flat 1 RU per request, so it
// equals the request count here; Cosmos DB charges by operation and size).
func BenchmarkRequestsPerDelivery(b *testing.B) {
	e := newEnv(b, "Strong")
	s := e.store(b, cosmosstore.Options{})
	ctx, charge := telemetry.WithCharge(context.Background())
	dup := inbox.NewKey("bench", "duplicate")
	if err := s.RecordProcessed(ctx, dup); err != nil {
		b.Fatal(err)
	}
	deliver := func(b *testing.B, k inbox.Key) {
		seen, err := s.HasProcessed(ctx, k)
		if err != nil {
			b.Fatal(err)
		}
		if !seen {
			if err := s.RecordProcessed(ctx, k); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("fresh", func(b *testing.B) {
		e.Rec.Reset()
		ru := charge.RequestUnits()
		for b.Loop() {
			deliver(b, inbox.NewKey("bench", fmt.Sprint("fresh-", benchSeq.Add(1))))
		}
		b.ReportMetric(float64(e.Rec.Count(cosmostest.IsStoreTraffic))/float64(b.N), "requests/delivery")
		b.ReportMetric((charge.RequestUnits()-ru)/float64(b.N), "RU/delivery")
	})
	b.Run("duplicate", func(b *testing.B) {
		e.Rec.Reset()
		ru := charge.RequestUnits()
		for b.Loop() {
			deliver(b, dup)
		}
		b.ReportMetric(float64(e.Rec.Count(cosmostest.IsStoreTraffic))/float64(b.N), "requests/delivery")
		b.ReportMetric((charge.RequestUnits()-ru)/float64(b.N), "RU/delivery")
	})
}

// Purging a 10,000-record backlog: the draining Cleaner against NimBus's
// one batch per cleanup tick (default interval one hour).
func BenchmarkPurge10k(b *testing.B) {
	const backlog = 10000
	for _, batch := range []int{100, 1000} {
		b.Run(fmt.Sprintf("cleaner-drain/batch=%d", batch), func(b *testing.B) {
			e := newEnv(b, "Session")
			clock := inboxtest.NewClock(inboxtest.Epoch)
			s := e.store(b, cosmosstore.Options{StoreOptions: cosmos.StoreOptions{AllowRelaxedConsistency: true, Now: clock.Now}, PurgeBatchSize: batch})
			var purged, batches int
			var elapsed time.Duration
			for b.Loop() {
				b.StopTimer()
				clock.Advance(-8 * 24 * time.Hour)
				recordMany(b, s, "bench", fmt.Sprint("d", benchSeq.Add(1)), backlog)
				clock.Advance(8 * 24 * time.Hour)
				b.StartTimer()
				rep, err := (&inbox.Cleaner{Store: s, EndpointID: "bench", Budget: time.Hour}).Run(context.Background(), clock.Now())
				if err != nil || rep.Purged != backlog || !rep.Drained {
					b.Fatalf("report %+v, %v", rep, err)
				}
				purged += rep.Purged
				batches += rep.Batches
				elapsed += rep.Elapsed
			}
			b.ReportMetric(float64(purged)/elapsed.Seconds(), "records/s")
			b.ReportMetric(float64(batches)/float64(b.N), "batches/run")
			b.ReportMetric(1, "ticks-to-drain")
		})
	}
	b.Run("one-batch-per-tick/batch=100", func(b *testing.B) {
		e := newEnv(b, "Session")
		clock := inboxtest.NewClock(inboxtest.Epoch)
		s := e.store(b, cosmosstore.Options{StoreOptions: cosmos.StoreOptions{AllowRelaxedConsistency: true, Now: clock.Now}})
		var purged, ticks int
		var work time.Duration
		for b.Loop() {
			b.StopTimer()
			clock.Advance(-8 * 24 * time.Hour)
			recordMany(b, s, "bench", fmt.Sprint("t", benchSeq.Add(1)), backlog)
			clock.Advance(8 * 24 * time.Hour)
			b.StartTimer()
			// One PurgeExpired per tick, as InboxPurgeHostedService does; the
			// hour between ticks is not waited for.
			for n := -1; n != 0; {
				start := time.Now()
				var err error
				n, err = s.PurgeExpired(context.Background(), "bench", clock.Now().Add(-inbox.DefaultRetention))
				work += time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				if n > 0 {
					ticks++
					purged += n
				}
			}
		}
		b.ReportMetric(float64(purged)/work.Seconds(), "records/s")
		b.ReportMetric(float64(ticks)/float64(b.N), "ticks-to-drain")
		b.ReportMetric(float64(ticks)/float64(b.N), "hours-to-drain@1h")
	})
}
