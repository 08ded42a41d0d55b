package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/message/nimbusmsg"
)

// stepResult is what one case at one number of in-flight invocations
// measured.
type stepResult struct {
	Case     string
	Inflight int
	// Msgs invocations completed in the measured Seconds: Rate per second;
	// Model is the model's rate and Ratio Rate ÷ Model.
	Msgs               int64
	Seconds            float64
	Rate, Model, Ratio float64
	P50, P99, ModelMs  float64 // invocation latency, ms
	// HandlerP50 and HandlerP99 are the invocations' durations as the
	// handler measured them (the durationMs of its answer), ms.
	HandlerP50, HandlerP99 float64
	// CosmosLateMs and ServiceBusLateMs are how much later than its delay
	// the injector answered a request or passed a send on, on average, ms:
	// the machine's scheduling delay, not the handler's.
	CosmosLateMs, ServiceBusLateMs float64
	// CosmosServiceMs and ServiceBusServiceMs are how long the server
	// behind the injector took to answer after that, on average, ms (zero
	// for the in-process servers, which answer inside the delay; the Node
	// stand-ins' processing behind a delay line or proxy).
	CosmosServiceMs, ServiceBusServiceMs float64
	// CosmosP99Ms and ServiceBusP99Ms are the 99th percentile of lateness
	// plus service time per exchange, ms: the stand-ins' share of the
	// jitter.
	CosmosP99Ms, ServiceBusP99Ms float64
	// InjectedMs is the model's latency with the lateness and service time
	// added to each round trip, RatioInjected the rate against the model at
	// that latency, and OwnMs the handler's own time per delivery: its
	// median duration less InjectedMs.
	InjectedMs, RatioInjected, OwnMs float64
	CPUPerMsg                        float64 // the handler's CPU per message, µs
	BinaryCores                      float64 // the handler's CPU, in cores
	LoadgenCores                     float64 // this program's CPU, in cores
	StandInCores                     float64 // the Node stand-ins' CPU, in cores
	MachineBusy                      float64 // the machine's busy share of all cores, 0..1
	Cores                            int
	RSSPeakMB                        float64 // the handler's resident memory, highest sample
	HeapPeakMB                       float64 // the handler's live heap, highest sample
	GoroutinesPeak                   uint64
	AllocPerMsgKB                    float64 // heap allocated per message
	ConnsCosmos                      int64   // connections open to Cosmos DB, most at once
	NewConnsCosmos                   int64   // connections opened to Cosmos DB in the measured time
	ConnsServiceBus                  int64
	NewConnsServiceBus               int64
	NewConnsHost                     int64 // connections the host side opened to the handler in the measured time
	// Connections opened since the handler started (the case's steps so
	// far), to Cosmos DB, Service Bus and from the host side.
	OpenedCosmos, OpenedServiceBus, OpenedHost int64
	CosmosReqPerMsg                            float64 // as the handler counted them in its answers
	// OutsideP50 and OutsideP99 are, at one invocation in flight, the part
	// of each invocation's latency during which no stand-in exchange was
	// open (the binary's time and the host hop, the stand-ins' delays,
	// lateness and service taken out exactly), ms; 0 at other steps.
	OutsideP50, OutsideP99 float64
	// HopsP50 and HopsP99 are, at one invocation in flight, the time two
	// bare processes of this machine take for the same round trips after
	// the same idle gaps (hopFloor), ms; 0 at other steps.
	HopsP50, HopsP99 float64
	RerunsPerMsg     float64 // transactional re-runs after a conflict, per message
	Errors           int64
	FirstError       string
	Load             string // load average at the end of the step
}

// saturated reports whether the machine's cores were nearly all busy, so
// the step measured the machine, not the handler.
func (s stepResult) saturated() bool { return s.MachineBusy >= 0.9 }

