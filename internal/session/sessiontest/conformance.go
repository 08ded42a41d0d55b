// Package sessiontest is the conformance suite every session.Store passes:
// the transitions (create, read, block, unblock, park, drain) stored and
// read back, a missing state read as "not blocked, nothing parked",
// compare-and-swap on every write (two writers never lose each other's
// update, including many concurrent writers allocating parked sequences),
// and store failures surfacing as errors, never as a default state.
package sessiontest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/session"
)

// Target is a store under test and how to break it.
type Target struct {
	Store session.Store
	// Break makes the store's operations fail as a storage outage does
	// (for Cosmos: an error answer at the HTTP transport) until restore is
	// called. Cases that need it fail when it is nil.
	Break func(t *testing.T) (restore func())
	// Writers and ParksPerWriter size the concurrent-writers case; zero
	// means 16 and 50.
	Writers, ParksPerWriter int
}

// Factory returns the target for one case. Every call may return the same
// store: cases use keys unique to the run. Cases that call Break do not run
// in parallel with the others.
type Factory func(t *testing.T) Target

type testCase struct {
	name   string
	serial bool // breaks the store: not in parallel with other cases
	run    func(h *harness)
}

// Run runs every case against targets from newTarget.
func Run(t *testing.T, newTarget Factory) {
	t.Run("parallel", func(t *testing.T) {
		for _, c := range cases {
			if c.serial {
				continue
			}
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				c.run(newHarness(t, newTarget(t)))
			})
		}
	})
	for _, c := range cases {
		if c.serial {
			t.Run(c.name, func(t *testing.T) { c.run(newHarness(t, newTarget(t))) })
		}
	}
}

type harness struct {
	*testing.T
	tg    Target
	s     session.Store
	scope string
	ctx   context.Context
}

func newHarness(t *testing.T, tg Target) *harness {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return &harness{T: t, tg: tg, s: tg.Store, scope: "st-" + hex.EncodeToString(b), ctx: context.Background()}
}

// key returns a key unique to the case.
func (h *harness) key(sessionID string) session.Key {
	return session.NewKey(h.scope+"-endpoint", sessionID)
}

func (h *harness) read(k session.Key) session.State {
	h.Helper()
	s, err := h.s.Read(h.ctx, k)
	if err != nil {
		h.Fatalf("Read: %v", err)
	}
	return s
}

// apply applies c to the state read (or given) and fails the test on an
// error.
func (h *harness) apply(k session.Key, cur session.State, c session.Change) (session.State, bool) {
	h.Helper()
	s, wrote, err := session.Apply(h.ctx, h.s, k, cur, 0, c)
	if err != nil {
		h.Fatalf("Apply: %v", err)
	}
	return s, wrote
}

func block(eventID, messageID string) session.Change {
	return func(s session.State) (session.State, bool, error) { return s.Block(eventID, messageID) }
}

func unblock(s session.State) (session.State, bool, error) {
	n, ok := s.Unblock()
	return n, ok, nil
}

func park(messageID string, seq *int64) session.Change {
	return func(s session.State) (session.State, bool, error) {
		n, q, ok := s.Park(messageID)
		*seq = q
		return n, ok, nil
	}
}

func replayed(seq int64) session.Change {
	return func(s session.State) (session.State, bool, error) {
		n, ok := s.Replayed(seq)
		return n, ok, nil
	}
}

func requestDrain(now time.Time) session.Change {
	return func(s session.State) (session.State, bool, error) {
		n, ok := s.RequestDrain(now)
		return n, ok, nil
	}
}

// same compares the stored fields of two states (not Version, UpdatedAt).
func same(a, b session.State) bool {
	if !a.DrainRequestedAt.Equal(b.DrainRequestedAt) {
		return false
	}
	a.Version, a.UpdatedAt, a.DrainRequestedAt = "", time.Time{}, time.Time{}
	b.Version, b.UpdatedAt, b.DrainRequestedAt = "", time.Time{}, time.Time{}
	return a == b
}

func (h *harness) wantStored(k session.Key, want session.State) session.State {
	h.Helper()
	got := h.read(k)
	if !got.Exists() || !same(got, want) {
		h.Fatalf("stored state\n got %+v\nwant %+v", got, want)
	}
	if got.Version != want.Version && want.Version != "" {
		h.Fatalf("read Version %q, the write returned %q", got.Version, want.Version)
	}
	return got
}

