package telemetry

import (
	"encoding/json"
	"net/http/httptest"
	"sync"
	"testing"
)

func TestCountersAreKeyedByNameAndTag(t *testing.T) {
	var m Metrics
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.Inc(DuplicateDetected, "", "")
			m.Add(InboxOperationFailed, "operation", "check", 2)
		}()
	}
	wg.Wait()
	if m.Get(DuplicateDetected, "") != 50 || m.Get(InboxOperationFailed, "operation=check") != 100 || m.Get(InboxOperationFailed, "operation=record") != 0 {
		t.Fatalf("snapshot = %v", m.Snapshot())
	}
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest("GET", "/_nimbus/metrics", nil))
	var got map[string]int64
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got["nimbus.inbox.operation.failed{operation=check}"] != 100 {
		t.Fatalf("served %s (%v)", rec.Body.String(), err)
	}
	if keys := m.Keys(); len(keys) != 2 || keys[0] > keys[1] {
		t.Fatalf("keys = %v", keys)
	}
	var nilMetrics *Metrics
	nilMetrics.Inc(Purged, "", "") // a nil set discards
}
