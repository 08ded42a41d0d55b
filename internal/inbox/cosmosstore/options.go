package cosmosstore

import (
	"errors"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
)

// Defaults, as NimBus's CosmosInboxOptions where it has them.
const (
	DefaultDatabaseID             = "MessageDatabase"
	DefaultContainerID            = "inbox"
	DefaultPurgeBatchSize         = 100
	MaxPurgeBatchSize             = 1000
	DefaultPurgeDeleteConcurrency = 8
	MaxPurgeDeleteConcurrency     = 64
	DefaultInitTimeout            = cosmos.DefaultInitTimeout
	// PartitionKeyPath is the inbox container's partition key path.
	PartitionKeyPath = "/id"
)

// IndexedPaths are the only paths the inbox container indexes: the ones the
// purge and oldest-record queries filter on (endpointId equality, createdAtUtc
// range and IN). The duplicate check is a point read by id and the record a
// create, neither of which uses the index; messageId is never queried.
// Cosmos DB charges a write by the index terms it maintains, so leaving the
// rest unindexed makes every record and purge delete cheaper.
var IndexedPaths = []string{"/endpointId/?", "/createdAtUtc/?"}

// IndexingPolicy returns the inbox container's indexing policy, used when
// the store creates the container (the Bicep sets the same): consistent,
// IndexedPaths included, everything else excluded. An existing container
// keeps whatever policy it has; the queries are correct under any policy.
func IndexingPolicy() *azcosmos.IndexingPolicy {
	p := &azcosmos.IndexingPolicy{
		Automatic:     true,
		IndexingMode:  azcosmos.IndexingModeConsistent,
		ExcludedPaths: []azcosmos.ExcludedPath{{Path: "/*"}},
	}
	for _, path := range IndexedPaths {
		p.IncludedPaths = append(p.IncludedPaths, azcosmos.IncludedPath{Path: path})
	}
	return p
}

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
	// RelaxAs names, in the operator error of a relaxed account, how the
	// operator sets AllowRelaxedConsistency (the app passes its setting
	// name); default "AllowRelaxedConsistency".
	RelaxAs string
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
// error lists every problem, each naming its option field.
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
	if err := cosmos.CheckID(o.DatabaseID); err != nil {
		errs = append(errs, fmt.Errorf("DatabaseID %q: %w", o.DatabaseID, err))
	}
	if err := cosmos.CheckID(o.ContainerID); err != nil {
		errs = append(errs, fmt.Errorf("ContainerID %q: %w", o.ContainerID, err))
	}
	if o.PurgeBatchSize < 1 || o.PurgeBatchSize > MaxPurgeBatchSize {
		errs = append(errs, fmt.Errorf("PurgeBatchSize: %d is outside 1..%d", o.PurgeBatchSize, MaxPurgeBatchSize))
	}
	if o.PurgeDeleteConcurrency < 1 || o.PurgeDeleteConcurrency > MaxPurgeDeleteConcurrency {
		errs = append(errs, fmt.Errorf("PurgeDeleteConcurrency: %d is outside 1..%d", o.PurgeDeleteConcurrency, MaxPurgeDeleteConcurrency))
	}
	if o.InitTimeout < 0 {
		errs = append(errs, fmt.Errorf("InitTimeout: %v is negative", o.InitTimeout))
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	return o, nil
}