// line is the step's machine-readable line.
func (s stepResult) line() string {
	sat := 0
	if s.saturated() {
		sat = 1
	}
	return fmt.Sprintf("case=%s inflight=%d msgs/s=%.1f model=%.1f ratio=%.3f p50_ms=%.2f p99_ms=%.2f model_p99_ms=%.2f "+
		"handler_p50_ms=%.2f handler_p99_ms=%.2f cosmos_late_ms=%.2f servicebus_late_ms=%.2f cosmos_service_ms=%.2f servicebus_service_ms=%.2f "+
		"cosmos_excess_p99_ms=%.2f servicebus_excess_p99_ms=%.2f injected_ms=%.2f ratio_injected=%.3f handler_own_ms=%.2f "+
		"cpu_us_per_msg=%.0f handler_cores=%.2f loadgen_cores=%.2f standin_cores=%.2f machine_busy=%.2f saturated=%d rss_mb=%.1f heap_mb=%.1f "+
		"goroutines=%d alloc_kb_per_msg=%.1f conns_cosmos=%d conns_servicebus=%d new_conns_cosmos=%d new_conns_servicebus=%d new_conns_host=%d "+
		"cosmos_req_per_msg=%.2f reruns_per_msg=%.3f outside_p50_ms=%.2f outside_p99_ms=%.2f hops_p50_ms=%.2f hops_p99_ms=%.2f msgs=%d errors=%d load=%q",
		s.Case, s.Inflight, s.Rate, s.Model, s.Ratio, s.P50, s.P99, s.ModelMs,
		s.HandlerP50, s.HandlerP99, s.CosmosLateMs, s.ServiceBusLateMs, s.CosmosServiceMs, s.ServiceBusServiceMs,
		s.CosmosP99Ms, s.ServiceBusP99Ms, s.InjectedMs, s.RatioInjected, s.OwnMs,
		s.CPUPerMsg, s.BinaryCores, s.LoadgenCores, s.StandInCores, s.MachineBusy, sat, s.RSSPeakMB, s.HeapPeakMB,
		s.GoroutinesPeak, s.AllocPerMsgKB, s.ConnsCosmos, s.ConnsServiceBus, s.NewConnsCosmos, s.NewConnsServiceBus, s.NewConnsHost,
		s.CosmosReqPerMsg, s.RerunsPerMsg, s.OutsideP50, s.OutsideP99, s.HopsP50, s.HopsP99, s.Msgs, s.Errors, s.Load)
}

// window is the measured time of a step, as Unix nanoseconds (0 until
// it is known).
type window struct{ from, to atomic.Int64 }

func (w *window) contains(t time.Time) bool {
	from, to := w.from.Load(), w.to.Load()
	n := t.UnixNano()
	return from != 0 && n >= from && (to == 0 || n <= to)
}

// slot is one in-flight invocation's loop: its sessions, its counters and
// the latencies of its invocations that ended in the window.
type slot struct {
	e        *env
	c        string
	id       string // unique in the run
	sessions []string
	seeds    []nimbusmsg.Message // the duplicate case's recorded messages, one per session
	seq      int64
	lat      []time.Duration
	// spans are the same invocations, post to answer.
	spans []span
	// handlerLat are the same invocations' durations as the handler
	// measured them.
	handlerLat []time.Duration
	cosmos     int64 // Cosmos DB requests of the invocations in lat, as the handler counted them
	reruns     int64 // transactional re-runs after a conflict, as the handler reported them
	// first and last are when the first and the last invocation of lat
	// ended.
	first, last time.Time
	done        atomic.Int64 // invocations completed (any time)
	errors      atomic.Int64
	firstErr    atomic.Value
}

