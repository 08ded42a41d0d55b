package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The machine's own cost of a delivery's hops. A delivery at one in flight
// is a chain of exchanges between processes, each after the handler (or the
// stand-in) sat idle for a delay: on a virtual machine a process that wakes
// from idle to read its socket can take from a tenth of a millisecond to
// several, whatever it then does. hopFloor measures that cost alone: two
// bare processes (this program and a copy of it that echoes) make the same
// number of round trips after the same idle gaps, and nothing else.

// echoEnv, set in a copy of this program's environment, makes it the echo
// peer.
const echoEnv = "NIMBUS_LOAD_ECHO"

// serveEcho is the echo peer's main: it listens on a loopback port, prints
// the port, echoes one connection and returns when it closes.
func serveEcho(out io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Fprintln(out, ln.Addr().(*net.TCPAddr).Port)
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = io.Copy(c, c)
	return err
}

// startEchoPeer starts a copy of this program as the echo peer and
// connects to it.
func startEchoPeer() (net.Conn, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), echoEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("the echo peer: %w", err)
	}
	port, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("the echo peer printed %q", line)
	}
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 10*time.Second)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return c, func() { _ = c.Close(); stop() }, nil
}

// hopFloor makes rounds rounds, each a round trip of 64 bytes on c after
// each of gaps (a sleep), and returns the 50th and 99th percentiles of the
// rounds' round-trip time (the sleeps left out).
func hopFloor(c net.Conn, gaps []time.Duration, rounds int) (p50, p99 time.Duration, err error) {
	buf := make([]byte, 64)
	sums := make([]time.Duration, 0, rounds)
	for range rounds {
		var sum time.Duration
		for _, g := range gaps {
			time.Sleep(g)
			start := time.Now()
			if _, err := c.Write(buf); err != nil {
				return 0, 0, err
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				return 0, 0, err
			}
			sum += time.Since(start)
		}
		sums = append(sums, sum)
	}
	slices.Sort(sums)
	return percentile(sums, 50), percentile(sums, 99), nil
}

// hopGaps are the idle gaps before each hop of a delivery of case c: the
// delay of each of its round trips, and for the host's hop (the answer
// the host waits for) the whole delivery.
func hopGaps(c string, l Latency) []time.Duration {
	var gaps []time.Duration
	for _, t := range caseTrips[c] {
		gaps = append(gaps, map[trip]time.Duration{tripRead: l.Read, tripWrite: l.Write, tripBatch: l.Batch, tripSend: l.Send}[t])
	}
	return append(gaps, modelLatency(c, l))
}
