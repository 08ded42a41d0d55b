// Package telemetry keeps the process's counters. Every counter has a fixed,
// bounded set of tag values decided in code: never a message id, session id,
// event id or payload.
package telemetry

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// Counter names, mirroring NimBus's meters where one exists.
const (
	// DuplicateDetected counts deliveries skipped by the inbox (no tags).
	DuplicateDetected = "nimbus.inbox.duplicate_detected"
	// InboxOperationFailed counts failed store operations, tagged
	// operation=check|record|purge.
	InboxOperationFailed = "nimbus.inbox.operation.failed"
	// InboxBypassed counts deliveries that could not be deduplicated,
	// tagged reason=missing_or_blank|too_long.
	InboxBypassed = "nimbus.inbox.bypassed"
	// Invocations counts invocations, tagged function and outcome.
	Invocations = "nimbus.invocations"
	// Purged counts inbox records deleted by cleanup.
	Purged = "nimbus.inbox.purged"
)

// Metrics is a set of counters keyed by name and at most one tag
// (key=value, from a bounded set of values). The zero value is ready to use
// and safe for concurrent use. Incrementing builds no strings: the
// "name{key=value}" form exists only when counters are read.
type Metrics struct {
	mu sync.RWMutex
	m  map[counterKey]*atomic.Int64
}

type counterKey struct{ name, tagKey, tagValue string }

func (k counterKey) String() string {
	if k.tagKey == "" {
		return k.name
	}
	return k.name + "{" + k.tagKey + "=" + k.tagValue + "}"
}

// Add adds n to the counter name{tagKey=tagValue}; tagKey "" means no tag.
func (m *Metrics) Add(name, tagKey, tagValue string, n int64) {
	if m == nil {
		return
	}
	k := counterKey{name, tagKey, tagValue}
	m.mu.RLock()
	c := m.m[k]
	m.mu.RUnlock()
	if c == nil {
		m.mu.Lock()
		if m.m == nil {
			m.m = map[counterKey]*atomic.Int64{}
		}
		if c = m.m[k]; c == nil {
			c = new(atomic.Int64)
			m.m[k] = c
		}
		m.mu.Unlock()
	}
	c.Add(n)
}

// Inc adds one.
func (m *Metrics) Inc(name, tagKey, tagValue string) { m.Add(name, tagKey, tagValue, 1) }

// Get returns the value of name{tag}, where tag is "" or "key=value".
func (m *Metrics) Get(name, tag string) int64 {
	if m == nil {
		return 0
	}
	k := counterKey{name: name}
	if tag != "" {
		k.tagKey, k.tagValue, _ = strings.Cut(tag, "=")
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if c := m.m[k]; c != nil {
		return c.Load()
	}
	return 0
}

// Snapshot returns every counter by its full key, "name" or
// "name{key=value}".
func (m *Metrics) Snapshot() map[string]int64 {
	out := map[string]int64{}
	if m == nil {
		return out
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	for k, c := range m.m {
		out[k.String()] = c.Load()
	}
	return out
}

// Keys returns the counter keys in sorted order.
func (m *Metrics) Keys() []string {
	s := m.Snapshot()
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ServeHTTP writes the counters as a JSON object.
func (m *Metrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(m.Snapshot())
}
