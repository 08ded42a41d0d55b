package e2e

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// BenchmarkEndToEnd publishes 1,000 OrderPlaced events over 16 sessions per
// iteration and waits for every Resolver response: mini host (16 concurrent
// sessions) → the real handler binary → local Cosmos DB (Strong, behind the
// fault proxy with faults off, which counts the requests) → local Service
// Bus. The events are sent back to back, each session's in order and the
// 16 sessions concurrently, so the latency includes the wait behind earlier
// events of the same session. Run it without -race:
//
//	go test -run '^$' -bench BenchmarkEndToEnd -benchtime 1x -count 1 ./internal/dev/e2e
//
// Metrics (over all iterations): msgs/s (first send to last response),
// sent-msgs/s (how fast the test published),
// e2e-p50-ms and e2e-p99-ms (send → Resolver response received),
// invoke-p50-ms and invoke-p99-ms (the durationMs the handler logged),
// responses/msg (Resolver responses per message; 1 expected) and
// cosmos-req/msg (Cosmos requests per fresh message; 2 expected: a check
// and a record).
func BenchmarkEndToEnd(b *testing.B) {
	const (
		messages = 1000
		sessions = 16
	)
	if raceEnabled {
		b.Log("the race detector is on: the figures measure its instrumentation, not the subscriber")
	}
	s := startStack(b, stackConfig{sessions: sessions, faults: &testenv.FaultProxyOptions{Disabled: true}})

	// Warm up: connections, the Cosmos consistency check and container.
	var warm []event
	for k := range sessions {
		warm = append(warm, order(fmt.Sprintf("OrderPlaced-warm-%02d", k), fmt.Sprintf("bench-%02d", k), 10, 0))
	}
	s.send(warm...)
	s.waitResponses(len(warm), 60*time.Second)
	s.settle(len(warm), len(warm), 30*time.Second)

	var (
		e2e, invoke     []float64
		wall, sendTime  time.Duration
		responses       int
		cosmosRequests  int64
		total           int
		seenInvocations = len(s.handler.invocations())
	)
	b.ResetTimer()
	for iter := range b.N {
		evs := make([]event, messages)
		for i := range evs {
			evs[i] = order(fmt.Sprintf("OrderPlaced-b%d-%04d", iter, i), fmt.Sprintf("bench-%02d", i%sessions), 10+i%5000, 0)
		}
		before := s.proxy.Counts().Requests
		doneBefore := len(s.resolver.responses())
		auditsBefore := s.resolver.audits()
		completesBefore := int(s.host.Stats().Completes)
		start := time.Now()
		s.sendPerSession(evs...)
		sendTime += time.Since(start)
		s.waitResponses(doneBefore+messages, 5*time.Minute)
		s.settle(completesBefore+messages, auditsBefore+messages, time.Minute)

		byID := s.resolver.responsesByRequest()
		var last time.Time
		for _, e := range evs {
			rs := byID[e.MessageID]
			if len(rs) == 0 {
				b.Fatalf("%s has no response", e.MessageID)
			}
			responses += len(rs)
			e2e = append(e2e, float64(rs[0].at.Sub(s.firstSent(e.MessageID)).Microseconds())/1000)
			if rs[0].at.After(last) {
				last = rs[0].at
			}
		}
		wall += last.Sub(start)
		cosmosRequests += s.proxy.Counts().Requests - before
		ivs := s.handler.invocations()
		for _, iv := range ivs[seenInvocations:] {
			if iv.Outcome != "completed" {
				b.Errorf("unexpected outcome %+v", iv)
			}
			invoke = append(invoke, iv.DurationMs)
		}
		seenInvocations = len(ivs)
		total += messages
	}
	b.StopTimer()

	sort.Float64s(e2e)
	sort.Float64s(invoke)
	b.ReportMetric(float64(total)/wall.Seconds(), "msgs/s")
	b.ReportMetric(float64(total)/sendTime.Seconds(), "sent-msgs/s")
	b.ReportMetric(percentile(e2e, 50), "e2e-p50-ms")
	b.ReportMetric(percentile(e2e, 99), "e2e-p99-ms")
	b.ReportMetric(percentile(invoke, 50), "invoke-p50-ms")
	b.ReportMetric(percentile(invoke, 99), "invoke-p99-ms")
	b.ReportMetric(float64(responses)/float64(total), "responses/msg")
	b.ReportMetric(float64(cosmosRequests)/float64(total), "cosmos-req/msg")
}
