package minihost

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/sleep"
)

// Config configures a Host. Client, Topic, Subscription, Function and
// Invoker are required.
type Config struct {
	// Client receives from the subscription.
	Client *azservicebus.Client
	// Topic and Subscription name the subscription to consume: a session
	// subscription, or one without sessions when NoSessions is set.
	Topic, Subscription string
	// NoSessions consumes a subscription without sessions, as a trigger with
	// "isSessionsEnabled": false: one plain receiver, up to
	// MaxConcurrentCalls invocations at once in no particular order, each
	// message's lock renewed while its invocation runs.
	NoSessions bool
	// MaxConcurrentCalls is how many invocations run at once without
	// sessions (default 16, the host's default per core).
	MaxConcurrentCalls int
	// LockRenewInterval is how often a message lock is renewed while its
	// invocation runs without sessions (default 10s).
	LockRenewInterval time.Duration
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

// Host receives from a subscription and invokes the handler as the
// Functions host does, completing on success and abandoning on failure:
// from a session subscription up to MaxConcurrentSessions sessions at a
// time, one invocation at a time per session; from a subscription without
// sessions (NoSessions) up to MaxConcurrentCalls invocations at a time.
type Host struct {
	cfg      Config
	clientID string

	invocations, completes, abandons, failures, settleErrors atomic.Int64
	inFlight, maxInFlight                                    atomic.Int64

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
	if cfg.MaxConcurrentCalls <= 0 {
		cfg.MaxConcurrentCalls = 16
	}
	if cfg.LockRenewInterval <= 0 {
		cfg.LockRenewInterval = 10 * time.Second
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

// Start starts the session workers, or without sessions the receive loop.
// It fails if the host is running or, without sessions, if the receiver
// cannot be created.
func (h *Host) Start() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancel != nil {
		return errors.New("minihost: already started")
	}
	if h.cfg.NoSessions {
		r, err := h.cfg.Client.NewReceiverForSubscription(h.cfg.Topic, h.cfg.Subscription, nil)
		if err != nil {
			return fmt.Errorf("minihost: receiver for %s/%s: %w", h.cfg.Topic, h.cfg.Subscription, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		h.cancel = cancel
		h.running.Add(1)
		go h.receiveLoop(ctx, r)
		return nil
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

// MaxInFlight returns the most invocations that ran at once so far.
func (h *Host) MaxInFlight() int64 { return h.maxInFlight.Load() }

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
				sleep.For(ctx, 100*time.Millisecond)
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
			h.process(sr, m, sr.LockedUntil(), nil)
		}
		if err != nil || len(ms) == 0 {
			return
		}
	}
}

// receiveLoop receives one message whenever an invocation slot is free and
// processes it on its own goroutine, until the host stops; then it waits for
// the invocations in flight and closes the receiver.
func (h *Host) receiveLoop(ctx context.Context, r *azservicebus.Receiver) {
	defer h.running.Done()
	var inFlight sync.WaitGroup
	defer func() {
		inFlight.Wait()
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = r.Close(cctx)
		cancel()
	}()
	slots := make(chan struct{}, h.cfg.MaxConcurrentCalls)
	for {
		select {
		case <-ctx.Done():
			return
		case slots <- struct{}{}:
		}
		rctx, cancel := context.WithTimeout(ctx, h.cfg.AcceptTimeout)
		ms, err := r.ReceiveMessages(rctx, 1, nil)
		cancel()
		if len(ms) == 0 {
			<-slots
			if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
				sleep.For(ctx, 100*time.Millisecond)
			}
			continue
		}
		for i, m := range ms {
			if i > 0 { // ReceiveMessages(…, 1) returns at most one; stay safe
				slots <- struct{}{}
			}
			inFlight.Add(1)
			go func() {
				defer inFlight.Done()
				defer func() { <-slots }()
				h.process(r, m, time.Time{}, r)
			}()
		}
	}
}

// settler settles a received message; *azservicebus.Receiver and
// *azservicebus.SessionReceiver both are one.
type settler interface {
	CompleteMessage(ctx context.Context, m *azservicebus.ReceivedMessage, o *azservicebus.CompleteMessageOptions) error
	AbandonMessage(ctx context.Context, m *azservicebus.ReceivedMessage, o *azservicebus.AbandonMessageOptions) error
}

// renewer renews a message lock (a receiver without sessions).
type renewer interface {
	RenewMessageLock(ctx context.Context, m *azservicebus.ReceivedMessage, o *azservicebus.RenewMessageLockOptions) error
}

// process invokes the handler for m and settles it. Neither step uses the
// worker's context: an invocation in flight at Stop finishes and settles.
// sessionLockedUntil is zero without sessions; a non-nil renew renews m's
// lock every LockRenewInterval while the invocation runs.
func (h *Host) process(sr settler, m *azservicebus.ReceivedMessage, sessionLockedUntil time.Time, renew renewer) {
	n := h.inFlight.Add(1)
	defer h.inFlight.Add(-1)
	for {
		old := h.maxInFlight.Load()
		if n <= old || h.maxInFlight.CompareAndSwap(old, n) {
			break
		}
	}
	if renew != nil {
		stop := make(chan struct{})
		done := make(chan struct{})
		defer func() { close(stop); <-done }()
		go func() {
			defer close(done)
			t := time.NewTicker(h.cfg.LockRenewInterval)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_ = renew.RenewMessageLock(rctx, m, nil) // a lost lock shows at settlement
					cancel()
				}
			}
		}()
	}
	trigger := TriggerFromMessage(m, sessionLockedUntil, h.cfg.Namespace, h.clientID)
	trigger.FunctionName, trigger.Binding, trigger.UtcNow, trigger.RandGUID = h.cfg.Function, h.cfg.Binding, time.Now().UTC(), NewGUID()
	ok := false
	envelope, err := hostwire.Build(trigger)
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
