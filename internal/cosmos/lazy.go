package cosmos

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultInitTimeout bounds a first-use initialization when Lazy.Timeout is
// zero.
const DefaultInitTimeout = 30 * time.Second

// Lazy runs a one-time initialization on first use: the first caller starts
// it, concurrent callers share that one attempt, a success is remembered
// and a failure is forgotten so that a later call tries again. The attempt
// runs detached from any caller's cancellation, bounded by Timeout; each
// caller waits for it or for its own context. The zero value is ready to
// use; a Lazy must not be copied after first use.
type Lazy struct {
	// Timeout bounds one attempt; zero means DefaultInitTimeout.
	Timeout time.Duration

	ready  atomic.Bool
	mu     sync.Mutex
	flight *lazyFlight
}

type lazyFlight struct {
	done chan struct{}
	err  error
}

// Do runs init unless an earlier attempt succeeded, and returns the
// attempt's error, or ctx's error if ctx ends first (the attempt goes on
// for the other callers). Once an attempt has succeeded, Do costs one
// atomic load.
func (l *Lazy) Do(ctx context.Context, init func(context.Context) error) error {
	if l.ready.Load() {
		return nil
	}
	l.mu.Lock()
	if l.ready.Load() {
		l.mu.Unlock()
		return nil
	}
	f := l.flight
	if f == nil {
		f = &lazyFlight{done: make(chan struct{})}
		l.flight = f
		timeout := l.Timeout
		if timeout <= 0 {
			timeout = DefaultInitTimeout
		}
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		go func() {
			defer cancel()
			err := init(ictx)
			l.mu.Lock()
			f.err = err
			if err == nil {
				l.ready.Store(true)
			}
			l.flight = nil
			l.mu.Unlock()
			close(f.done)
		}()
	}
	l.mu.Unlock()
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Ready reports whether an attempt has succeeded.
func (l *Lazy) Ready() bool { return l.ready.Load() }
