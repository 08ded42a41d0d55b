package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv/handlerproc"
)

// writeTable writes the steps as a Markdown table.
func writeTable(w io.Writer, cfg config, steps []stepResult) {
	fmt.Fprintln(w, "| case | in flight | msgs/s | model | ratio | p50 / p99 ms | model ms | stand-ins beyond the delay, per exchange: Cosmos / Service Bus ms, mean (p99) | as injected: ms, ratio | handler's own ms | handler CPU µs/msg | cores: handler / load / stand-ins | machine busy | RSS / heap MB | goroutines | alloc KB/msg | connections Cosmos / Service Bus (new) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range steps {
		busy := fmt.Sprintf("%.0f%%", 100*s.MachineBusy)
		if s.saturated() {
			busy += " (saturated)"
		}
		fmt.Fprintf(w, "| %s | %d | %.1f | %.1f | %.2f | %.1f / %.1f | %.0f | %.2f / %.2f (%.1f / %.1f) | %.1f, %.2f | %.1f | %.0f | %.2f / %.2f / %.2f | %s | %.0f / %.1f | %d | %.1f | %d / %d (%d / %d) |\n",
			s.Case, s.Inflight, s.Rate, s.Model, s.Ratio, s.P50, s.P99, s.ModelMs,
			s.CosmosLateMs+s.CosmosServiceMs, s.ServiceBusLateMs+s.ServiceBusServiceMs, s.CosmosP99Ms, s.ServiceBusP99Ms,
			s.InjectedMs, s.RatioInjected, s.OwnMs, s.CPUPerMsg,
			s.BinaryCores, s.LoadgenCores, s.StandInCores, busy, s.RSSPeakMB, s.HeapPeakMB, s.GoroutinesPeak, s.AllocPerMsgKB,
			s.ConnsCosmos, s.ConnsServiceBus, s.NewConnsCosmos, s.NewConnsServiceBus)
	}
}

// caseColors are the plot's colours, by case.
var caseColors = map[string]string{"fresh": "#1f77b4", "tx": "#d62728", "duplicate": "#2ca02c"}

