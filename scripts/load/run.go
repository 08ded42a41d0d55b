package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv/handlerproc"
)

// config is one load run.
type config struct {
	Cases    []string
	Inflight []int
	// Duration is the measured time of a step, Warmup the unmeasured time
	// before it.
	Duration, Warmup time.Duration
	Latency          Latency
	// SessionsPerSlot is how many sessions each in-flight slot cycles
	// through.
	SessionsPerSlot int
	// BodyBytes is the size of the event JSON.
	BodyBytes int
	// Cosmos is "memory" or "node"; ServiceBus "go" or "node".
	Cosmos, ServiceBus string
	// Binary is a built handler; "" builds one.
	Binary string
	// Settings are extra app settings.
	Settings map[string]string
	// Out receives the table and lines, Progress the progress lines.
	Out, Progress io.Writer
	// SVG is a file for the plot; WriteDocs names the docs' part the run
	// writes ("" for none).
	SVG       string
	WriteDocs string
	// Replay is an earlier run's output to report again instead of
	// running.
	Replay string
	// CPUProfile is a file for the load program's CPU profile ("" for
	// none).
	CPUProfile string
}

// trip is one sequential round trip of a delivery.
type trip int

const (
	tripRead trip = iota
	tripWrite
	tripBatch
	tripSend
)

// caseTrips are the sequential round trips of each case's delivery (the
// round-trip table of docs/performance.md): requests made at once are one
// trip, at the delay of that kind.
var caseTrips = map[string][]trip{
	// inbox check ∥ session-state read; the two events the sample publishes
	// (one send); the record; the ResolutionResponse.
	"fresh": {tripRead, tripSend, tripWrite, tripSend},
	// inbox check ∥ marker read ∥ session-state read; the handler's two
	// reads at once; the batch (payment, balance, marker holding
	// PaymentRecorded); the event and the response in one send; the
	// dispatched mark.
	"tx": {tripRead, tripRead, tripBatch, tripSend, tripBatch},
	// inbox check ∥ session-state read (the record is found); the
	// SkipResponse.
	"duplicate": {tripRead, tripSend},
}

// modelLatency is the time one delivery of c spends waiting on Cosmos DB
// and Service Bus: the sum of its sequential round trips.
func modelLatency(c string, l Latency) time.Duration {
	var d time.Duration
	for _, t := range caseTrips[c] {
		switch t {
		case tripRead:
			d += l.Read
		case tripWrite:
			d += l.Write
		case tripBatch:
			d += l.Batch
		case tripSend:
			d += l.Send
		}
	}
	return d
}

// injectedLatency is modelLatency with each round trip lengthened by what
// the stand-ins added to it beyond its delay, on average for its kind (the
// injector's lateness and the time the server behind it took): the latency
// the handler actually waited on.
func injectedLatency(c string, l Latency, cosmosLate, sbLate time.Duration) time.Duration {
	d := modelLatency(c, l)
	for _, t := range caseTrips[c] {
		if t == tripSend {
			d += sbLate
		} else {
			d += cosmosLate
		}
	}
	return d
}

