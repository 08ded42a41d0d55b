// Package config turns app settings into a validated configuration. It owns
// every app-setting name, default and limit: the adapters (Cosmos, Service
// Bus) take typed options and never read or name a setting. The environment
// is read by the caller (main); this package only sees a lookup function, so
// tests pass maps. Validation reports every problem at once, each naming its
// setting and quoting at most about 100 characters of the bad value (never
// any part of a connection string).
//
// Limits, chosen so that no value silently means something else:
//
//   - NimBus__Endpoint: required in an endpoint app, a name the deployment
//     takes (CheckEndpointName: a letter, then up to 44 letters, digits,
//     '.', '_' or '-', none of ReservedEndpointNames); in the Resolver app,
//     which does not read it, at most 260 UTF-16 code units.
//   - NimBus__Inbox__RetentionPeriod: 1 second to 3650 days.
//   - NimBus__Inbox__CleanupTimeBudget: 1 second to 1 hour; a warning when it
//     is not below the 10-minute functionTimeout of host.json, which would
//     end the run first.
//   - NimBus__Retry__BaseDelay and NimBus__Retry__MaxDelay: 0 to 5 minutes,
//     MaxDelay not below BaseDelay (the pause is jittered into its upper
//     half: see Retry.Pause). The pause runs inside the invocation,
//     which holds the message's session lock and counts against
//     functionTimeout.
//   - NimBus__Inbox__CleanupSchedule and NimBus__Outbox__SweepSchedule:
//     six-field NCRONTAB ({second} {minute} {hour} {day} {month}
//     {day-of-week}) or a positive TimeSpan interval (hh:mm:ss, App Service
//     plans). Five-field cron is refused: the host version decides whether
//     it means a schedule or a start-up error.
//   - NimBus__Outbox__MinimumAge: 1 second to 30 days; a warning when it is
//     not above NimBus__Retry__MaxDelay, which lets the sweep race a
//     redelivery.
//   - NimBus__Inbox__Cosmos__DatabaseId, ContainerId and SessionContainerId:
//     1 to 255 UTF-16 code units, not blank, not ending with a space, none
//     of / \ ? #; SessionContainerId differs from ContainerId.
//   - NimBus__Host__MaxBodyBytesInFlight: 1 MiB to 16 GiB.
//   - NimBus__Publish__MaxMessageBytes: 16 KiB to 1 MiB.
//   - NimBus__LogLevel: debug, info, warn (or warning), error.
//
// Durations are .NET TimeSpans ("7.00:00:00", or a bare whole number of
// days such as "7") or Go durations ("168h"); see ParseDuration.
package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmosconn"
	"github.com/nimbus-go/functions-subscriber/internal/retrypolicy"
)

// App-setting names. Azure Functions app settings use "__" as the
// hierarchy separator.
const (
	KeyPort                   = "FUNCTIONS_CUSTOMHANDLER_PORT"
	KeyEndpoint               = "NimBus__Endpoint"
	KeyInboxEnabled           = "NimBus__Inbox__Enabled"
	KeyInboxStore             = "NimBus__Inbox__Store"
	KeyRetention              = "NimBus__Inbox__RetentionPeriod"
	KeyCleanupSchedule        = "NimBus__Inbox__CleanupSchedule"
	KeyPurgeBatchSize         = "NimBus__Inbox__PurgeBatchSize"
	KeyCleanupBudget          = "NimBus__Inbox__CleanupTimeBudget"
	KeyCleanupConcurrency     = "NimBus__Inbox__CleanupConcurrency"
	KeyCosmosEndpoint         = "NimBus__Inbox__Cosmos__AccountEndpoint"
	KeyCosmosConnectionString = "NimBus__Inbox__Cosmos__ConnectionString"
	KeyCosmosClientID         = "NimBus__Inbox__Cosmos__ClientId"
	KeyCosmosDatabase         = "NimBus__Inbox__Cosmos__DatabaseId"
	KeyCosmosContainer        = "NimBus__Inbox__Cosmos__ContainerId"
	KeyCosmosAutoCreate       = "NimBus__Inbox__Cosmos__AutoCreateContainer"
	KeyCosmosRelaxed          = "NimBus__Inbox__Cosmos__AllowRelaxedConsistency"
	KeyServiceBus             = "ServiceBusConnection"
	KeyServiceBusNamespace    = "ServiceBusConnection__fullyQualifiedNamespace"
	KeyServiceBusClientID     = "ServiceBusConnection__clientId"
	KeyServiceBusCredential   = "ServiceBusConnection__credential"
	KeyResolverSink           = "NimBus__Resolver__Sink"
	KeyLogLevel               = "NimBus__LogLevel"
	KeyRetryBaseDelay         = "NimBus__Retry__BaseDelay"
	KeyRetryMaxDelay          = "NimBus__Retry__MaxDelay"
	KeyMaxBodyBytesInFlight   = "NimBus__Host__MaxBodyBytesInFlight"

	// The Resolver app (see resolverapp.go).
	KeyApp                      = "NimBus__App"
	KeyTrackingStore            = "NimBus__Resolver__Store"
	KeyTrackingEndpoint         = "NimBus__Cosmos__AccountEndpoint"
	KeyTrackingConnectionString = "NimBus__Cosmos__ConnectionString"
	KeyTrackingClientID         = "NimBus__Cosmos__ClientId"
	KeyTrackingDatabase         = "NimBus__Cosmos__DatabaseId"
	KeyTrackingAutoCreate       = "NimBus__Cosmos__AutoCreateContainers"
	KeyTrackingRelaxed          = "NimBus__Cosmos__AllowRelaxedConsistency"
)

