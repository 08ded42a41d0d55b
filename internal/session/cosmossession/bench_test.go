package cosmossession_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmostest"
	"github.com/nimbus-go/functions-subscriber/internal/session"
	"github.com/nimbus-go/functions-subscriber/internal/session/cosmossession"
)

var benchSeq atomic.Int64

// Cosmos HTTP requests per session-state operation, counted at the
// transport after the store's one-time initialization. Each operation
// starts from the state the caller already holds (the pipeline reads it
// concurrently with the inbox check), so a change is one write:
//
//   - read: one point read (a 404 for a session never blocked);
//   - block: one create (first block) or one replace If-Match;
//   - park: one replace If-Match (sequence and count in the same write);
//   - unblock: one replace If-Match (with the replay request);
//   - replayed: one replace If-Match per replayed copy.
func BenchmarkRequestsPerOperation(b *testing.B) {
	e := cosmostest.NewEnv(b, "Strong")
	s := newStore(b, e, cosmossession.Options{})
	if _, err := s.Read(ctx, session.NewKey("bench", "init")); err != nil {
		b.Fatal(err)
	}
	fresh := func() session.Key { return session.NewKey("bench", fmt.Sprint("s-", benchSeq.Add(1))) }
	report := func(b *testing.B, ops int) {
		b.ReportMetric(float64(e.Rec.Count(cosmostest.IsStoreTraffic))/float64(ops), "requests/op")
	}
	apply := func(b *testing.B, k session.Key, cur session.State, c session.Change) session.State {
		st, _, err := session.Apply(ctx, s, k, cur, 0, c)
		if err != nil {
			b.Fatal(err)
		}
		return st
	}
	blockC := func(s session.State) (session.State, bool, error) { return s.Block("e1", "m1") }
	b.Run("read-missing", func(b *testing.B) {
		e.Rec.Reset()
		for b.Loop() {
			if _, err := s.Read(ctx, fresh()); err != nil {
				b.Fatal(err)
			}
		}
		report(b, b.N)
	})
	k := fresh()
	blocked := apply(b, k, session.State{}, blockC)
	b.Run("read-blocked", func(b *testing.B) {
		e.Rec.Reset()
		for b.Loop() {
			if _, err := s.Read(ctx, k); err != nil {
				b.Fatal(err)
			}
		}
		report(b, b.N)
	})
	b.Run("block-first", func(b *testing.B) {
		e.Rec.Reset()
		for b.Loop() {
			apply(b, fresh(), session.State{}, blockC)
		}
		report(b, b.N)
	})
	b.Run("park", func(b *testing.B) {
		cur := blocked
		e.Rec.Reset()
		for b.Loop() {
			cur = apply(b, k, cur, func(s session.State) (session.State, bool, error) {
				n, _, ok := s.Park(fmt.Sprint("p-", benchSeq.Add(1)))
				return n, ok, nil
			})
		}
		report(b, b.N)
		blocked = cur
	})
	b.Run("unblock-then-block", func(b *testing.B) {
		cur := blocked
		e.Rec.Reset()
		ops := 0
		for b.Loop() {
			cur = apply(b, k, cur, func(s session.State) (session.State, bool, error) {
				s, a := s.Unblock()
				n, r := s.RequestDrain(time.Now())
				return n, a || r, nil
			})
			cur = apply(b, k, cur, blockC)
			ops += 2
		}
		report(b, ops)
		blocked = cur
	})
	b.Run("replayed", func(b *testing.B) {
		cur := blocked
		for range b.N {
			cur = apply(b, k, cur, func(s session.State) (session.State, bool, error) {
				n, _, ok := s.Park(fmt.Sprint("r-", benchSeq.Add(1)))
				return n, ok, nil
			})
		}
		e.Rec.Reset()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			seq := cur.NextReplaySequence
			cur = apply(b, k, cur, func(s session.State) (session.State, bool, error) {
				n, ok := s.Replayed(seq)
				return n, ok, nil
			})
		}
		report(b, b.N)
	})
}

// Parks on one session from 16 concurrent writers (far more contention than
// a session sees: its deliveries are handled one at a time, so only a
// replay or an operator races a delivery). Every lost race costs a re-read
// and another write; the figures are requests and lost races per park.
func BenchmarkContendedParks(b *testing.B) {
	const writers = 16
	e := cosmostest.NewEnv(b, "Strong")
	s := newStore(b, e, cosmossession.Options{})
	k := session.NewKey("bench", fmt.Sprint("contended-", benchSeq.Add(1)))
	if _, _, err := session.Apply(ctx, s, k, session.State{}, 0, func(s session.State) (session.State, bool, error) { return s.Block("e1", "m1") }); err != nil {
		b.Fatal(err)
	}
	e.Rec.Reset()
	var parks, lost atomic.Int64
	b.SetParallelism(writers / 2) // GOMAXPROCS is 2 here: 16 goroutines
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			msg := fmt.Sprint("p-", benchSeq.Add(1))
			for {
				cur, err := s.Read(ctx, k)
				if err != nil {
					b.Error(err)
					return
				}
				_, _, err = session.Apply(ctx, s, k, cur, 1, func(s session.State) (session.State, bool, error) {
					n, _, ok := s.Park(msg)
					return n, ok, nil
				})
				if err == nil {
					parks.Add(1)
					break
				}
				if !session.IsConflict(err) {
					b.Error(err)
					return
				}
				lost.Add(1)
			}
		}
	})
	b.ReportMetric(float64(e.Rec.Count(cosmostest.IsStoreTraffic))/float64(parks.Load()), "requests/park")
	b.ReportMetric(float64(lost.Load())/float64(parks.Load()), "lost-races/park")
}
