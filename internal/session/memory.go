package session

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Memory is an in-process Store for the demo and tests. It is not durable:
// the state does not survive a restart. Versions are never reused, so a
// state read before a write never matches after it.
type Memory struct {
	now func() time.Time

	mu      sync.Mutex
	docs    map[string]State // by Key.ID
	version uint64
	fail    func(op string) error
}

var _ Store = (*Memory)(nil)

// MemoryOptions configures a Memory. The zero value means defaults.
type MemoryOptions struct {
	// Now is the clock for UpdatedAt; default time.Now.
	Now func() time.Time
}

// NewMemory returns an empty store.
func NewMemory(o MemoryOptions) *Memory {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Memory{now: o.Now, docs: map[string]State{}}
}

// FailWith makes every later operation ask fail first: a non-nil error is
// returned as the operation's StoreError, as a storage outage would be;
// nil (or a nil fail) lets operations through. It lets the conformance
// suite and pipeline tests inject outages into the in-memory store.
func (m *Memory) FailWith(fail func(op string) error) {
	m.mu.Lock()
	m.fail = fail
	m.mu.Unlock()
}

func (m *Memory) begin(ctx context.Context, key Key, op string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := key.Check(); err != nil {
		return err
	}
	m.mu.Lock()
	fail := m.fail
	m.mu.Unlock()
	if fail != nil {
		if err := fail(op); err != nil {
			return &StoreError{Op: op, Err: err}
		}
	}
	return nil
}

// Read implements Store.
func (m *Memory) Read(ctx context.Context, key Key) (State, error) {
	if err := m.begin(ctx, key, OpRead); err != nil {
		return State{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.docs[key.ID], nil
}

// Write implements Store.
func (m *Memory) Write(ctx context.Context, key Key, next State) (State, error) {
	if err := m.begin(ctx, key, OpWrite); err != nil {
		return State{}, err
	}
	if err := next.Check(); err != nil {
		return State{}, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.docs[key.ID]
	if (next.Version == "") == ok || (ok && cur.Version != next.Version) {
		return State{}, fmt.Errorf("session: write: %w", ErrConflict)
	}
	m.version++
	next.Version = "m" + strconv.FormatUint(m.version, 10)
	next.UpdatedAt = m.now().UTC()
	m.docs[key.ID] = next
	return next, nil
}

// Len returns the number of stored states, for tests and the demo.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.docs)
}