// Defaults.
const (
	DefaultPort                 = 8080
	DefaultRetention            = 7 * 24 * time.Hour
	DefaultCleanupSchedule      = "0 0 * * * *"
	DefaultPurgeBatchSize       = 100
	DefaultCleanupBudget        = 4 * time.Minute
	DefaultCleanupConcurrency   = 8
	DefaultCosmosDatabase       = "MessageDatabase"
	DefaultCosmosContainer      = "inbox"
	DefaultRetryBaseDelay       = time.Second
	DefaultRetryMaxDelay        = time.Minute
	DefaultMaxBodyBytesInFlight = 64 << 20 // 64 MiB: processing allocates about six bytes per envelope byte
)

// Limits.
const (
	MaxEndpointLen = 260 // UTF-16 code units

	MinRetention = time.Second
	MaxRetention = 3650 * 24 * time.Hour

	MinPurgeBatchSize     = 1
	MaxPurgeBatchSize     = 1000
	MinCleanupConcurrency = 1
	MaxCleanupConcurrency = 64

	MinCleanupBudget = time.Second
	MaxCleanupBudget = time.Hour
	// HostFunctionTimeout is functionTimeout in host.json: a cleanup budget
	// that is not below it draws a warning.
	HostFunctionTimeout = 10 * time.Minute

	MaxRetryDelay = 5 * time.Minute

	MinMaxBodyBytesInFlight = 1 << 20  // 1 MiB
	MaxMaxBodyBytesInFlight = 16 << 30 // 16 GiB
)

// Store selects the inbox provider.
type Store string

// Inbox providers.
const (
	StoreCosmos   Store = "Cosmos"
	StoreInMemory Store = "InMemory"
)

// Sink selects where Resolver responses go.
type Sink string

// Resolver sinks.
const (
	SinkServiceBus Sink = "ServiceBus"
	// SinkInMemory keeps responses in the process: local demos only.
	SinkInMemory Sink = "InMemory"
)

// Config is the validated configuration.
type Config struct {
	Port int
	// App is the Functions app this process serves (NimBus__App).
	App      App
	Endpoint string
	LogLevel zerolog.Level
	Inbox    Inbox
	Resolver Resolver
	Retry    Retry
	Host     Host
	// Session configures session blocking (endpoint app).
	Session Session
	// Ledger is the sample endpoint's ledger container.
	Ledger Ledger
	// Tracking configures the Resolver app's tracking store; zero for the
	// endpoint app.
	Tracking Tracking
	// CloudEvents configures consuming CloudEvents (off by default).
	CloudEvents CloudEvents
	// Outbox configures the OutboxSweep timer (endpoint app).
	Outbox Outbox
	// RetryPolicies choose whether and when a failed event gets a
	// RetryRequest (NimBus__RetryPolicies__*); nil when none is set, which
	// means no RetryRequest.
	RetryPolicies *retrypolicy.Set
	// Warnings are problems that do not stop start-up.
	Warnings []string
}

// Host configures the custom handler process.
type Host struct {
	// MaxBodyBytesInFlight bounds the total bytes of invocation bodies
	// processed at once (NimBus__Host__MaxBodyBytesInFlight).
	MaxBodyBytesInFlight int64
}

