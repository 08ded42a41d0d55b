package config

import (
	"fmt"
	"strings"
)

// App selects which of the two Functions apps this binary serves. One
// binary is staged as either app (scripts/package.sh); NimBus__App tells the
// process which one it is, so start-up asks only for that app's settings.
type App string

// Apps.
const (
	// AppEndpoint is a NimBus subscriber endpoint: the Subscriber and
	// InboxCleanup functions. It is the default.
	AppEndpoint App = "Endpoint"
	// AppResolver is the NimBus Resolver: the Resolver function, which keeps
	// one tracking row per event and session.
	AppResolver App = "Resolver"
)

// TrackingStore selects the Resolver's message-tracking store.
type TrackingStore string

// Tracking stores.
const (
	TrackingCosmos TrackingStore = "Cosmos"
	// TrackingInMemory keeps tracking rows in the process: demos and tests.
	TrackingInMemory TrackingStore = "InMemory"
)

// DefaultTrackingDatabase is the database of the tracking containers, as
// NimBus names it.
const DefaultTrackingDatabase = "MessageDatabase"

// Tracking configures the Resolver's tracking store. Cosmos.ContainerID is
// not used: the store names its containers (one per endpoint, messages,
// audits).
type Tracking struct {
	Store  TrackingStore
	Cosmos Cosmos
	// UnresolvedRetentionDays is NimBus__Cosmos__UnresolvedRetentionDays:
	// -1 (unlimited) or 1–365 (see tracking.go).
	UnresolvedRetentionDays int
}

func (l *loader) app() App {
	switch raw := l.str(KeyApp); {
	case raw == "" || strings.EqualFold(raw, string(AppEndpoint)):
		return AppEndpoint
	case strings.EqualFold(raw, string(AppResolver)):
		return AppResolver
	default:
		l.problem("%s=%s is not an app this binary serves (use %s or %s)", KeyApp, show(raw), AppEndpoint, AppResolver)
		return AppEndpoint
	}
}

// resolverApp checks what the Resolver app needs: a Service Bus connection
// (the Resolver trigger and the scheduled re-sends of a store failure use
// it) and the tracking store.
func (l *loader) resolverApp(c *Config) {
	r := c.Resolver
	if r.ConnectionString == "" && r.FullyQualifiedNamespace == "" {
		l.problem("the Resolver needs a Service Bus connection: set %s (a connection string) or %s (with a managed identity; %s for a user-assigned one) — the setting the Resolver trigger uses", KeyServiceBus, KeyServiceBusNamespace, KeyServiceBusClientID)
	}
	t := &c.Tracking
	cs := &t.Cosmos
	cs.AccountEndpoint = l.str(KeyTrackingEndpoint)
	cs.ConnectionString = l.str(KeyTrackingConnectionString)
	cs.ClientID = l.str(KeyTrackingClientID)
	cs.DatabaseID = l.cosmosID(KeyTrackingDatabase, DefaultTrackingDatabase)
	cs.AutoCreateContainer = l.bool(KeyTrackingAutoCreate, true)
	cs.AllowRelaxedConsistency = l.bool(KeyTrackingRelaxed, false)
	switch raw := l.str(KeyTrackingStore); {
	case raw == "" || strings.EqualFold(raw, string(TrackingCosmos)):
		t.Store = TrackingCosmos
		l.checkCosmosAccount(cs, cosmosKeys{Store: KeyTrackingStore, Endpoint: KeyTrackingEndpoint, ConnectionString: KeyTrackingConnectionString, ClientID: KeyTrackingClientID})
	case strings.EqualFold(raw, string(TrackingInMemory)):
		t.Store = TrackingInMemory
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s=%s keeps tracking rows in this process only: they are lost on restart and not shared between instances; use it for local demos and tests", KeyTrackingStore, TrackingInMemory))
	default:
		l.problem("%s=%s is not a supported tracking store (use %s or %s)", KeyTrackingStore, show(raw), TrackingCosmos, TrackingInMemory)
	}
}
