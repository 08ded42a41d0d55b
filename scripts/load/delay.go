package main

import (
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
// connections clients open.
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
	late   lateness
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
	done := make(chan struct{})
	go func() {
		// Answers come back at once.
		_, _ = io.Copy(client, upstream)
		_ = client.Close()
		close(done)
	}()
	d.delayed(upstream, client)
	_ = upstream.Close()
	<-done
}

// chunk is a piece of the client's stream and when it is due upstream.
type chunk struct {
	due  time.Time
	data []byte
}

// delayed copies src to dst, each chunk delay after it was read.
func (d *delayLine) delayed(dst, src net.Conn) {
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
		d.late.add(time.Since(c.due))
		if _, err := dst.Write(c.data); err != nil {
			_ = src.Close()
			for range queue {
			}
			return
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
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
	late  lateness
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
		Transport: &http.Transport{
			MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: 90 * time.Second,
		},
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
	p.late.add(time.Since(arrived) - wait)
	p.rp.ServeHTTP(w, r)
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
