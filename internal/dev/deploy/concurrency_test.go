package deploy

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// A deterministic model of one Functions instance draining a session
// subscription, used to choose host.json's maxConcurrentSessions and
// sessionIdleTimeout (docs/concurrency.md). It follows the Service Bus
// extension's session processor: each of `slots` workers accepts the next
// session that has messages (no other worker holds it), handles its messages
// one at a time (maxConcurrentCallsPerSession 1, prefetch 0: one receive per
// message), and after the last one keeps the session for sessionIdleTimeout
// in case another arrives, then closes it and accepts the next. Latencies of
// Cosmos DB and Service Bus are injected; the handler's path for a fresh
// event is (inbox check ∥ state read), handler, record, response send, then
// the host's complete.

// simLatency are the injected round trips.
type simLatency struct {
	CosmosRead, CosmosWrite time.Duration // point read; conditioned write
	Send, Settle, Receive   time.Duration // Service Bus send, complete, receive of the next message
	Accept, Close           time.Duration // accept the next session; close a session
	Handler                 time.Duration // the event handler's own work
	Invoke                  time.Duration // host → custom handler HTTP hop
	name                    string
}

// azureLatency: one region, Cosmos DB Strong single region, Service Bus
// Standard, median round trips from inside the region.
var azureLatency = simLatency{name: "Azure, one region",
	CosmosRead: 5 * time.Millisecond, CosmosWrite: 8 * time.Millisecond,
	Send: 10 * time.Millisecond, Settle: 8 * time.Millisecond, Receive: 8 * time.Millisecond,
	Accept: 30 * time.Millisecond, Close: 8 * time.Millisecond,
	Handler: 10 * time.Millisecond, Invoke: time.Millisecond}

// handle is the time a worker spends on one message once it has it.
func (l simLatency) handle() time.Duration {
	return l.Invoke + l.CosmosRead + l.Handler + l.CosmosWrite + l.Send + l.Settle
}

// simWorkload: conversations (new sessions) arrive as a Poisson process;
// each brings Burst messages Gap apart. Burst 1 is the sparse case.
type simWorkload struct {
	Name  string
	Burst int
	Gap   time.Duration
}

var (
	sparse = simWorkload{Name: "sparse (1 msg/session)", Burst: 1}
	bursty = simWorkload{Name: "bursty (6 msgs 200 ms apart)", Burst: 6, Gap: 200 * time.Millisecond}
	slow   = simWorkload{Name: "slow (3 msgs 5 s apart)", Burst: 3, Gap: 5 * time.Second}
)

type simResult struct {
	Completed  int
	Throughput float64 // messages per second completed, after warm-up
	P50, P99   time.Duration
	Accepts    int
}

const (
	evArrival = iota
	evAcceptDone
	evHandleDone
	evIdleExpire
	evCloseDone
)

type simEvent struct {
	at      time.Duration
	seq     int
	kind    int
	slot    int
	session int
	gen     int
}

type eventHeap []simEvent

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(simEvent)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

const (
	slotFree = iota
	slotAccepting
	slotBusy
	slotIdle
	slotClosing
)

type simSession struct {
	queue   []time.Duration // arrival times of waiting messages
	locked  bool
	inAvail bool
}

type simSlot struct {
	state, session, gen int
}