// step runs case c with n invocations in flight: warm-up, then the
// measured window, with a progress line.
func (e *env) step(ctx context.Context, c string, n int) (stepResult, error) {
	cfg := e.cfg
	if e.mem != nil {
		e.mem.Reset()
	}
	e.cosmosLate().reset()
	e.sbLate().reset()
	nonce := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff)
	var win window
	slots := make([]*slot, n)
	for i := range slots {
		s := &slot{e: e, c: c, id: fmt.Sprintf("%s-%d-%03d", nonce, n, i)}
		for k := range cfg.SessionsPerSlot {
			s.sessions = append(s.sessions, fmt.Sprintf("load-%s-%s-%d-%03d-%02d", c, nonce, n, i, k))
		}
		slots[i] = s
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range slots {
		wg.Go(func() { s.loop(ctx, stop, &win) })
	}
	stopAll := func() {
		close(stop)
		wg.Wait()
	}

	// Warm-up: connections, pools, the containers; the duplicate case
	// records its messages here. It lasts Warmup, and at least until every
	// slot has completed two invocations of the case (the first ones of a
	// run wait for the clients' connections and the containers' first use).
	if !sleepCtx(ctx, cfg.Warmup) {
		stopAll()
		return stepResult{}, ctx.Err()
	}
	need := int64(2)
	if c == "duplicate" {
		need += int64(cfg.SessionsPerSlot) // the recording of its messages
	}
	warm := time.Now().Add(2 * time.Minute)
	for !allDone(slots, need) {
		if time.Now().After(warm) {
			stopAll()
			return stepResult{}, fmt.Errorf("some in-flight slots did not complete two invocations within 2 minutes of warm-up (%d errors so far)", errorsOf(slots))
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			stopAll()
			return stepResult{}, ctx.Err()
		}
	}
	before, err := e.snapshot()
	if err != nil {
		stopAll()
		return stepResult{}, err
	}
	e.cosmosConns().resetPeak()
	e.sbConns().resetPeak()
	win.from.Store(time.Now().UnixNano())

	var (
		peakRSS   int64
		peakHeap  uint64
		peakGo    uint64
		sampleErr error
	)
	sample := func() {
		if rss, _, err := procRSS(e.proc.Pid()); err == nil {
			peakRSS = max(peakRSS, rss)
		}
		if rs, err := e.runtimeStats(); err == nil {
			peakHeap = max(peakHeap, rs.HeapLiveBytes)
			peakGo = max(peakGo, rs.Goroutines)
		} else {
			sampleErr = err
		}
	}
	progress := newProgress(cfg.Progress)
	tick := time.NewTicker(250 * time.Millisecond)
	end := time.Now().Add(cfg.Duration)
	lastDone, lastAt, ticks := completed(slots), time.Now(), 0
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			tick.Stop()
			stopAll()
			progress.done()
			return stepResult{}, ctx.Err()
		case <-tick.C:
		}
		sample()
		if ticks++; ticks%4 == 0 {
			d, now := completed(slots), time.Now()
			progress.show(fmt.Sprintf("%s, %d in flight: %2.0f/%.0f s, %6.1f msgs/s (model %.1f), %d errors, load %s",
				c, n, cfg.Duration.Seconds()-time.Until(end).Seconds(), cfg.Duration.Seconds(),
				float64(d-lastDone)/now.Sub(lastAt).Seconds(), modelRate(c, cfg.Latency, n), errorsOf(slots), loadAverage()))
			lastDone, lastAt = d, now
		}
	}
	tick.Stop()
	win.to.Store(time.Now().UnixNano())
	after, err := e.snapshot()
	progress.done()
	stopAll()
	if err != nil {
		return stepResult{}, err
	}
	if sampleErr != nil && peakGo == 0 {
		return stepResult{}, fmt.Errorf("reading the handler's runtime figures: %w", sampleErr)
	}

	var lat, handlerLat []time.Duration
	var cosmos, reruns int64
	r := stepResult{Case: c, Inflight: n, Cores: after.machine.cores, Load: loadAverage()}
	for _, s := range slots {
		lat = append(lat, s.lat...)
		handlerLat = append(handlerLat, s.handlerLat...)
		cosmos += s.cosmos
		reruns += s.reruns
		r.Errors += s.errors.Load()
		if r.FirstError == "" {
			if e, ok := s.firstErr.Load().(string); ok {
				r.FirstError = e
			}
		}
	}
	slices.Sort(lat)
	secs := time.Duration(win.to.Load() - win.from.Load()).Seconds()
	r.Msgs, r.Seconds = int64(len(lat)), secs
	r.Rate = rate(slots, secs)
	r.Model = modelRate(c, cfg.Latency, n)
	if r.Model > 0 {
		r.Ratio = r.Rate / r.Model
	}
	r.P50, r.P99 = ms(percentile(lat, 50)), ms(percentile(lat, 99))
	slices.Sort(handlerLat)
	r.HandlerP50, r.HandlerP99 = ms(percentile(handlerLat, 50)), ms(percentile(handlerLat, 99))
	cx := e.cosmosLate().since(before.cosmosMark, after.cosmosMark)
	sx := e.sbLate().since(before.sbMark, after.sbMark)
	r.CosmosLateMs, r.ServiceBusLateMs = ms(cx.Late), ms(sx.Late)
	r.CosmosServiceMs, r.ServiceBusServiceMs = ms(cx.Service), ms(sx.Service)
	r.CosmosP99Ms, r.ServiceBusP99Ms = ms(cx.P99), ms(sx.P99)
	injected := injectedLatency(c, cfg.Latency, cx.Late+cx.Service, sx.Late+sx.Service)
	r.InjectedMs = ms(injected)
	if injected > 0 {
		r.RatioInjected = r.Rate / (float64(n) / injected.Seconds())
	}
	r.OwnMs = r.HandlerP50 - r.InjectedMs
	if n == 1 {
		var invs []span
		for _, s := range slots {
			invs = append(invs, s.spans...)
		}
		ex := append(e.cosmosLate().spansOf(before.cosmosMark, after.cosmosMark), e.sbLate().spansOf(before.sbMark, after.sbMark)...)
		out := outside(invs, ex)
		slices.Sort(out)
		r.OutsideP50, r.OutsideP99 = ms(percentile(out, 50)), ms(percentile(out, 99))
	}
	r.ModelMs = ms(modelLatency(c, cfg.Latency))
	if r.Msgs > 0 {
		r.CPUPerMsg = float64((after.handlerCPU - before.handlerCPU).Microseconds()) / float64(r.Msgs)
		r.AllocPerMsgKB = float64(after.rt.TotalAllocBytes-before.rt.TotalAllocBytes) / 1024 / float64(r.Msgs)
		r.CosmosReqPerMsg = float64(cosmos) / float64(r.Msgs)
		r.RerunsPerMsg = float64(reruns) / float64(r.Msgs)
	}
	r.BinaryCores = (after.handlerCPU - before.handlerCPU).Seconds() / secs
	r.LoadgenCores = (after.selfCPU - before.selfCPU).Seconds() / secs
	r.StandInCores = (after.standInCPU - before.standInCPU).Seconds() / secs
	if dt := after.machine.total - before.machine.total; dt > 0 {
		r.MachineBusy = float64(after.machine.busy-before.machine.busy) / float64(dt)
	}
	r.RSSPeakMB = float64(peakRSS) / (1 << 20)
	r.HeapPeakMB = float64(peakHeap) / (1 << 20)
	r.GoroutinesPeak = peakGo
	r.ConnsCosmos = after.cosmosConns.Peak
	r.NewConnsCosmos = after.cosmosConns.Opened - before.cosmosConns.Opened
	r.ConnsServiceBus = after.sbConns.Peak
	r.NewConnsServiceBus = after.sbConns.Opened - before.sbConns.Opened
	r.NewConnsHost = after.hostConns - before.hostConns
	r.OpenedCosmos = after.cosmosConns.Opened - e.base.cosmos
	r.OpenedServiceBus = after.sbConns.Opened - e.base.sb
	r.OpenedHost = after.hostConns - e.base.host
	return r, nil
}

