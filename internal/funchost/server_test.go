package funchost

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestServerProtocol(t *testing.T) {
	s := NewServer(zerolog.Nop())
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
	s := NewServer(zerolog.Nop())
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