// modelRate is the model's messages per second at n in flight.
func modelRate(c string, l Latency, n int) float64 {
	d := modelLatency(c, l)
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// hopRounds is how many deliveries' worth of hops hopFloor times after
// each step at one in flight.
const hopRounds = 100

// endpoint is the sample handler's endpoint.
const endpoint = "BillingEndpoint"

// env is a running handler with its stand-ins.
type env struct {
	cfg     config
	proc    *handlerproc.Proc
	mem     *memCosmos  // -cosmos memory
	node    *delayProxy // -cosmos node
	nodeSrv *testenv.Process
	sb      *testenv.Process // -servicebus node
	line    *delayLine       // -servicebus node
	sbSrv   *sbServer        // -servicebus go
	client  *http.Client     // the host's invocations
	probe   *http.Client     // GET /_nimbus/runtime, on connections of its own
	// standIns are the pids of the Node stand-ins, for their CPU time.
	standIns []int
	// hostConns counts the connections the host side opened to the handler.
	hostConns atomic.Int64

	bin, binDir string            // the handler binary, and the directory start made for it
	settings    map[string]string // the handler's app settings
	// base are the connection counts when the running handler started.
	base struct{ cosmos, sb, host int64 }
}

// cosmosConns returns the connection counter of the Cosmos injector.
func (e *env) cosmosConns() *connCounter {
	if e.mem != nil {
		return &e.mem.conns
	}
	return &e.node.conns
}

// cosmosLate is the Cosmos injector's record of its exchanges.
func (e *env) cosmosLate() *exchanges {
	if e.mem != nil {
		return &e.mem.late
	}
	return &e.node.late
}

// sbConns returns the connection counter of the Service Bus injector.
func (e *env) sbConns() *connCounter {
	if e.sbSrv != nil {
		return &e.sbSrv.conns
	}
	return &e.line.conns
}

// sbLate is the Service Bus injector's record of its exchanges.
func (e *env) sbLate() *exchanges {
	if e.sbSrv != nil {
		return &e.sbSrv.late
	}
	return &e.line.late
}

// serviceBusName says which Service Bus stand-in the run uses.
func serviceBusName(cfg config) string {
	if cfg.ServiceBus == "node" {
		return "Node stand-in scripts/testenv/sbfake.js behind a TCP delay line"
	}
	return "in-process AMQP server (accepts each send after the delay)"
}

// cosmosName says which Cosmos DB stand-in the run uses.
func cosmosName(cfg config) string {
	if cfg.Cosmos == "node" {
		return "Node stand-in scripts/testenv/cosmos.js behind a delaying proxy"
	}
	return "in-process memory server (answers from memory after the delay)"
}

func (e *env) close() {
	if e.proc != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, _ = e.proc.Stop(ctx)
		cancel()
	}
	if e.line != nil {
		e.line.Close()
	}
	if e.sbSrv != nil {
		e.sbSrv.Close()
	}
	if e.sb != nil {
		e.sb.Stop()
	}
	if e.mem != nil {
		e.mem.Close()
	}
	if e.node != nil {
		e.node.Close()
	}
	if e.nodeSrv != nil {
		e.nodeSrv.Stop()
	}
	if e.binDir != "" {
		_ = os.RemoveAll(e.binDir)
	}
}

