// Command load measures what one handler instance carries: it plays the
// Azure Functions host at a given number of in-flight Service Bus
// invocations (spread over many sessions) against the real handler binary,
// with Cosmos DB and Service Bus behind a latency injector that adds a
// fixed delay per request, and compares the throughput and latency it
// measures with the round-trip model: in-flight invocations ÷ the sum of
// the delivery's sequential round trips.
//
//	go run ./scripts/load -cases fresh,tx,duplicate -inflight 1,16,64 -duration 10s
//
// Cases: fresh (a new OrderPlaced with the plain inbox: inbox check ∥
// session-state read, the send of the two events the sample publishes, the
// record, the ResolutionResponse), tx (a new PaymentReceived through the
// transactional handler: the reads, the handler's reads, the batch, the
// event with the response, the dispatched mark) and duplicate (a MessageId
// already recorded: the check ∥ state read, the SkipResponse).
//
// Cosmos DB is, by default, an in-process server that keeps documents in
// memory and holds each answer until the request's delay has passed
// (-cosmos memory); -cosmos node puts the delay in a proxy in front of the
// Node stand-in (scripts/testenv/cosmos.js), which cannot keep up beyond a
// few hundred requests per second on a small machine. Service Bus is the
// Node stand-in (scripts/testenv/sbfake.js) behind a TCP delay line that
// holds every byte the handler sends for the send delay. Both count the
// connections the handler opens.
//
// It prints a progress line while it runs, then a table, one
// machine-readable line per case and step (case=… inflight=… msgs/s=…
// model=… ratio=…), and, with -svg, a plot; -write-docs NAME regenerates
// the table, the summary and the plot in docs/ (see docs/performance.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Latency is the delay the injector adds to each request, by kind.
type Latency struct {
	// Read is a Cosmos DB point read (and a metadata read).
	Read time.Duration
	// Write is a Cosmos DB create, replace, upsert or delete.
	Write time.Duration
	// Batch is a Cosmos DB transactional batch.
	Batch time.Duration
	// Send is a Service Bus send (transfer to disposition).
	Send time.Duration
}

// The default latencies: the bounds Azure publishes. Cosmos DB's SLA
// guarantees point reads and writes under 10 ms at the 99th percentile
// within a region; a transactional batch is one write request to one
// partition, so it is given the write figure. Service Bus publishes no
// latency guarantee; with batched store access (on by default for every
// entity) the broker holds a send for up to 20 ms before it is stored and
// acknowledged, so a send is given 20 ms.
var defaultLatency = Latency{
	Read:  10 * time.Millisecond,
	Write: 10 * time.Millisecond,
	Batch: 10 * time.Millisecond,
	Send:  20 * time.Millisecond,
}

func main() {
	if os.Getenv(echoEnv) != "" {
		if err := serveEcho(os.Stdout); err != nil {
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "load:", err)
			os.Exit(2)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "load:", err)
			os.Exit(2)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	res, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		exit(cfg, 1)
	}
	if !res.ok() {
		exit(cfg, 1)
	}
}

// exit stops the CPU profile, if one is being written, and exits.
func exit(cfg config, code int) {
	if cfg.CPUProfile != "" {
		pprof.StopCPUProfile()
	}
	os.Exit(code)
}