// Inbox configures deduplication and cleanup.
type Inbox struct {
	Enabled            bool
	Store              Store
	Retention          time.Duration
	CleanupSchedule    string
	PurgeBatchSize     int
	CleanupBudget      time.Duration
	CleanupConcurrency int
	Cosmos             Cosmos
}

// Cosmos configures the Cosmos DB inbox.
type Cosmos struct {
	AccountEndpoint  string
	ConnectionString string
	// Connection is ConnectionString parsed; zero when it is not set.
	Connection              CosmosConnection
	ClientID                string
	DatabaseID              string
	ContainerID             string
	AutoCreateContainer     bool
	AllowRelaxedConsistency bool

	// SessionContainerID is the session-state store's container, in the
	// same account and database (NimBus__Inbox__Cosmos__SessionContainerId).
	SessionContainerID string
}

// Retry paces redeliveries after a transient failure. The host abandons a
// failed message and Service Bus redelivers it at once, so without a pause
// ten deliveries (and the dead-letter) could follow one another within a
// second of a short outage. The handler waits about
// BaseDelay·2^(DeliveryCount−1), at most MaxDelay (Delay), before it
// answers a transient failure, jittered (Pause); zero BaseDelay answers at
// once.
type Retry struct {
	BaseDelay time.Duration
	MaxDelay  time.Duration
}

// Delay returns the longest pause before failing delivery number
// deliveryCount.
func (r Retry) Delay(deliveryCount int) time.Duration {
	if r.BaseDelay <= 0 {
		return 0
	}
	d := r.BaseDelay
	for i := 1; i < deliveryCount && d < r.MaxDelay; i++ {
		d *= 2
	}
	return min(d, r.MaxDelay)
}

// Pause returns the pause before failing delivery number deliveryCount:
// Delay jittered uniformly into [Delay/2, Delay) by rnd in [0,1), so that
// deliveries that failed together (copies whose batches conflicted, the
// messages of one outage) are not redelivered together. A zero Delay stays
// zero.
func (r Retry) Pause(deliveryCount int, rnd float64) time.Duration {
	switch d, half := r.Delay(deliveryCount), r.Delay(deliveryCount)/2; {
	case !(rnd > 0): // NaN too
		return half
	case rnd >= 1:
		return d
	default:
		return half + time.Duration(rnd*float64(d-half))
	}
}

// Resolver configures response publishing.
type Resolver struct {
	Sink             Sink
	ConnectionString string
	// Connection is ConnectionString parsed; zero when it is not set.
	Connection              ServiceBusConnection
	FullyQualifiedNamespace string
	ClientID                string
}

// Error lists every configuration problem found.
type Error struct {
	Problems []string
}

// maxListed bounds the problems Error lists (each is bounded already).
const maxListed = 50

func (e *Error) Error() string {
	p := e.Problems
	if len(p) > maxListed {
		p = append(p[:maxListed:maxListed], fmt.Sprintf("… and %d more problems", len(e.Problems)-maxListed))
	}
	return "invalid configuration:\n  - " + strings.Join(p, "\n  - ")
}

// Lookup returns a setting and whether it is set.
type Lookup func(key string) (string, bool)