// plotSVG draws messages per second (left) and the p99 invocation
// latency (right) against the in-flight invocations, measured (solid,
// dots) and modelled (dashed), one colour per case. Both axes of the
// throughput panel are logarithmic.
func plotSVG(cfg config, steps []stepResult) string {
	const (
		w, h         = 960, 420
		panelW       = 400
		top, bottom  = 50, 350
		leftA, leftB = 70, 550
	)
	byCase := map[string][]stepResult{}
	var cases []string
	minN, maxN := 256, 1
	maxRate, maxMs := 1.0, 1.0
	for _, s := range steps {
		for minN > s.Inflight {
			minN /= 2
		}
		if _, ok := byCase[s.Case]; !ok {
			cases = append(cases, s.Case)
		}
		byCase[s.Case] = append(byCase[s.Case], s)
		maxN = max(maxN, s.Inflight)
		maxRate = max(maxRate, s.Rate, s.Model)
		maxMs = max(maxMs, s.P99, s.ModelMs)
	}
	for _, c := range cases {
		sort.Slice(byCase[c], func(i, j int) bool { return byCase[c][i].Inflight < byCase[c][j].Inflight })
	}
	minN = min(minN, maxN)
	xLog := func(left float64, n int) float64 {
		span := math.Log2(float64(maxN)) - math.Log2(float64(minN))
		if span == 0 {
			span = 1
		}
		return left + (math.Log2(float64(n))-math.Log2(float64(minN)))/span*panelW
	}
	rateTop := math.Pow(10, math.Ceil(math.Log10(maxRate)))
	rateBottom := math.Pow(10, math.Floor(math.Log10(max(minRate(steps), 1))))
	if rateBottom >= rateTop {
		rateBottom = rateTop / 10
	}
	yRate := func(v float64) float64 {
		v = max(v, rateBottom)
		return bottom - (math.Log10(v)-math.Log10(rateBottom))/(math.Log10(rateTop)-math.Log10(rateBottom))*(bottom-top)
	}
	msTop := niceCeil(maxMs * 1.1)
	yMs := func(v float64) float64 { return bottom - v/msTop*(bottom-top) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14">Messages per second per instance (log scale) — measured (solid) and model (dashed)</text>`+"\n", leftA)
	fmt.Fprintf(&b, `<text x="%d" y="36" fill="#555">injected: Cosmos read %v, write %v, batch %v; Service Bus send %v</text>`+"\n", leftA, cfg.Latency.Read, cfg.Latency.Write, cfg.Latency.Batch, cfg.Latency.Send)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="14">p99 invocation latency, ms</text>`+"\n", leftB, top-4)

	// Axes and grids.
	for _, left := range []float64{leftA, leftB} {
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%d" x2="%.0f" y2="%d" stroke="black"/>`+"\n", left, bottom, left+panelW, bottom)
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%d" x2="%.0f" y2="%d" stroke="black"/>`+"\n", left, top, left, bottom)
		for n := minN; n <= maxN; n *= 2 {
			x := xLog(left, n)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>`+"\n", x, top, x, bottom)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", x, bottom+16, n)
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">invocations in flight</text>`+"\n", left+panelW/2, bottom+34)
	}
	for v := rateBottom; v <= rateTop*1.0001; v *= 10 {
		y := yRate(v)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`+"\n", leftA, y, leftA+panelW, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", leftA-6, y+4, trimFloat(v))
	}
	for i := 0; i <= 5; i++ {
		v := msTop * float64(i) / 5
		y := yMs(v)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`+"\n", leftB, y, leftB+panelW, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", leftB-6, y+4, trimFloat(v))
	}

	// Series.
	for i, c := range cases {
		color := caseColors[c]
		if color == "" {
			color = "#555"
		}
		var meas, model, p99, modelMs []string
		for _, s := range byCase[c] {
			x := xLog(leftA, s.Inflight)
			meas = append(meas, fmt.Sprintf("%.1f,%.1f", x, yRate(s.Rate)))
			model = append(model, fmt.Sprintf("%.1f,%.1f", x, yRate(s.Model)))
			x2 := xLog(leftB, s.Inflight)
			p99 = append(p99, fmt.Sprintf("%.1f,%.1f", x2, yMs(s.P99)))
			modelMs = append(modelMs, fmt.Sprintf("%.1f,%.1f", x2, yMs(s.ModelMs)))
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5" stroke-dasharray="5,4"/>`+"\n", strings.Join(model, " "), color)
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(meas, " "), color)
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5" stroke-dasharray="5,4"/>`+"\n", strings.Join(modelMs, " "), color)
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(p99, " "), color)
		for _, s := range byCase[c] {
			fill := color
			if s.saturated() {
				fill = "white"
			}
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s" stroke="%s"/>`+"\n", xLog(leftA, s.Inflight), yRate(s.Rate), fill, color)
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s" stroke="%s"/>`+"\n", xLog(leftB, s.Inflight), yMs(s.P99), fill, color)
		}
		ly := top + 14 + 18*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", leftA+10, ly, leftA+34, ly, color)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s (model %.0f ms per delivery)</text>`+"\n", leftA+40, ly+4, c, ms(modelLatency(c, cfg.Latency)))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">open dots: the machine's cores were at least 90%% busy (load generator, stand-ins and handler share them)</text>`+"\n", leftA, h-12)
	b.WriteString("</svg>\n")
	return b.String()
}

func minRate(steps []stepResult) float64 {
	m := math.Inf(1)
	for _, s := range steps {
		if s.Rate > 0 {
			m = min(m, s.Rate)
		}
		if s.Model > 0 {
			m = min(m, s.Model)
		}
	}
	if math.IsInf(m, 1) {
		return 1
	}
	return m
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.1f", v)
	return strings.TrimSuffix(s, ".0")
}