// parseFlags reads the command line into a config.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg := config{Latency: defaultLatency, Out: os.Stdout, Progress: os.Stderr}
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cases := fs.String("cases", "fresh,tx,duplicate", "cases to run, in order: fresh, tx, duplicate")
	inflight := fs.String("inflight", "1,4,16,32,64", "in-flight invocations per step (1 to 256)")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "measured time per step")
	fs.DurationVar(&cfg.Warmup, "warmup", 2*time.Second, "unmeasured time before each step (connections, pools)")
	fs.DurationVar(&cfg.Latency.Read, "cosmos-read", defaultLatency.Read, "delay added to each Cosmos DB point read")
	fs.DurationVar(&cfg.Latency.Write, "cosmos-write", defaultLatency.Write, "delay added to each Cosmos DB write")
	fs.DurationVar(&cfg.Latency.Batch, "cosmos-batch", defaultLatency.Batch, "delay added to each Cosmos DB transactional batch")
	fs.DurationVar(&cfg.Latency.Send, "sb-send", defaultLatency.Send, "delay added to each Service Bus send")
	fs.IntVar(&cfg.SessionsPerSlot, "sessions", 4, "sessions each in-flight slot cycles through (a session has one invocation at a time)")
	fs.IntVar(&cfg.BodyBytes, "body", 200, "bytes of event JSON per message")
	fs.StringVar(&cfg.ServiceBus, "servicebus", "go", "Service Bus stand-in: go (in process, an AMQP server that accepts each send after the delay) or node (scripts/testenv/sbfake.js behind a TCP delay line)")
	fs.StringVar(&cfg.Cosmos, "cosmos", "memory", "Cosmos DB stand-in: memory (in process, answers from memory) or node (scripts/testenv/cosmos.js behind a delaying proxy)")
	fs.StringVar(&cfg.Binary, "binary", "", "a built handler binary (default: build ./handler)")
	fs.StringVar(&cfg.SVG, "svg", "", "write the plot to this SVG file")
	fs.StringVar(&cfg.WriteDocs, "write-docs", "", "write the table and summary into docs/performance.md's part `NAME` (azure: the default latencies, also the capacity table of docs/concurrency.md; deep: the high-concurrency run) and the plot to docs/performance-load-NAME.svg")
	fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write the load program's own CPU profile (the host side and the in-process stand-ins) to `FILE`")
	settings := fs.String("set", "", "extra app settings for the handler, KEY=value;KEY=value")
	fs.StringVar(&cfg.Replay, "replay", "", "report the machine-readable lines of an earlier run's output `FILE` again (table, summary, -svg, -write-docs) instead of running; give the run's latency, duration and stand-in flags")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	fail := func(format string, a ...any) (config, error) {
		err := fmt.Errorf(format, a...)
		fmt.Fprintln(stderr, "load:", err)
		return cfg, err
	}
	for c := range strings.SplitSeq(*cases, ",") {
		c = strings.TrimSpace(c)
		if _, ok := caseTrips[c]; !ok {
			return fail("unknown case %q (fresh, tx, duplicate)", c)
		}
		cfg.Cases = append(cfg.Cases, c)
	}
	for s := range strings.SplitSeq(*inflight, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 256 {
			return fail("-inflight %q: each step is a number from 1 to 256", s)
		}
		cfg.Inflight = append(cfg.Inflight, n)
	}
	if cfg.Duration < time.Second {
		return fail("-duration %v: at least 1s", cfg.Duration)
	}
	if cfg.SessionsPerSlot < 1 {
		return fail("-sessions %d: at least 1", cfg.SessionsPerSlot)
	}
	if cfg.BodyBytes < 0 || cfg.BodyBytes > 192<<10 {
		return fail("-body %d: 0 to 196608 bytes (a Standard message is at most 256 KB with its properties)", cfg.BodyBytes)
	}
	if cfg.WriteDocs != "" && !slices.Contains(docsNames, cfg.WriteDocs) {
		return fail("-write-docs %q: one of %s", cfg.WriteDocs, strings.Join(docsNames, ", "))
	}
	if cfg.Cosmos != "memory" && cfg.Cosmos != "node" {
		return fail("-cosmos %q: memory or node", cfg.Cosmos)
	}
	if cfg.ServiceBus != "go" && cfg.ServiceBus != "node" {
		return fail("-servicebus %q: go or node", cfg.ServiceBus)
	}
	for _, d := range []time.Duration{cfg.Latency.Read, cfg.Latency.Write, cfg.Latency.Batch, cfg.Latency.Send} {
		if d < 0 || d > 5*time.Second {
			return fail("latencies are 0 to 5s")
		}
	}
	if *settings != "" {
		cfg.Settings = map[string]string{}
		for kv := range strings.SplitSeq(*settings, ";") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return fail("-set %q: KEY=value;KEY=value", *settings)
			}
			cfg.Settings[k] = v
		}
	}
	return cfg, nil
}
