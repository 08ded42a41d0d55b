package e2e

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// BenchmarkResolverEndToEnd measures the Resolver app alone, end to end on
// the local stand-ins: per iteration 1,000 OrderPlaced events over 64
// sessions go through the endpoint while the Resolver's mini host is
// stopped, so the Resolver subscription holds 2,000 messages (each event's
// request copy and its ResolutionResponse); then the Resolver's mini host
// (16 concurrent sessions and a 1 s session idle timeout, as the Resolver's
// host.json) starts and the clock runs until it has completed all 2,000:
// Service Bus stand-in → mini host → the real handler binary as the
// Resolver → local Cosmos DB (behind the fault proxy with faults off, which
// counts the Resolver's requests). Run it without -race:
//
//	go test -run '^$' -bench BenchmarkResolverEndToEnd -benchtime 1x -count 1 ./internal/dev/e2e
//
// Metrics: resolver-msgs/s, invoke-p50-ms and invoke-p99-ms (the durationMs
// the Resolver logged), cosmos-req/msg (the Resolver's Cosmos requests per
// message).
func BenchmarkResolverEndToEnd(b *testing.B) {
	const (
		events   = 1000
		sessions = 64
	)
	if raceEnabled {
		b.Log("the race detector is on: the figures measure its instrumentation, not the Resolver")
	}
	s := startResolverStack(b, resolverStackConfig{faults: &testenv.FaultProxyOptions{Disabled: true}, resolverIdle: time.Second})

	// Warm up: connections, the Strong check, the containers.
	warm := order("OrderPlaced-warm", "warm", 10, 0)
	s.send(warm)
	s.waitRow(warm, time.Minute, "to be Completed", func(r *trackedRow) bool { return r.Status == "Completed" })
	testenv.WaitUntil(b, time.Minute, func() bool { st := s.resHost.Stats(); return st.Completes >= 2 && st.Invocations == st.Completes },
		func() string { return fmt.Sprintf("warm-up: Resolver host %+v", s.resHost.Stats()) })

	var (
		wall     time.Duration
		invoke   []float64
		requests int64
		total    int
		seen     = len(s.resolverLines())
	)
	b.ResetTimer()
	for iter := range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := s.resHost.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
		evs := make([]event, events)
		for i := range evs {
			evs[i] = order(fmt.Sprintf("OrderPlaced-r%d-%04d", iter, i), fmt.Sprintf("rb-%02d", i%sessions), 10, 0)
		}
		epBefore := s.epHost.Stats().Completes
		s.send(evs...)
		testenv.WaitUntil(b, 5*time.Minute, func() bool { return s.epHost.Stats().Completes >= epBefore+events },
			func() string { return fmt.Sprintf("endpoint host %+v", s.epHost.Stats()) })

		before := s.resHost.Stats().Completes
		reqBefore := s.proxy.Counts().Requests
		start := time.Now()
		if err := s.resHost.Start(); err != nil {
			b.Fatal(err)
		}
		testenv.WaitUntil(b, 10*time.Minute, func() bool { return s.resHost.Stats().Completes >= before+2*events },
			func() string { return fmt.Sprintf("Resolver host %+v", s.resHost.Stats()) })
		wall += time.Since(start)
		requests += s.proxy.Counts().Requests - reqBefore
		total += 2 * events

		lines := s.resolverLines()
		for _, l := range lines[seen:] {
			if o := l["outcome"]; o != "written" && o != "stale" {
				b.Errorf("unexpected Resolver outcome %v", l)
			}
			d, _ := l["durationMs"].(float64)
			invoke = append(invoke, d)
		}
		seen = len(lines)
		for _, e := range evs[:10] {
			if r := s.row(e); r == nil || r.Status != "Completed" {
				b.Errorf("%s: row %+v, want Completed", e.MessageID, r)
			}
		}
	}
	b.StopTimer()
	sort.Float64s(invoke)
	b.ReportMetric(float64(total)/wall.Seconds(), "resolver-msgs/s")
	b.ReportMetric(percentile(invoke, 50), "invoke-p50-ms")
	b.ReportMetric(percentile(invoke, 99), "invoke-p99-ms")
	b.ReportMetric(float64(requests)/float64(total), "cosmos-req/msg")
}
