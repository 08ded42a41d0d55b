package e2e

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/dev/minihost"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// BenchmarkSessionConcurrency measures how session slots and the idle
// timeout bound one instance on sparse sessions, with the real handler
// binary, the mini host, the local Cosmos DB (Strong) and the local Service
// Bus: each event has a session of its own, all are published at once, and
// the mini host drains them with `slots` concurrent sessions, keeping each
// session `idle` after its message (as the Functions host keeps it for
// sessionIdleTimeout). The idle timeouts are scaled down from Azure's (2 s
// stands for 30 s) so a run takes seconds. docs/concurrency.md compares the
// figures with its model. Run it without -race:
//
//	go test -run '^$' -bench BenchmarkSessionConcurrency -benchtime 1x -count 1 ./internal/dev/e2e
//
// Metrics: msgs/s (first send to last Resolver response); model-msgs/s,
// the closed form for this batch without the accept and close costs: the
// messages drain in rounds of `slots`, each round but the last costing the
// median invocation plus the idle timeout, so messages / ((rounds − 1) ×
// (idle + invocation) + invocation); e2e-p50-ms and e2e-p99-ms (send →
// Resolver response); invoke-p50-ms (the handler's own durationMs).
func BenchmarkSessionConcurrency(b *testing.B) {
	if raceEnabled {
		b.Log("the race detector is on: the figures measure its instrumentation, not the subscriber")
	}
	s := startStack(b, stackConfig{sessions: 8, faults: &testenv.FaultProxyOptions{Disabled: true}})
	// Warm up with the stack's own host: connections, the consistency
	// check and the container.
	var warm []event
	for k := range 8 {
		warm = append(warm, order(fmt.Sprintf("OrderPlaced-cwarm-%02d", k), fmt.Sprintf("cwarm-%02d", k), 10, 0))
	}
	s.send(warm...)
	s.waitResponses(len(warm), 60*time.Second)
	s.settle(len(warm), len(warm), 30*time.Second)
	stopHost(b, s.host)
	client := s.sb.Client(b)

	for _, c := range []struct {
		slots    int
		idle     time.Duration
		messages int
	}{
		{8, 2 * time.Second, 48},
		{8, time.Second, 96},
		{8, 200 * time.Millisecond, 160},
		{32, time.Second, 192},
		{32, 200 * time.Millisecond, 320},
	} {
		b.Run(fmt.Sprintf("slots=%d/idle=%v", c.slots, c.idle), func(b *testing.B) {
			host, err := minihost.New(minihost.Config{
				Client: client, Topic: endpointID, Subscription: endpointID, Function: "Subscriber", Binding: "message",
				Invoker:               &minihost.Invoker{BaseURL: s.handler.base},
				MaxConcurrentSessions: c.slots, SessionIdleTimeout: c.idle,
				AcceptTimeout: 5 * time.Second, InvocationTimeout: 2 * time.Minute,
			})
			if err != nil {
				b.Fatal(err)
			}
			if err := host.Start(); err != nil {
				b.Fatal(err)
			}
			s.host = host
			defer stopHost(b, host)

			var e2e, invoke []float64
			var wall time.Duration
			total := 0
			seen := len(s.handler.invocations())
			b.ResetTimer()
			for iter := range b.N {
				evs := make([]event, c.messages)
				for i := range evs {
					id := fmt.Sprintf("OrderPlaced-c%d-%v-%d-%04d", c.slots, c.idle.Milliseconds(), iter, i)
					evs[i] = order(id, "sparse-"+id, 10+i, 0)
				}
				before := len(s.resolver.responses())
				start := time.Now()
				s.send(evs...)
				s.waitResponses(before+c.messages, 5*time.Minute)
				byID := s.resolver.responsesByRequest()
				var last time.Time
				for _, e := range evs {
					rs := byID[e.MessageID]
					if len(rs) == 0 {
						b.Fatalf("%s has no response", e.MessageID)
					}
					e2e = append(e2e, float64(rs[0].at.Sub(s.firstSent(e.MessageID)).Microseconds())/1000)
					if rs[0].at.After(last) {
						last = rs[0].at
					}
				}
				wall += last.Sub(start)
				total += c.messages
			}
			b.StopTimer()
			for _, iv := range s.handler.invocations()[seen:] {
				invoke = append(invoke, iv.DurationMs)
			}
			sort.Float64s(e2e)
			sort.Float64s(invoke)
			b.ReportMetric(float64(total)/wall.Seconds(), "msgs/s")
			h := percentile(invoke, 50) / 1000
			rounds := float64((c.messages + c.slots - 1) / c.slots)
			b.ReportMetric(float64(c.messages)/((rounds-1)*(c.idle.Seconds()+h)+h), "model-msgs/s")
			b.ReportMetric(percentile(e2e, 50), "e2e-p50-ms")
			b.ReportMetric(percentile(e2e, 99), "e2e-p99-ms")
			b.ReportMetric(percentile(invoke, 50), "invoke-p50-ms")
		})
	}
}

func stopHost(tb testing.TB, h *minihost.Host) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := h.Stop(ctx); err != nil {
		tb.Errorf("stopping the mini host: %v", err)
	}
}
