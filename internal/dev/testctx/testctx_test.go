package testctx

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestTimeoutEndsAfterItsDuration(t *testing.T) {
	ctx := Timeout(t, 10*time.Millisecond)
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("context still open 5 s after a 10 ms timeout")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err() = %v, want DeadlineExceeded", ctx.Err())
	}
}

func TestTimeoutEndsWithTheTest(t *testing.T) {
	var ctx context.Context
	t.Run("inner", func(t *testing.T) { ctx = Timeout(t, time.Hour) })
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("after the test, Err() = %v, want Canceled", ctx.Err())
	}
}

func TestTimeoutMadeInACleanupIsOpen(t *testing.T) {
	var err error
	t.Run("inner", func(t *testing.T) {
		t.Cleanup(func() { err = Timeout(t, time.Hour).Err() })
	})
	if err != nil {
		t.Fatalf("a context made in a Cleanup is already done: %v", err)
	}
}
