package cosmos_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
)

// Concurrent first uses share one attempt; a failure is not remembered, a
// success is.
func TestLazySharesOneAttemptAndRetriesAfterFailure(t *testing.T) {
	t.Parallel()
	var l cosmos.Lazy
	var calls atomic.Int32
	boom := errors.New("boom")
	fail := func(context.Context) error { calls.Add(1); return boom }
	if err := l.Do(context.Background(), fail); !errors.Is(err, boom) {
		t.Fatalf("err %v", err)
	}
	if l.Ready() {
		t.Fatal("ready after a failure")
	}

	gate := make(chan struct{})
	started := make(chan struct{})
	var startOnce sync.Once
	init := func(context.Context) error {
		calls.Add(1)
		startOnce.Do(func() { close(started) })
		<-gate
		return nil
	}
	const callers = 16
	errs := make(chan error, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- l.Do(context.Background(), init) }()
	}
	<-started
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Do(context.Background(), fail); err != nil {
		t.Fatalf("after success: %v", err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d attempts, want 2 (one failed, one shared)", n)
	}
}

// A caller whose context ends gets its context error; the attempt goes on,
// undisturbed by that cancellation, and serves the next caller.
func TestLazyDetachesTheAttemptFromTheCaller(t *testing.T) {
	t.Parallel()
	var l cosmos.Lazy
	gate := make(chan struct{})
	attemptErr := make(chan error, 1)
	init := func(ctx context.Context) error {
		<-gate
		attemptErr <- ctx.Err()
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Do(ctx, init) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want Canceled", err)
	}
	close(gate)
	if err := <-attemptErr; err != nil {
		t.Fatalf("the attempt saw %v", err)
	}
	if err := l.Do(context.Background(), func(context.Context) error { return errors.New("not called") }); err != nil {
		t.Fatal(err)
	}
}

// Timeout bounds the attempt.
func TestLazyTimeout(t *testing.T) {
	t.Parallel()
	l := cosmos.Lazy{Timeout: 20 * time.Millisecond}
	err := l.Do(context.Background(), func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	var d cosmos.Lazy
	var deadline time.Duration
	_ = d.Do(context.Background(), func(ctx context.Context) error {
		dl, _ := ctx.Deadline()
		deadline = time.Until(dl)
		return nil
	})
	if deadline <= cosmos.DefaultInitTimeout-time.Second || deadline > cosmos.DefaultInitTimeout {
		t.Fatalf("default attempt deadline %v, want about %v", deadline, cosmos.DefaultInitTimeout)
	}
}
