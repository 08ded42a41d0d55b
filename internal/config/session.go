package config

import (
	"fmt"
	"strings"
	"time"
)

// KeySessionContainer names the container of the session-state store: one
// document per (endpoint, SessionId) holding NimBus's session state (the
// blocking event, parked copies, replay). It sits beside
// NimBus__Inbox__Cosmos__ContainerId because the state lives in the inbox's
// account and database: both need Strong consistency, and sharing the
// account keeps one set of connection settings.
const KeySessionContainer = "NimBus__Inbox__Cosmos__SessionContainerId"

// DefaultSessionContainer is the session-state container's default id. Not
// "sessions": the Resolver's tracking store names one container after each
// endpoint in a database of the same default name, and "sessions" is a
// plausible endpoint id.
const DefaultSessionContainer = "sessionstate"

// sessionContainer reads KeySessionContainer into c. It must pass the
// Cosmos DB id rule and differ from the inbox's container: both key their
// documents by the same identity hash, so a shared container would let an
// inbox record and a session's state overwrite each other's id.
func (l *loader) sessionContainer(c *Cosmos) {
	c.SessionContainerID = l.cosmosID(KeySessionContainer, DefaultSessionContainer)
	if c.SessionContainerID == c.ContainerID {
		l.problem("%s=%s is the inbox's container (%s); the session state needs its own container, because both key documents by the same identity hash", KeySessionContainer, show(c.SessionContainerID), KeyCosmosContainer)
	}
}

// Session-blocking settings.
const (
	// KeySessionStore selects where session state is kept: Cosmos (the
	// inbox's account) or InMemory (this process only). Default: the
	// inbox's store when the inbox is on, else InMemory.
	KeySessionStore = "NimBus__Session__Store"
	// KeyMaxDeliveryCount is the endpoint subscriptions' maximum delivery
	// count: a message that fails on this delivery is dead-lettered by the
	// broker, so the Resolver is told on it. NimBus provisions 10.
	KeyMaxDeliveryCount = "NimBus__Session__MaxDeliveryCount"
	// KeyReplayBudget bounds the time one DeferredProcessor invocation
	// spends replaying parked messages; the rest continues in a new
	// invocation.
	KeyReplayBudget = "NimBus__Session__ReplayBudget"
)

// Session-blocking defaults and limits.
const (
	DefaultMaxDeliveryCount = 10
	// MaxMaxDeliveryCount is Service Bus's limit.
	MaxMaxDeliveryCount = 2000
	DefaultReplayBudget = 4 * time.Minute
	MinReplayBudget     = time.Second
)

// Session configures session blocking: where its state lives, the
// subscriptions' max delivery count and the replay budget.
type Session struct {
	Store            Store
	MaxDeliveryCount int
	ReplayBudget     time.Duration
}

// session reads the session-blocking settings into c (after the inbox's).
func (l *loader) session(c *Config) {
	s := &c.Session
	s.MaxDeliveryCount = l.int(KeyMaxDeliveryCount, DefaultMaxDeliveryCount, 1, MaxMaxDeliveryCount)
	s.ReplayBudget = l.duration(KeyReplayBudget, DefaultReplayBudget, MinReplayBudget, HostFunctionTimeout-time.Minute)
	if c.App != AppEndpoint {
		return
	}
	switch raw := l.str(KeySessionStore); {
	case raw == "" && c.Inbox.Enabled:
		s.Store = c.Inbox.Store
	case raw == "":
		s.Store = StoreInMemory
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s is not set and the inbox is off: session state (blocked sessions, parked messages) is kept in this process only and does not survive a restart or span instances; set %s=%s for production", KeySessionStore, KeySessionStore, StoreCosmos))
	case strings.EqualFold(raw, string(StoreCosmos)):
		s.Store = StoreCosmos
		if !(c.Inbox.Enabled && c.Inbox.Store == StoreCosmos) {
			l.checkCosmos(&c.Inbox.Cosmos)
		}
	case strings.EqualFold(raw, string(StoreInMemory)):
		s.Store = StoreInMemory
		if c.Inbox.Enabled {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s=%s keeps session state in this process only: blocked sessions and parked messages are forgotten on restart; use it for local runs and tests", KeySessionStore, StoreInMemory))
		}
	default:
		l.problem("%s=%s is not a supported session-state store (use %s or %s)", KeySessionStore, show(raw), StoreCosmos, StoreInMemory)
	}
}
