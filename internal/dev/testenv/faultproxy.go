package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// FaultKind is one kind of fault a FaultProxy injects.
type FaultKind int

const (
	// FaultUnavailable answers 503 Service Unavailable without forwarding.
	FaultUnavailable FaultKind = iota + 1
	// FaultThrottle answers 429 Too Many Requests with x-ms-retry-after-ms
	// (and Retry-After) without forwarding.
	FaultThrottle
	// FaultDrop closes the connection without forwarding or answering.
	FaultDrop
	// FaultDropAfterForward forwards the request, then closes the
	// connection instead of answering: the upstream applied the request but
	// the client cannot tell.
	FaultDropAfterForward
	// FaultForbidden answers 403 Forbidden with sub-status 5301 without
	// forwarding, as Cosmos DB answers an identity whose data-plane role
	// does not allow the request (a read-only role writing).
	FaultForbidden
)

func (k FaultKind) String() string {
	switch k {
	case FaultUnavailable:
		return "unavailable"
	case FaultThrottle:
		return "throttle"
	case FaultDrop:
		return "drop"
	case FaultDropAfterForward:
		return "drop-after-forward"
	case FaultForbidden:
		return "forbidden"
	}
	return "none"
}

// FaultProxyOptions configures a FaultProxy. The zero value forwards
// everything (Rate 0).
type FaultProxyOptions struct {
	// Seed seeds the RNG that decides which requests get a fault and which
	// kind; the same seed and request order give the same faults.
	Seed uint64
	// Rate is the share of eligible requests, 0..1, that get a fault while
	// faults are enabled.
	Rate float64
	// Kinds are chosen from uniformly; default FaultUnavailable,
	// FaultThrottle and FaultDrop.
	Kinds []FaultKind
	// RetryAfter is the delay a 429 asks for; default 10ms.
	RetryAfter time.Duration
	// Match limits faults to the requests it accepts; nil means all.
	Match func(*http.Request) bool
	// Disabled starts the proxy with faults switched off.
	Disabled bool
	// Hooks, when set, run around forwarding each request Match accepts
	// and no fault was picked for (whether faults are enabled or not).
	Hooks *ForwardHooks
	// Latency delays every request, whatever Match says and whether it
	// gets a fault or is forwarded, by this long before the proxy acts on
	// it: the round trip to a service in another region. A request whose
	// client goes away meanwhile is dropped.
	Latency time.Duration
}

// ForwardHooks run at the points of forwarding one request where a process
// on the client's side can be stopped (a test kills it there): before the
// request reaches the upstream, after the upstream applied it and before
// the client has the answer, and after the client has it. Each may block;
// the request waits.
type ForwardHooks struct {
	// BeforeForward runs before the request is forwarded; false closes
	// the client's connection instead, and nothing reaches the upstream.
	BeforeForward func(r *http.Request) bool
	// BeforeRelay runs after the upstream answered with status; false
	// closes the client's connection instead of relaying the answer.
	BeforeRelay func(r *http.Request, status int) bool
	// AfterRelay runs once the answer was relayed and flushed.
	AfterRelay func(r *http.Request, status int)
}

