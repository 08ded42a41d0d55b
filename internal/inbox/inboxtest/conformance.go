// Package inboxtest holds the conformance suite every inbox.Store must pass,
// and a manual clock for driving record timestamps in tests.
package inboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
)

// Clock is a manual clock, safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock set to start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// HashVector is an (endpoint, MessageId) pair and its NimBus identity hash
// (computed with NimBus's algorithm: upper-case hex SHA-256 of
// "<UTF-16 length of endpoint>\x1f<endpoint>\x1f<messageId>").
type HashVector struct{ Endpoint, MessageID, ID string }

// HashVectors cover delimiters, case, trailing spaces, length-prefix
// ambiguity and multi-unit UTF-16 characters.
var HashVectors = []HashVector{
	{"billing", `orders/one?#\customer`, "1159040A9607A8F0686169BA21981998EB32D6279CC5A0CFBE80CBF530B4F0D5"},
	{"shipping", `orders/one?#\customer`, "79E8E63EE69B5EB478E0CB6733E735458D84894A87033799C9703FE369B41160"},
	{"billing", "m-1", "52B03B3F613F2E7313454206FE3C2E51EC71F873F869B828F906B8FDF32A9835"},
	{"billing", "message-1", "BB9FE4FA580EE1BA93E391AF9212CFB2DF1B81B577A0262E26509017537F5E20"},
	{"Billing", "ext-1", "6CE9FA9C5FC44547A023415D0FE3C05FF630BBF4126B8109609AC46034FA9B08"},
	{"Shipping", "ext-1", "8F3691A2E0043E46AD9B6E9D7DCDDB663BB15BE6DAE3FC031E98941ACC8294B2"},
	{"billing", "m1", "7E32AD0C6310C4DD12292DB0B6FB46F7EB8684F507D30C9211D203518F2F99D2"},
	{"billing", "m1 ", "7E1114E64F522BF42307A410D9E4FD72B75B681836BA2A487A0A9F77ED9BD612"},
	{"billing ", "m1", "1CADFF8DDEAB7183392077F0BC598CF7F3E7C85C9C86E84608D7A82F78834BCF"},
	{"Billing", "m1", "8BB0CC5D62FDD6E68160C4E750CAE959C3844D9F3C43831508F16D0954A386FB"},
	{"12", "3", "D94D6714F4E464123A1A19409B536560A396C38132DE1264EC3E01ED9F0E4690"},
	{"1", "23", "0FB57BC0B55A1AFAB01465CE3D3A67DAD9576AB588295BAC06A0B3101AE7308B"},
	{"café", "m", "C64C38F474B0CE5222817BC865E76F4DB94A5B56D78AC3EA38E196C7CA429D39"},
	{"😀ep", "m", "8AA69D0F44F594087DB8CD247034BEC654E1C7F0F3D453015B9B9CD710A63442"},
}

// Factory returns a fresh store whose record timestamps come from now. Stores
// that persist between calls (a shared Cosmos container) are fine: every case
// uses endpoints no other case or run uses.
type Factory func(t *testing.T, now func() time.Time) inbox.Store

