package nimbustest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/session"
	"github.com/nimbus-go/functions-subscriber/internal/tracking"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
	"github.com/nimbus-go/functions-subscriber/nimbus"
)

// What a [Fault] hits, besides a container (see [ContainerFault]).
const (
	// FaultSend: the broker refuses the endpoint's sends (responses,
	// published events, parked copies, scheduled RetryRequests).
	FaultSend = "send"
	// FaultSessions: the session-state store is unavailable.
	FaultSessions = "sessions"
	// FaultInbox: the inbox store is unavailable.
	FaultInbox = "inbox"
	// FaultTracking: the Resolver's tracking store is unavailable (Endpoint
	// is "Resolver").
	FaultTracking = "tracking"
)

// ContainerFault is the [Fault.Target] of container c of a transactional
// handler or front door: reads and batches fail as an unavailable Cosmos
// DB does (503; nothing is applied). c's ids are the defaults: a
// container whose ids the endpoint's settings change is named by its
// "database/container" as set.
func ContainerFault(c nimbus.Container) string { return c.DatabaseID + "/" + c.ContainerID }

// Fault is a failure injected into the next calls of one store or sender.
type Fault struct {
	// Endpoint is the app whose store fails ("Resolver" for the tracking
	// store).
	Endpoint string
	// Target is FaultSend, FaultSessions, FaultInbox, FaultTracking or a
	// [ContainerFault].
	Target string
	// Calls is how many calls fail, from the next one on; 0 means every
	// call until [Workflow.Heal].
	Calls int
}

type faultState struct {
	Fault
	failed int
}

// Inject makes the next calls f names fail.
func (w *Workflow) Inject(f Fault) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.faults = append(w.faults, &faultState{Fault: f})
}

// Heal ends every injected fault.
func (w *Workflow) Heal() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.faults = nil
}

// FaultedCalls returns how many calls the faults injected since the last
// [Workflow.Heal] failed.
func (w *Workflow) FaultedCalls() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, f := range w.faults {
		n += f.failed
	}
	return n
}

// errInjected is the cause of every injected failure.
var errInjected = errors.New("nimbustest: injected outage")

// faultLocked returns the failure injected for the next call of target on
// endpoint, nil when none. w.mu is held.
func (w *Workflow) faultLocked(endpoint, target string) error {
	for _, f := range w.faults {
		if f.Endpoint != endpoint || f.Target != target || (f.Calls > 0 && f.failed >= f.Calls) {
			continue
		}
		f.failed++
		return fmt.Errorf("%w of %s on %s (call %d)", errInjected, target, endpoint, f.failed)
	}
	return nil
}

func (w *Workflow) fault(endpoint, target string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.faultLocked(endpoint, target)
}

type faultyInbox struct {
	inbox.Store
	w        *Workflow
	endpoint string
}

func (f faultyInbox) HasProcessed(ctx context.Context, key inbox.Key) (bool, error) {
	if err := f.w.fault(f.endpoint, FaultInbox); err != nil {
		return false, err
	}
	return f.Store.HasProcessed(ctx, key)
}

func (f faultyInbox) RecordProcessed(ctx context.Context, key inbox.Key) error {
	if err := f.w.fault(f.endpoint, FaultInbox); err != nil {
		return err
	}
	return f.Store.RecordProcessed(ctx, key)
}

func (f faultyInbox) PurgeExpired(ctx context.Context, endpointID string, olderThan time.Time) (int, error) {
	if err := f.w.fault(f.endpoint, FaultInbox); err != nil {
		return 0, err
	}
	return f.Store.PurgeExpired(ctx, endpointID, olderThan)
}

type faultySessions struct {
	session.Store
	w        *Workflow
	endpoint string
}

func (f faultySessions) Read(ctx context.Context, key session.Key) (session.State, error) {
	if err := f.w.fault(f.endpoint, FaultSessions); err != nil {
		return session.State{}, &session.StoreError{Op: session.OpRead, Err: err}
	}
	return f.Store.Read(ctx, key)
}

func (f faultySessions) Write(ctx context.Context, key session.Key, next session.State) (session.State, error) {
	if err := f.w.fault(f.endpoint, FaultSessions); err != nil {
		return session.State{}, &session.StoreError{Op: session.OpWrite, Err: err}
	}
	return f.Store.Write(ctx, key, next)
}

// faultyTxn fails the calls of one container; the marker queries of the
// OutboxSweep (FindPending) go through the embedded store's methods.
type faultyTxn struct {
	*txn.Memory
	w        *Workflow
	endpoint string
}

func (f faultyTxn) Read(ctx context.Context, target txn.Target, pk, id string) ([]byte, string, bool, error) {
	if err := f.w.fault(f.endpoint, target.String()); err != nil {
		return nil, "", false, &txn.TransientError{Status: http.StatusServiceUnavailable, Err: err}
	}
	return f.Memory.Read(ctx, target, pk, id)
}

func (f faultyTxn) Execute(ctx context.Context, target txn.Target, pk string, ops []txn.Op) (txn.Result, error) {
	if err := f.w.fault(f.endpoint, target.String()); err != nil {
		return txn.Result{}, &txn.TransientError{Status: http.StatusServiceUnavailable, Err: err}
	}
	return f.Memory.Execute(ctx, target, pk, ops)
}

// faultyTracking fails the Resolver's tracking writes.
type faultyTracking struct {
	tracking.Writer
	w *Workflow
}

func (f faultyTracking) StoreMessage(ctx context.Context, m tracking.MessageEntity) error {
	if err := f.w.fault("Resolver", FaultTracking); err != nil {
		return &tracking.StoreError{Op: "StoreMessage", Kind: tracking.FailureTransient, Err: err}
	}
	return f.Writer.StoreMessage(ctx, m)
}
