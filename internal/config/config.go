// Package config turns app settings into a validated configuration. The
// environment is read by the caller (main); this package only sees a lookup
// function, so tests pass maps. Validation reports every problem at once.
package config

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
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
)

// Defaults.
const (
	DefaultPort               = 8080
	DefaultRetention          = 7 * 24 * time.Hour
	DefaultCleanupSchedule    = "0 0 * * * *"
	DefaultPurgeBatchSize     = 100
	DefaultCleanupBudget      = 4 * time.Minute
	DefaultCleanupConcurrency = 8
	DefaultCosmosDatabase     = "MessageDatabase"
	DefaultCosmosContainer    = "inbox"
	DefaultRetryBaseDelay     = time.Second
	DefaultRetryMaxDelay      = time.Minute
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
	Port     int
	Endpoint string
	LogLevel zerolog.Level
	Inbox    Inbox
	Resolver Resolver
	Retry    Retry
	Host     Host
	// Warnings are problems that do not stop start-up.
	Warnings []string
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
	AccountEndpoint         string
	ConnectionString        string
	ClientID                string
	DatabaseID              string
	ContainerID             string
	AutoCreateContainer     bool
	AllowRelaxedConsistency bool
}

// Retry paces redeliveries after a transient failure. The host abandons a
// failed message and Service Bus redelivers it at once, so without a pause
// ten deliveries (and the dead-letter) could follow one another within a
// second of a short outage. The handler waits BaseDelay·2^(DeliveryCount−1),
// at most MaxDelay, before it answers a transient failure; zero BaseDelay
// answers at once.
type Retry struct {
	BaseDelay time.Duration
	MaxDelay  time.Duration
}

// Delay returns the pause before failing delivery number deliveryCount.
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

// Host configures the protocol server.
type Host struct {
	MaxBodyBytesInFlight int64
}

// Resolver configures response publishing.
type Resolver struct {
	Sink                    Sink
	ConnectionString        string
	FullyQualifiedNamespace string
	ClientID                string
}

// Error lists every configuration problem found.
type Error struct {
	Problems []string
}

