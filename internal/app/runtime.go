package app

import (
	"encoding/json"
	"net/http"
	"runtime"
	"runtime/metrics"
)

// RuntimeStats is what GET /_nimbus/runtime answers: the Go runtime's view
// of the process, for load runs and capacity checks (goroutines per
// in-flight invocation, heap and allocation per message). Reading it costs
// no stop-the-world pause.
type RuntimeStats struct {
	// Goroutines is the number of live goroutines.
	Goroutines uint64 `json:"goroutines"`
	// HeapLiveBytes is the heap the last collection found live (garbage
	// allocated since is not in it), HeapGoalBytes the heap size at which
	// the next collection starts.
	HeapLiveBytes uint64 `json:"heapLiveBytes"`
	HeapGoalBytes uint64 `json:"heapGoalBytes"`
	// TotalAllocBytes and TotalAllocObjects count every heap allocation
	// since start (cumulative).
	TotalAllocBytes   uint64 `json:"totalAllocBytes"`
	TotalAllocObjects uint64 `json:"totalAllocObjects"`
	// GCCycles counts completed collections since start.
	GCCycles uint64 `json:"gcCycles"`
	// GCPercent is the collector's GOGC percent in force (the heap floor
	// raises it while the live heap is small).
	GCPercent uint64 `json:"gcPercent"`
	// MaxProcs is GOMAXPROCS.
	MaxProcs int `json:"maxProcs"`
}

var runtimeSamples = []string{
	"/sched/goroutines:goroutines",
	"/gc/heap/live:bytes",
	"/gc/heap/goal:bytes",
	"/gc/heap/allocs:bytes",
	"/gc/heap/allocs:objects",
	"/gc/cycles/total:gc-cycles",
	"/gc/gogc:percent",
}

// readRuntimeStats reads the runtime's metrics.
func readRuntimeStats() RuntimeStats {
	s := make([]metrics.Sample, len(runtimeSamples))
	for i, name := range runtimeSamples {
		s[i].Name = name
	}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	return RuntimeStats{
		Goroutines: v(0), HeapLiveBytes: v(1), HeapGoalBytes: v(2),
		TotalAllocBytes: v(3), TotalAllocObjects: v(4), GCCycles: v(5), GCPercent: v(6),
		MaxProcs: runtime.GOMAXPROCS(0),
	}
}

// serveRuntime answers GET /_nimbus/runtime with RuntimeStats as JSON.
func serveRuntime(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(readRuntimeStats())
}
