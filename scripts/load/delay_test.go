package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// echoServer answers each line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// Each exchange takes the delay longer, bytes keep their order, a
// pipelined burst pays the delay once (not once per chunk), and every
// client connection is counted.
func TestDelayLineDelaysEachExchangeOnceAndKeepsOrder(t *testing.T) {
	t.Parallel()
	const delay = 40 * time.Millisecond
	d, err := startDelayLine(echoServer(t), delay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	c, err := net.Dial("tcp", d.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	start := time.Now()
	fmt.Fprintf(c, "ping\n")
	if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo %q, %v", line, err)
	}
	if took := time.Since(start); took < delay {
		t.Errorf("an exchange took %v, less than the delay %v", took, delay)
	}
	// 50 lines written at once come back in order after about one delay.
	start = time.Now()
	for i := range 50 {
		fmt.Fprintf(c, "line %d\n", i)
		time.Sleep(200 * time.Microsecond)
	}
	for i := range 50 {
		line, err := r.ReadString('\n')
		if err != nil || line != fmt.Sprintf("line %d\n", i) {
			t.Fatalf("line %d: %q, %v", i, line, err)
		}
	}
	if took := time.Since(start); took < delay || took > 20*delay {
		t.Errorf("50 pipelined lines took %v; one delay is %v (a delay per line would be %v)", took, delay, 50*delay)
	}
	c2, err := net.Dial("tcp", d.Addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c2, "x\n")
	if _, err := bufio.NewReader(c2).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	_ = c2.Close()
	if s := d.conns.stats(); s.Opened != 2 || s.Peak != 2 {
		t.Errorf("connections %+v, want 2 opened, 2 at once", s)
	}
}

// The model's round trips per case are the ones the repository's docs
// count: a fresh success 3, a duplicate 2 (docs/performance.md's round-trip
// table), a transactional delivery the 3 of docs/exactly-once.md plus the
// sample handler's own reads.
func TestModelRoundTripsAreTheDocumentedOnes(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "performance.md"))
	if err != nil {
		t.Fatal(err)
	}
	for row, c := range map[string]string{"fresh plain success publishing two events": "fresh", "duplicate": "duplicate"} {
		m := regexp.MustCompile(`(?m)^\| ` + row + ` \| (\d+) \|`).FindStringSubmatch(string(b))
		if m == nil {
			t.Fatalf("docs/performance.md has no round-trip row %q", row)
		}
		if n, _ := strconv.Atoi(m[1]); len(caseTrips[c]) != n {
			t.Errorf("case %s models %d round trips; the docs count %d for %q", c, len(caseTrips[c]), n, row)
		}
	}
	x, err := os.ReadFile(filepath.Join("..", "..", "docs", "exactly-once.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(x), "4 when it publishes: the reads, the batch, the events with the\nresponse, the dispatched mark") {
		t.Fatal("docs/exactly-once.md no longer counts 4 round trips for a fresh transactional delivery that publishes")
	}
	if len(caseTrips["tx"]) != 4+1 {
		t.Errorf("case tx models %d round trips, want the documented 4 (the sample publishes) and the sample handler's one round of reads", len(caseTrips["tx"]))
	}
	l := Latency{Read: 10 * time.Millisecond, Write: 20 * time.Millisecond, Batch: 30 * time.Millisecond, Send: 40 * time.Millisecond}
	for c, want := range map[string]time.Duration{"fresh": 110 * time.Millisecond, "duplicate": 50 * time.Millisecond, "tx": 120 * time.Millisecond} {
		if got := modelLatency(c, l); got != want {
			t.Errorf("modelLatency(%s) = %v, want %v", c, got, want)
		}
	}
	if got := modelRate("fresh", l, 11); got < 99.99 || got > 100.01 {
		t.Errorf("modelRate(fresh, 11 in flight) = %v, want 100/s", got)
	}
}

