package inbox_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/inbox/inboxtest"
)

func TestMemoryStoreConformance(t *testing.T) {
	inboxtest.Run(t, func(t *testing.T, now func() time.Time) inbox.Store {
		s, err := inbox.NewMemoryStore(inbox.MemoryOptions{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestMemoryStoreRejectsUnboundedPurgeBatch(t *testing.T) {
	for _, n := range []int{-1, 1001} {
		if _, err := inbox.NewMemoryStore(inbox.MemoryOptions{PurgeBatchSize: n}); err == nil {
			t.Errorf("PurgeBatchSize %d accepted", n)
		}
	}
	for _, n := range []int{1, 1000} {
		if _, err := inbox.NewMemoryStore(inbox.MemoryOptions{PurgeBatchSize: n}); err != nil {
			t.Errorf("PurgeBatchSize %d rejected: %v", n, err)
		}
	}
}

func TestMemoryStorePurgeIsBounded(t *testing.T) {
	clock := inboxtest.NewClock(inboxtest.Epoch)
	s, err := inbox.NewMemoryStore(inbox.MemoryOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 1001 {
		if err := s.RecordProcessed(ctx, inbox.NewKey("billing", "m-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	cutoff := clock.Now().Add(time.Second)
	for _, want := range []int{1000, 1, 0} {
		got, err := s.PurgeExpired(ctx, "billing", cutoff)
		if err != nil || got != want {
			t.Fatalf("PurgeExpired = %d, %v; want %d", got, err, want)
		}
	}
}
