package deploy

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// host.json's session concurrency is one the load run measured: the
// capacity table of docs/concurrency.md (written by go run ./scripts/load
// -write-docs azure) has a row for maxConcurrentSessions that rests on a
// step with at least that many invocations in flight, not on an
// extrapolation, and prefetch stays off as the page explains.
func TestHostJSONSessionsRestOnTheLoadRun(t *testing.T) {
	var h hostJSON
	readJSON(t, filepath.Join(repoRoot(t), "host.json"), &h)
	sb := h.Extensions.ServiceBus
	sessions, ok := sb["maxConcurrentSessions"].(float64)
	if !ok {
		t.Fatalf("host.json has no maxConcurrentSessions: %v", sb)
	}
	if sb["prefetchCount"] != float64(0) {
		t.Errorf("host.json prefetchCount = %v; docs/concurrency.md explains why it stays 0 (the DeferredProcessor's prefetched locks)", sb["prefetchCount"])
	}
	page := string(readFile(t, filepath.Join(repoRoot(t), "docs", "concurrency.md")))
	begin := strings.Index(page, "<!-- load-capacity:begin")
	end := strings.Index(page, "<!-- load-capacity:end -->")
	if begin < 0 || end < begin {
		t.Fatal("docs/concurrency.md has no generated capacity table (go run ./scripts/load -write-docs azure)")
	}
	row := regexp.MustCompile(`(?m)^\| ` + strconv.Itoa(int(sessions)) + ` \|.*$`).FindString(page[begin:end])
	if row == "" {
		t.Fatalf("the capacity table has no row for host.json's maxConcurrentSessions %d:\n%s", int(sessions), page[begin:end])
	}
	if strings.Contains(row, "fewer than the sessions") {
		t.Errorf("the capacity row for %d sessions is extrapolated from fewer invocations in flight: %s", int(sessions), row)
	}
}
