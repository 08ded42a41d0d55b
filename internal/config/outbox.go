package config

import (
	"fmt"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// The OutboxSweep timer's settings (endpoint app).
const (
	// KeyOutboxSweepSchedule is the OutboxSweep timer's schedule, which the
	// Functions host reads itself (%NimBus:Outbox:SweepSchedule% in its
	// function.json), checked like NimBus__Inbox__CleanupSchedule.
	KeyOutboxSweepSchedule = "NimBus__Outbox__SweepSchedule"
	// KeyOutboxMinimumAge is how long a marker's events stay undispatched
	// (from the marker's createdAtUtc) before the sweep sends them.
	KeyOutboxMinimumAge = "NimBus__Outbox__MinimumAge"
	// KeyPublishMaxMessageBytes bounds the message of each event a handler
	// publishes: the namespace's largest message (256 KB on Standard) or,
	// on Premium, up to 1 MB, the largest batch.
	KeyPublishMaxMessageBytes = "NimBus__Publish__MaxMessageBytes"
)

// Publish limits: a message of at least 16 KB, at most the largest batch.
const (
	MinPublishMaxMessageBytes = 16 << 10
	MaxPublishMaxMessageBytes = message.MaxMessageBytesLimit
)

// Outbox defaults and limits.
const (
	// DefaultOutboxSweepSchedule runs the sweep every five minutes.
	DefaultOutboxSweepSchedule = "0 */5 * * * *"
	// DefaultOutboxMinimumAge leaves five minutes to the deliveries: a
	// failed send is answered after at most NimBus__Retry__MaxDelay (one
	// minute by default) and its redelivery sends the events itself.
	DefaultOutboxMinimumAge = 5 * time.Minute
	MinOutboxMinimumAge     = time.Second
	MaxOutboxMinimumAge     = 30 * 24 * time.Hour
)

// Outbox configures the OutboxSweep timer, which sends the events of
// transactional deliveries whose dispatch no redelivery finished.
type Outbox struct {
	SweepSchedule string
	MinimumAge    time.Duration
	// MaxMessageBytes bounds each published event's message
	// (NimBus__Publish__MaxMessageBytes; plain and transactional handlers).
	MaxMessageBytes int
}

// outbox reads the OutboxSweep settings into c (after the inbox and retry
// settings: it warns about both).
func (l *loader) outbox(c *Config) {
	c.Outbox.SweepSchedule = l.schedule(KeyOutboxSweepSchedule, DefaultOutboxSweepSchedule, "OutboxSweep")
	c.Outbox.MinimumAge = l.duration(KeyOutboxMinimumAge, DefaultOutboxMinimumAge, MinOutboxMinimumAge, MaxOutboxMinimumAge)
	c.Outbox.MaxMessageBytes = l.int(KeyPublishMaxMessageBytes, message.DefaultMaxMessageBytes, MinPublishMaxMessageBytes, MaxPublishMaxMessageBytes)
	if c.App != AppEndpoint || !c.Inbox.Enabled {
		// Transactional handlers need the inbox: without it the sweep has
		// nothing to do.
		return
	}
	if _, set := l.lookup(KeyOutboxSweepSchedule); !set {
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s is not set: the Functions host resolves the OutboxSweep timer schedule from it, so set it (default %q) in the app settings", KeyOutboxSweepSchedule, DefaultOutboxSweepSchedule))
	}
	if c.Outbox.MinimumAge <= c.Retry.MaxDelay {
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s (%s) is not above %s (%s): the sweep may send events that a redelivery of their message is about to send; the copies keep their MessageIds, so downstream inboxes drop them, but each is sent twice", KeyOutboxMinimumAge, formatTimeSpan(c.Outbox.MinimumAge), KeyRetryMaxDelay, formatTimeSpan(c.Retry.MaxDelay)))
	}
}
