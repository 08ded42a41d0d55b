package subscriber

import (
	"context"
	"errors"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// The ports the pipeline alone consumes are declared here, with the types
// they pass; the adapters (servicebus, servicebus/deferred, retrypolicy
// through the app) implement them. The ports other packages consume too
// have packages of their own (inbox.Store, session.Store, txn.Store,
// resolver.Publisher).

// Delivery is one delivered message as the transport saw it.
type Delivery struct {
	Broker     message.Broker
	Properties map[string]any
	Body       []byte
}

// Scheduler schedules a message on the endpoint topic.
type Scheduler interface {
	Schedule(ctx context.Context, m *message.Outgoing, at time.Time) error
}

// RetryPolicies decides the RetryRequest after a failed event.
type RetryPolicies interface {
	// RetryDelay returns the wait before the next RetryRequest for an
	// event of eventTypeID that failed with errText after retryCount
	// retries, and false when no policy applies or its retries are spent.
	RetryDelay(eventTypeID, errText, endpoint string, retryCount int, rnd float64) (time.Duration, bool)
}

// Deferred reaches the parked copies of a session: the endpoint topic's
// Deferred session subscription.
type Deferred interface {
	// Accept locks the session's parked copies for this replay. It returns
	// an error wrapping ErrSessionLocked when another replay holds them.
	Accept(ctx context.Context, sessionID string) (DeferredSession, error)
}

// DeferredSession is one locked session of parked copies.
type DeferredSession interface {
	// Next returns the next parked copy, locked. It returns an error
	// wrapping ErrNoParked when ctx ends before one arrives.
	Next(ctx context.Context) (*Parked, error)
	// Complete removes p.
	Complete(ctx context.Context, p *Parked) error
	// Abandon returns p for a later replay (its delivery count goes up).
	Abandon(ctx context.Context, p *Parked) error
	// DeadLetter moves p to the dead-letter queue.
	DeadLetter(ctx context.Context, p *Parked, reason, description string) error
	// RenewLock extends the session lock.
	RenewLock(ctx context.Context) error
	// Close releases the session; unsettled copies return to it.
	Close(ctx context.Context) error
}

// Parked is a parked copy as received from the Deferred subscription.
type Parked struct {
	Delivery
	// Handle is the transport's message, for settlement.
	Handle any
}

// ErrSessionLocked: another replay holds the session's parked copies.
var ErrSessionLocked = errors.New("the session's parked messages are locked by another replay")

// ErrNoParked: no parked copy arrived before the wait ended.
var ErrNoParked = errors.New("no parked message arrived")
