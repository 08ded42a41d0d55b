package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercentFor(t *testing.T) {
	for _, c := range []struct {
		live, floor uint64
		want        int
	}{
		{4 << 20, 64 << 20, 1600},
		{3 << 20, 64 << 20, 1675},
		{64 << 20, 64 << 20, 100},
		{400 << 20, 64 << 20, 100},
		{1 << 20, 64 << 20, 1625},
		{0, 64 << 20, 1600},
		{0, 1 << 20, 100},
	} {
		if got := PercentFor(c.live, c.floor); got != c.want {
			t.Errorf("PercentFor(%d, %d) = %d, want %d", c.live, c.floor, got, c.want)
		}
	}
}

func cycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

var sink []byte

// churn allocates n bytes of garbage in 64 KB pieces.
func churn(n int) {
	for range n / (64 << 10) {
		sink = make([]byte, 64<<10)
	}
}

// With the floor the collector runs once per 32 MiB of garbage at a
// small live heap (here, a test binary's), where GOGC 100 runs it every
// few megabytes; once the live heap exceeds the floor, the percent is 100
// again.
func TestFloorSpacesCollections(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	runtime.GC()
	before := cycles()
	churn(256 << 20)
	plain := cycles() - before

	tu := start(32 << 20)
	defer tu.Stop()
	runtime.GC()
	if p := tu.Percent(); p <= 100 {
		t.Fatalf("percent %d at a small live heap, want more than 100", p)
	}
	before = cycles()
	churn(256 << 20)
	floored := cycles() - before
	t.Logf("GC cycles over 256 MiB of garbage: %d with GOGC 100, %d with a 32 MiB floor", plain, floored)
	if floored > 12 || floored*2 > plain {
		t.Errorf("%d cycles with the floor against %d without: want at most 12, and at most half", floored, plain)
	}

	// A live heap above the floor: the proportion is GOGC's again.
	keep := make([][]byte, 0, 48)
	for range 48 {
		keep = append(keep, make([]byte, 1<<20))
	}
	// The tuner follows the heap from a cleanup, which runs on its own
	// goroutine after a collection: collect until it has seen the live
	// heap, for at most ten seconds (a loaded machine schedules the cleanup
	// late).
	deadline := time.Now().Add(10 * time.Second)
	for tu.Percent() != 100 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if p := tu.Percent(); p != 100 {
		t.Errorf("percent %d with %d MiB live above a 32 MiB floor, want 100", p, len(keep))
	}
	runtime.KeepAlive(keep)
}
