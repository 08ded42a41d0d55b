package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// delayLine is a TCP proxy on a loopback port that holds every byte the
// client sends for delay before passing it on (the answers come back at
// once), so each request–answer exchange of a protocol on top, such as an
// AMQP transfer and its disposition, takes delay longer. Bytes are
// forwarded in order and without limiting throughput: a chunk read at t
// is written at t + delay, whatever else is in flight. It counts the
// connections clients open, and reads the AMQP frames passing both ways
// to time each message sent to an entity: how late the line passed it on,
// and how long the server behind took from then to its disposition.
type delayLine struct {
	Addr   string
	target string
	delay  time.Duration
	ln     net.Listener
	conns  connCounter

	mu     sync.Mutex
	open   map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	bytes  atomic.Int64
	late   exchanges
}

// startDelayLine listens on a free loopback port and forwards to target
// ("host:port").
func startDelayLine(target string, delay time.Duration) (*delayLine, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("delay line: %w", err)
	}
	d := &delayLine{Addr: ln.Addr().String(), target: target, delay: delay, ln: ln, open: map[net.Conn]struct{}{}}
	d.wg.Add(1)
	go d.accept()
	return d, nil
}

// Port is the port clients connect to.
func (d *delayLine) Port() int { return d.ln.Addr().(*net.TCPAddr).Port }

// Close stops accepting, cuts every connection and waits for the copies.
func (d *delayLine) Close() {
	_ = d.ln.Close()
	d.mu.Lock()
	d.closed = true
	for c := range d.open {
		_ = c.Close()
	}
	d.mu.Unlock()
	d.wg.Wait()
}

func (d *delayLine) track(c net.Conn) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.open[c] = struct{}{}
	return true
}

func (d *delayLine) untrack(c net.Conn) {
	d.mu.Lock()
	delete(d.open, c)
	d.mu.Unlock()
}

func (d *delayLine) accept() {
	defer d.wg.Done()
	for {
		client, err := d.ln.Accept()
		if err != nil {
			return
		}
		d.conns.track(client, http.StateNew)
		d.wg.Add(1)
		go d.serve(client)
	}
}

