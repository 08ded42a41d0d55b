package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/inbox/inboxtest"
)

// hookStore wraps a store and runs before ahead of every purge.
type hookStore struct {
	inbox.Store
	calls  int
	before func(ctx context.Context, call int) error
}

func (h *hookStore) PurgeExpired(ctx context.Context, endpointID string, olderThan time.Time) (int, error) {
	h.calls++
	if h.before != nil {
		if err := h.before(ctx, h.calls); err != nil {
			return 0, err
		}
	}
	return h.Store.PurgeExpired(ctx, endpointID, olderThan)
}

// finderStore adds the wrapped store's OldestExpired back to a hookStore.
type finderStore struct {
	*hookStore
	finder inbox.OldestExpiredFinder
	err    error
}

func (f finderStore) OldestExpired(ctx context.Context, ep string, olderThan time.Time) (time.Time, bool, error) {
	if f.err != nil {
		return time.Time{}, false, f.err
	}
	return f.finder.OldestExpired(ctx, ep, olderThan)
}

type fixture struct {
	store  *inbox.MemoryStore
	clock  *inboxtest.Clock
	ep     string
	keys   []inbox.Key // ep's records, in creation order
	times  []time.Time
	others []inbox.Key
}

// newFixture records expired records of ep one minute apart (the first at
// Epoch), plus expired records of other endpoints and fresh ones of ep,
// with retention 1h and a batch size of batch.
func newFixture(t *testing.T, batch, expired, fresh int) *fixture {
	t.Helper()
	clock := inboxtest.NewClock(inboxtest.Epoch)
	s, err := inbox.NewMemoryStore(inbox.MemoryOptions{Now: clock.Now, PurgeBatchSize: batch})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{store: s, clock: clock, ep: "billing"}
	ctx := context.Background()
	for i := range expired {
		k := inbox.NewKey(f.ep, fmt.Sprintf("old-%d", i))
		f.keys, f.times = append(f.keys, k), append(f.times, clock.Now())
		for _, o := range []inbox.Key{inbox.NewKey("shipping", k.MessageID), inbox.NewKey("billing ", k.MessageID), inbox.NewKey("Billing", k.MessageID)} {
			if err := s.RecordProcessed(ctx, o); err != nil {
				t.Fatal(err)
			}
			f.others = append(f.others, o)
		}
		if err := s.RecordProcessed(ctx, k); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
	}
	clock.Advance(2 * time.Hour)
	for i := range fresh {
		k := inbox.NewKey(f.ep, fmt.Sprintf("fresh-%d", i))
		f.keys, f.times = append(f.keys, k), append(f.times, clock.Now())
		if err := s.RecordProcessed(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// remaining returns how many of ep's records before cutoff are left, and
// the oldest of them.
func (f *fixture) remaining(t *testing.T, cutoff time.Time) (int, time.Time) {
	t.Helper()
	n, oldest := 0, time.Time{}
	for i, k := range f.keys {
		ok, err := f.store.HasProcessed(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		if ok && f.times[i].Before(cutoff) {
			if n == 0 || f.times[i].Before(oldest) {
				oldest = f.times[i]
			}
			n++
		}
	}
	return n, oldest
}

func (f *fixture) mustKeepOthers(t *testing.T) {
	t.Helper()
	for _, k := range f.others {
		if ok, err := f.store.HasProcessed(context.Background(), k); err != nil || !ok {
			t.Fatalf("record of %q was purged (err %v)", k.EndpointID, err)
		}
	}
}

// tickingClock is a budget clock that a purge hook advances.
type tickingClock struct{ now time.Time }

func (c *tickingClock) Now() time.Time { return c.now }

func TestCleanerDrainsUntilABatchDeletesNothing(t *testing.T) {
	cases := []struct {
		batch, expired, fresh int
		wantBatches           int
	}{
		{batch: 10, expired: 35, fresh: 5, wantBatches: 5},
		{batch: 10, expired: 30, fresh: 0, wantBatches: 4},
		{batch: 1000, expired: 0, fresh: 3, wantBatches: 1},
		{batch: 1, expired: 7, fresh: 1, wantBatches: 8},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("batch %d expired %d", tc.batch, tc.expired), func(t *testing.T) {
			f := newFixture(t, tc.batch, tc.expired, tc.fresh)
			now := f.clock.Now()
			c := inbox.Cleaner{Store: f.store, EndpointID: f.ep, Retention: time.Hour}
			rep, err := c.Run(context.Background(), now)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Cutoff != now.Add(-time.Hour) || rep.EndpointID != f.ep {
				t.Fatalf("cutoff %v endpoint %q", rep.Cutoff, rep.EndpointID)
			}
			if rep.Purged != tc.expired || rep.Batches != tc.wantBatches || !rep.Drained || rep.StoppedOnBudget {
				t.Fatalf("report %+v, want %d purged in %d batches, drained", rep, tc.expired, tc.wantBatches)
			}
			if !rep.LagKnown || rep.Lag != 0 || !rep.Oldest.IsZero() {
				t.Fatalf("drained run reports lag %+v", rep)
			}
			if n, _ := f.remaining(t, rep.Cutoff); n != 0 {
				t.Fatalf("%d expired records left", n)
			}
			if got := f.store.Len(); got != tc.fresh+len(f.others) {
				t.Fatalf("store holds %d records, want %d fresh + %d of other endpoints", got, tc.fresh, len(f.others))
			}
			f.mustKeepOthers(t)
		})
	}
}

func TestCleanerCutoffIsExclusiveAndDefaultsToSevenDays(t *testing.T) {
	f := newFixture(t, 100, 3, 0)
	// now − 7 days lands exactly on the second record.
	now := f.times[1].Add(inbox.DefaultRetention)
	rep, err := (&inbox.Cleaner{Store: f.store, EndpointID: f.ep}).Run(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Cutoff != f.times[1] || rep.Purged != 1 {
		t.Fatalf("report %+v, want only the record before %v purged", rep, f.times[1])
	}
	for i, want := range []bool{false, true, true} {
		if ok, _ := f.store.HasProcessed(context.Background(), f.keys[i]); ok != want {
			t.Errorf("record %d present = %v, want %v", i, ok, want)
		}
	}
}

func TestCleanerStopsOnBudgetAndReportsLag(t *testing.T) {
	cases := []struct {
		name        string
		budget      time.Duration
		wantBatches int
	}{
		{"explicit budget", 3 * time.Minute, 3},
		{"default budget", 0, 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 5, 40, 2)
			budgetClock := &tickingClock{now: time.Unix(0, 0)}
			hs := &hookStore{Store: f.store, before: func(context.Context, int) error {
				budgetClock.now = budgetClock.now.Add(time.Minute)
				return nil
			}}
			c := inbox.Cleaner{Store: finderStore{hookStore: hs, finder: f.store}, EndpointID: f.ep, Retention: time.Hour, Budget: tc.budget, Clock: budgetClock.Now}
			rep, err := c.Run(context.Background(), f.clock.Now())
			if err != nil {
				t.Fatal(err)
			}
			if !rep.StoppedOnBudget || rep.Drained || rep.Batches != tc.wantBatches || rep.Purged != 5*tc.wantBatches {
				t.Fatalf("report %+v, want a budget stop after %d batches", rep, tc.wantBatches)
			}
			if rep.Elapsed != time.Duration(tc.wantBatches)*time.Minute {
				t.Fatalf("elapsed %v", rep.Elapsed)
			}
			left, oldest := f.remaining(t, rep.Cutoff)
			if left != 40-rep.Purged {
				t.Fatalf("%d expired left, want %d", left, 40-rep.Purged)
			}
			if !rep.LagKnown || !rep.Oldest.Equal(oldest) || rep.Lag != rep.Cutoff.Sub(oldest) || rep.Lag <= 0 {
				t.Fatalf("lag %v oldest %v (known %v), want oldest %v lag %v", rep.Lag, rep.Oldest, rep.LagKnown, oldest, rep.Cutoff.Sub(oldest))
			}
			f.mustKeepOthers(t)
		})
	}
}

func TestCleanerWithoutFinderLeavesLagUnknown(t *testing.T) {
	f := newFixture(t, 5, 20, 0)
	budgetClock := &tickingClock{now: time.Unix(0, 0)}
	hs := &hookStore{Store: f.store, before: func(context.Context, int) error {
		budgetClock.now = budgetClock.now.Add(time.Minute)
		return nil
	}}
	rep, err := (&inbox.Cleaner{Store: hs, EndpointID: f.ep, Retention: time.Hour, Budget: 2 * time.Minute, Clock: budgetClock.Now}).Run(context.Background(), f.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.StoppedOnBudget || rep.LagKnown || rep.Lag != 0 {
		t.Fatalf("report %+v", rep)
	}
}

func TestCleanerCancellationStopsPromptly(t *testing.T) {
	t.Run("cancelled during a batch", func(t *testing.T) {
		f := newFixture(t, 5, 40, 0)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		hs := &hookStore{Store: f.store, before: func(_ context.Context, call int) error {
			if call == 2 {
				cancel()
			}
			return nil
		}}
		rep, err := (&inbox.Cleaner{Store: hs, EndpointID: f.ep, Retention: time.Hour}).Run(ctx, f.clock.Now())
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
		if hs.calls != 2 || rep.Batches != 2 || rep.Purged != 5 {
			t.Fatalf("%d purge calls, report %+v", hs.calls, rep)
		}
	})
	t.Run("cancelled before the run", func(t *testing.T) {
		f := newFixture(t, 5, 10, 0)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		hs := &hookStore{Store: f.store}
		_, err := (&inbox.Cleaner{Store: hs, EndpointID: f.ep, Retention: time.Hour}).Run(ctx, f.clock.Now())
		if !errors.Is(err, context.Canceled) || hs.calls != 0 {
			t.Fatalf("err %v after %d purge calls", err, hs.calls)
		}
	})
}

func TestCleanerSurfacesStoreFailures(t *testing.T) {
	errOutage := errors.New("store outage")
	t.Run("purge", func(t *testing.T) {
		f := newFixture(t, 5, 20, 0)
		hs := &hookStore{Store: f.store, before: func(_ context.Context, call int) error {
			if call == 3 {
				return errOutage
			}
			return nil
		}}
		rep, err := (&inbox.Cleaner{Store: hs, EndpointID: f.ep, Retention: time.Hour}).Run(context.Background(), f.clock.Now())
		if !errors.Is(err, errOutage) {
			t.Fatalf("err %v, want the store's error", err)
		}
		if rep.Batches != 3 || rep.Purged != 10 || rep.Drained || rep.LagKnown {
			t.Fatalf("report %+v", rep)
		}
	})
	t.Run("lag", func(t *testing.T) {
		f := newFixture(t, 5, 20, 0)
		budgetClock := &tickingClock{now: time.Unix(0, 0)}
		hs := &hookStore{Store: f.store, before: func(context.Context, int) error {
			budgetClock.now = budgetClock.now.Add(time.Minute)
			return nil
		}}
		c := inbox.Cleaner{Store: finderStore{hookStore: hs, err: errOutage}, EndpointID: f.ep, Retention: time.Hour, Budget: time.Minute, Clock: budgetClock.Now}
		rep, err := c.Run(context.Background(), f.clock.Now())
		if !errors.Is(err, errOutage) || rep.Purged != 5 || !rep.StoppedOnBudget || rep.LagKnown {
			t.Fatalf("err %v report %+v", err, rep)
		}
	})
}

func TestCleanerRejectsInvalidConfiguration(t *testing.T) {
	s, err := inbox.NewMemoryStore(inbox.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]inbox.Cleaner{
		"no store":           {EndpointID: "billing"},
		"blank endpoint":     {Store: s, EndpointID: " \t"},
		"negative retention": {Store: s, EndpointID: "billing", Retention: -time.Hour},
		"negative budget":    {Store: s, EndpointID: "billing", Budget: -time.Second},
	} {
		if _, err := c.Run(context.Background(), time.Now()); !errors.Is(err, inbox.ErrInvalidCleaner) {
			t.Errorf("%s: err %v, want ErrInvalidCleaner", name, err)
		}
	}
}

func TestMemoryStoreOldestExpired(t *testing.T) {
	f := newFixture(t, 100, 4, 2)
	ctx := context.Background()
	cases := []struct {
		ep        string
		olderThan time.Time
		want      time.Time
		wantOK    bool
	}{
		{f.ep, f.clock.Now(), f.times[0], true},
		{f.ep, f.times[0], time.Time{}, false}, // exclusive
		{f.ep, f.times[0].Add(time.Nanosecond), f.times[0], true},
		{"nobody", f.clock.Now(), time.Time{}, false},
	}
	for _, tc := range cases {
		got, ok, err := f.store.OldestExpired(ctx, tc.ep, tc.olderThan)
		if err != nil || ok != tc.wantOK || !got.Equal(tc.want) {
			t.Errorf("OldestExpired(%q, %v) = %v, %v, %v; want %v, %v", tc.ep, tc.olderThan, got, ok, err, tc.want, tc.wantOK)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := f.store.OldestExpired(cctx, f.ep, f.clock.Now()); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err %v", err)
	}
}
