package session_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/session"
)

// racing is a store another writer always beats: every write conflicts.
type racing struct {
	session.Store
	reads, writes int
}

func (r *racing) Read(ctx context.Context, k session.Key) (session.State, error) {
	r.reads++
	return r.Store.Read(ctx, k)
}

func (r *racing) Write(context.Context, session.Key, session.State) (session.State, error) {
	r.writes++
	return session.State{}, session.ErrConflict
}

func TestApplyGivesUpAfterItsAttempts(t *testing.T) {
	r := &racing{Store: session.NewMemory(session.MemoryOptions{})}
	k := session.NewKey("billing", "s1")
	_, wrote, err := session.Apply(context.Background(), r, k, session.State{}, 3, func(s session.State) (session.State, bool, error) {
		return s.Block("e1", "m1")
	})
	if wrote || !errors.Is(err, session.ErrTooManyConflicts) || !session.IsConflict(err) {
		t.Fatalf("wrote=%v err=%v; want ErrTooManyConflicts, a conflict", wrote, err)
	}
	if r.writes != 3 || r.reads != 2 {
		t.Fatalf("%d writes and %d reads; want 3 writes and a re-read between each", r.writes, r.reads)
	}
}

func TestApplyWithoutAChangeDoesNotWrite(t *testing.T) {
	r := &racing{Store: session.NewMemory(session.MemoryOptions{})}
	k := session.NewKey("billing", "s1")
	cur := session.State{}
	got, wrote, err := session.Apply(context.Background(), r, k, cur, 0, func(s session.State) (session.State, bool, error) {
		n, ok := s.Unblock()
		return n, ok, nil
	})
	if err != nil || wrote || got != cur || r.writes != 0 || r.reads != 0 {
		t.Fatalf("got %+v wrote=%v err=%v writes=%d reads=%d", got, wrote, err, r.writes, r.reads)
	}
}