// serve pipes one client connection to a new upstream connection.
func (d *delayLine) serve(client net.Conn) {
	defer d.wg.Done()
	defer d.conns.track(client, http.StateClosed)
	upstream, err := net.DialTimeout("tcp", d.target, 10*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	if !d.track(client) || !d.track(upstream) {
		_ = client.Close()
		_ = upstream.Close()
		return
	}
	defer d.untrack(client)
	defer d.untrack(upstream)
	t := newTransferTimer(&d.late)
	done := make(chan struct{})
	go func() {
		// Answers come back at once.
		buf := make([]byte, 32<<10)
		for {
			n, err := upstream.Read(buf)
			if n > 0 {
				now := time.Now()
				if _, werr := client.Write(buf[:n]); werr != nil {
					break
				}
				t.answers(buf[:n], now)
			}
			if err != nil {
				break
			}
		}
		_ = client.Close()
		close(done)
	}()
	d.delayed(upstream, client, t)
	_ = upstream.Close()
	<-done
}

// chunk is a piece of the client's stream and when it is due upstream.
type chunk struct {
	due  time.Time
	data []byte
}

// delayed copies src to dst, each chunk delay after it was read.
func (d *delayLine) delayed(dst, src net.Conn, t *transferTimer) {
	queue := make(chan chunk, 4096)
	go func() {
		defer close(queue)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				queue <- chunk{due: time.Now().Add(d.delay), data: buf[:n]}
				d.bytes.Add(int64(n))
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range queue {
		if w := time.Until(c.due); w > 0 {
			time.Sleep(w)
		}
		now := time.Now()
		if _, err := dst.Write(c.data); err != nil {
			_ = src.Close()
			for range queue {
			}
			return
		}
		t.requests(c.data, c.due.Add(-d.delay), now, now.Sub(c.due))
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// transferTimer follows the AMQP frames of one connection through the
// delay line: each message the client sends to an entity (not a $cbs or
// $management request), from the moment its last frame was passed on to
// the server's disposition of it, recorded in x with the line's lateness
// for it.
type transferTimer struct {
	x        *exchanges
	up, down frameScanner
	// Seen only on the way up: the client's links that carry requests, by
	// channel and handle, and the delivery each link is in.
	rpc     map[[2]uint32]bool
	current map[[2]uint32]uint32
	// Seen only on the way down: the client's channel of each of the
	// server's.
	channels map[uint16]uint16

	mu      sync.Mutex
	pending map[[2]uint32]pendingTransfer // by the client's channel and delivery id
}

type pendingTransfer struct {
	late      time.Duration
	arrived   time.Time // at the line
	forwarded time.Time
}

func newTransferTimer(x *exchanges) *transferTimer {
	return &transferTimer{x: x, rpc: map[[2]uint32]bool{}, current: map[[2]uint32]uint32{},
		channels: map[uint16]uint16{}, pending: map[[2]uint32]pendingTransfer{}}
}

// requests reads the client's bytes b, which reached the line at arrived
// and were passed on at now, late after they were due.
func (t *transferTimer) requests(b []byte, arrived, now time.Time, late time.Duration) {
	t.up.feed(b, func(f frame) {
		switch f.perf.code() {
		case perfAttach:
			h, _ := asUint(f.field(1))
			if receives, _ := f.field(2).(bool); !receives {
				addr := address(f.field(6))
				t.rpc[[2]uint32{uint32(f.channel), uint32(h)}] = addr == "$cbs" || strings.HasSuffix(addr, "/$management")
			}
		case perfTransfer:
			h, _ := asUint(f.field(0))
			link := [2]uint32{uint32(f.channel), uint32(h)}
			if id, ok := asUint(f.field(1)); ok {
				t.current[link] = uint32(id)
			}
			more, _ := f.field(5).(bool)
			settled, _ := f.field(4).(bool)
			if more || settled || t.rpc[link] {
				return
			}
			t.mu.Lock()
			t.pending[[2]uint32{uint32(f.channel), t.current[link]}] = pendingTransfer{late: late, arrived: arrived, forwarded: now}
			t.mu.Unlock()
		}
	})
}

// answers reads the server's bytes b, received at now.
func (t *transferTimer) answers(b []byte, now time.Time) {
	t.down.feed(b, func(f frame) {
		switch f.perf.code() {
		case perfBegin:
			if rc, ok := f.field(0).(uint16); ok {
				t.channels[f.channel] = rc
			}
		case perfDisposition:
			if receiver, _ := f.field(0).(bool); !receiver {
				return
			}
			first, _ := asUint(f.field(1))
			last, ok := asUint(f.field(2))
			if !ok {
				last = first
			}
			ch := uint32(t.channels[f.channel])
			t.mu.Lock()
			for id := first; id <= last && id-first < 1<<16; id++ {
				if p, ok := t.pending[[2]uint32{ch, uint32(id)}]; ok {
					delete(t.pending, [2]uint32{ch, uint32(id)})
					t.x.add(p.arrived, now, p.late, now.Sub(p.forwarded))
				}
			}
			t.mu.Unlock()
		}
	})
}

// frameScanner cuts a byte stream into AMQP frames, skipping the
// protocol headers.
type frameScanner struct{ buf []byte }

// feed adds b and calls fn for every frame now complete.
func (s *frameScanner) feed(b []byte, fn func(frame)) {
	s.buf = append(s.buf, b...)
	rest := s.buf
	for len(rest) >= 8 {
		if string(rest[:4]) == "AMQP" {
			rest = rest[8:]
			continue
		}
		size := int(binary.BigEndian.Uint32(rest[:4]))
		if size < 8 {
			// Not AMQP framing: stop reading this stream.
			rest = nil
			break
		}
		if len(rest) < size {
			break
		}
		if f, err := readFrame(bytes.NewReader(rest[:size]), uint32(size)); err == nil && f.typ == frameAMQP {
			fn(f)
		}
		rest = rest[size:]
	}
	s.buf = append(s.buf[:0], rest...)
}

// delayProxy is an HTTP reverse proxy that holds each request for the
// delay of its kind before forwarding it: the latency injector in front
// of the Node Cosmos DB stand-in. It counts the connections clients open.
type delayProxy struct {
	URL   string
	delay Latency
	srv   *http.Server
	conns connCounter
	rp    *httputil.ReverseProxy
	late  exchanges
}

// serviceKey is the request context key of the *time.Duration the proxy's
// transport sets to the upstream's answer time.
type serviceKey struct{}

// timedTransport records how long the upstream took to answer (to its
// response headers) in the request's *time.Duration.
type timedTransport struct{ http.RoundTripper }

func (t timedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.RoundTripper.RoundTrip(r)
	if p, ok := r.Context().Value(serviceKey{}).(*time.Duration); ok {
		*p = time.Since(start)
	}
	return resp, err
}

// startDelayProxy starts a proxy in front of target ("http://host:port/").
// Account answers that name target are rewritten to name the proxy, so the
// SDK's regional endpoint stays the proxy.
func startDelayProxy(target string, delay Latency) (*delayProxy, error) {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("delay proxy: bad target %q", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("delay proxy: %w", err)
	}
	p := &delayProxy{URL: "http://" + ln.Addr().String() + "/", delay: delay}
	from := strings.TrimSuffix(target, "/")
	to := strings.TrimSuffix(p.URL, "/")
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.Out.Host = u.Host },
		Transport: timedTransport{&http.Transport{
			MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: 90 * time.Second,
		}},
		ModifyResponse: func(resp *http.Response) error {
			if resp.Request.URL.Path != "/" {
				return nil
			}
			b, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				return err
			}
			b = []byte(strings.ReplaceAll(string(b), from, to))
			resp.Body = io.NopCloser(strings.NewReader(string(b)))
			resp.ContentLength = int64(len(b))
			resp.Header.Set("Content-Length", fmt.Sprint(len(b)))
			return nil
		},
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second, ConnState: p.conns.track}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *delayProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	wait := p.classify(r)
	if d := wait - time.Since(arrived); d > 0 {
		time.Sleep(d)
	}
	late := time.Since(arrived) - wait
	var service time.Duration
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), serviceKey{}, &service)))
	p.late.add(arrived, time.Now(), late, service)
}

// classify returns r's delay.
func (p *delayProxy) classify(r *http.Request) time.Duration {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	isDoc := len(parts) >= 5 && parts[0] == "dbs" && parts[2] == "colls" && parts[4] == "docs"
	switch {
	case isDoc && strings.EqualFold(r.Header.Get("x-ms-cosmos-is-batch-request"), "true"):
		return p.delay.Batch
	case isDoc && r.Method == http.MethodGet:
		return p.delay.Read
	case isDoc:
		return p.delay.Write
	}
	return p.delay.Read
}

// Close stops the proxy.
func (p *delayProxy) Close() { _ = p.srv.Close() }