// outside returns, for each invocation of invs, how much of it no
// exchange of ex covered: with one invocation in flight every exchange
// within an invocation is its own, and the union of their spans is the time
// it spent on the stand-ins (concurrent requests counted once).
func outside(invs, ex []span) []time.Duration {
	slices.SortFunc(ex, func(a, b span) int { return a.from.Compare(b.from) })
	out := make([]time.Duration, 0, len(invs))
	for _, inv := range invs {
		var covered time.Duration
		var cur span
		open := false
		for _, x := range ex {
			if !x.to.After(inv.from) || !x.from.Before(inv.to) {
				continue
			}
			x.from, x.to = later(x.from, inv.from), earlier(x.to, inv.to)
			switch {
			case !open:
				cur, open = x, true
			case x.from.After(cur.to):
				covered += cur.to.Sub(cur.from)
				cur = x
			case x.to.After(cur.to):
				cur.to = x.to
			}
		}
		if open {
			covered += cur.to.Sub(cur.from)
		}
		out = append(out, inv.to.Sub(inv.from)-covered)
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// rate is the messages per second the slots completed in the window of
// secs seconds. Each slot's invocations follow one another, so its rate is
// the number of intervals between its first and last completion in the
// window over the time they span: counting completions in the window
// instead would be off by up to one invocation per slot, which matters
// when an invocation lasts a sizeable part of the window (slots started
// together stay in step, so those errors add up instead of averaging
// out). A slot with fewer than two completions counts them over the
// window.
func rate(slots []*slot, secs float64) float64 {
	var r float64
	for _, s := range slots {
		if n := len(s.lat); n >= 2 && s.last.After(s.first) {
			r += float64(n-1) / s.last.Sub(s.first).Seconds()
		} else {
			r += float64(n) / secs
		}
	}
	return r
}

// snapshot is the counters read at either end of the measured window.
type snapshot struct {
	handlerCPU, selfCPU  time.Duration
	standInCPU           time.Duration
	machine              machineCPU
	rt                   runtimeStats
	cosmosConns, sbConns ConnStats
	hostConns            int64
	// cosmosMark and sbMark are the injectors' exchanges recorded so far.
	cosmosMark, sbMark int
}

func (e *env) snapshot() (snapshot, error) {
	var s snapshot
	var err error
	if s.handlerCPU, err = procCPU(e.proc.Pid()); err != nil {
		return s, err
	}
	if s.selfCPU, err = procCPU(os.Getpid()); err != nil {
		return s, err
	}
	for _, pid := range e.standIns {
		if c, err := procCPU(pid); err == nil {
			s.standInCPU += c
		}
	}
	if s.machine, err = readMachineCPU(); err != nil {
		return s, err
	}
	if s.rt, err = e.runtimeStats(); err != nil {
		return s, fmt.Errorf("reading the handler's runtime figures: %w", err)
	}
	s.cosmosConns = e.cosmosConns().stats()
	s.sbConns = e.sbConns().stats()
	s.hostConns = e.hostConns.Load()
	s.cosmosMark, s.sbMark = e.cosmosLate().mark(), e.sbLate().mark()
	return s, nil
}

// loop delivers messages one after another until stop, as one of the
// host's session slots: each invocation waits for the previous one.
func (s *slot) loop(ctx context.Context, stop <-chan struct{}, win *window) {
	if s.c == "duplicate" {
		// Record one message per session first: the step's duplicates
		// are their redeliveries.
		for i := range s.sessions {
			m := s.message(i)
			s.seeds = append(s.seeds, m)
			if !s.invoke(ctx, s.deliver(m, 1), "outcome=completed", win) {
				return
			}
		}
	}
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		k := int(s.seq % int64(len(s.sessions)))
		want, env := "outcome=completed", []byte(nil)
		if s.c == "duplicate" {
			want, env = "outcome=duplicate", s.deliver(s.seeds[k], 2)
		} else {
			env = s.deliver(s.message(k), 1)
		}
		if !s.invoke(ctx, env, want, win) {
			return
		}
	}
}

// invoke POSTs one envelope as the host does and records the answer. It
// returns false when the run is over.
func (s *slot) invoke(ctx context.Context, env []byte, want string, win *window) bool {
	s.seq++
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.e.proc.BaseURL()+"/"+app.FuncSubscriber, bytes.NewReader(env))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Azure-Functions-Host/load")
	req.Header.Set("X-Azure-Functions-InvocationId", fmt.Sprintf("load-%s-%d", s.id, s.seq))
	start := time.Now()
	resp, err := s.e.client.Do(req)
	var body []byte
	if err == nil {
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	end := time.Now()
	if ctx.Err() != nil {
		return false
	}
	s.done.Add(1)
	switch {
	case err != nil:
		s.fail(err.Error())
	case resp.StatusCode != http.StatusOK:
		s.fail(fmt.Sprintf("HTTP %d: %s", resp.StatusCode, firstLine(body)))
	case !bytes.Contains(body, []byte(want)):
		s.fail(fmt.Sprintf("no %q in the answer: %s", want, firstLine(body)))
	default:
		if win.contains(end) {
			if len(s.lat) == 0 {
				s.first = end
			}
			s.last = end
			s.lat = append(s.lat, end.Sub(start))
			s.spans = append(s.spans, span{start, end})
			s.cosmos += summaryInt(body, "cosmosRequests")
			s.reruns += summaryInt(body, "txnReruns")
			s.handlerLat = append(s.handlerLat, summaryMillis(body, "durationMs"))
		}
	}
	return true
}

// summaryValue is the value the handler put in the answer's summary
// after key (" cosmosRequests=3", " durationMs=41.234"), "" when absent.
func summaryValue(body []byte, key string) string {
	i := bytes.Index(body, []byte(" "+key+"="))
	if i < 0 {
		return ""
	}
	v := body[i+len(key)+2:]
	end := bytes.IndexFunc(v, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if end >= 0 {
		v = v[:end]
	}
	return string(v)
}

// summaryInt is summaryValue as an integer, 0 when absent.
func summaryInt(body []byte, key string) int64 {
	n, _ := strconv.ParseInt(summaryValue(body, key), 10, 64)
	return n
}

// summaryMillis is summaryValue, in milliseconds, as a duration.
func summaryMillis(body []byte, key string) time.Duration {
	f, _ := strconv.ParseFloat(summaryValue(body, key), 64)
	return time.Duration(f * float64(time.Millisecond))
}

func (s *slot) fail(msg string) {
	s.errors.Add(1)
	s.firstErr.CompareAndSwap(nil, msg)
}

// message is a new message on session k.
func (s *slot) message(k int) nimbusmsg.Message {
	sid := s.sessions[k]
	var typ, js string
	switch s.c {
	case "tx":
		// The session is the customer: one payment at a time per balance.
		typ = "PaymentReceived"
		js = fmt.Sprintf(`{"PaymentId":"P-%s-%d","CustomerId":%q,"AmountCents":100,"Note":%q}`, s.id, s.seq, sid, pad(s.e.cfg.BodyBytes, 80))
	default:
		typ = "OrderPlaced"
		js = fmt.Sprintf(`{"OrderId":"O-%s-%d","CustomerId":"C-%s","Amount":12.5,"Note":%q}`, s.id, s.seq, s.id, pad(s.e.cfg.BodyBytes, 70))
	}
	return nimbusmsg.EventRequest(nimbusmsg.Event{
		Publisher: "ShopEndpoint", Endpoint: endpoint, EventTypeID: typ, EventJSON: js, SessionID: sid, CorrelationID: "load-" + s.id,
	})
}

// deliver is the envelope the host POSTs for m's delivery number
// deliveryCount.
func (s *slot) deliver(m nimbusmsg.Message, deliveryCount int) []byte {
	now := time.Now().UTC()
	sb := m.Delivery(app.FuncSubscriber, "", deliveryCount, now.Add(-50*time.Millisecond))
	sb.SequenceNumber = s.seq + 1
	sb.Namespace = "sb-load.servicebus.windows.net"
	sb.UtcNow = now
	sb.RandGUID = "0f8fad5b-d9cb-469f-a165-70867728950e"
	sb.ContentType = hostwire.S("application/json")
	return hostwire.ServiceBus(sb)
}

// pad is a string that brings the event JSON to about n bytes (fixed is
// the rest of it).
func pad(n, fixed int) string {
	return strings.Repeat("x", max(n-fixed, 0))
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

func completed(slots []*slot) int64 {
	var n int64
	for _, s := range slots {
		n += s.done.Load()
	}
	return n
}

// allDone reports whether every slot has completed n invocations.
func allDone(slots []*slot, n int64) bool {
	for _, s := range slots {
		if s.done.Load() < n {
			return false
		}
	}
	return true
}

func errorsOf(slots []*slot) int64 {
	var n int64
	for _, s := range slots {
		n += s.errors.Load()
	}
	return n
}

// percentile is the p-th percentile of sorted (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// sleepCtx sleeps d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// progress writes one progress line, rewritten in place on a terminal.
type progress struct {
	w    io.Writer
	tty  bool
	used bool
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) show(line string) {
	if p.w == nil {
		return
	}
	p.used = true
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		return
	}
	fmt.Fprintln(p.w, line)
}

func (p *progress) done() {
	if p.w != nil && p.tty && p.used {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
