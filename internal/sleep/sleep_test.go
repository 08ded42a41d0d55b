package sleep

import (
	"context"
	"testing"
	"time"
)

func TestForWaitsItsDuration(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, 0, 20 * time.Millisecond} {
		start := time.Now()
		For(context.Background(), d)
		if got := time.Since(start); got < d {
			t.Errorf("For(%v) returned after %v", d, got)
		}
	}
}

func TestForEndsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { For(ctx, time.Hour); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("For ignored the context's cancellation")
	}
}

func TestForReturnsAtOnceForAnEndedContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	For(ctx, time.Hour)
	if got := time.Since(start); got > 10*time.Second {
		t.Fatalf("For on an ended context took %v", got)
	}
}
