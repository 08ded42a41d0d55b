package testenv

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// upstream answers JSON naming its own address and counts requests.
func upstream(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"path":%q,"self":"%s/"}`, r.URL.Path, srv.URL)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// noReuse is a client that never reuses connections, so net/http does not
// transparently retry a request on a dropped keep-alive connection.
func noReuse() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
}

func TestFaultProxyKinds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		kind        FaultKind
		wantStatus  int // 0: transport error expected
		wantUpHits  int64
		wantCounter func(FaultCounts) int64
	}{
		{"unavailable", FaultUnavailable, http.StatusServiceUnavailable, 0, func(c FaultCounts) int64 { return c.Unavailable }},
		{"throttle", FaultThrottle, http.StatusTooManyRequests, 0, func(c FaultCounts) int64 { return c.Throttled }},
		{"drop", FaultDrop, 0, 0, func(c FaultCounts) int64 { return c.Dropped }},
		{"drop after forward", FaultDropAfterForward, 0, 1, func(c FaultCounts) int64 { return c.DroppedAfterForward }},
		{"forbidden", FaultForbidden, http.StatusForbidden, 0, func(c FaultCounts) int64 { return c.Forbidden }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up, hits := upstream(t)
			p := StartFaultProxy(t, up.URL+"/", FaultProxyOptions{Seed: 1, Rate: 1, Kinds: []FaultKind{tc.kind}, RetryAfter: 25 * time.Millisecond})
			resp, err := noReuse().Post(p.URL+"dbs/x", "application/json", strings.NewReader(`{"id":"a"}`))
			if tc.wantStatus == 0 {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("got status %d, want a transport error", resp.StatusCode)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if resp.StatusCode != tc.wantStatus {
					t.Fatalf("status %d, want %d", resp.StatusCode, tc.wantStatus)
				}
				if tc.kind == FaultForbidden && resp.Header.Get("x-ms-substatus") != "5301" {
					t.Fatalf("x-ms-substatus = %q, want 5301", resp.Header.Get("x-ms-substatus"))
				}
				if tc.kind == FaultThrottle && resp.Header.Get("x-ms-retry-after-ms") != "25" {
					t.Fatalf("x-ms-retry-after-ms = %q, want 25", resp.Header.Get("x-ms-retry-after-ms"))
				}
			}
			if got := hits.Load(); got != tc.wantUpHits {
				t.Fatalf("upstream saw %d requests, want %d", got, tc.wantUpHits)
			}
			c := p.Counts()
			if tc.wantCounter(c) != 1 || c.Injected() != 1 || c.Requests != 1 || c.Forwarded != tc.wantUpHits {
				t.Fatalf("counts %+v", c)
			}
		})
	}
}

func TestFaultProxyForwardsAndRewritesSelfAddress(t *testing.T) {
	t.Parallel()
	up, hits := upstream(t)
	p := StartFaultProxy(t, up.URL+"/", FaultProxyOptions{Seed: 1, Rate: 1, Disabled: true})
	resp, err := http.Get(p.URL + "dbs")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || hits.Load() != 1 {
		t.Fatalf("status %d, upstream hits %d", resp.StatusCode, hits.Load())
	}
	want := fmt.Sprintf(`{"path":"/dbs","self":"%s"}`, p.URL)
	if string(body) != want {
		t.Fatalf("body %s, want %s", body, want)
	}
	if c := p.Counts(); c.Injected() != 0 || c.Forwarded != 1 {
		t.Fatalf("counts %+v", c)
	}

	p.SetEnabled(true)
	resp, err = http.Get(p.URL + "dbs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == 200 {
		t.Fatal("enabled proxy at rate 1 forwarded a request")
	}
	p.SetRate(0)
	resp, err = http.Get(p.URL + "dbs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("rate 0: status %d", resp.StatusCode)
	}
}

func TestFaultProxyMatchLimitsFaults(t *testing.T) {
	t.Parallel()
	up, _ := upstream(t)
	p := StartFaultProxy(t, up.URL+"/", FaultProxyOptions{
		Seed: 1, Rate: 1, Kinds: []FaultKind{FaultUnavailable},
		Match: func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/dbs/") },
	})
	for path, want := range map[string]int{"": 200, "dbs": 200, "dbs/a/colls/b": 503} {
		resp, err := http.Get(p.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET /%s: status %d, want %d", path, resp.StatusCode, want)
		}
	}
}

// The same seed and request order give the same faults, at about the
// configured share.
func TestFaultProxySeededShare(t *testing.T) {
	t.Parallel()
	run := func() (string, FaultCounts) {
		up, hits := upstream(t)
		p := StartFaultProxy(t, up.URL+"/", FaultProxyOptions{Seed: 42, Rate: 0.3, Kinds: []FaultKind{FaultUnavailable, FaultThrottle}})
		var seq strings.Builder
		for range 400 {
			resp, err := http.Get(p.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			fmt.Fprintf(&seq, "%d,", resp.StatusCode)
		}
		c := p.Counts()
		if c.Forwarded != hits.Load() || c.Forwarded+c.Injected() != c.Requests {
			t.Fatalf("counts %+v disagree with upstream hits %d", c, hits.Load())
		}
		return seq.String(), c
	}
	seq1, c1 := run()
	seq2, c2 := run()
	if seq1 != seq2 || c1 != c2 {
		t.Fatalf("same seed gave different faults: %+v vs %+v", c1, c2)
	}
	if c1.Injected() < 80 || c1.Injected() > 160 || c1.Unavailable == 0 || c1.Throttled == 0 {
		t.Fatalf("rate 0.3 over 400 requests injected %+v", c1)
	}
}

func TestNewFaultProxyRejectsBadOptions(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		target string
		opts   FaultProxyOptions
	}{
		"https target": {"https://127.0.0.1:1/", FaultProxyOptions{}},
		"rate above 1": {"http://127.0.0.1:1/", FaultProxyOptions{Rate: 1.5}},
		"unknown kind": {"http://127.0.0.1:1/", FaultProxyOptions{Kinds: []FaultKind{99}}},
	} {
		if p, err := NewFaultProxy(tc.target, tc.opts); err == nil {
			_ = p.Close()
			t.Errorf("%s: no error", name)
		}
	}
}

func TestIsBatchRequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		method, path, header string
		want                 bool
	}{
		{"POST", "/dbs/Billing/colls/ledger/docs", "True", true},
		{"POST", "/dbs/Billing/colls/ledger/docs/", "true", true},
		{"POST", "/dbs/Billing/colls/ledger/docs", "", false},      // a create
		{"POST", "/dbs/Billing/colls/ledger/docs", "False", false}, // explicit no
		{"GET", "/dbs/Billing/colls/ledger/docs", "True", false},
		{"POST", "/dbs/Billing/colls/ledger/docs/payment-1", "True", false},
		{"POST", "/dbs/Billing/colls", "True", false},
		{"POST", "/dbs/Billing/users/ledger/docs", "True", false},
	} {
		r := httptest.NewRequest(tc.method, "http://127.0.0.1"+tc.path, nil)
		if tc.header != "" {
			r.Header.Set("x-ms-cosmos-is-batch-request", tc.header)
		}
		if got := IsBatchRequest(r); got != tc.want {
			t.Errorf("%s %s (header %q): IsBatchRequest = %v, want %v", tc.method, tc.path, tc.header, got, tc.want)
		}
	}
}

// The hooks run in order around the requests Match accepts, and each can
// cut the client off at its point: before forwarding (the upstream never
// sees the request) or after the upstream answered (it applied it).
func TestFaultProxyHooks(t *testing.T) {
	t.Parallel()
	type call struct {
		forward, relay bool
	}
	for name, tc := range map[string]struct {
		call
		wantErr  bool
		wantHits int64
		wantLog  string
	}{
		"forward and relay": {call{true, true}, false, 1, "before,relay 200,after 200"},
		"cut before":        {call{false, true}, true, 0, "before"},
		"cut after applied": {call{true, false}, true, 1, "before,relay 200"},
	} {
		t.Run(name, func(t *testing.T) {
			up, hits := upstream(t)
			var mu sync.Mutex
			var log []string
			note := func(s string) {
				mu.Lock()
				log = append(log, s)
				mu.Unlock()
			}
			p := StartFaultProxy(t, up.URL+"/", FaultProxyOptions{
				Disabled: true,
				Match:    func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/dbs/") },
				Hooks: &ForwardHooks{
					BeforeForward: func(*http.Request) bool { note("before"); return tc.forward },
					BeforeRelay:   func(_ *http.Request, st int) bool { note(fmt.Sprintf("relay %d", st)); return tc.relay },
					AfterRelay:    func(_ *http.Request, st int) { note(fmt.Sprintf("after %d", st)) },
				},
			})
			// A request Match refuses is forwarded without the hooks.
			resp, err := noReuse().Get(p.URL + "other")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			before := hits.Load()

			resp, err = noReuse().Post(p.URL+"dbs/a/colls/b/docs", "application/json", strings.NewReader(`{"id":"a"}`))
			if tc.wantErr {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("status %d, want the connection closed", resp.StatusCode)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || !strings.Contains(string(body), `"path":"/dbs/a/colls/b/docs"`) || !strings.Contains(string(body), p.URL) {
					t.Fatalf("status %d body %s: want the upstream's answer with the proxy's address", resp.StatusCode, body)
				}
			}
			if got := hits.Load() - before; got != tc.wantHits {
				t.Errorf("upstream saw %d requests, want %d", got, tc.wantHits)
			}
			// AfterRelay runs after the answer was flushed: wait for it.
			deadline := time.Now().Add(5 * time.Second)
			for {
				mu.Lock()
				got := strings.Join(log, ",")
				mu.Unlock()
				if got == tc.wantLog {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("hooks ran %q, want %q", got, tc.wantLog)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

// Latency delays every request, forwarded or faulted, by at least its
// value; without it the proxy adds none.
func TestFaultProxyLatency(t *testing.T) {
	t.Parallel()
	const latency = 40 * time.Millisecond
	up, hits := upstream(t)
	p := StartFaultProxy(t, up.URL+"/", FaultProxyOptions{Latency: latency, Match: func(r *http.Request) bool { return r.URL.Path == "/faulted" }, Rate: 1, Kinds: []FaultKind{FaultUnavailable}})
	for _, c := range []struct {
		path   string
		status int
	}{{"/forwarded", http.StatusOK}, {"/faulted", http.StatusServiceUnavailable}} {
		start := time.Now()
		resp, err := noReuse().Get(strings.TrimSuffix(p.URL, "/") + c.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if took := time.Since(start); resp.StatusCode != c.status || took < latency {
			t.Fatalf("%s: status %d after %v, want %d after at least %v", c.path, resp.StatusCode, took, c.status, latency)
		}
	}
	if hits.Load() != 1 {
		t.Fatalf("upstream hits %d, want 1", hits.Load())
	}
	if _, err := NewFaultProxy(up.URL+"/", FaultProxyOptions{Latency: -time.Millisecond}); err == nil {
		t.Fatal("a negative latency was accepted")
	}
}
