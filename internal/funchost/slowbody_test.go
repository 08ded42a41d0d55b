package funchost

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// rawPost sends a POST with an announced length over its own connection,
// writing the body in chunks of chunk bytes with pause between them, then
// reads the answer. It returns the status, or the error the client met
// (a write to a connection the server closed, for one).
func rawPost(ctx context.Context, addr, path string, length int64, chunk int, pause time.Duration) (int, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, length); err != nil {
		return 0, err
	}
	// Read the answer concurrently, as a client that waits for its upload
	// to finish first would only after it; a write error wins.
	type answer struct {
		status int
		err    error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			got <- answer{0, err}
			return
		}
		resp.Body.Close()
		got <- answer{resp.StatusCode, nil}
	}()
	buf := []byte(strings.Repeat("x", chunk))
	for sent := int64(0); sent < length; sent += int64(len(buf)) {
		select {
		case a := <-got:
			if pause == 0 {
				// Answered before the upload ended: a real client still
				// sending would not read it.
				return 0, fmt.Errorf("answered (%d) after %d of %d bytes, before the upload ended", a.status, sent, length)
			}
			return a.status, a.err
		default:
		}
		if int64(len(buf)) > length-sent {
			buf = buf[:length-sent]
		}
		if _, err := c.Write(buf); err != nil {
			return 0, fmt.Errorf("after %d of %d bytes: %w", sent, length, err)
		}
		if pause > 0 {
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
	}
	a := <-got
	return a.status, a.err
}

// A client that announces 64 MiB and trickles one byte at a time holds its
// room in the byte budget only until the body timeout: it is answered 408
// then, and another invocation is admitted meanwhile.
func TestTricklingBodyIsCutOffAndReleasesTheBudget(t *testing.T) {
	s := NewServer(zerolog.Nop(), Options{MaxBytesInFlight: 1 << 20, AdmitWait: 3 * time.Second, BodyTimeout: 500 * time.Millisecond})
	s.Handle("Subscriber", func(context.Context, *Invocation) error { return nil })
	ts := httptest.NewServer(s)
	defer ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr := strings.TrimPrefix(ts.URL, "http://")

	start := time.Now()
	trickle := make(chan error, 1)
	var trickleStatus int
	go func() {
		var err error
		trickleStatus, err = rawPost(ctx, addr, "/Subscriber", 64<<20, 1, 50*time.Millisecond)
		trickle <- err
	}()
	// Wait until the trickler holds the whole budget, then invoke.
	for s.budget.TryAcquire(1) {
		s.budget.Release(1)
		if ctx.Err() != nil {
			t.Fatal("the trickling request was never admitted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp, err := http.Post(ts.URL+"/Subscriber", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("an invocation behind the trickler was answered %d, want 200", resp.StatusCode)
	}
	if err := <-trickle; err != nil || trickleStatus != http.StatusRequestTimeout {
		t.Fatalf("the trickler got %d, %v; want 408", trickleStatus, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the trickler held on for %v", d)
	}
}

// Concurrent large envelopes beyond the byte budget are answered 503, and
// each client, still uploading, reads that answer rather than a reset.
func TestOverloadedUploadsReadTheirAnswer(t *testing.T) {
	const size, clients = 8 << 20, 8
	release := make(chan struct{})
	s := NewServer(zerolog.Nop(), Options{MaxBytesInFlight: size + size/2, AdmitWait: 200 * time.Millisecond})
	s.Handle("Subscriber", func(ctx context.Context, _ *Invocation) error {
		select { // hold the budget until every other client has its answer
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	ts := httptest.NewServer(s)
	defer ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := strings.TrimPrefix(ts.URL, "http://")

	var mu sync.Mutex
	statuses := map[int]int{}
	var errs []error
	var wg sync.WaitGroup
	var answered sync.WaitGroup
	answered.Add(clients - 1)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, err := rawPost(ctx, addr, "/Subscriber", size, 64<<10, 0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else {
				statuses[status]++
			}
			if status != http.StatusOK {
				answered.Done()
			}
		}()
	}
	answered.Wait()
	close(release)
	wg.Wait()
	if len(errs) > 0 || statuses[http.StatusOK] != 1 || statuses[http.StatusServiceUnavailable] != clients-1 {
		t.Fatalf("statuses %v, client errors %v; want one 200 and %d readable 503s", statuses, errs, clients-1)
	}
}
