package resolverapp

import (
	"context"
	"time"
)

// The ports this package alone consumes are declared here; the servicebus
// adapter implements them.

// Redelivery is a copy of a Resolver message to enqueue later on the
// Resolver topic: the same body, MessageId, SessionId, CorrelationId,
// ContentType, Subject and application properties, with
// ThrottleRetryCount set to the attempt just spent.
type Redelivery struct {
	Body          []byte
	MessageID     string
	SessionID     string
	CorrelationID *string
	ContentType   string
	Subject       string
	// Properties hold the application properties with NimBus's AMQP types
	// restored (see restoreTypes).
	Properties map[string]any
}

// Scheduler schedules a Redelivery on the Resolver topic at the time at.
// An error means the copy may not have been scheduled.
type Scheduler interface {
	ScheduleRedelivery(ctx context.Context, r *Redelivery, at time.Time) error
}
