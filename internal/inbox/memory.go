package inbox

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// DefaultMemoryPurgeBatch is the in-memory store's default purge batch, as
// NimBus's InMemoryInboxStore.
const DefaultMemoryPurgeBatch = 1000

// MemoryStore is an in-process Store for tests, demos and local runs. It is
// not durable: deduplication does not survive a restart.
type MemoryStore struct {
	now   func() time.Time
	batch int

	mu sync.RWMutex
	// records holds no pointers, so the garbage collector need not scan it
	// however large it grows.
	records   map[[32]byte]memRecord // by identity hash
	endpoints map[string]uint32      // interned endpoint ids
	names     []string
}

type memRecord struct {
	endpoint  uint32 // index into names
	createdAt int64  // Unix nanoseconds, UTC
}

var _ Store = (*MemoryStore)(nil)

// MemoryOptions configures a MemoryStore. The zero value means defaults.
type MemoryOptions struct {
	// Now is the clock for record timestamps; default time.Now.
	Now func() time.Time
	// PurgeBatchSize bounds one purge, 1..1000; 0 means 1000.
	PurgeBatchSize int
}

// NewMemoryStore returns an empty store. It fails for a purge batch size
// outside 1..1000.
func NewMemoryStore(o MemoryOptions) (*MemoryStore, error) {
	if o.PurgeBatchSize == 0 {
		o.PurgeBatchSize = DefaultMemoryPurgeBatch
	}
	if o.PurgeBatchSize < 1 || o.PurgeBatchSize > 1000 {
		return nil, fmt.Errorf("inbox: purge batch size %d is outside 1..1000", o.PurgeBatchSize)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &MemoryStore{now: o.Now, batch: o.PurgeBatchSize, records: make(map[[32]byte]memRecord), endpoints: map[string]uint32{}}, nil
}

// HasProcessed implements Store.
func (s *MemoryStore) HasProcessed(ctx context.Context, key Key) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := validKey(key); err != nil {
		return false, err
	}
	sum := key.Sum()
	s.mu.RLock()
	_, ok := s.records[sum]
	s.mu.RUnlock()
	return ok, nil
}

// RecordProcessed implements Store; the first timestamp wins.
func (s *MemoryStore) RecordProcessed(ctx context.Context, key Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := validKey(key); err != nil {
		return err
	}
	now := s.now().UnixNano()
	sum := key.Sum()
	s.mu.Lock()
	if _, ok := s.records[sum]; !ok {
		s.records[sum] = memRecord{endpoint: s.intern(key.EndpointID), createdAt: now}
	}
	s.mu.Unlock()
	return nil
}

// intern returns the index of endpointID; s.mu must be held for writing.
func (s *MemoryStore) intern(endpointID string) uint32 {
	i, ok := s.endpoints[endpointID]
	if !ok {
		i = uint32(len(s.names))
		s.endpoints[endpointID] = i
		s.names = append(s.names, endpointID)
	}
	return i
}

// PurgeExpired implements Store. It deletes at most one batch, oldest
// first is not guaranteed.
func (s *MemoryStore) PurgeExpired(ctx context.Context, endpointID string, olderThan time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if isBlank(endpointID) {
		return 0, ErrInvalidKey
	}
	cutoff := olderThan.UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	ep, ok := s.endpoints[endpointID]
	if !ok {
		return 0, nil
	}
	n := 0
	for id, r := range s.records {
		if n == s.batch {
			break
		}
		if r.endpoint == ep && r.createdAt < cutoff {
			delete(s.records, id)
			n++
		}
	}
	return n, nil
}

// OldestExpired implements OldestExpiredFinder: the creation time of
// endpointID's oldest record created before olderThan.
func (s *MemoryStore) OldestExpired(ctx context.Context, endpointID string, olderThan time.Time) (time.Time, bool, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, false, err
	}
	if isBlank(endpointID) {
		return time.Time{}, false, ErrInvalidKey
	}
	cutoff := olderThan.UnixNano()
	s.mu.RLock()
	defer s.mu.RUnlock()
	ep, ok := s.endpoints[endpointID]
	if !ok {
		return time.Time{}, false, nil
	}
	var oldest int64
	found := false
	for _, r := range s.records {
		if r.endpoint == ep && r.createdAt < cutoff && (!found || r.createdAt < oldest) {
			oldest, found = r.createdAt, true
		}
	}
	if !found {
		return time.Time{}, false, nil
	}
	return time.Unix(0, oldest).UTC(), true, nil
}

var _ OldestExpiredFinder = (*MemoryStore)(nil)

// Len returns the number of records held, for tests and the demo.
func (s *MemoryStore) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.records)
}
