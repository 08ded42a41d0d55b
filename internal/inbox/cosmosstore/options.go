package cosmosstore

import (
	"errors"
	"fmt"

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
	// StoreOptions holds the options every Cosmos store shares: DatabaseID
	// (default "MessageDatabase"), AutoCreateContainer (nil means true:
	// the database and the container, partition key /id, no default TTL,
	// are created when absent), AllowRelaxedConsistency (accepting that a
	// duplicate check on one process may miss a record another process
	// just wrote), RelaxAs, InitTimeout (default 30s) and Now (the clock
	// for createdAtUtc).
	cosmos.StoreOptions
	// ContainerID is the container; default "inbox".
	ContainerID string
	// PurgeBatchSize bounds one purge (rows per query page), 1..1000;
	// default 100.
	PurgeBatchSize int
	// PurgeDeleteConcurrency bounds the deletes one purge runs at once,
	// 1..64; default 8.
	PurgeDeleteConcurrency int
}

// ErrInvalidOptions reports Options that fail validation.
var ErrInvalidOptions = errors.New("cosmosstore: invalid inbox options")

// withDefaults returns a validated copy of o with defaults applied. The
// error lists every problem, each naming its option field.
func (o Options) withDefaults() (Options, error) {
	errs := o.ApplyDefaults(DefaultDatabaseID)
	if o.ContainerID == "" {
		o.ContainerID = DefaultContainerID
	}
	if o.PurgeBatchSize == 0 {
		o.PurgeBatchSize = DefaultPurgeBatchSize
	}
	if o.PurgeDeleteConcurrency == 0 {
		o.PurgeDeleteConcurrency = DefaultPurgeDeleteConcurrency
	}
	if err := cosmos.CheckContainerID(o.ContainerID); err != nil {
		errs = append(errs, err)
	}
	if o.PurgeBatchSize < 1 || o.PurgeBatchSize > MaxPurgeBatchSize {
		errs = append(errs, fmt.Errorf("PurgeBatchSize: %d is outside 1..%d", o.PurgeBatchSize, MaxPurgeBatchSize))
	}
	if o.PurgeDeleteConcurrency < 1 || o.PurgeDeleteConcurrency > MaxPurgeDeleteConcurrency {
		errs = append(errs, fmt.Errorf("PurgeDeleteConcurrency: %d is outside 1..%d", o.PurgeDeleteConcurrency, MaxPurgeDeleteConcurrency))
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	return o, nil
}
