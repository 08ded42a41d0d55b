// Package gctune keeps Go's garbage collector from running every few
// megabytes while the live heap is small. With the default GOGC of 100 the
// collector starts a cycle each time the heap has grown by as much as is
// live: a handler holding 3–10 MB between deliveries, and allocating
// 100–260 KB per delivery (mostly the Azure SDKs' request and diagnostics
// objects), runs a cycle every 30–80 deliveries, and the cycles (marking,
// sweeping, stack scans of every goroutine) take a fifth of its CPU. A heap
// floor lets the heap grow by at least Floor before a cycle, and leaves
// GOGC's proportion in force once the live heap is large, so the memory a
// large envelope costs is what it was.
package gctune

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// DefaultFloor is the heap growth the collector waits for at least: 64
// MiB, a few percent of a Functions instance's memory (1.5 GB or more).
const DefaultFloor = 64 << 20

// minHeap is the runtime's smallest heap goal at GOGC 100, which it scales
// with the GC percent.
const minHeap = 4 << 20

// PercentFor is the GC percent that makes the collector wait for the heap
// to grow by max(live, floor) (100 when live ≥ floor). Below 4 MiB live the
// runtime's smallest goal, 4 MiB scaled by the percent, is what binds: the
// percent is then the one that puts that goal at live + floor.
func PercentFor(live, floor uint64) int {
	p := (live + floor) * 100 / minHeap
	if live > 0 {
		p = min(p, (floor*100+live-1)/live)
	}
	return int(max(p, 100))
}

// Tuner sets the GC percent from the live heap after each collection.
type Tuner struct {
	floor   uint64
	mu      sync.Mutex
	percent int
	stopped bool
	sample  []metrics.Sample
}

// Start applies the floor (DefaultFloor when floor is 0) and keeps it
// applied after every collection, unless the GOGC environment variable is
// set: an operator's GOGC is left as it is, and Start returns nil.
func Start(floor uint64) *Tuner {
	if _, set := os.LookupEnv("GOGC"); set {
		return nil
	}
	return start(floor)
}

func start(floor uint64) *Tuner {
	if floor == 0 {
		floor = DefaultFloor
	}
	t := &Tuner{floor: floor, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.apply()
	t.arm()
	return t
}

// Percent is the GC percent set last.
func (t *Tuner) Percent() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.percent
}

// Stop restores GOGC 100 and stops following the heap.
func (t *Tuner) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	t.percent = 100
	debug.SetGCPercent(100)
}

// apply sets the percent for the live heap of the last collection.
func (t *Tuner) apply() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	metrics.Read(t.sample)
	var live uint64
	if t.sample[0].Value.Kind() == metrics.KindUint64 {
		live = t.sample[0].Value.Uint64()
	}
	p := PercentFor(live, t.floor)
	// Small changes of the live heap are not worth a new pacing, except
	// the return to GOGC's own proportion once the live heap passes the
	// floor.
	if t.percent == 0 || p < t.percent*9/10 || p > t.percent*11/10 || (p == 100 && t.percent != 100) {
		t.percent = p
		debug.SetGCPercent(p)
	}
}

// sentinel is allocated for each cycle; its cleanup runs once a
// collection has found it unreachable.
type sentinel struct{ _ *int }

// arm schedules apply after the next collection.
func (t *Tuner) arm() {
	s := &sentinel{}
	runtime.AddCleanup(s, func(t *Tuner) {
		t.mu.Lock()
		stopped := t.stopped
		t.mu.Unlock()
		if stopped {
			return
		}
		t.apply()
		t.arm()
	}, t)
}
