package funchost

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestServerProtocol(t *testing.T) {
	s := NewServer(zerolog.Nop(), Options{})
	var got *Invocation
	s.Handle("Subscriber", func(ctx context.Context, inv *Invocation) error {
		got = inv
		switch string(inv.Body) {
		case "fail":
			return errors.New("transient")
		case "malformed":
			return &MalformedError{Reason: "x"}
		case "panic":
			panic("boom")
		}
		return nil
	})
	ts := httptest.NewServer(s)
	defer ts.Close()

	resp, err := http.Get(ts.URL + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET / = %v, %v", resp, err)
	}
	resp.Body.Close()

	post := func(path, body string) (int, string, string) {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+path, strings.NewReader(body))
		req.Header.Set("X-Azure-Functions-InvocationId", "inv-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	cases := []struct {
		path, body string
		status     int
	}{
		{"/Subscriber", "ok", 200},
		{"/subscriber", "ok", 200}, // function names are case-insensitive
		{"/Subscriber", "fail", 503},
		{"/Subscriber", "malformed", 400},
		{"/Subscriber", "panic", 500},
		{"/Unknown", "ok", 404},
	}
	for _, c := range cases {
		status, ctype, body := post(c.path, c.body)
		if status != c.status {
			t.Errorf("POST %s %q: status %d, want %d", c.path, c.body, status, c.status)
		}
		if ctype != "application/json" || body != ResponseBody {
			t.Errorf("POST %s: content type %q, body %q", c.path, ctype, body)
		}
	}
	if got == nil || got.InvocationID != "inv-1" || got.Function != "Subscriber" {
		t.Errorf("last invocation = %+v", got)
	}
	resp, err = http.Get(ts.URL + "/Subscriber")
	if err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /Subscriber = %v, %v", resp.StatusCode, err)
	}
	resp.Body.Close()
}

func TestServerRejectsOversizedBody(t *testing.T) {
	s := NewServer(zerolog.Nop(), Options{})
	s.maxBody = 10
	called := false
	s.Handle("F", func(context.Context, *Invocation) error { called = true; return nil })
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/F", strings.NewReader(strings.Repeat("x", 11))))
	if rec.Code == 200 || called {
		t.Fatalf("oversized body: status %d, called %v", rec.Code, called)
	}
}

func TestStatusOf(t *testing.T) {
	if StatusOf(nil) != 200 || StatusOf(errors.New("x")) != 503 || StatusOf(&MalformedError{}) != 400 {
		t.Fatal("StatusOf mapping changed")
	}
}

// post sends body to s through ServeHTTP; known says whether the request
// announces its length.
func serve(s *Server, path, body string, known bool) int {
	var r io.Reader = strings.NewReader(body)
	if !known {
		r = io.MultiReader(r) // hides the length: ContentLength -1
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, r))
	return rec.Code
}

func TestInFlightByteBudget(t *testing.T) {
	var overloads atomic.Int32
	s := NewServer(zerolog.Nop(), Options{MaxBytesInFlight: 100, AdmitWait: 50 * time.Millisecond,
		OnOverload: func(string) { overloads.Add(1) }})
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	s.Handle("F", func(_ context.Context, inv *Invocation) error {
		calls.Add(1)
		if string(inv.Body[:1]) == "b" {
			entered <- struct{}{}
			<-release
		}
		return nil
	})
	first := make(chan int, 1)
	go func() { first <- serve(s, "/F", "b"+strings.Repeat("x", 79), true) }()
	<-entered

	// 80 of 100 bytes are held: a 50-byte envelope waits, then gets 503.
	if code := serve(s, "/F", strings.Repeat("y", 50), true); code != http.StatusServiceUnavailable {
		t.Fatalf("over budget: status %d, want 503", code)
	}
	// An unannounced length is metered while it is read, and refused too.
	if code := serve(s, "/F", strings.Repeat("y", 50), false); code != http.StatusServiceUnavailable {
		t.Fatalf("unannounced over budget: status %d, want 503", code)
	}
	if overloads.Load() != 2 || calls.Load() != 1 {
		t.Fatalf("overloads %d, calls %d; want 2 and 1", overloads.Load(), calls.Load())
	}
	// A small one still fits beside the first.
	if code := serve(s, "/F", strings.Repeat("y", 20), true); code != 200 {
		t.Fatalf("within budget: status %d", code)
	}
	close(release)
	if code := <-first; code != 200 {
		t.Fatalf("first: status %d", code)
	}
	// With the budget free again, both forms are admitted, and an envelope
	// larger than the whole budget runs alone.
	for _, known := range []bool{true, false} {
		if code := serve(s, "/F", strings.Repeat("y", 50), known); code != 200 {
			t.Fatalf("after release (known length %v): status %d", known, code)
		}
		if code := serve(s, "/F", strings.Repeat("y", 150), known); code != 200 {
			t.Fatalf("larger than the budget, alone (known length %v): status %d", known, code)
		}
	}
	if !s.budget.TryAcquire(100) {
		t.Fatal("budget not fully released after the invocations")
	}
}