// The docs' generated parts: -write-docs NAME replaces, in docsPage, the
// table and summary between NAME's markers and writes the plot to
// docs/performance-load-NAME.svg; the run named "azure" (the default
// latencies) also replaces the capacity table in capacityPage.
const (
	docsPage     = "docs/performance.md"
	capacityPage = "docs/concurrency.md"
)

// docsNames are the parts -write-docs may write.
var docsNames = []string{"azure", "deep"}

// markers returns the begin and end lines of a generated part.
func markers(part string) (begin, end string) {
	return "<!-- " + part + ":begin (generated by go run ./scripts/load -write-docs) -->", "<!-- " + part + ":end -->"
}

// plotFile is the plot of the run named name, relative to the repository.
func plotFile(name string) string { return "docs/performance-load-" + name + ".svg" }

// writeDocs writes the plot and replaces the generated parts of the docs
// with this run's table, summary and (for the "azure" run) capacity table.
func writeDocs(cfg config, steps []stepResult, load string) error {
	root, err := handlerproc.RepoRoot()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, plotFile(cfg.WriteDocs)), []byte(plotSVG(cfg, steps)), 0o644); err != nil {
		return err
	}
	var t strings.Builder
	fmt.Fprintf(&t, "`%s` — Cosmos DB: %s; Service Bus: %s. %d cores, load average %s at the end of the run; %v per step after at least %v of warm-up, %d sessions per in-flight slot, %d-byte events.\n\n",
		commandLine(cfg), cosmosName(cfg), serviceBusName(cfg), coreCount(), load, cfg.Duration, cfg.Warmup, cfg.SessionsPerSlot, cfg.BodyBytes)
	writeTable(&t, cfg, steps)
	t.WriteString("\n")
	writeSummary(&t, steps, cfg.Settings["GOGC"] != "")
	if err := replacePart(filepath.Join(root, docsPage), "load-table-"+cfg.WriteDocs, t.String()); err != nil {
		return err
	}
	if cfg.WriteDocs != "azure" {
		return nil
	}
	var c strings.Builder
	writeCapacity(&c, cfg, steps)
	return replacePart(filepath.Join(root, capacityPage), "load-capacity", c.String())
}

// commandLine is the command that repeats the run.
func commandLine(cfg config) string {
	var in []string
	for _, n := range cfg.Inflight {
		in = append(in, fmt.Sprint(n))
	}
	cmd := fmt.Sprintf("go run ./scripts/load -cases %s -inflight %s -duration %v", strings.Join(cfg.Cases, ","), strings.Join(in, ","), cfg.Duration)
	l := cfg.Latency
	if l != defaultLatency {
		cmd += fmt.Sprintf(" -cosmos-read %v -cosmos-write %v -cosmos-batch %v -sb-send %v", l.Read, l.Write, l.Batch, l.Send)
	}
	if cfg.Cosmos != "memory" {
		cmd += " -cosmos " + cfg.Cosmos
	}
	if cfg.ServiceBus != "go" {
		cmd += " -servicebus " + cfg.ServiceBus
	}
	return cmd + " -write-docs " + cfg.WriteDocs
}