// start builds (or takes) the handler and starts the stand-ins;
// startHandler starts the handler.
func start(ctx context.Context, cfg config) (*env, error) {
	e := &env{cfg: cfg}
	ok := false
	defer func() {
		if !ok {
			e.close()
		}
	}()
	bin := cfg.Binary
	if bin == "" {
		root, err := handlerproc.RepoRoot()
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "nimbus-load-")
		if err != nil {
			return nil, err
		}
		e.binDir = dir
		bin = filepath.Join(dir, "handler")
		bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		err = handlerproc.Build(bctx, root, bin)
		cancel()
		if err != nil {
			return nil, err
		}
	}

	var cosmosURL string
	switch cfg.Cosmos {
	case "memory":
		m, err := startMemCosmos(cfg.Latency)
		if err != nil {
			return nil, err
		}
		e.mem, cosmosURL = m, m.URL
	case "node":
		p, err := testenv.StartNode("cosmos.js", "PORT=0", "COSMOS_CONSISTENCY=Strong")
		if err != nil {
			return nil, fmt.Errorf("the Node Cosmos DB stand-in: %w (run `npm ci --prefix scripts/testenv`)", err)
		}
		e.nodeSrv = p
		proxy, err := startDelayProxy(fmt.Sprintf("http://127.0.0.1:%d/", p.Port), cfg.Latency)
		if err != nil {
			return nil, err
		}
		e.node, cosmosURL = proxy, proxy.URL
	}

	var sbPort int
	switch cfg.ServiceBus {
	case "go":
		srv, err := startSBServer(cfg.Latency.Send)
		if err != nil {
			return nil, err
		}
		e.sbSrv, sbPort = srv, srv.Port()
	case "node":
		// The endpoint's topic without subscriptions: the broker accepts
		// each response and keeps nothing, so a long run does not fill
		// memory.
		topo, _ := json.Marshal(testenv.Topology{Topics: []testenv.Topic{{Name: endpoint}}})
		sb, err := testenv.StartNode("sbfake.js", "PORT=0", "TOPOLOGY="+string(topo))
		if err != nil {
			return nil, fmt.Errorf("the Node Service Bus stand-in: %w (run `npm ci --prefix scripts/testenv`)", err)
		}
		e.sb = sb
		if e.line, err = startDelayLine(fmt.Sprintf("127.0.0.1:%d", sb.Port), cfg.Latency.Send); err != nil {
			return nil, err
		}
		sbPort = e.line.Port()
	}
	for _, script := range []string{"sbfake.js", "cosmos.js"} {
		if pid := childPid(script); pid != 0 {
			e.standIns = append(e.standIns, pid)
		}
	}

	settings := map[string]string{
		"NimBus__Endpoint":                        endpoint,
		"NimBus__Inbox__Enabled":                  "true",
		"NimBus__Inbox__Store":                    "Cosmos",
		"NimBus__Inbox__Cosmos__ConnectionString": fmt.Sprintf("AccountEndpoint=%s;AccountKey=%s;", cosmosURL, testenv.CosmosEmulatorKey),
		"NimBus__Inbox__Cosmos__DatabaseId":       "load",
		"NimBus__Inbox__CleanupSchedule":          "0 0 0 1 1 *",
		"ServiceBusConnection":                    testenv.ConnectionString(sbPort),
	}
	for k, v := range cfg.Settings {
		settings[k] = v
	}
	e.bin, e.settings = bin, settings
	maxConns := 0
	for _, n := range cfg.Inflight {
		maxConns = max(maxConns, n)
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	e.client = &http.Client{
		Transport: &http.Transport{
			MaxIdleConns: maxConns + 16, MaxIdleConnsPerHost: maxConns + 16, DisableCompression: true, IdleConnTimeout: time.Minute,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				e.hostConns.Add(1)
				return dialer.DialContext(ctx, network, addr)
			},
		},
		Timeout: 2 * time.Minute,
	}
	e.probe = &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	ok = true
	return e, nil
}

// startHandler starts the handler, stopping the one running, and waits
// until it answers: each case starts on a fresh process, so goroutines,
// memory and connections are the case's own.
func (e *env) startHandler(ctx context.Context) error {
	if e.proc != nil {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := e.proc.Stop(sctx)
		cancel()
		if err != nil {
			return fmt.Errorf("stopping the handler: %w", err)
		}
	}
	e.client.CloseIdleConnections()
	e.probe.CloseIdleConnections()
	var err error
	if e.proc, err = handlerproc.Start(handlerproc.Options{Binary: e.bin, Settings: e.settings, DropLines: true}); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := e.proc.WaitReady(rctx); err != nil {
		return err
	}
	e.base.cosmos, e.base.sb, e.base.host = e.cosmosConns().stats().Opened, e.sbConns().stats().Opened, e.hostConns.Load()
	return nil
}