// FromMap is a Lookup over a map, for tests and demos.
func FromMap(m map[string]string) Lookup {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// Load reads and validates every setting. A nil error means the returned
// Config is complete; otherwise the *Error lists every problem.
func Load(lookup Lookup) (*Config, error) {
	l := loader{lookup: lookup}
	c := &Config{}
	c.Port = l.int(KeyPort, DefaultPort, 1, 65535)
	c.LogLevel = l.logLevel()
	c.App = l.app()
	c.Endpoint = l.str(KeyEndpoint)
	switch n := utf16Len(c.Endpoint); {
	case c.Endpoint == "" && c.App == AppResolver:
		// The Resolver serves every endpoint; NimBus__Endpoint is not read.
	case c.Endpoint == "":
		l.problem("%s is required: the NimBus endpoint this app serves (its topic and session subscription name, and the endpoint side of every inbox key)", KeyEndpoint)
	case n > MaxEndpointLen:
		l.problem("%s=%s is %d UTF-16 code units long; the most is %d", KeyEndpoint, show(c.Endpoint), n, MaxEndpointLen)
	case strings.IndexFunc(c.Endpoint, unicode.IsControl) >= 0 || !utf8.ValidString(c.Endpoint):
		// A topic name never holds one, and the endpoint goes into every
		// inbox key, log line and Resolver message.
		l.problem("%s=%s holds a control character (such as a line break) or invalid UTF-8", KeyEndpoint, show(c.Endpoint))
	case c.App == AppEndpoint:
		// The endpoint's topology is named after it.
		if why := endpointNameProblem(c.Endpoint); why != "" {
			l.problem("%s=%s %s", KeyEndpoint, show(c.Endpoint), why)
		}
	}
	// NimBus__Cosmos__UnresolvedRetentionDays fails start-up when invalid;
	// the Resolver app's tracking settings carry its value.
	c.Tracking.UnresolvedRetentionDays = l.retentionDays()
	c.Host.MaxBodyBytesInFlight = l.int64(KeyMaxBodyBytesInFlight, DefaultMaxBodyBytesInFlight, MinMaxBodyBytesInFlight, MaxMaxBodyBytesInFlight, "bytes")

	c.Ledger = l.ledger()
	in := &c.Inbox
	in.Enabled = l.bool(KeyInboxEnabled, false) && c.App == AppEndpoint
	in.Retention = l.duration(KeyRetention, DefaultRetention, MinRetention, MaxRetention)
	in.CleanupSchedule = l.schedule(KeyCleanupSchedule, DefaultCleanupSchedule, "InboxCleanup")
	in.PurgeBatchSize = l.int(KeyPurgeBatchSize, DefaultPurgeBatchSize, MinPurgeBatchSize, MaxPurgeBatchSize)
	in.CleanupBudget = l.duration(KeyCleanupBudget, DefaultCleanupBudget, MinCleanupBudget, MaxCleanupBudget)
	if in.CleanupBudget >= HostFunctionTimeout {
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s=%s is not below the host's functionTimeout (%s in host.json): the host ends a cleanup run before its budget is spent", KeyCleanupBudget, formatTimeSpan(in.CleanupBudget), formatTimeSpan(HostFunctionTimeout)))
	}
	in.CleanupConcurrency = l.int(KeyCleanupConcurrency, DefaultCleanupConcurrency, MinCleanupConcurrency, MaxCleanupConcurrency)
	cs := &in.Cosmos
	cs.AccountEndpoint = l.str(KeyCosmosEndpoint)
	cs.ConnectionString = l.str(KeyCosmosConnectionString)
	cs.ClientID = l.str(KeyCosmosClientID)
	cs.DatabaseID = l.cosmosID(KeyCosmosDatabase, DefaultCosmosDatabase)
	cs.ContainerID = l.cosmosID(KeyCosmosContainer, DefaultCosmosContainer)
	l.sessionContainer(cs)
	cs.AutoCreateContainer = l.bool(KeyCosmosAutoCreate, true)
	cs.AllowRelaxedConsistency = l.bool(KeyCosmosRelaxed, false)
	if in.Enabled {
		raw := l.str(KeyInboxStore)
		switch {
		case raw == "":
			l.problem("%s must name the inbox provider when %s is true: %s or %s", KeyInboxStore, KeyInboxEnabled, StoreCosmos, StoreInMemory)
		case strings.EqualFold(raw, string(StoreCosmos)):
			in.Store = StoreCosmos
			l.checkCosmos(cs)
		case strings.EqualFold(raw, string(StoreInMemory)):
			in.Store = StoreInMemory
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s=%s keeps inbox records in this process only: deduplication does not survive a restart or span instances; use it for local runs and tests", KeyInboxStore, StoreInMemory))
		default:
			l.problem("%s=%s is not a supported inbox provider (use %s or %s)", KeyInboxStore, show(raw), StoreCosmos, StoreInMemory)
		}
		if _, set := lookup(KeyCleanupSchedule); !set {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s is not set: the Functions host resolves the InboxCleanup timer schedule from it, so set it (default %q) in the app settings", KeyCleanupSchedule, DefaultCleanupSchedule))
		}
	}

	l.session(c)

	c.Retry.BaseDelay = l.duration(KeyRetryBaseDelay, DefaultRetryBaseDelay, 0, MaxRetryDelay)
	c.Retry.MaxDelay = l.duration(KeyRetryMaxDelay, DefaultRetryMaxDelay, 0, MaxRetryDelay)
	if c.Retry.MaxDelay < c.Retry.BaseDelay {
		l.problem("%s (%s) must not be shorter than %s (%s)", KeyRetryMaxDelay, formatTimeSpan(c.Retry.MaxDelay), KeyRetryBaseDelay, formatTimeSpan(c.Retry.BaseDelay))
	}
	l.outbox(c)

	r := &c.Resolver
	r.ConnectionString = l.str(KeyServiceBus)
	r.FullyQualifiedNamespace = l.str(KeyServiceBusNamespace)
	r.ClientID = l.str(KeyServiceBusClientID)
	// The Subscriber trigger reads the same settings, so they are checked
	// whenever they are set, whatever the sink.
	if r.ConnectionString != "" {
		var why string
		if r.Connection, why = parseServiceBusConnection(r.ConnectionString); why != "" {
			l.problem("%s is not a usable Service Bus connection string: %s (the form is Endpoint=sb://<namespace>.servicebus.windows.net/;SharedAccessKeyName=<name>;SharedAccessKey=<key>)", KeyServiceBus, why)
		}
	}
	if r.FullyQualifiedNamespace != "" {
		if placeholder(r.FullyQualifiedNamespace) {
			l.problem("%s=%s is still the sample's placeholder: set your namespace's host name (<namespace>.servicebus.windows.net), or leave it empty when %s holds a connection string", KeyServiceBusNamespace, show(r.FullyQualifiedNamespace), KeyServiceBus)
		} else if why := checkNamespace(r.FullyQualifiedNamespace); why != "" {
			l.problem("%s=%s must be a host name such as <namespace>.servicebus.windows.net: %s", KeyServiceBusNamespace, show(r.FullyQualifiedNamespace), why)
		}
	}
	switch raw := l.str(KeyResolverSink); {
	case c.App == AppResolver:
		l.resolverApp(c)
	case raw == "" || strings.EqualFold(raw, string(SinkServiceBus)):
		r.Sink = SinkServiceBus
		if r.ConnectionString == "" && r.FullyQualifiedNamespace == "" {
			l.problem("responses to the Resolver need a Service Bus connection: set %s (a connection string) or %s (with a managed identity; %s for a user-assigned one) — the same setting the Subscriber trigger uses", KeyServiceBus, KeyServiceBusNamespace, KeyServiceBusClientID)
		}
	case strings.EqualFold(raw, string(SinkInMemory)):
		r.Sink = SinkInMemory
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s=%s: Resolver responses stay in this process and never reach the Resolver; use it for local demos only", KeyResolverSink, SinkInMemory))
	default:
		l.problem("%s=%s is not supported (use %s or %s)", KeyResolverSink, show(raw), SinkServiceBus, SinkInMemory)
	}

	l.cloudEvents(c)
	l.retryPolicies(c)
	l.otel()

	if len(l.problems) > 0 {
		return nil, &Error{Problems: l.problems}
	}
	return c, nil
}

type loader struct {
	lookup   Lookup
	problems []string
}

func (l *loader) problem(format string, args ...any) {
	l.problems = append(l.problems, fmt.Sprintf(format, args...))
}

func (l *loader) str(key string) string {
	v, _ := l.lookup(key)
	return strings.TrimSpace(v)
}

func (l *loader) bool(key string, def bool) bool {
	raw := l.str(key)
	if raw == "" {
		return def
	}
	b, err := strconv.ParseBool(raw)
	if err != nil {
		l.problem("%s=%s is not a boolean (use true or false)", key, show(raw))
		return def
	}
	return b
}

func (l *loader) int(key string, def, lo, hi int) int {
	return int(l.int64(key, int64(def), int64(lo), int64(hi), ""))
}

func (l *loader) int64(key string, def, lo, hi int64, unit string) int64 {
	raw := l.str(key)
	if raw == "" {
		return def
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n < lo || n > hi {
		if unit != "" {
			unit = " of " + unit
		}
		l.problem("%s=%s must be a whole number%s from %d to %d", key, show(raw), unit, lo, hi)
		return def
	}
	return n
}

// duration reads a duration within [lo, hi].
func (l *loader) duration(key string, def, lo, hi time.Duration) time.Duration {
	raw := l.str(key)
	if raw == "" {
		return def
	}
	rng := fmt.Sprintf("from %s to %s", formatTimeSpan(lo), formatTimeSpan(hi))
	if lo == 0 {
		rng = fmt.Sprintf("from 0 (off) to %s", formatTimeSpan(hi))
	}
	d, why := parseDuration(raw)
	switch {
	case why != "":
		l.problem("%s=%s is not a usable duration: %s; it must be %s, written as a .NET TimeSpan (d.hh:mm:ss, or a whole number of days) or a Go duration (such as 90s)", key, show(raw), why, rng)
		return def
	case d < lo || d > hi:
		l.problem("%s=%s (%s) is out of range: it must be %s", key, show(raw), formatTimeSpan(d), rng)
		return def
	}
	return d
}

// logLevels are the accepted NimBus__LogLevel values. Lower levels than
// error (fatal, panic, disabled) are refused: they would hide failures.
var logLevels = map[string]zerolog.Level{
	"debug":   zerolog.DebugLevel,
	"info":    zerolog.InfoLevel,
	"warn":    zerolog.WarnLevel,
	"warning": zerolog.WarnLevel,
	"error":   zerolog.ErrorLevel,
}

func (l *loader) logLevel() zerolog.Level {
	raw := l.str(KeyLogLevel)
	if raw == "" {
		return zerolog.InfoLevel
	}
	lv, ok := logLevels[strings.ToLower(raw)]
	if !ok {
		l.problem("%s=%s is not a log level (debug, info, warn, error)", KeyLogLevel, show(raw))
		return zerolog.InfoLevel
	}
	return lv
}

// schedule reads the schedule of the timer function named function.
func (l *loader) schedule(key, def, function string) string {
	raw, set := l.lookup(key)
	if !set {
		return def
	}
	if why := checkSchedule(raw, function); why != "" {
		l.problem("%s=%s is not a timer schedule: %s", key, show(raw), why)
		return def
	}
	return strings.TrimSpace(raw)
}

// cosmosID reads a Cosmos DB id. The raw value is checked (a trailing space
// matters); unset or blank means the default.
func (l *loader) cosmosID(key, def string) string {
	raw, set := l.lookup(key)
	if !set || strings.TrimSpace(raw) == "" {
		return def
	}
	if err := checkCosmosID(raw); err != nil {
		l.problem("%s=%s is not a valid Cosmos DB id: %v", key, show(raw), err)
	}
	return raw
}

func (l *loader) checkCosmos(c *Cosmos) {
	l.checkCosmosAccount(c, cosmosKeys{Store: KeyInboxStore, Endpoint: KeyCosmosEndpoint, ConnectionString: KeyCosmosConnectionString, ClientID: KeyCosmosClientID})
}

// cosmosKeys name the settings of one Cosmos account: the inbox's or the
// Resolver's tracking store.
type cosmosKeys struct{ Store, Endpoint, ConnectionString, ClientID string }

func (l *loader) checkCosmosAccount(c *Cosmos, k cosmosKeys) {
	switch {
	case c.ConnectionString == "" && c.AccountEndpoint == "":
		l.problem("%s=%s needs an account: set %s (Entra ID; %s for a user-assigned managed identity) or %s (account key, local use)", k.Store, StoreCosmos, k.Endpoint, k.ClientID, k.ConnectionString)
	case placeholder(c.AccountEndpoint):
		l.problem("%s=%s is still the sample's placeholder: set your account's endpoint, or leave it empty and set %s (account key, local use)", k.Endpoint, show(c.AccountEndpoint), k.ConnectionString)
	case c.ConnectionString != "" && c.AccountEndpoint != "":
		l.problem("set only one of %s and %s", k.Endpoint, k.ConnectionString)
	case c.AccountEndpoint != "":
		if err := cosmosconn.CheckEndpoint(c.AccountEndpoint); err != nil {
			l.problem("%s=%s is not an account URL such as https://<account>.documents.azure.com:443/: %v", k.Endpoint, show(c.AccountEndpoint), err)
		} else if cosmosconn.PlainHTTPToAnotherMachine(c.AccountEndpoint) {
			l.problem("%s=%s uses http: Entra ID authentication needs https except on this machine (localhost)", k.Endpoint, show(c.AccountEndpoint))
		}
	case c.ConnectionString != "":
		var err error
		if c.Connection, err = cosmosconn.Parse(c.ConnectionString); err != nil {
			l.problem("%s is not a usable Cosmos DB connection string: %v (the form is %s)", k.ConnectionString, err, cosmosconn.Form)
		}
		if c.ClientID != "" {
			l.problem("%s selects a managed identity, which a connection string (%s, key auth) excludes: set one of them", k.ClientID, k.ConnectionString)
		}
	}
}

// KeyUnresolvedRetentionDays bounds the life of the Resolver's unresolved
// tracking rows (loader.retentionDays reads it).
const KeyUnresolvedRetentionDays = "NimBus__Cosmos__UnresolvedRetentionDays"