var cases = []testCase{
	{name: "MissingStateIsNotBlockedNothingParked", run: func(h *harness) {
		s := h.read(h.key("never-written"))
		if s.Exists() || s.Blocked() || s.Gated() || s.Draining() || s.DeferredCount != 0 || s.NextDeferralSequence != 0 || !s.Empty() || s != (session.State{}) {
			h.Fatalf("missing state read as %+v; want the zero state", s)
		}
	}},
	{name: "BlockCreatesTheDocumentAndReadsBack", run: func(h *harness) {
		k := h.key("s1")
		before := time.Now().Add(-time.Minute)
		s, wrote := h.apply(k, session.State{}, block("event-2", "msg-2"))
		if !wrote || !s.Exists() || !s.Blocked() || !s.BlockedBy("EVENT-2") || s.BlockedBy("event-3") || s.BlockedBy("") || !s.Gated() {
			h.Fatalf("after Block: wrote=%v %+v", wrote, s)
		}
		if s.UpdatedAt.Before(before) || s.UpdatedAt.Location() != time.UTC {
			h.Errorf("UpdatedAt %v: want the write's time, in UTC", s.UpdatedAt)
		}
		got := h.wantStored(k, s)
		if got.BlockedByEventID != "event-2" || got.BlockedByMessageID != "msg-2" {
			h.Fatalf("read back %+v", got)
		}
		// Blocking again by the same event and message writes nothing.
		if again, wrote := h.apply(k, got, block("event-2", "msg-2")); wrote || again.Version != got.Version {
			h.Fatalf("re-blocking wrote: %v %+v", wrote, again)
		}
		// Another event overwrites the block (the caller decides).
		s, wrote = h.apply(k, got, block("event-9", ""))
		if !wrote || s.BlockedByEventID != "event-9" || s.BlockedByMessageID != "" {
			h.Fatalf("overwrite: %v %+v", wrote, s)
		}
		h.wantStored(k, s)
	}},
	{name: "BlockRefusesAnEmptyEventIdWithoutWriting", run: func(h *harness) {
		k := h.key("s1")
		_, wrote, err := session.Apply(h.ctx, h.s, k, session.State{}, 0, block("", "msg-1"))
		if !errors.Is(err, session.ErrInvalidArgument) || wrote {
			h.Fatalf("Block(\"\"): wrote=%v err=%v", wrote, err)
		}
		if s := h.read(k); s.Exists() {
			h.Fatalf("a refused block stored %+v", s)
		}
	}},
	{name: "UnblockClearsTheBlockAndKeepsParkedCopies", run: func(h *harness) {
		k := h.key("s1")
		s, _ := h.apply(k, session.State{}, block("event-2", "msg-2"))
		var seq int64
		s, _ = h.apply(k, s, park("msg-3", &seq))
		s, wrote := h.apply(k, s, unblock)
		if !wrote || s.Blocked() || s.BlockedByMessageID != "" || s.DeferredCount != 1 || !s.Gated() {
			h.Fatalf("after Unblock: %v %+v; want unblocked, one copy waiting, still gated", wrote, s)
		}
		h.wantStored(k, s)
		if again, wrote := h.apply(k, s, unblock); wrote || again.Version != s.Version {
			h.Fatalf("unblocking an unblocked session wrote")
		}
	}},
	{name: "ParkAllocatesSequencesAndCountsCopies", run: func(h *harness) {
		k := h.key("s1")
		s, _ := h.apply(k, session.State{}, block("event-2", "msg-2"))
		for i, m := range []string{"msg-3", "msg-4", "msg-5", "msg-6"} {
			var seq int64
			var wrote bool
			s, wrote = h.apply(k, s, park(m, &seq))
			if !wrote || seq != int64(i) || s.DeferredCount != int64(i+1) || s.NextDeferralSequence != int64(i+1) {
				h.Fatalf("park %s: wrote=%v seq=%d %+v", m, wrote, seq, s)
			}
		}
		got := h.wantStored(k, s)
		if got.LastParkedMessageID != "msg-6" || got.LastParkedSequence != 3 {
			h.Fatalf("last park %q/%d", got.LastParkedMessageID, got.LastParkedSequence)
		}
		// A redelivery of the last parked message parks under its sequence
		// again, without a write.
		var seq int64
		again, wrote := h.apply(k, got, park("msg-6", &seq))
		if wrote || seq != 3 || again.DeferredCount != 4 {
			h.Fatalf("re-park: wrote=%v seq=%d %+v", wrote, seq, again)
		}
		// Without a message id every park allocates.
		s, _ = h.apply(k, got, park("", &seq))
		var seq2 int64
		s, _ = h.apply(k, s, park("", &seq2))
		if seq != 4 || seq2 != 5 || s.DeferredCount != 6 {
			h.Fatalf("anonymous parks %d, %d, count %d", seq, seq2, s.DeferredCount)
		}
		h.wantStored(k, s)
	}},
	{name: "DrainReplaysInOrderAndOpensTheSession", run: func(h *harness) {
		k := h.key("s1")
		s, _ := h.apply(k, session.State{}, block("event-2", "msg-2"))
		for _, m := range []string{"msg-3", "msg-4", "msg-5"} {
			var seq int64
			s, _ = h.apply(k, s, park(m, &seq))
		}
		// Nothing to request while nothing waits is covered below; here the
		// unblock and the request are one write.
		at := time.Date(2026, 11, 30, 13, 0, 0, 123456700, time.UTC)
		s, wrote := h.apply(k, s, func(s session.State) (session.State, bool, error) {
			s, a := s.Unblock()
			s, b := s.RequestDrain(at)
			return s, a || b, nil
		})
		if !wrote || s.Blocked() || !s.Draining() || !s.DrainRequestedAt.Equal(at) || !s.Gated() {
			h.Fatalf("unblock+request: %+v", s)
		}
		h.wantStored(k, s)
		if again, wrote := h.apply(k, s, requestDrain(at.Add(time.Second))); wrote || !again.DrainRequestedAt.Equal(at) {
			h.Fatalf("a second request wrote")
		}
		s, _ = h.apply(k, s, replayed(0))
		if s.NextReplaySequence != 1 || s.DeferredCount != 2 || !s.Draining() || !s.Stale(0) || s.Stale(1) {
			h.Fatalf("after replaying 0: %+v", s)
		}
		if again, wrote := h.apply(k, s, replayed(0)); wrote || again.Version != s.Version {
			h.Fatalf("replaying a stale copy wrote")
		}
		if again, wrote := h.apply(k, s, replayed(7)); wrote || again.Version != s.Version {
			h.Fatalf("replaying a sequence never allocated wrote")
		}
		s, _ = h.apply(k, s, replayed(1))
		s, _ = h.apply(k, s, replayed(2))
		if s.DeferredCount != 0 || s.Draining() || s.Gated() || !s.Empty() {
			h.Fatalf("after the last copy: %+v; want open, empty, no replay requested", s)
		}
		got := h.wantStored(k, s)
		// The document stays: sequences never restart.
		var seq int64
		s, _ = h.apply(k, got, block("event-7", "msg-7"))
		s, _ = h.apply(k, s, park("msg-8", &seq))
		if seq != 3 || s.DeferredCount != 1 || s.NextReplaySequence != 3 {
			h.Fatalf("after reopening: seq %d %+v", seq, s)
		}
		h.wantStored(k, s)
	}},
	{name: "ReplayPassesOverMissingCopies", run: func(h *harness) {
		k := h.key("s1")
		s, _ := h.apply(k, session.State{}, block("event-2", "msg-2"))
		for _, m := range []string{"a", "b", "c", "d"} {
			var seq int64
			s, _ = h.apply(k, s, park(m, &seq))
		}
		s, _ = h.apply(k, s, replayed(2))
		if s.NextReplaySequence != 3 || s.DeferredCount != 1 || !s.Stale(1) {
			h.Fatalf("after passing over 0 and 1: %+v", s)
		}
		h.wantStored(k, s)
	}},
	{name: "FinishDrainClearsTheRequest", run: func(h *harness) {
		k := h.key("s1")
		var seq int64
		s, _ := h.apply(k, session.State{}, park("m1", &seq))
		if again, wrote := h.apply(k, session.State{}, requestDrain(time.Now())); wrote || again.Exists() {
			h.Fatalf("a request with nothing parked wrote")
		}
		s, _ = h.apply(k, s, requestDrain(time.Now()))
		s, wrote := h.apply(k, s, func(s session.State) (session.State, bool, error) {
			n, ok := s.FinishDrain()
			return n, ok, nil
		})
		if !wrote || s.Draining() || s.DeferredCount != 1 {
			h.Fatalf("FinishDrain: %+v", s)
		}
		h.wantStored(k, s)
	}},
	{name: "SessionsAndEndpointsAreIndependent", run: func(h *harness) {
		a := session.NewKey(h.scope+"-a", "s1")
		b := session.NewKey(h.scope+"-b", "s1")
		c := session.NewKey(h.scope+"-a", "s2")
		h.apply(a, session.State{}, block("event-1", "m1"))
		for _, k := range []session.Key{b, c} {
			if s := h.read(k); s.Exists() || s.Blocked() {
				h.Fatalf("%s/%s reads %+v", k.EndpointID, k.SessionID, s)
			}
		}
	}},
	{name: "AStaleWriteIsAConflictAndChangesNothing", run: func(h *harness) {
		k := h.key("s1")
		first, _ := h.apply(k, session.State{}, block("event-1", "m1"))
		r1, r2 := h.read(k), h.read(k)
		var seq int64
		n1, _, _ := r1.Park("m2")
		w1, err := h.s.Write(h.ctx, k, n1)
		if err != nil {
			h.Fatalf("first writer: %v", err)
		}
		if w1.Version == first.Version || w1.Version == "" {
			h.Fatalf("a write kept the version %q", w1.Version)
		}
		n2, _ := r2.Unblock()
		_, err = h.s.Write(h.ctx, k, n2)
		var se *session.StoreError
		if !session.IsConflict(err) || errors.As(err, &se) {
			h.Fatalf("second writer from the same read: %v; want ErrConflict, not a *StoreError (a lost race is no outage)", err)
		}
		got := h.wantStored(k, w1)
		if !got.Blocked() || got.DeferredCount != 1 {
			h.Fatalf("after the lost race %+v", got)
		}
		// Apply re-reads and applies its change to the winner's state.
		s, wrote, err := session.Apply(h.ctx, h.s, k, r2, 0, park("m3", &seq))
		if err != nil || !wrote || seq != 1 || s.DeferredCount != 2 || !s.Blocked() {
			h.Fatalf("Apply from a stale read: %v %v seq=%d %+v", err, wrote, seq, s)
		}
		h.wantStored(k, s)
	}},
	{name: "TwoCreatesOneWins", run: func(h *harness) {
		k := h.key("s1")
		a, _, _ := session.State{}.Block("event-a", "ma")
		b, _, _ := session.State{}.Block("event-b", "mb")
		var errs [2]error
		var wg sync.WaitGroup
		for i, s := range []session.State{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = h.s.Write(h.ctx, k, s)
			}()
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !session.IsConflict(err):
				h.Fatalf("create: %v", err)
			}
		}
		if won != 1 {
			h.Fatalf("%d creates succeeded (%v); want exactly one", won, errs)
		}
		got := h.read(k)
		if (errs[0] == nil) != (got.BlockedByEventID == "event-a") {
			h.Fatalf("stored %+v; the winner was %v", got, errs)
		}
		// A create over an existing document is a conflict too.
		if _, err := h.s.Write(h.ctx, k, a); !session.IsConflict(err) {
			h.Fatalf("create over an existing document: %v", err)
		}
	}},
	{name: "ConcurrentParksNeverLoseAnUpdate", run: func(h *harness) {
		writers, parks := h.tg.Writers, h.tg.ParksPerWriter
		if writers == 0 {
			writers = 16
		}
		if parks == 0 {
			parks = 50
		}
		k := h.key("contended")
		h.apply(k, session.State{}, block("event-1", "m0"))
		seqs := make([][]int64, writers)
		errs := make(chan error, writers)
		var conflicts sync.Map
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lost := 0
				for i := range parks {
					msg := fmt.Sprintf("w%d-m%d", w, i)
					for {
						cur, err := h.s.Read(h.ctx, k)
						if err != nil {
							errs <- err
							return
						}
						var seq int64
						_, _, err = session.Apply(h.ctx, h.s, k, cur, 1, park(msg, &seq))
						if err == nil {
							seqs[w] = append(seqs[w], seq)
							break
						}
						if !session.IsConflict(err) {
							errs <- err
							return
						}
						lost++
					}
				}
				conflicts.Store(w, lost)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			h.Fatalf("a writer failed: %v", err)
		}
		var all []int64
		for w := range writers {
			if len(seqs[w]) != parks {
				h.Fatalf("writer %d parked %d, want %d", w, len(seqs[w]), parks)
			}
			if !sort.SliceIsSorted(seqs[w], func(i, j int) bool { return seqs[w][i] < seqs[w][j] }) {
				h.Errorf("writer %d got sequences out of order: %v", w, seqs[w])
			}
			all = append(all, seqs[w]...)
		}
		sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
		for i, s := range all {
			if s != int64(i) {
				h.Fatalf("sequences are not 0..%d each once: position %d holds %d", writers*parks-1, i, s)
			}
		}
		got := h.read(k)
		n := int64(writers * parks)
		if got.DeferredCount != n || got.NextDeferralSequence != n || !got.Blocked() || got.BlockedByEventID != "event-1" {
			h.Fatalf("final state %+v; want %d parked and the block kept", got, n)
		}
		total := 0
		conflicts.Range(func(_, v any) bool { total += v.(int); return true })
		h.Logf("%d writers × %d parks: %d lost races, all re-read and retried", writers, parks, total)
	}},
	{name: "InvalidKeysAndCanceledContextsTouchNothing", run: func(h *harness) {
		bad := []session.Key{
			session.NewKey(h.scope, ""),
			session.NewKey("", "s1"),
			session.NewKey(" ", "s1"),
			{EndpointID: h.scope, SessionID: "s1", ID: "ABC"},
		}
		s, _, _ := session.State{}.Block("e", "m")
		for _, k := range bad {
			if _, err := h.s.Read(h.ctx, k); !errors.Is(err, session.ErrInvalidKey) {
				h.Errorf("Read %+v: %v", k, err)
			}
			if _, err := h.s.Write(h.ctx, k, s); !errors.Is(err, session.ErrInvalidKey) {
				h.Errorf("Write %+v: %v", k, err)
			}
		}
		ctx, cancel := context.WithCancel(h.ctx)
		cancel()
		k := h.key("s1")
		if _, err := h.s.Read(ctx, k); !errors.Is(err, context.Canceled) {
			h.Errorf("Read with a canceled context: %v", err)
		}
		if _, err := h.s.Write(ctx, k, s); !errors.Is(err, context.Canceled) {
			h.Errorf("Write with a canceled context: %v", err)
		}
		if got := h.read(k); got.Exists() {
			h.Errorf("a canceled write stored %+v", got)
		}
	}},
	{name: "AnInvalidStateIsRefused", run: func(h *harness) {
		k := h.key("s1")
		bad := session.State{NextDeferralSequence: 3, DeferredCount: 1}
		if _, err := h.s.Write(h.ctx, k, bad); err == nil || session.IsConflict(err) {
			h.Fatalf("Write of %+v: %v; want a refusal", bad, err)
		}
		if got := h.read(k); got.Exists() {
			h.Fatalf("stored %+v", got)
		}
	}},
	{name: "AStoreFailureIsAnErrorNeverADefaultState", serial: true, run: func(h *harness) {
		if h.tg.Break == nil {
			h.Fatal("the target cannot inject store failures (Target.Break is nil)")
		}
		k := h.key("s1")
		stored, _ := h.apply(k, session.State{}, block("event-1", "m1"))
		missing := h.key("s2")
		restore := h.tg.Break(h.T)
		for _, key := range []session.Key{k, missing} {
			s, err := h.s.Read(h.ctx, key)
			var se *session.StoreError
			if err == nil || !errors.As(err, &se) || se.Op != session.OpRead || session.IsConflict(err) {
				restore()
				h.Fatalf("Read during an outage: %+v, %v; want a *StoreError (read)", s, err)
			}
			if s.Exists() || s.Blocked() {
				h.Errorf("a failed read returned a state %+v", s)
			}
		}
		n, _ := stored.Unblock()
		_, err := h.s.Write(h.ctx, k, n)
		var se *session.StoreError
		if err == nil || !errors.As(err, &se) || se.Op != session.OpWrite || session.IsConflict(err) {
			restore()
			h.Fatalf("Write during an outage: %v; want a *StoreError (write), not a conflict", err)
		}
		var seq int64
		if _, wrote, err := session.Apply(h.ctx, h.s, k, stored, 0, park("m2", &seq)); err == nil || wrote || session.IsConflict(err) {
			restore()
			h.Fatalf("Apply during an outage: wrote=%v %v", wrote, err)
		}
		restore()
		got := h.wantStored(k, stored)
		if got.Version != stored.Version {
			h.Fatalf("a failed write changed the document")
		}
	}},
}