// IsBatchRequest reports whether r is a Cosmos DB transactional batch: a
// POST to /dbs/{db}/colls/{coll}/docs with the header
// x-ms-cosmos-is-batch-request: True.
func IsBatchRequest(r *http.Request) bool {
	if r.Method != http.MethodPost || !strings.EqualFold(r.Header.Get("x-ms-cosmos-is-batch-request"), "true") {
		return false
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	return len(parts) == 5 && parts[0] == "dbs" && parts[2] == "colls" && parts[4] == "docs"
}

// FaultCounts counts what a FaultProxy saw and did.
type FaultCounts struct {
	Requests            int64 // requests received
	Forwarded           int64 // requests sent upstream (including drop-after-forward)
	Unavailable         int64 // 503s injected
	Throttled           int64 // 429s injected
	Dropped             int64 // connections closed before forwarding
	DroppedAfterForward int64 // connections closed after forwarding
	Forbidden           int64 // 403s injected
}

// Injected is the number of faults injected.
func (c FaultCounts) Injected() int64 {
	return c.Unavailable + c.Throttled + c.Dropped + c.DroppedAfterForward + c.Forbidden
}

// FaultProxy is an HTTP reverse proxy on 127.0.0.1 that injects faults into
// a seeded share of requests. JSON responses that name the upstream's own
// address (a Cosmos account advertising its locations) are rewritten to name
// the proxy, so clients that follow them keep going through it.
type FaultProxy struct {
	// URL is the proxy's base URL, "http://127.0.0.1:PORT/".
	URL string

	target     *url.URL
	rp         *httputil.ReverseProxy
	srv        *http.Server
	ln         net.Listener
	kinds      []FaultKind
	retryAfter time.Duration
	latency    time.Duration
	match      func(*http.Request) bool
	hooks      *ForwardHooks

	mu      sync.Mutex
	rng     *rand.Rand
	rate    float64
	enabled bool

	requests, forwarded, unavailable, throttled, dropped, droppedAfter, forbidden atomic.Int64
}

// NewFaultProxy starts a proxy in front of target (e.g.
// "http://127.0.0.1:8081/"). Close stops it.
func NewFaultProxy(target string, opts FaultProxyOptions) (*FaultProxy, error) {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("fault proxy: target %q must be an http URL", target)
	}
	if opts.Rate < 0 || opts.Rate > 1 {
		return nil, fmt.Errorf("fault proxy: rate %v is outside 0..1", opts.Rate)
	}
	kinds := opts.Kinds
	if len(kinds) == 0 {
		kinds = []FaultKind{FaultUnavailable, FaultThrottle, FaultDrop}
	}
	for _, k := range kinds {
		if k < FaultUnavailable || k > FaultForbidden {
			return nil, fmt.Errorf("fault proxy: unknown fault kind %d", k)
		}
	}
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = 10 * time.Millisecond
	}
	if opts.Latency < 0 {
		return nil, fmt.Errorf("fault proxy: latency %v is negative", opts.Latency)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fault proxy: %w", err)
	}
	p := &FaultProxy{
		URL:        "http://" + ln.Addr().String() + "/",
		target:     u,
		kinds:      append([]FaultKind(nil), kinds...),
		retryAfter: opts.RetryAfter,
		latency:    opts.Latency,
		match:      opts.Match,
		hooks:      opts.Hooks,
		rng:        rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		rate:       opts.Rate,
		enabled:    !opts.Disabled,
		ln:         ln,
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = u.Host
			p.forwarded.Add(1)
		},
		ModifyResponse: p.rewriteBody,
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// StartFaultProxy is NewFaultProxy that fails tb on error and closes the
// proxy when tb ends.
func StartFaultProxy(tb testing.TB, target string, opts FaultProxyOptions) *FaultProxy {
	tb.Helper()
	p, err := NewFaultProxy(target, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

// SetEnabled switches fault injection on or off; requests are forwarded
// untouched while it is off.
func (p *FaultProxy) SetEnabled(on bool) {
	p.mu.Lock()
	p.enabled = on
	p.mu.Unlock()
}

// SetRate changes the share of eligible requests that get a fault.
func (p *FaultProxy) SetRate(rate float64) {
	p.mu.Lock()
	p.rate = min(max(rate, 0), 1)
	p.mu.Unlock()
}

// Counts returns a snapshot of the counters.
func (p *FaultProxy) Counts() FaultCounts {
	return FaultCounts{
		Requests:            p.requests.Load(),
		Forwarded:           p.forwarded.Load(),
		Unavailable:         p.unavailable.Load(),
		Throttled:           p.throttled.Load(),
		Dropped:             p.dropped.Load(),
		DroppedAfterForward: p.droppedAfter.Load(),
		Forbidden:           p.forbidden.Load(),
	}
}

// Close stops the proxy and closes its connections.
func (p *FaultProxy) Close() error {
	err := p.srv.Close()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// pick decides the fault for r: 0 means forward it.
func (p *FaultProxy) pick(r *http.Request) FaultKind {
	if p.match != nil && !p.match(r) {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.enabled || p.rate == 0 {
		return 0
	}
	if p.rng.Float64() >= p.rate {
		return 0
	}
	return p.kinds[p.rng.IntN(len(p.kinds))]
}

// ServeHTTP implements http.Handler.
func (p *FaultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	if p.latency > 0 {
		t := time.NewTimer(p.latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	switch p.pick(r) {
	case FaultUnavailable:
		p.unavailable.Add(1)
		writeFault(w, http.StatusServiceUnavailable, "ServiceUnavailable", nil)
	case FaultThrottle:
		p.throttled.Add(1)
		ms := strconv.FormatInt(p.retryAfter.Milliseconds(), 10)
		writeFault(w, http.StatusTooManyRequests, "TooManyRequests", map[string]string{
			"x-ms-retry-after-ms": ms,
			"Retry-After":         strconv.FormatInt(int64(p.retryAfter.Round(time.Second)/time.Second), 10),
			"x-ms-substatus":      "3200",
		})
	case FaultDrop:
		p.dropped.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		hangUp(w)
	case FaultDropAfterForward:
		p.droppedAfter.Add(1)
		p.rp.ServeHTTP(&discardWriter{h: http.Header{}}, r)
		hangUp(w)
	case FaultForbidden:
		p.forbidden.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		writeFault(w, http.StatusForbidden, "Forbidden", map[string]string{"x-ms-substatus": "5301"})
	default:
		if p.hooks != nil && (p.match == nil || p.match(r)) {
			p.serveHooked(w, r)
			return
		}
		p.rp.ServeHTTP(w, r)
	}
}

// serveHooked forwards r with the hooks: the upstream's answer is buffered
// so that BeforeRelay runs between the upstream's answer and the client's.
func (p *FaultProxy) serveHooked(w http.ResponseWriter, r *http.Request) {
	h := p.hooks
	if h.BeforeForward != nil && !h.BeforeForward(r) {
		_, _ = io.Copy(io.Discard, r.Body)
		hangUp(w)
		return
	}
	rec := &bufferWriter{h: http.Header{}, status: http.StatusOK}
	p.rp.ServeHTTP(rec, r)
	if h.BeforeRelay != nil && !h.BeforeRelay(r, rec.status) {
		hangUp(w)
		return
	}
	for k, v := range rec.h {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body.Bytes())
	_ = http.NewResponseController(w).Flush()
	if h.AfterRelay != nil {
		h.AfterRelay(r, rec.status)
	}
}

// rewriteBody replaces the upstream's base URL with the proxy's in JSON
// responses.
func (p *FaultProxy) rewriteBody(resp *http.Response) error {
	if !strings.Contains(resp.Header.Get("Content-Type"), "json") || resp.Header.Get("Content-Encoding") != "" {
		return nil
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return err
	}
	from := []byte(p.target.Scheme + "://" + p.target.Host)
	if bytes.Contains(body, from) {
		body = bytes.ReplaceAll(body, from, []byte(strings.TrimSuffix(p.URL, "/")))
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return nil
}

func writeFault(w http.ResponseWriter, status int, code string, headers map[string]string) {
	for k, v := range headers {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"code":%q,"message":"fault injected by the test proxy"}`, code)
}

// hangUp closes the client connection without a response.
func hangUp(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// bufferWriter keeps an answer to relay it later.
type bufferWriter struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferWriter) Header() http.Header         { return b.h }
func (b *bufferWriter) Write(p []byte) (int, error) { return b.body.Write(p) }
func (b *bufferWriter) WriteHeader(status int)      { b.status = status }

type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}