func (e *Error) Error() string {
	return "invalid configuration:\n  - " + strings.Join(e.Problems, "\n  - ")
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
	c.Host.MaxBodyBytesInFlight = 256 << 20
	c.LogLevel = l.logLevel()
	c.Endpoint = l.str(KeyEndpoint)
	switch {
	case c.Endpoint == "":
		l.problem("%s is required: the NimBus endpoint this app serves (its topic and session subscription name, and the endpoint side of every inbox key)", KeyEndpoint)
	case len(c.Endpoint) > 260:
		l.problem("%s is longer than 260 characters", KeyEndpoint)
	}

	in := &c.Inbox
	in.Enabled = l.bool(KeyInboxEnabled, false)
	in.Retention = l.duration(KeyRetention, DefaultRetention)
	in.CleanupSchedule = l.schedule()
	in.PurgeBatchSize = l.int(KeyPurgeBatchSize, DefaultPurgeBatchSize, 1, 1000)
	in.CleanupBudget = l.duration(KeyCleanupBudget, DefaultCleanupBudget)
	in.CleanupConcurrency = l.int(KeyCleanupConcurrency, DefaultCleanupConcurrency, 1, 64)
	cs := &in.Cosmos
	cs.AccountEndpoint = l.str(KeyCosmosEndpoint)
	cs.ConnectionString = l.str(KeyCosmosConnectionString)
	cs.ClientID = l.str(KeyCosmosClientID)
	cs.DatabaseID = l.cosmosID(KeyCosmosDatabase, DefaultCosmosDatabase)
	cs.ContainerID = l.cosmosID(KeyCosmosContainer, DefaultCosmosContainer)
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
			l.problem("%s=%q is not a supported inbox provider (use %s or %s)", KeyInboxStore, raw, StoreCosmos, StoreInMemory)
		}
		if _, set := lookup(KeyCleanupSchedule); !set {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s is not set: the Functions host resolves the InboxCleanup timer schedule from it, so set it (default %q) in the app settings", KeyCleanupSchedule, DefaultCleanupSchedule))
		}
	}

	c.Retry.BaseDelay = l.nonNegativeDuration(KeyRetryBaseDelay, DefaultRetryBaseDelay)
	c.Retry.MaxDelay = l.nonNegativeDuration(KeyRetryMaxDelay, DefaultRetryMaxDelay)
	if c.Retry.MaxDelay < c.Retry.BaseDelay {
		l.problem("%s (%v) must not be shorter than %s (%v)", KeyRetryMaxDelay, c.Retry.MaxDelay, KeyRetryBaseDelay, c.Retry.BaseDelay)
	}

	r := &c.Resolver
	r.ConnectionString = l.str(KeyServiceBus)
	r.FullyQualifiedNamespace = l.str(KeyServiceBusNamespace)
	r.ClientID = l.str(KeyServiceBusClientID)
	switch raw := l.str(KeyResolverSink); {
	case raw == "" || strings.EqualFold(raw, string(SinkServiceBus)):
		r.Sink = SinkServiceBus
		if r.ConnectionString == "" && r.FullyQualifiedNamespace == "" {
			l.problem("responses to the Resolver need a Service Bus connection: set %s (a connection string) or %s (with a managed identity; %s for a user-assigned one) — the same setting the Subscriber trigger uses", KeyServiceBus, KeyServiceBusNamespace, KeyServiceBusClientID)
		}
		if r.ConnectionString != "" && !strings.Contains(strings.ToLower(r.ConnectionString), "endpoint=") {
			l.problem("%s is not a Service Bus connection string (it has no Endpoint=)", KeyServiceBus)
		}
	case strings.EqualFold(raw, string(SinkInMemory)):
		r.Sink = SinkInMemory
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s=%s: Resolver responses stay in this process and never reach the Resolver; use it for local demos only", KeyResolverSink, SinkInMemory))
	default:
		l.problem("%s=%q is not supported (use %s or %s)", KeyResolverSink, raw, SinkServiceBus, SinkInMemory)
	}

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
		l.problem("%s=%q is not a boolean (use true or false)", key, raw)
		return def
	}
	return b
}