// replacePart replaces the generated part named part of the file at path.
func replacePart(path, part, body string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	begin, end := markers(part)
	s, err := replaceBetween(string(b), begin, end, body)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

// replaceBetween replaces what lies between the lines begin and end.
func replaceBetween(s, begin, end, body string) (string, error) {
	i := strings.Index(s, begin)
	j := strings.Index(s, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("the markers %q and %q are missing", begin, end)
	}
	return s[:i+len(begin)] + "\n" + body + s[j:], nil
}

// capacitySessions are the busy-session counts of the capacity table.
var capacitySessions = []int{1, 8, 32, 128}

// writeCapacity writes the expected messages per second of one instance
// for busy sessions, fresh deliveries: the handler alone (sessions ÷ the
// model's handling time), and the slot's whole cycle with the host's own
// broker round trips (a receive unless prefetched, and the complete, each
// modelled at the send latency); the handler's CPU at that rate (the CPU
// per message of the busiest fresh step, where the runtime's idle work
// weighs least); and what this run measured: the per-instance figure
// without prefetch at the ratio measured at the largest step up to that
// many in flight (unsaturated steps when there are any, else the
// saturated ones, marked as lower bounds).
func writeCapacity(w io.Writer, cfg config, steps []stepResult) {
	var fresh, saturated []stepResult
	for _, s := range steps {
		switch {
		case s.Case != "fresh" || s.Msgs == 0:
		case s.saturated():
			saturated = append(saturated, s)
		default:
			fresh = append(fresh, s)
		}
	}
	lowerBound := len(fresh) == 0
	if lowerBound {
		fresh = saturated
	}
	if len(fresh) == 0 {
		fmt.Fprintln(w, "(no fresh step was measured)")
		return
	}
	sort.Slice(fresh, func(i, j int) bool { return fresh[i].Inflight < fresh[j].Inflight })
	busiest := fresh[0]
	for _, s := range fresh {
		if s.Rate > busiest.Rate {
			busiest = s
		}
	}
	handling := modelLatency("fresh", cfg.Latency).Seconds()
	broker := cfg.Latency.Send.Seconds()
	fmt.Fprintln(w, "| busy sessions | handler alone, msgs/s | per instance, prefetch 0 | per instance, prefetch ≥ 1 | handler CPU at the prefetch rate | this run: per instance, prefetch 0 |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, n := range capacitySessions {
		base := fresh[0]
		for _, s := range fresh {
			if s.Inflight <= n {
				base = s
			}
		}
		alone := float64(n) / handling
		noPrefetch := float64(n) / (broker + handling + broker)
		prefetch := float64(n) / (handling + broker)
		ratio := min(base.Ratio, 1)
		measured := float64(n) / (broker + handling/ratio + broker)
		note := fmt.Sprintf("%.0f (ratio %.2f at %d in flight", measured, base.Ratio, base.Inflight)
		if base.Inflight < n {
			note += ", fewer than the sessions"
		}
		if lowerBound {
			note += ", machine saturated: a lower bound"
		}
		fmt.Fprintf(w, "| %d | %.0f | %.0f | %.0f | %.2f cores (%.0f µs/msg) | %s) |\n",
			n, alone, noPrefetch, prefetch, prefetch*busiest.CPUPerMsg/1e6, busiest.CPUPerMsg, note)
	}
}

// writeSummary states, per case, how far the unsaturated steps kept up
// with the model (throughput at least 90% of it, p99 at most 5 ms over
// it), the handler's CPU per fresh delivery and its memory per in-flight
// invocation (resident too when floorOff: the run set GOGC, which turns
// the collector's heap floor off).
func writeSummary(w io.Writer, steps []stepResult, floorOff bool) {
	byCase := map[string][]stepResult{}
	var cases []string
	for _, s := range steps {
		if _, ok := byCase[s.Case]; !ok {
			cases = append(cases, s.Case)
		}
		byCase[s.Case] = append(byCase[s.Case], s)
	}
	for _, c := range cases {
		var largest, worst *stepResult
		var misses []string
		for i := range byCase[c] {
			s := &byCase[c][i]
			if s.saturated() {
				continue
			}
			if largest == nil || s.Inflight > largest.Inflight {
				largest = s
			}
			if worst == nil || s.Ratio < worst.Ratio {
				worst = s
			}
			if s.Ratio < 0.9 || s.P99 > s.ModelMs+5 {
				misses = append(misses, fmt.Sprintf("%d in flight (ratio %.2f, p99 %.1f ms against %.0f)", s.Inflight, s.Ratio, s.P99, s.ModelMs))
			}
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		worstInjected := math.Inf(1)
		for _, s := range byCase[c] {
			lo, hi = min(lo, s.OwnMs), max(hi, s.OwnMs)
			worstInjected = min(worstInjected, s.RatioInjected)
		}
		fmt.Fprintf(w, "%s: the handler's own time per delivery (its median duration less the latency as injected) %.1f to %.1f ms across the steps; lowest ratio to the model as injected %.2f.\n",
			c, lo, hi, worstInjected)
		for _, s := range byCase[c] {
			if s.Inflight == 1 && s.OutsideP50 > 0 {
				fmt.Fprintf(w, "%s at 1 in flight: %.1f ms p50, %.1f ms p99 of each delivery outside the stand-ins' exchanges (the binary and the host hop; the delays, the injector's lateness and the servers' answers taken out delivery by delivery), of a latency of %.1f ms p50, %.1f ms p99",
					c, s.OutsideP50, s.OutsideP99, s.P50, s.P99)
				if s.HopsP50 > 0 {
					fmt.Fprintf(w, "; the same %d round trips between two bare processes of this machine, after the same idle gaps, take %.1f ms p50, %.1f ms p99",
						len(caseTrips[c])+1, s.HopsP50, s.HopsP99)
				}
				fmt.Fprintln(w, ".")
			}
		}
		switch {
		case largest == nil:
			fmt.Fprintf(w, "%s: every step saturated the machine; nothing to compare with the model.\n", c)
		case len(misses) == 0:
			fmt.Fprintf(w, "%s: at least 90%% of the model's throughput and p99 within 5 ms of it at every unsaturated step, up to %d in flight (the largest this machine drove unsaturated); lowest ratio %.2f at %d.\n",
				c, largest.Inflight, worst.Ratio, worst.Inflight)
		default:
			fmt.Fprintf(w, "%s: below 90%% of the model or p99 more than 5 ms over it at %s (largest unsaturated step: %d in flight).\n",
				c, strings.Join(misses, ", "), largest.Inflight)
		}
	}
	if cpu, rate := freshCPU(steps); rate > 0 {
		fmt.Fprintf(w, "Handler CPU per fresh delivery: %.0f µs (at %.0f msgs/s, the busiest fresh step): one core carries about %.0f fresh deliveries per second of handler work.\n", cpu, rate, 1e6/cpu)
	}
	if lo, hi, ok := memorySpan(steps); ok {
		d := float64(hi.Inflight - lo.Inflight)
		fmt.Fprintf(w, "Memory per in-flight invocation (%s, %d → %d in flight): %.0f KB of live heap", hi.Case, lo.Inflight, hi.Inflight, (hi.HeapPeakMB-lo.HeapPeakMB)*1024/d)
		if floorOff {
			fmt.Fprintf(w, ", %.0f KB resident", (hi.RSSPeakMB-lo.RSSPeakMB)*1024/d)
		} else {
			fmt.Fprint(w, " (resident memory also holds the garbage the collector's 64 MiB floor lets accumulate, more the more a step allocates: -set GOGC=100 turns the floor off and gives it per invocation)")
		}
		fmt.Fprintln(w, ".")
	}
}

// freshCPU is the handler's CPU per fresh delivery at the fresh step that
// delivered the most per second (where the runtime's fixed background work
// weighs least), and that step's rate.
func freshCPU(steps []stepResult) (cpu, rate float64) {
	for _, s := range steps {
		if s.Case == "fresh" && s.Msgs > 0 && s.Rate > rate {
			cpu, rate = s.CPUPerMsg, s.Rate
		}
	}
	return cpu, rate
}

// memorySpan returns the steps of one case with the fewest and the most in
// flight (the case with the widest span), to difference their memory.
func memorySpan(steps []stepResult) (lo, hi stepResult, ok bool) {
	best := 0
	for _, a := range steps {
		for _, b := range steps {
			if a.Case == b.Case && b.Inflight-a.Inflight > best {
				lo, hi, best = a, b, b.Inflight-a.Inflight
			}
		}
	}
	return lo, hi, best > 0
}