// runtimeStats reads the handler's GET /_nimbus/runtime.
func (e *env) runtimeStats() (runtimeStats, error) {
	resp, err := e.probe.Get(e.proc.BaseURL() + "/_nimbus/runtime")
	if err != nil {
		return runtimeStats{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return runtimeStats{}, fmt.Errorf("GET /_nimbus/runtime answered %d", resp.StatusCode)
	}
	var s runtimeStats
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// runtimeStats is the handler's answer to GET /_nimbus/runtime.
type runtimeStats struct {
	Goroutines      uint64 `json:"goroutines"`
	HeapLiveBytes   uint64 `json:"heapLiveBytes"`
	TotalAllocBytes uint64 `json:"totalAllocBytes"`
	GCCycles        uint64 `json:"gcCycles"`
	GCPercent       uint64 `json:"gcPercent"`
}

// results is a whole run.
type results struct {
	steps  []stepResult
	failed []string
}

// ok reports whether every step ran without errors.
func (r *results) ok() bool { return len(r.failed) == 0 }

// run starts everything, runs every case at every step and reports; with
// cfg.Replay it reads the steps of an earlier run's output instead.
func run(ctx context.Context, cfg config) (*results, error) {
	if cfg.Replay != "" {
		return replay(cfg)
	}
	e, err := start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer e.close()
	res := &results{}
	var echo net.Conn // the echo peer of hopFloor, once a step at 1 in flight needs it
	fmt.Fprintf(cfg.Out, "Load run: the handler binary, Cosmos DB = %s, Service Bus = %s.\n", cosmosName(cfg), serviceBusName(cfg))
	fmt.Fprintf(cfg.Out, "Injected latency: Cosmos read %v, write %v, batch %v; Service Bus send %v. %d s per step after %v of warm-up; %d cores, load average %s.\n",
		cfg.Latency.Read, cfg.Latency.Write, cfg.Latency.Batch, cfg.Latency.Send, int(cfg.Duration.Seconds()), cfg.Warmup, coreCount(), loadAverage())
	for _, c := range cfg.Cases {
		if err := e.startHandler(ctx); err != nil {
			return res, err
		}
		for _, n := range cfg.Inflight {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			s, err := e.step(ctx, c, n)
			if err != nil {
				return res, fmt.Errorf("%s at %d in flight: %w", c, n, err)
			}
			if n == 1 {
				// The machine's own cost of the same hops, measured now,
				// with the handler idle.
				if echo == nil {
					var stop func()
					if echo, stop, err = startEchoPeer(); err != nil {
						return res, err
					}
					defer stop()
				}
				p50, p99, err := hopFloor(echo, hopGaps(c, cfg.Latency), hopRounds)
				if err != nil {
					return res, fmt.Errorf("the machine's hops: %w", err)
				}
				s.HopsP50, s.HopsP99 = ms(p50), ms(p99)
			}
			res.steps = append(res.steps, s)
			if s.Errors > 0 {
				res.failed = append(res.failed, fmt.Sprintf("%s at %d in flight: %d invocations failed (%s)", c, n, s.Errors, s.FirstError))
			}
			fmt.Fprintln(cfg.Out, s.line())
		}
	}
	if e.mem != nil && e.mem.unsupported.Load() > 0 {
		res.failed = append(res.failed, fmt.Sprintf("the Cosmos DB stand-in refused %d requests it does not serve (last: %s)", e.mem.unsupported.Load(), e.mem.LastUnsupported()))
	}
	if err := report(cfg, res, loadAverage()); err != nil {
		return res, err
	}
	if !res.ok() {
		return res, errors.New("some invocations failed; see FAILED above and the handler's stderr:\n" + lastBytes(e.proc.Stderr(), 16<<10))
	}
	return res, nil
}

// report writes the table, the summary, the failures, and the plot and
// the docs' part when asked; load is the load average to state.
func report(cfg config, res *results, load string) error {
	fmt.Fprintln(cfg.Out)
	writeTable(cfg.Out, cfg, res.steps)
	fmt.Fprintln(cfg.Out)
	writeSummary(cfg.Out, res.steps, cfg.Settings["GOGC"] != "")
	for _, f := range res.failed {
		fmt.Fprintln(cfg.Out, "FAILED:", f)
	}
	if cfg.SVG != "" {
		if err := os.WriteFile(cfg.SVG, []byte(plotSVG(cfg, res.steps)), 0o644); err != nil {
			return err
		}
	}
	if cfg.WriteDocs != "" {
		return writeDocs(cfg, res.steps, load)
	}
	return nil
}

// replay reports the steps an earlier run printed (its machine-readable
// lines, in cfg.Replay) as if it had just run them: the table, the
// summary, the plot and the docs are rebuilt without measuring again. The
// latencies, durations and stand-in are taken from the flags, which must
// be the run's.
func replay(cfg config) (*results, error) {
	b, err := os.ReadFile(cfg.Replay)
	if err != nil {
		return nil, err
	}
	res := &results{}
	load := ""
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.HasPrefix(line, "case=") {
			continue
		}
		s, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.Replay, err)
		}
		res.steps = append(res.steps, s)
		load = s.Load
	}
	if len(res.steps) == 0 {
		return nil, fmt.Errorf("%s has no line starting with case=", cfg.Replay)
	}
	cfg.Cases, cfg.Inflight = nil, nil
	for _, s := range res.steps {
		if !slices.Contains(cfg.Cases, s.Case) {
			cfg.Cases = append(cfg.Cases, s.Case)
		}
		if !slices.Contains(cfg.Inflight, s.Inflight) {
			cfg.Inflight = append(cfg.Inflight, s.Inflight)
		}
	}
	return res, report(cfg, res, load)
}