// simulate runs one instance with `slots` workers and the idle timeout for
// `duration` of simulated time, with conversations arriving at `rate` per
// second (messages per second = rate × Burst). Throughput and latency
// count messages arriving after the first fifth of the run.
func simulate(slots int, idle time.Duration, lat simLatency, w simWorkload, rate float64, duration time.Duration, seed uint64) simResult {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	var (
		now      time.Duration
		seq      int
		events   eventHeap
		sessions []*simSession
		avail    []int
		free     []int
		ss       = make([]simSlot, slots)
		latency  []time.Duration
		res      simResult
		warm     = duration / 5
		doneWarm int
	)
	push := func(e simEvent) { seq++; e.seq = seq; heap.Push(&events, e) }
	for i := range slots {
		free = append(free, i)
	}
	// Arrivals, generated up front.
	for t := time.Duration(0); ; {
		t += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if t >= duration {
			break
		}
		id := len(sessions)
		sessions = append(sessions, &simSession{})
		for k := range w.Burst {
			push(simEvent{at: t + time.Duration(k)*w.Gap, kind: evArrival, session: id})
		}
	}
	assign := func() {
		for len(free) > 0 && len(avail) > 0 {
			sl, sid := free[0], avail[0]
			free, avail = free[1:], avail[1:]
			s := sessions[sid]
			s.inAvail, s.locked = false, true
			ss[sl] = simSlot{state: slotAccepting, session: sid, gen: ss[sl].gen + 1}
			res.Accepts++
			push(simEvent{at: now + lat.Accept, kind: evAcceptDone, slot: sl})
		}
	}
	for events.Len() > 0 {
		e := heap.Pop(&events).(simEvent)
		now = e.at
		if now > duration*3 {
			break // far past the arrivals: saturated; stop
		}
		switch e.kind {
		case evArrival:
			s := sessions[e.session]
			s.queue = append(s.queue, now)
			switch {
			case s.locked:
				for i := range ss {
					if ss[i].session == e.session && ss[i].state == slotIdle {
						ss[i].state = slotBusy
						ss[i].gen++
						push(simEvent{at: now + lat.Receive + lat.handle(), kind: evHandleDone, slot: i})
					}
				}
			case !s.inAvail:
				s.inAvail = true
				avail = append(avail, e.session)
				assign()
			}
		case evAcceptDone:
			ss[e.slot].state = slotBusy
			push(simEvent{at: now + lat.Receive + lat.handle(), kind: evHandleDone, slot: e.slot})
		case evHandleDone:
			sl := &ss[e.slot]
			s := sessions[sl.session]
			arrived := s.queue[0]
			s.queue = s.queue[1:]
			res.Completed++
			if arrived >= warm && arrived < duration {
				latency = append(latency, now-arrived)
			}
			if now >= warm && now < duration {
				doneWarm++
			}
			if len(s.queue) > 0 {
				push(simEvent{at: now + lat.Receive + lat.handle(), kind: evHandleDone, slot: e.slot})
				continue
			}
			sl.state = slotIdle
			sl.gen++
			push(simEvent{at: now + idle, kind: evIdleExpire, slot: e.slot, gen: sl.gen})
		case evIdleExpire:
			sl := &ss[e.slot]
			if sl.state != slotIdle || sl.gen != e.gen {
				continue
			}
			sl.state = slotClosing
			push(simEvent{at: now + lat.Close, kind: evCloseDone, slot: e.slot})
		case evCloseDone:
			sl := &ss[e.slot]
			s := sessions[sl.session]
			s.locked = false
			if len(s.queue) > 0 {
				s.inAvail = true
				avail = append(avail, sl.session)
			}
			sl.state = slotFree
			free = append(free, e.slot)
			assign()
		}
	}
	sort.Slice(latency, func(i, j int) bool { return latency[i] < latency[j] })
	if n := len(latency); n > 0 {
		res.P50 = latency[n/2]
		res.P99 = latency[min(n-1, n*99/100)]
	}
	// Throughput: messages completed in the measured window, over the
	// window; a saturated instance completes fewer than arrive.
	res.Throughput = float64(doneWarm) / (duration - warm).Seconds()
	return res
}

// capacity is the most messages per second one instance completes: the
// offered load doubles until the completions fall behind it; the instance
// is then saturated and completes at its capacity.
// Each run lasts long enough for about 4,000 messages, so the Poisson
// noise stays near 2%.
func capacity(slots int, idle time.Duration, lat simLatency, w simWorkload) float64 {
	best := 0.0
	for offered := 0.25; ; offered *= 2 {
		d := max(120*time.Second, time.Duration(4000/offered*float64(time.Second)))
		r := simulate(slots, idle, lat, w, offered/float64(w.Burst), d, 1)
		best = math.Max(best, r.Throughput)
		if r.Throughput < 0.8*offered {
			return best
		}
	}
}

type simSetting struct {
	Slots int
	Idle  time.Duration
}

var simSettings = []simSetting{
	{8, 30 * time.Second}, {8, 5 * time.Second}, {8, time.Second}, {16, time.Second}, {32, time.Second},
	{64, time.Second}, {200, time.Second}, {32, 500 * time.Millisecond}, {200, 30 * time.Second},
}

