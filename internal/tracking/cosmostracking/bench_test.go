package cosmostracking_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmostest"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/tracking"
	"github.com/nimbus-go/functions-subscriber/internal/tracking/cosmostracking"
)

// BenchmarkResolverWrites reports the Cosmos requests each kind of Resolver
// write sends, counted at the HTTP transport (document requests only: the
// once-per-container metadata reads are made before the timer starts), and
// for one whole event as the Resolver records it: the request copy
// (history + first guarded projection) and the response (history, the
// history query of the handoff wall-clock check, terminal projection).
// The times are the local stand-in's, not Azure's; the request counts are
// what Azure would bill.
func BenchmarkResolverWrites(b *testing.B) {
	e := cosmostest.NewEnv(b, "Strong")
	s := newStore(b, e, cosmostracking.Options{})
	const ep = "billing"
	// Warm up: Strong check and every container's first use.
	if _, err := s.GetEventByID(ctx, ep, "warm"); err != nil {
		b.Fatal(err)
	}
	if _, err := s.GetMessage(ctx, "warm", "warm"); err != nil {
		b.Fatal(err)
	}
	if _, err := s.GetMessageAudits(ctx, "warm"); err != nil {
		b.Fatal(err)
	}
	msg := func(ev, id string, t message.Type) tracking.MessageEntity {
		return tracking.MessageEntity{EventID: ev, MessageID: id, EndpointID: ep, SessionID: tracking.Str("s1"), MessageType: t,
			EnqueuedTimeUtc: time.Now(), MessageContent: &message.Content{EventContent: &message.EventContent{EventTypeID: tracking.Str("OrderPlaced"), EventJSON: tracking.Str(`{"order":42}`)}}}
	}
	// Every run of a sub-benchmark gets fresh event ids.
	round := 0
	run := func(b *testing.B, setup func(i int), op func(i int)) {
		round++
		for i := 0; i < b.N; i++ {
			setup(i)
		}
		e.Rec.Reset()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			op(i)
		}
		b.StopTimer()
		sent := e.Rec.Sent()
		var reads, writes, queries, all int
		for _, r := range sent {
			if !cosmostest.IsDocRequest(r) {
				continue
			}
			all++
			switch {
			case cosmostest.IsQuery(r):
				queries++
			case cosmostest.IsDocRead(r):
				reads++
			default:
				writes++
			}
		}
		n := float64(b.N)
		b.ReportMetric(float64(all)/n, "requests/op")
		b.ReportMetric(float64(reads)/n, "reads/op")
		b.ReportMetric(float64(writes)/n, "writes/op")
		b.ReportMetric(float64(queries)/n, "queries/op")
	}
	must := func(ok bool, err error, want bool) {
		if err != nil {
			b.Fatal(err)
		}
		if ok != want {
			b.Fatalf("applied %v, want %v (N=%d)", ok, want, b.N)
		}
	}
	id := func(prefix string, i int) string { return prefix + "-" + strconv.Itoa(round) + "-" + strconv.Itoa(i) }
	none := func(int) {}

	b.Run("history", func(b *testing.B) {
		run(b, none, func(i int) {
			if err := s.StoreMessage(ctx, msg(id("h", i), "m1", message.EventRequest)); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("guarded_first", func(b *testing.B) {
		run(b, none, func(i int) {
			ev := id("gf", i)
			ok, err := s.Upload(ctx, tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Pending, row(ep, ev, "s1", message.EventRequest, "m1", ""))
			must(ok, err, true)
		})
	})
	b.Run("guarded_refresh", func(b *testing.B) {
		run(b, func(i int) {
			ev := id("gr", i)
			ok, err := s.Upload(ctx, tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Pending, row(ep, ev, "s1", message.EventRequest, "m1", ""))
			must(ok, err, true)
		}, func(i int) {
			ev := id("gr", i)
			ok, err := s.Upload(ctx, tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Deferred, row(ep, ev, "s1", message.DeferralResponse, "m2", ""))
			must(ok, err, true)
		})
	})
	b.Run("guarded_refused", func(b *testing.B) {
		run(b, func(i int) {
			ev := id("gx", i)
			ok, err := s.Upload(ctx, tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Completed, row(ep, ev, "s1", message.ResolutionResponse, "r1", "m1"))
			must(ok, err, true)
		}, func(i int) {
			ev := id("gx", i)
			ok, err := s.Upload(ctx, tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Pending, row(ep, ev, "s1", message.EventRequest, "m1", ""))
			must(ok, err, false)
		})
	})
	b.Run("terminal", func(b *testing.B) {
		run(b, none, func(i int) {
			ev := id("t", i)
			ok, err := s.Upload(ctx, tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Completed, row(ep, ev, "s1", message.ResolutionResponse, "r1", "m1"))
			must(ok, err, true)
		})
	})
	b.Run("audit", func(b *testing.B) {
		run(b, none, func(i int) {
			a := tracking.MessageAudit{AuditorName: tracking.Str("Manager"), AuditTimestamp: time.Now(), AuditType: tracking.AuditRetry}
			if err := s.StoreMessageAudit(ctx, tracking.EventKey{EndpointID: "", EventID: id("a", i)}, a, ""); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("event", func(b *testing.B) {
		run(b, none, func(i int) {
			ev := id("ev", i)
			// The request copy.
			if err := s.StoreMessage(ctx, msg(ev, "m1", message.EventRequest)); err != nil {
				b.Fatal(err)
			}
			ok, err := s.Upload(ctx, tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Pending, row(ep, ev, "s1", message.EventRequest, "m1", ""))
			must(ok, err, true)
			// The response.
			if err := s.StoreMessage(ctx, msg(ev, "r1", message.ResolutionResponse)); err != nil {
				b.Fatal(err)
			}
			if _, err := s.GetEventHistory(ctx, ev); err != nil {
				b.Fatal(err)
			}
			ok, err = s.Upload(ctx, tracking.Key{EndpointID: ep, EventID: ev, SessionID: "s1"}, tracking.Completed, row(ep, ev, "s1", message.ResolutionResponse, "r1", "m1"))
			must(ok, err, true)
		})
	})
}