// parseLine reads a step's machine-readable line (stepResult.line).
func parseLine(line string) (stepResult, error) {
	var s stepResult
	rest, load, _ := strings.Cut(line, ` load="`)
	s.Load = strings.TrimSuffix(load, `"`)
	fields := map[string]string{}
	for kv := range strings.FieldsSeq(rest) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return s, fmt.Errorf("%q is not key=value", kv)
		}
		fields[k] = v
	}
	var bad []string
	num := func(k string) float64 {
		f, err := strconv.ParseFloat(fields[k], 64)
		if err != nil {
			bad = append(bad, k)
		}
		return f
	}
	s.Case = fields["case"]
	s.Inflight = int(num("inflight"))
	s.Rate, s.Model, s.Ratio = num("msgs/s"), num("model"), num("ratio")
	s.P50, s.P99, s.ModelMs = num("p50_ms"), num("p99_ms"), num("model_p99_ms")
	s.HandlerP50, s.HandlerP99 = num("handler_p50_ms"), num("handler_p99_ms")
	s.CosmosLateMs, s.ServiceBusLateMs = num("cosmos_late_ms"), num("servicebus_late_ms")
	s.CosmosServiceMs, s.ServiceBusServiceMs = num("cosmos_service_ms"), num("servicebus_service_ms")
	s.CosmosP99Ms, s.ServiceBusP99Ms = num("cosmos_excess_p99_ms"), num("servicebus_excess_p99_ms")
	s.InjectedMs, s.RatioInjected, s.OwnMs = num("injected_ms"), num("ratio_injected"), num("handler_own_ms")
	s.CPUPerMsg, s.BinaryCores, s.LoadgenCores, s.StandInCores = num("cpu_us_per_msg"), num("handler_cores"), num("loadgen_cores"), num("standin_cores")
	s.MachineBusy, s.RSSPeakMB, s.HeapPeakMB = num("machine_busy"), num("rss_mb"), num("heap_mb")
	s.GoroutinesPeak, s.AllocPerMsgKB = uint64(num("goroutines")), num("alloc_kb_per_msg")
	s.ConnsCosmos, s.ConnsServiceBus = int64(num("conns_cosmos")), int64(num("conns_servicebus"))
	s.NewConnsCosmos, s.NewConnsServiceBus, s.NewConnsHost = int64(num("new_conns_cosmos")), int64(num("new_conns_servicebus")), int64(num("new_conns_host"))
	s.CosmosReqPerMsg, s.Msgs, s.Errors = num("cosmos_req_per_msg"), int64(num("msgs")), int64(num("errors"))
	if _, ok := fields["reruns_per_msg"]; ok {
		s.RerunsPerMsg = num("reruns_per_msg")
	}
	if _, ok := fields["outside_p50_ms"]; ok {
		s.OutsideP50, s.OutsideP99 = num("outside_p50_ms"), num("outside_p99_ms")
	}
	if _, ok := fields["hops_p50_ms"]; ok {
		s.HopsP50, s.HopsP99 = num("hops_p50_ms"), num("hops_p99_ms")
	}
	if len(bad) > 0 || s.Case == "" {
		return s, fmt.Errorf("line %q: missing or unreadable %s", line, strings.Join(bad, ", "))
	}
	return s, nil
}

func coreCount() int {
	m, err := readMachineCPU()
	if err != nil {
		return 0
	}
	return m.cores
}

// lastBytes is the end of s, at most n bytes.
func lastBytes(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
