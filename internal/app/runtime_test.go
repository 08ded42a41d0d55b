package app

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
)

func getRuntime(t *testing.T, ta *testApp) RuntimeStats {
	t.Helper()
	rec := httptest.NewRecorder()
	ta.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/_nimbus/runtime", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /_nimbus/runtime = %d %s", rec.Code, rec.Body)
	}
	var s RuntimeStats
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
		t.Fatalf("decoding %s: %v", rec.Body, err)
	}
	return s
}

// The runtime route reports the process's goroutines and counts the heap
// allocations of the invocations served between two reads.
func TestRuntimeRouteReportsGoroutinesAndAllocations(t *testing.T) {
	ta := newTestApp(t, nil, nil)
	runtime.GC() // the live heap is what a collection found
	before := getRuntime(t, ta)
	if before.Goroutines == 0 || before.MaxProcs == 0 || before.HeapLiveBytes == 0 || before.HeapGoalBytes == 0 || before.GCPercent == 0 {
		t.Fatalf("runtime stats %+v: goroutines, GOMAXPROCS and heap sizes must be positive", before)
	}
	const n = 50
	for i := range n {
		if code, body := ta.post(t, FuncSubscriber, envelope(msg{id: "m-" + string(rune('a'+i%26)) + string(rune('a'+i/26))})); code != http.StatusOK {
			t.Fatalf("invocation %d: %d %s", i, code, body)
		}
	}
	after := getRuntime(t, ta)
	if got := after.TotalAllocObjects - before.TotalAllocObjects; got < n*10 {
		t.Errorf("%d allocations counted across %d invocations; each allocates well over 10 objects", got, n)
	}
	if after.TotalAllocBytes <= before.TotalAllocBytes {
		t.Errorf("allocated bytes did not grow: %d → %d", before.TotalAllocBytes, after.TotalAllocBytes)
	}
}