func TestFlagsAreChecked(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-cases", "fresh,nope"},
		{"-inflight", "0"},
		{"-inflight", "257"},
		{"-duration", "100ms"},
		{"-cosmos", "emulator"},
		{"-set", "novalue"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	cfg, err := parseFlags([]string{"-cases", "tx,duplicate", "-inflight", "1,16,64", "-duration", "3s", "-sb-send", "5ms", "-set", "A=1;B=2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Cases, ",") != "tx,duplicate" || fmt.Sprint(cfg.Inflight) != "[1 16 64]" || cfg.Duration != 3*time.Second ||
		cfg.Latency.Send != 5*time.Millisecond || cfg.Latency.Read != defaultLatency.Read || cfg.Settings["B"] != "2" {
		t.Errorf("parsed %+v", cfg)
	}
}

// The figures the handler puts in its answer's summary are read from the
// answer as the host receives it.
func TestSummaryFiguresAreReadFromTheAnswer(t *testing.T) {
	t.Parallel()
	body := []byte(`{"Outputs":{},"Logs":["completed: outcome=completed inbox=new messageId=OrderPlaced-1 sessionId=s-1 eventId=e-1 eventTypeId=OrderPlaced deliveryCount=1 handlerRan=true durationMs=41.237 requestCharge=3 cosmosRequests=3"],"ReturnValue":null}`)
	if got := summaryInt(body, "cosmosRequests"); got != 3 {
		t.Errorf("cosmosRequests = %d, want 3", got)
	}
	if got := summaryMillis(body, "durationMs"); got != 41237*time.Microsecond {
		t.Errorf("durationMs = %v, want 41.237ms", got)
	}
	if got := summaryInt(body, "missing"); got != 0 {
		t.Errorf("a missing key read as %d", got)
	}
}

// Slots that started together stay in step: counting their completions in
// the window is off by up to one invocation each, the same way for all.
// The rate is taken from the intervals between completions instead.
func TestRateIsTheSlotsIntervalsNotTheWindowsCount(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	var slots []*slot
	for range 16 {
		s := &slot{}
		// A 1.5 s invocation after another: 6 end inside a 10 s window.
		for k := range 6 {
			end := t0.Add(time.Second + time.Duration(k)*1500*time.Millisecond)
			if k == 0 {
				s.first = end
			}
			s.last = end
			s.lat = append(s.lat, 1500*time.Millisecond)
		}
		slots = append(slots, s)
	}
	if got, want := rate(slots, 10), 16/1.5; math.Abs(got-want) > 0.001 {
		t.Errorf("rate = %.3f msgs/s, want %.3f (16 slots at 1.5 s each; the window's count gives 9.6)", got, want)
	}
	one := &slot{lat: []time.Duration{time.Second}, first: t0, last: t0}
	if got := rate([]*slot{one}, 10); got != 0.1 {
		t.Errorf("a slot with one completion: %v msgs/s, want 1 over the 10 s window", got)
	}
}

// The time of an invocation outside the stand-ins is its span less the
// union of the exchanges within it: concurrent requests count once, and an
// exchange is clipped to the invocation.
func TestOutsideTakesOutTheExchangesOnce(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	invs := []span{{at(0), at(100)}, {at(200), at(250)}}
	ex := []span{
		{at(10), at(30)}, {at(15), at(35)}, // two reads at once: 10–35
		{at(40), at(60)},   // a send
		{at(95), at(120)},  // runs past the first invocation's end: 95–100
		{at(150), at(190)}, // between the invocations: neither's
		{at(210), at(220)},
	}
	got := outside(invs, ex)
	want := []time.Duration{100*time.Millisecond - (25+20+5)*time.Millisecond, 40 * time.Millisecond}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("outside = %v, want %v", got, want)
	}
}

// The machine's hops: one per round trip of the case after its delay, and
// the host's after the whole delivery; each timed without its sleep.
func TestHopFloor(t *testing.T) {
	l := Latency{Read: 10 * time.Millisecond, Write: 10 * time.Millisecond, Batch: 10 * time.Millisecond, Send: 20 * time.Millisecond}
	ms := func(v ...int) (d []time.Duration) {
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	if got := hopGaps("fresh", l); !slices.Equal(got, ms(10, 20, 10, 20, 60)) {
		t.Errorf("fresh gaps %v", got)
	}
	if got := hopGaps("duplicate", l); !slices.Equal(got, ms(10, 20, 30)) {
		t.Errorf("duplicate gaps %v", got)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = io.Copy(c, c)
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	p50, p99, err := hopFloor(c, ms(20, 20), 3)
	if err != nil {
		t.Fatal(err)
	}
	if p50 <= 0 || p99 < p50 || p50 >= 40*time.Millisecond {
		t.Errorf("p50 %v, p99 %v: two round trips without their 20 ms sleeps", p50, p99)
	}
	if time.Since(start) < 120*time.Millisecond {
		t.Errorf("3 rounds of two 20 ms gaps took %v", time.Since(start))
	}
}