// Epoch is where every case's clock starts.
var Epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Run runs the conformance suite (NimBus's InboxStoreConformanceTests cases)
// against the stores newStore returns.
func Run(t *testing.T, newStore Factory) {
	run := uniqueSuffix()
	// Every case gets endpoints no other case or run uses, so stores that
	// share one container (Cosmos) keep the cases apart.
	var caseID string
	ep := func(name string) string { return name + "-" + run + "-" + caseID }
	ctx := context.Background()

	setup := func(t *testing.T) (inbox.Store, *Clock) {
		t.Helper()
		caseID = uniqueSuffix()
		clock := NewClock(Epoch)
		return newStore(t, clock.Now), clock
	}

	t.Run("HasProcessed transitions from false to true after record", func(t *testing.T) {
		s, _ := setup(t)
		k := inbox.NewKey(ep("billing"), "message-1")
		mustProcessed(t, s, k, false)
		if err := s.RecordProcessed(ctx, k); err != nil {
			t.Fatalf("RecordProcessed: %v", err)
		}
		mustProcessed(t, s, k, true)
	})

	t.Run("RecordProcessed is idempotent when repeated concurrently", func(t *testing.T) {
		s, _ := setup(t)
		k := inbox.NewKey(ep("billing"), "concurrent-1")
		var wg sync.WaitGroup
		errs := make(chan error, 32)
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- s.RecordProcessed(ctx, k)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("concurrent RecordProcessed: %v", err)
			}
		}
		if err := s.RecordProcessed(ctx, k); err != nil {
			t.Fatalf("repeated RecordProcessed: %v", err)
		}
		mustProcessed(t, s, k, true)
	})

	t.Run("record for one endpoint does not mark other endpoints processed", func(t *testing.T) {
		s, _ := setup(t)
		billing := inbox.NewKey(ep("billing"), "fan-out-1")
		shipping := inbox.NewKey(ep("shipping"), "fan-out-1")
		if err := s.RecordProcessed(ctx, billing); err != nil {
			t.Fatal(err)
		}
		mustProcessed(t, s, billing, true)
		mustProcessed(t, s, shipping, false)
	})

	t.Run("message identifiers are case sensitive", func(t *testing.T) {
		s, _ := setup(t)
		e := ep("billing")
		if err := s.RecordProcessed(ctx, inbox.NewKey(e, "Message-A")); err != nil {
			t.Fatal(err)
		}
		mustProcessed(t, s, inbox.NewKey(e, "message-a"), false)
		mustProcessed(t, s, inbox.NewKey(e, "MESSAGE-A"), false)
		mustProcessed(t, s, inbox.NewKey(e, "Message-A"), true)
	})

	t.Run("identifiers differing only by trailing whitespace are distinct", func(t *testing.T) {
		s, _ := setup(t)
		e := ep("billing")
		if err := s.RecordProcessed(ctx, inbox.NewKey(e, "m1")); err != nil {
			t.Fatal(err)
		}
		mustProcessed(t, s, inbox.NewKey(e, "m1 "), false)
		mustProcessed(t, s, inbox.NewKey(e+" ", "m1"), false)
		if err := s.RecordProcessed(ctx, inbox.NewKey(e+" ", "m2")); err != nil {
			t.Fatal(err)
		}
		mustProcessed(t, s, inbox.NewKey(e, "m2"), false)
		mustProcessed(t, s, inbox.NewKey(e+" ", "m2"), true)
	})

	t.Run("maximum length identifiers are recorded and found", func(t *testing.T) {
		s, _ := setup(t)
		prefix := ep("b")
		e := prefix + strings.Repeat("e", inbox.MaxEndpointIDLength-len(prefix))
		m := strings.Repeat("m", inbox.MaxMessageIDLength-1) + "z"
		if inbox.UTF16Len(e) != 260 || inbox.UTF16Len(m) != 512 {
			t.Fatalf("test ids have lengths %d/%d", inbox.UTF16Len(e), inbox.UTF16Len(m))
		}
		if err := s.RecordProcessed(ctx, inbox.NewKey(e, m)); err != nil {
			t.Fatalf("RecordProcessed(max lengths): %v", err)
		}
		mustProcessed(t, s, inbox.NewKey(e, m), true)
		mustProcessed(t, s, inbox.NewKey(e, m[:511]), false)
	})

	t.Run("PurgeExpired removes expired rows and retains newer rows", func(t *testing.T) {
		s, clock := setup(t)
		e := ep("billing")
		old := inbox.NewKey(e, "old")
		if err := s.RecordProcessed(ctx, old); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		cutoff := clock.Now()
		// A repeated record must not refresh the first timestamp.
		if err := s.RecordProcessed(ctx, old); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		newer := inbox.NewKey(e, "new")
		if err := s.RecordProcessed(ctx, newer); err != nil {
			t.Fatal(err)
		}
		mustPurge(t, s, e, cutoff, 1)
		mustPurge(t, s, e, cutoff, 0)
		mustProcessed(t, s, old, false)
		mustProcessed(t, s, newer, true)
	})

	t.Run("PurgeExpired cutoff is exclusive", func(t *testing.T) {
		s, clock := setup(t)
		e := ep("billing")
		k := inbox.NewKey(e, "at-cutoff")
		if err := s.RecordProcessed(ctx, k); err != nil {
			t.Fatal(err)
		}
		mustPurge(t, s, e, clock.Now(), 0)
		mustProcessed(t, s, k, true)
		mustPurge(t, s, e, clock.Now().Add(time.Millisecond), 1)
	})

	t.Run("PurgeExpired is scoped to the requested endpoint", func(t *testing.T) {
		s, clock := setup(t)
		e := ep("billing")
		other := ep("shipping")
		for _, k := range []inbox.Key{inbox.NewKey(e, "m"), inbox.NewKey(other, "m"), inbox.NewKey(e+" ", "m"), inbox.NewKey(strings.ToUpper(e), "m")} {
			if err := s.RecordProcessed(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(time.Minute)
		mustPurge(t, s, e, clock.Now(), 1)
		mustProcessed(t, s, inbox.NewKey(e, "m"), false)
		mustProcessed(t, s, inbox.NewKey(other, "m"), true)
		mustProcessed(t, s, inbox.NewKey(e+" ", "m"), true)
		mustProcessed(t, s, inbox.NewKey(strings.ToUpper(e), "m"), true)
	})

	t.Run("operations honor pre-cancelled contexts without recording", func(t *testing.T) {
		s, clock := setup(t)
		e := ep("billing")
		k := inbox.NewKey(e, "cancelled")
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.HasProcessed(cctx, k); !errors.Is(err, context.Canceled) {
			t.Errorf("HasProcessed with cancelled ctx: got %v, want context.Canceled", err)
		}
		if err := s.RecordProcessed(cctx, k); !errors.Is(err, context.Canceled) {
			t.Errorf("RecordProcessed with cancelled ctx: got %v, want context.Canceled", err)
		}
		if _, err := s.PurgeExpired(cctx, e, clock.Now().Add(time.Hour)); !errors.Is(err, context.Canceled) {
			t.Errorf("PurgeExpired with cancelled ctx: got %v, want context.Canceled", err)
		}
		mustProcessed(t, s, k, false)
	})

	t.Run("non-ASCII identifiers round trip", func(t *testing.T) {
		s, _ := setup(t)
		e := ep("café😀")
		k := inbox.NewKey(e, "orders/one?#\\customer")
		if err := s.RecordProcessed(ctx, k); err != nil {
			t.Fatal(err)
		}
		mustProcessed(t, s, k, true)
		mustProcessed(t, s, inbox.NewKey(e, "orders/one?#\\Customer"), false)
	})
}

func mustProcessed(t *testing.T, s inbox.Store, k inbox.Key, want bool) {
	t.Helper()
	got, err := s.HasProcessed(context.Background(), k)
	if err != nil {
		t.Fatalf("HasProcessed(%q, %q): %v", k.EndpointID, k.MessageID, err)
	}
	if got != want {
		t.Fatalf("HasProcessed(%q, %q) = %v, want %v", k.EndpointID, k.MessageID, got, want)
	}
}

func mustPurge(t *testing.T, s inbox.Store, endpoint string, cutoff time.Time, want int) {
	t.Helper()
	got, err := s.PurgeExpired(context.Background(), endpoint, cutoff)
	if err != nil {
		t.Fatalf("PurgeExpired(%q): %v", endpoint, err)
	}
	if got != want {
		t.Fatalf("PurgeExpired(%q, %s) = %d, want %d", endpoint, cutoff.Format(time.RFC3339Nano), got, want)
	}
}

func uniqueSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
