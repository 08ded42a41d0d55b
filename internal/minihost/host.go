package minihost

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/funchost/funchosttest"
)

// Config configures a Host. Client, Topic, Subscription, Function and
// Invoker are required.
type Config struct {
	// Client receives from the subscription.
	Client *azservicebus.Client
	// Topic and Subscription name the session subscription to consume.
	Topic, Subscription string
	// Function is the function name: the URL path and sys.MethodName.
	Function string
	// Binding is the trigger binding name, the key under Data (default
	// "message").
	Binding string
	// Invoker reaches the handler.
	Invoker *Invoker
	// MaxConcurrentSessions is how many sessions are processed at once, one
	// invocation at a time each (default 8, the host's default).
	MaxConcurrentSessions int
	// SessionIdleTimeout is how long a session with no new message is kept
	// before it is released (default 500ms; the host's default is 1 min).
	SessionIdleTimeout time.Duration
	// AcceptTimeout bounds each wait for the next free session (default 5s).
	// A short deadline that expires during the SDK's link set-up makes it
	// rebuild the whole connection, failing other workers' settlements.
	AcceptTimeout time.Duration
	// InvocationTimeout bounds one HTTP invocation (default 1 min).
	InvocationTimeout time.Duration
	// Namespace is Metadata.Client.FullyQualifiedNamespace (default
	// "127.0.0.1").
	Namespace string
}

// Stats counts what a Host did.
type Stats struct {
	// Invocations is the number of handler invocations attempted.
	Invocations int64
	// Completes and Abandons count successful settlements of each kind.
	Completes int64
	Abandons  int64
	// Failures counts invocations that did not succeed: transport errors,
	// non-2xx answers and invalid responses (each also leads to an abandon).
	Failures int64
	// SettleErrors counts settlements the broker refused (e.g. lock lost).
	SettleErrors int64
}

// Host receives from a session subscription and invokes the handler as the
// Functions host does: up to MaxConcurrentSessions sessions at a time, one
// invocation at a time per session, complete on success and abandon on
// failure.
type Host struct {
	cfg      Config
	clientID string

	invocations, completes, abandons, failures, settleErrors atomic.Int64

	mu      sync.Mutex
	cancel  context.CancelFunc
	running sync.WaitGroup
}

// New validates cfg and returns a stopped Host.
func New(cfg Config) (*Host, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("minihost: Config.Client is required")
	case cfg.Topic == "" || cfg.Subscription == "":
		return nil, errors.New("minihost: Config.Topic and Config.Subscription are required")
	case cfg.Function == "":
		return nil, errors.New("minihost: Config.Function is required")
	case cfg.Invoker == nil || cfg.Invoker.BaseURL == "":
		return nil, errors.New("minihost: Config.Invoker with a BaseURL is required")
	}
	if cfg.Binding == "" {
		cfg.Binding = "message"
	}
	if cfg.MaxConcurrentSessions <= 0 {
		cfg.MaxConcurrentSessions = 8
	}
	if cfg.SessionIdleTimeout <= 0 {
		cfg.SessionIdleTimeout = 500 * time.Millisecond
	}
	if cfg.AcceptTimeout <= 0 {
		cfg.AcceptTimeout = 5 * time.Second
	}
	if cfg.InvocationTimeout <= 0 {
		cfg.InvocationTimeout = time.Minute
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "127.0.0.1"
	}
	return &Host{cfg: cfg, clientID: cfg.Namespace + "-" + NewGUID()}, nil
}

// Start starts the session workers. It fails if the host is running.
func (h *Host) Start() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancel != nil {
		return errors.New("minihost: already started")
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	for range h.cfg.MaxConcurrentSessions {
		h.running.Add(1)
		go h.worker(ctx)
	}
	return nil
}

// Stop stops receiving, lets in-flight invocations finish and settle, and
// releases the sessions. It returns ctx's error if that takes longer than
// ctx allows. Stopping a stopped host does nothing.
func (h *Host) Stop(ctx context.Context) error {
	h.mu.Lock()
	cancel := h.cancel
	h.cancel = nil
	h.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	done := make(chan struct{})
	go func() { h.running.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("minihost: stopping: %w", ctx.Err())
	}
}

// Stats returns the counters so far.
func (h *Host) Stats() Stats {
	return Stats{
		Invocations:  h.invocations.Load(),
		Completes:    h.completes.Load(),
		Abandons:     h.abandons.Load(),
		Failures:     h.failures.Load(),
		SettleErrors: h.settleErrors.Load(),
	}
}

// WaitFor polls Stats until cond holds or ctx ends.
func (h *Host) WaitFor(ctx context.Context, cond func(Stats) bool) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond(h.Stats()) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("minihost: waiting (stats %+v): %w", h.Stats(), ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// worker accepts one free session at a time and drains it.
func (h *Host) worker(ctx context.Context) {
	defer h.running.Done()
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, h.cfg.AcceptTimeout)
		sr, err := h.cfg.Client.AcceptNextSessionForSubscription(actx, h.cfg.Topic, h.cfg.Subscription, nil)
		cancel()
		if err != nil {
			// No free session within the wait (CodeTimeout or the deadline),
			// or a broker error: back off a little before trying again.
			var sbErr *azservicebus.Error
			if !(errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeTimeout) && !errors.Is(err, context.DeadlineExceeded) {
				sleep(ctx, 100*time.Millisecond)
			}
			continue
		}
		h.drain(ctx, sr)
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = sr.Close(cctx)
		cancel()
	}
}

// drain processes a session's messages one at a time until it is idle for
// SessionIdleTimeout or the host stops.
func (h *Host) drain(ctx context.Context, sr *azservicebus.SessionReceiver) {
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, h.cfg.SessionIdleTimeout)
		ms, err := sr.ReceiveMessages(rctx, 1, nil)
		cancel()
		for _, m := range ms {
			h.process(sr, m)
		}
		if err != nil || len(ms) == 0 {
			return
		}
	}
}

// process invokes the handler for m and settles it. Neither step uses the
// worker's context: an invocation in flight at Stop finishes and settles.
func (h *Host) process(sr *azservicebus.SessionReceiver, m *azservicebus.ReceivedMessage) {
	trigger := TriggerFromMessage(m, sr.LockedUntil(), h.cfg.Namespace, h.clientID)
	trigger.FunctionName, trigger.Binding, trigger.UtcNow, trigger.RandGUID = h.cfg.Function, h.cfg.Binding, time.Now().UTC(), NewGUID()
	ok := false
	envelope, err := funchosttest.Build(trigger)
	if err == nil {
		h.invocations.Add(1)
		ictx, cancel := context.WithTimeout(context.Background(), h.cfg.InvocationTimeout)
		res, ierr := h.cfg.Invoker.Invoke(ictx, h.cfg.Function, envelope)
		cancel()
		ok = ierr == nil && res.Succeeded
	}
	if !ok {
		h.failures.Add(1)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch {
	case ok:
		err = sr.CompleteMessage(sctx, m, nil)
		if err == nil {
			h.completes.Add(1)
		}
	default:
		err = sr.AbandonMessage(sctx, m, nil)
		if err == nil {
			h.abandons.Add(1)
		}
	}
	if err != nil {
		h.settleErrors.Add(1)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