// TestSessionModelMatchesTheClosedForms checks the model against the closed
// form for sparse sessions (each message costs a slot accept + receive +
// handle + idle + close, so one instance completes about slots / that per
// second once loaded) and for hot sessions.
func TestSessionModelMatchesTheClosedForms(t *testing.T) {
	for _, s := range []simSetting{{8, 30 * time.Second}, {8, time.Second}, {32, time.Second}} {
		per := azureLatency.Accept + azureLatency.Receive + azureLatency.handle() + s.Idle + azureLatency.Close
		want := float64(s.Slots) / per.Seconds()
		got := capacity(s.Slots, s.Idle, azureLatency, sparse)
		if math.Abs(got-want)/want > 0.05 {
			t.Errorf("%d slots, idle %v: model capacity %.2f msgs/s, closed form %.2f", s.Slots, s.Idle, got, want)
		}
	}
	// Hot sessions (100 messages per second each, more than a slot
	// handles) keep every slot busy: handling alone bounds the instance,
	// slots / (receive + handling).
	hot := simWorkload{Burst: 3000, Gap: 10 * time.Millisecond}
	got := simulate(8, time.Second, azureLatency, hot, 1, 120*time.Second, 1).Throughput
	want := 8 / (azureLatency.Receive + azureLatency.handle()).Seconds()
	t.Logf("8 hot sessions: model %.1f msgs/s, closed form %.1f", got, want)
	if math.Abs(got-want)/want > 0.02 {
		t.Errorf("8 hot sessions: model %.1f msgs/s, closed form %.1f", got, want)
	}
}

// TestSessionConcurrencyFigures reports the model's figures per instance for
// the settings docs/concurrency.md compares, and for host.json's values
// (run with -v to see the table). It asserts only what the model must show
// for the chosen values: a better sparse capacity than today's 8/30 s.
func TestSessionConcurrencyFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates every compared setting: the full suite (go test without -short, scripts/test.sh) runs it")
	}
	var h hostJSON
	readJSON(t, filepath.Join(repoRoot(t), "host.json"), &h)
	chosenSlots := int(h.Extensions.ServiceBus["maxConcurrentSessions"].(float64))
	chosenIdle, err := parseTimeSpan(asString(h.Extensions.ServiceBus["sessionIdleTimeout"]))
	if err != nil {
		t.Fatal(err)
	}
	settings := append([]simSetting{{chosenSlots, chosenIdle}}, simSettings...)
	var b strings.Builder
	fmt.Fprintf(&b, "latencies: %s; handle %v per message\n", azureLatency.name, azureLatency.handle())
	fmt.Fprintf(&b, "| slots | idle | sparse msgs/s | bursty msgs/s | slow msgs/s | sparse p50/p99 at 5 msgs/s | bursty p50/p99 at 20 msgs/s | instances for 100 sparse msgs/s |\n|---|---|---|---|---|---|---|---|\n")
	caps := map[simSetting]float64{}
	for i, s := range settings {
		cs := capacity(s.Slots, s.Idle, azureLatency, sparse)
		cb := capacity(s.Slots, s.Idle, azureLatency, bursty)
		cl := capacity(s.Slots, s.Idle, azureLatency, slow)
		caps[s] = cs
		l5 := simulate(s.Slots, s.Idle, azureLatency, sparse, 5, 300*time.Second, 2)
		l20 := simulate(s.Slots, s.Idle, azureLatency, bursty, 20.0/6, 300*time.Second, 3)
		mark := ""
		if i == 0 {
			mark = " (host.json)"
		}
		fmt.Fprintf(&b, "| %d%s | %v | %.1f | %.1f | %.1f | %s | %s | %d |\n", s.Slots, mark, s.Idle, cs, cb, cl,
			latencyCell(l5, 5), latencyCell(l20, 20), int(math.Ceil(100/cs)))
	}
	t.Log("\n" + b.String())
	if chosen, today := caps[settings[0]], capacity(8, 30*time.Second, azureLatency, sparse); chosen <= today {
		t.Errorf("host.json's %d sessions / %v idle give %.2f sparse msgs/s per instance, no better than 8 / 30 s (%.2f)", chosenSlots, chosenIdle, chosen, today)
	}
}

// latencyCell shows p50/p99, or "saturated" when the instance completed
// well under the offered load.
func latencyCell(r simResult, offered float64) string {
	if r.Throughput < 0.95*offered {
		return fmt.Sprintf("saturated (%.1f/s done)", r.Throughput)
	}
	return fmt.Sprintf("%s / %s", round(r.P50), round(r.P99))
}

func round(d time.Duration) string {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// BenchmarkSessionModel reports the model's sparse capacity per instance
// for each setting as a metric (sparse-msgs/s).
func BenchmarkSessionModel(b *testing.B) {
	for _, s := range simSettings {
		b.Run(fmt.Sprintf("slots=%d/idle=%v", s.Slots, s.Idle), func(b *testing.B) {
			var c float64
			for range b.N {
				c = capacity(s.Slots, s.Idle, azureLatency, sparse)
			}
			b.ReportMetric(c, "sparse-msgs/s")
		})
	}
}