func (l *loader) int(key string, def, lo, hi int) int {
	raw := l.str(key)
	if raw == "" {
		return def
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < lo || n > hi {
		l.problem("%s=%q must be a whole number from %d to %d", key, raw, lo, hi)
		return def
	}
	return n
}

func (l *loader) duration(key string, def time.Duration) time.Duration {
	raw := l.str(key)
	if raw == "" {
		return def
	}
	d, err := ParseDuration(raw)
	if err != nil || d <= 0 {
		l.problem("%s=%q must be a positive duration such as 7.00:00:00 (a .NET TimeSpan) or 168h", key, raw)
		return def
	}
	return d
}

func (l *loader) nonNegativeDuration(key string, def time.Duration) time.Duration {
	raw := l.str(key)
	if raw == "" {
		return def
	}
	d, err := ParseDuration(raw)
	if err != nil || d < 0 {
		l.problem("%s=%q must be a duration such as 00:00:01 (a .NET TimeSpan) or 1s, or 0 to turn it off", key, raw)
		return def
	}
	return d
}

func (l *loader) logLevel() zerolog.Level {
	raw := l.str(KeyLogLevel)
	if raw == "" {
		return zerolog.InfoLevel
	}
	lv, err := zerolog.ParseLevel(strings.ToLower(raw))
	if err != nil || lv == zerolog.NoLevel {
		l.problem("%s=%q is not a log level (debug, info, warn, error)", KeyLogLevel, raw)
		return zerolog.InfoLevel
	}
	return lv
}

var cronField = regexp.MustCompile(`^[0-9A-Za-z*/,\-?LW#]+$`)

func (l *loader) schedule() string {
	raw := l.str(KeyCleanupSchedule)
	if raw == "" {
		return DefaultCleanupSchedule
	}
	if _, err := ParseDuration(raw); err == nil && strings.Contains(raw, ":") {
		return raw // a TimeSpan schedule (App Service plans)
	}
	fields := strings.Fields(raw)
	ok := len(fields) == 6 || len(fields) == 5
	for _, f := range fields {
		ok = ok && cronField.MatchString(f)
	}
	if !ok {
		l.problem("%s=%q is not an NCRONTAB expression ({second} {minute} {hour} {day} {month} {day-of-week}, e.g. %q)", KeyCleanupSchedule, raw, DefaultCleanupSchedule)
	}
	return raw
}

func (l *loader) cosmosID(key, def string) string {
	raw, set := l.lookup(key)
	if !set || strings.TrimSpace(raw) == "" {
		return def
	}
	if len(raw) > 255 || strings.HasSuffix(raw, " ") || strings.ContainsAny(raw, `/\?#`) {
		l.problem("%s=%q is not a valid Cosmos DB id: 1-255 characters, none of / \\ ? #, not ending with a space", key, raw)
	}
	return raw
}

func (l *loader) checkCosmos(c *Cosmos) {
	switch {
	case c.ConnectionString == "" && c.AccountEndpoint == "":
		l.problem("%s=%s needs an account: set %s (Entra ID; %s for a user-assigned managed identity) or %s (account key, local use)", KeyInboxStore, StoreCosmos, KeyCosmosEndpoint, KeyCosmosClientID, KeyCosmosConnectionString)
	case c.ConnectionString != "" && c.AccountEndpoint != "":
		l.problem("set only one of %s and %s", KeyCosmosEndpoint, KeyCosmosConnectionString)
	case c.AccountEndpoint != "":
		u, err := url.Parse(c.AccountEndpoint)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			l.problem("%s=%q is not an account URL such as https://<account>.documents.azure.com:443/", KeyCosmosEndpoint, c.AccountEndpoint)
		}
	case c.ConnectionString != "":
		lower := strings.ToLower(c.ConnectionString)
		if !strings.Contains(lower, "accountendpoint=") || !strings.Contains(lower, "accountkey=") {
			l.problem("%s must look like AccountEndpoint=https://...;AccountKey=...;", KeyCosmosConnectionString)
		}
	}
}

// ParseDuration accepts a .NET TimeSpan ("[-][d.]hh:mm[:ss[.fffffff]]", or a
// bare number of days such as "7") and Go durations ("168h", "4m30s").
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty duration")
	}
	if !strings.Contains(s, ":") {
		if n, err := strconv.Atoi(s); err == nil {
			return time.Duration(n) * 24 * time.Hour, nil
		}
		return time.ParseDuration(s)
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var days int64
	if i := strings.IndexByte(s, '.'); i >= 0 && i < strings.IndexByte(s, ':') {
		d, err := strconv.ParseInt(s[:i], 10, 32)
		if err != nil {
			return 0, fmt.Errorf("bad days in %q", s)
		}
		days, s = d, s[i+1:]
	}
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, fmt.Errorf("bad TimeSpan %q", s)
	}
	h, err1 := strconv.Atoi(parts[0])
	m, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil || h > 23 || m > 59 || h < 0 || m < 0 {
		return 0, fmt.Errorf("bad TimeSpan %q", s)
	}
	var secs float64
	if len(parts) == 3 {
		f, err := strconv.ParseFloat(parts[2], 64)
		if err != nil || f < 0 || f >= 60 {
			return 0, fmt.Errorf("bad TimeSpan seconds %q", parts[2])
		}
		secs = f
	}
	d := time.Duration(days)*24*time.Hour + time.Duration(h)*time.Hour + time.Duration(m)*time.Minute +
		time.Duration(secs*float64(time.Second))
	if neg {
		d = -d
	}
	return d, nil
}
