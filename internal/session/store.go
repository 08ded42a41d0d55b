package session

import (
	"context"
	"errors"
	"fmt"
)

// Store is the contract every session-state provider implements. It is
// safe for concurrent use.
//
// Every method returns ctx.Err() (wrapped or not) without touching storage
// when ctx is already done, and ErrInvalidKey for an invalid key. Any other
// error but ErrConflict means the store could not answer or could not
// write: the caller treats it as transient (the delivery fails and is
// redelivered), never as "not blocked" and never as written. A write that
// failed that way may still have been applied; re-reading tells, and the
// transitions are idempotent for the same arguments (Block by the same
// event and message, Park of the same message).
type Store interface {
	// Read returns the session's state. A missing document is the zero
	// State (Version ""): not blocked, nothing parked.
	Read(ctx context.Context, key Key) (State, error)
	// Write stores next if the stored document is still the one next was
	// derived from: next.Version "" creates the document and requires that
	// none exists; otherwise it replaces the document only if its version
	// is still next.Version. A lost race changes nothing and returns an
	// error wrapping ErrConflict; the caller re-reads. It returns the state
	// as stored, with its new Version and UpdatedAt. next must pass Check.
	Write(ctx context.Context, key Key, next State) (State, error)
}

// ErrConflict reports a Write that lost its compare-and-swap: the document
// changed (or appeared, or vanished) since it was read. Nothing was
// written; re-read and decide again.
var ErrConflict = errors.New("session: the state changed since it was read")

// IsConflict reports whether err is a lost compare-and-swap.
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }

// Operations named in StoreError, counters and logs; the only values the
// "operation" tag ever takes.
const (
	OpRead  = "read"
	OpWrite = "write"
)

// StoreError is a failure of the backing store (unavailable, throttled,
// refused, or a stored document that is not valid). The pipeline treats
// it as transient.
type StoreError struct {
	// Op is OpRead or OpWrite.
	Op  string
	Err error
}

func (e *StoreError) Error() string { return fmt.Sprintf("session: %s: %v", e.Op, e.Err) }

// Unwrap returns the provider's error.
func (e *StoreError) Unwrap() error { return e.Err }

// DefaultApplyAttempts bounds Apply's writes: a session's deliveries are
// handled one at a time, so a race is between a delivery and a replay (or
// an operator), and a few attempts settle it.
const DefaultApplyAttempts = 5

// Change is a transition: it returns the next state and whether it
// differs from the state given; an error stops Apply without a write.
type Change func(State) (State, bool, error)

// ErrTooManyConflicts reports an Apply that lost every attempt. It wraps
// ErrConflict, so callers treat it like one lost race: transient.
var ErrTooManyConflicts = fmt.Errorf("%w on every attempt", ErrConflict)

// Apply applies change to cur (the state the caller read, so the common
// case costs one write and no read) and writes the result. On a lost race
// it re-reads and applies change to the fresh state, at most attempts
// writes in all (DefaultApplyAttempts when attempts < 1); after the last it
// returns ErrTooManyConflicts. When change reports no change, nothing is
// written and cur is returned. It returns the state as stored and whether
// a write was made.
func Apply(ctx context.Context, s Store, key Key, cur State, attempts int, change Change) (State, bool, error) {
	if attempts < 1 {
		attempts = DefaultApplyAttempts
	}
	for attempt := 1; ; attempt++ {
		next, changed, err := change(cur)
		if err != nil || !changed {
			return cur, false, err
		}
		stored, err := s.Write(ctx, key, next)
		if err == nil {
			return stored, true, nil
		}
		if !IsConflict(err) {
			return cur, false, err
		}
		if attempt == attempts {
			return cur, false, fmt.Errorf("%w (%d attempts): %w", ErrTooManyConflicts, attempts, err)
		}
		if cur, err = s.Read(ctx, key); err != nil {
			return cur, false, err
		}
	}
}
