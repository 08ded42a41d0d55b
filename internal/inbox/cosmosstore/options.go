package cosmosstore

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
)

// App settings the options correspond to; validation errors name them.
const (
	SettingDatabaseID              = "NimBus__Inbox__Cosmos__DatabaseId"
	SettingContainerID             = "NimBus__Inbox__Cosmos__ContainerId"
	SettingAutoCreateContainer     = "NimBus__Inbox__Cosmos__AutoCreateContainer"
	SettingAllowRelaxedConsistency = "NimBus__Inbox__Cosmos__AllowRelaxedConsistency"
	SettingPurgeBatchSize          = "NimBus__Inbox__PurgeBatchSize"
	SettingPurgeDeleteConcurrency  = "NimBus__Inbox__CleanupConcurrency"
)

// Defaults, as NimBus's CosmosInboxOptions where it has them.
const (
	DefaultDatabaseID             = "MessageDatabase"
	DefaultContainerID            = "inbox"
	DefaultPurgeBatchSize         = 100
	MaxPurgeBatchSize             = 1000
	DefaultPurgeDeleteConcurrency = 8
	MaxPurgeDeleteConcurrency     = 64
	DefaultInitTimeout            = 30 * time.Second
	// PartitionKeyPath is the inbox container's partition key path.
	PartitionKeyPath = "/id"
)

// Options configures a Store. Zero values mean the defaults.
type Options struct {
	// DatabaseID is the database; default "MessageDatabase".
	DatabaseID string
	// ContainerID is the container; default "inbox".
	ContainerID string
	// AutoCreateContainer creates the database and container (partition key
	// /id, no default TTL) when absent; nil means true. Set false when the
	// identity cannot create them (Entra data-plane RBAC): the first use
	// then fails if the container is missing.
	AutoCreateContainer *bool
	// AllowRelaxedConsistency skips the check that the account's default
	// consistency is Strong, accepting that a duplicate check on one
	// process may miss a record another process just wrote.
	AllowRelaxedConsistency bool
	// PurgeBatchSize bounds one purge (rows per query page), 1..1000;
	// default 100.
	PurgeBatchSize int
	// PurgeDeleteConcurrency bounds the deletes one purge runs at once,
	// 1..64; default 8.
	PurgeDeleteConcurrency int
	// InitTimeout bounds the first-use initialization (consistency check and
	// container ensure), which runs detached from any one caller's context;
	// default 30s.
	InitTimeout time.Duration
	// Now is the clock for createdAtUtc; default time.Now.
	Now func() time.Time
}

// ErrInvalidOptions reports Options that fail validation.
var ErrInvalidOptions = errors.New("cosmosstore: invalid inbox options")

// withDefaults returns a validated copy of o with defaults applied. The
// error lists every problem, each naming its setting.
func (o Options) withDefaults() (Options, error) {
	if o.DatabaseID == "" {
		o.DatabaseID = DefaultDatabaseID
	}
	if o.ContainerID == "" {
		o.ContainerID = DefaultContainerID
	}
	if o.AutoCreateContainer == nil {
		t := true
		o.AutoCreateContainer = &t
	} else {
		v := *o.AutoCreateContainer
		o.AutoCreateContainer = &v
	}
	if o.PurgeBatchSize == 0 {
		o.PurgeBatchSize = DefaultPurgeBatchSize
	}
	if o.PurgeDeleteConcurrency == 0 {
		o.PurgeDeleteConcurrency = DefaultPurgeDeleteConcurrency
	}
	if o.InitTimeout == 0 {
		o.InitTimeout = DefaultInitTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}

	var errs []error
	if msg := checkResourceID(o.DatabaseID); msg != "" {
		errs = append(errs, fmt.Errorf("%s: %s", SettingDatabaseID, msg))
	}
	if msg := checkResourceID(o.ContainerID); msg != "" {
		errs = append(errs, fmt.Errorf("%s: %s", SettingContainerID, msg))
	}
	if o.PurgeBatchSize < 1 || o.PurgeBatchSize > MaxPurgeBatchSize {
		errs = append(errs, fmt.Errorf("%s: %d is outside 1..%d", SettingPurgeBatchSize, o.PurgeBatchSize, MaxPurgeBatchSize))
	}
	if o.PurgeDeleteConcurrency < 1 || o.PurgeDeleteConcurrency > MaxPurgeDeleteConcurrency {
		errs = append(errs, fmt.Errorf("%s: %d is outside 1..%d", SettingPurgeDeleteConcurrency, o.PurgeDeleteConcurrency, MaxPurgeDeleteConcurrency))
	}
	if o.InitTimeout < 0 {
		errs = append(errs, fmt.Errorf("init timeout %v is negative", o.InitTimeout))
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	return o, nil
}

// checkResourceID applies NimBus's rule for Cosmos ids: 1-255 characters,
// not blank, not ending in a space, none of / \ ? #.
func checkResourceID(id string) string {
	n := inbox.UTF16Len(id)
	switch {
	case n < 1 || n > 255:
		return fmt.Sprintf("Cosmos DB resource ids must be 1-255 characters (got %d)", n)
	case strings.TrimSpace(id) == "":
		return "Cosmos DB resource ids must not be blank"
	case strings.HasSuffix(id, " "):
		return "Cosmos DB resource ids must not end with a space"
	case strings.ContainsAny(id, `/\?#`):
		return `Cosmos DB resource ids must not contain /, \, ? or #`
	}
	return ""
}