func TestShutdownEndsTheWaitForRoom(t *testing.T) {
	stopping, stop := context.WithCancel(context.Background())
	s := NewServer(zerolog.Nop(), Options{MaxBytesInFlight: 10, AdmitWait: time.Hour, Stopping: stopping})
	s.Handle("F", func(context.Context, *Invocation) error { return nil })
	if !s.budget.TryAcquire(10) {
		t.Fatal("fresh budget not free")
	}
	done := make(chan int, 1)
	go func() { done <- serve(s, "/F", "12345", true) }()
	stop()
	select {
	case code := <-done:
		if code != http.StatusServiceUnavailable {
			t.Fatalf("status %d, want 503", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wait for room ignored shutdown")
	}
}

func TestPanicAndOversizedHeadersAreLoggedBounded(t *testing.T) {
	var buf bytes.Buffer
	s := NewServer(zerolog.New(&buf), Options{})
	s.Handle("F", func(context.Context, *Invocation) error { panic(strings.Repeat("p", 100_000)) })
	req := httptest.NewRequest(http.MethodPost, "/F", strings.NewReader("{}"))
	req.Header.Set("X-Azure-Functions-InvocationId", strings.Repeat("i", 200_000))
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status %d", rec.Code)
	}
	var line map[string]string
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("log line: %v", err)
	}
	if !strings.Contains(line["stack"], "goroutine") || !strings.Contains(line["stack"], "funchost") {
		t.Fatalf("panic stack not logged: %.200q", line["stack"])
	}
	if buf.Len() > 16<<10 {
		t.Fatalf("log line is %d bytes", buf.Len())
	}
	for _, k := range []string{"invocationId", "panic"} {
		if !strings.Contains(line[k], "[truncated: ") {
			t.Fatalf("%s not marked truncated", k)
		}
	}
}

// An extra POST route answers POST only; a GET of its path is not it.
func TestExtraPostRoute(t *testing.T) {
	s := NewServer(zerolog.Nop(), Options{})
	s.HandlePost("/_control", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	for _, c := range []struct {
		method string
		want   int
	}{{http.MethodPost, http.StatusNoContent}, {http.MethodGet, http.StatusNotFound}} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(c.method, "/_control", nil))
		if rec.Code != c.want {
			t.Errorf("%s: %d, want %d", c.method, rec.Code, c.want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("a route outside /_ was accepted")
		}
	}()
	s.HandlePost("/control", http.NotFoundHandler())
}

// An HTTP function is served at /api/<route>, matched case-insensitively,
// for its methods only (another is answered 405 with Allow), beside the
// envelope functions; its body is bounded by the envelope limit and its
// announced length takes room in the in-flight budget while it runs.
func TestHTTPFunctionRoutes(t *testing.T) {
	var overloads atomic.Int32
	s := NewServer(zerolog.Nop(), Options{MaxBytesInFlight: 100, AdmitWait: 20 * time.Millisecond, OnOverload: func(string) { overloads.Add(1) }})
	s.maxBody = 1000
	s.Handle("Subscriber", func(context.Context, *Invocation) error { return nil })
	entered, release := make(chan struct{}), make(chan struct{})
	var bodyErr atomic.Value
	s.HandleHTTP("PlaceOrder", "orders/new", []string{http.MethodPost, http.MethodPut}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Hold") != "" {
			entered <- struct{}{}
			<-release
		}
		if _, err := io.ReadAll(r.Body); err != nil {
			bodyErr.Store(err.Error())
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	do := func(method, path string, body io.Reader, hold bool) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, body)
		if hold {
			req.Header.Set("X-Hold", "1")
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec
	}
	for _, path := range []string{"/api/orders/new", "/API/Orders/New"} {
		if rec := do(http.MethodPost, path, strings.NewReader("{}"), false); rec.Code != http.StatusCreated {
			t.Fatalf("POST %s = %d, want 201", path, rec.Code)
		}
	}
	if rec := do(http.MethodGet, "/api/orders/new", nil, false); rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "POST, PUT" {
		t.Fatalf("GET = %d Allow %q, want 405 with POST, PUT", rec.Code, rec.Header().Get("Allow"))
	}
	for _, path := range []string{"/api/orders", "/orders/new", "/api/orders/new/x"} {
		if rec := do(http.MethodPost, path, nil, false); rec.Code != http.StatusNotFound {
			t.Fatalf("POST %s = %d, want 404", path, rec.Code)
		}
	}
	if rec := do(http.MethodPost, "/Subscriber", strings.NewReader("{}"), false); rec.Code != http.StatusOK {
		t.Fatalf("the envelope function beside it = %d", rec.Code)
	}
	if rec := do(http.MethodPost, "/api/orders/new", strings.NewReader(strings.Repeat("x", 1001)), false); rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("announced oversized body = %d, want 413", rec.Code)
	}
	if rec := do(http.MethodPost, "/api/orders/new", io.MultiReader(strings.NewReader(strings.Repeat("x", 1001))), false); rec.Code != http.StatusRequestEntityTooLarge || bodyErr.Load() == nil {
		t.Fatalf("unannounced oversized body = %d (%v), want 413 from the bounded body", rec.Code, bodyErr.Load())
	}
	first := make(chan int, 1)
	go func() {
		first <- do(http.MethodPost, "/api/orders/new", strings.NewReader(strings.Repeat("x", 80)), true).Code
	}()
	<-entered
	if rec := do(http.MethodPost, "/api/orders/new", strings.NewReader(strings.Repeat("y", 50)), false); rec.Code != http.StatusServiceUnavailable || overloads.Load() != 1 {
		t.Fatalf("over the budget = %d (overloads %d), want 503", rec.Code, overloads.Load())
	}
	close(release)
	if code := <-first; code != http.StatusCreated {
		t.Fatalf("held request = %d", code)
	}
	if !s.budget.TryAcquire(100) {
		t.Fatal("budget not released after the requests")
	}
}
