package cosmossession

import (
	"errors"
	"fmt"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
)

// Defaults.
const (
	// DefaultDatabaseID is the inbox's database: the state lives in the
	// Strong account and database the inbox uses.
	DefaultDatabaseID = "MessageDatabase"
	// DefaultContainerID is the state's own container. It is not "sessions"
	// because NimBus's tracking store names a container after each endpoint
	// in the same database name, and "sessions" is a plausible endpoint.
	DefaultContainerID = "sessionstate"
	// PartitionKeyPath is the container's partition key path.
	PartitionKeyPath   = "/id"
	DefaultInitTimeout = cosmos.DefaultInitTimeout
)

// Options configures a Store. Zero values mean the defaults.
type Options struct {
	// StoreOptions holds the options every Cosmos store shares: DatabaseID
	// (default "MessageDatabase"), AutoCreateContainer (nil means true:
	// the database and the container, partition key /id, no TTL, are
	// created when absent), AllowRelaxedConsistency, RelaxAs, InitTimeout
	// (default 30s) and Now (the clock for updatedAtUtc).
	cosmos.StoreOptions
	// ContainerID is the container; default "sessionstate". It must not be
	// the inbox's container: both key documents by the same identity hash.
	ContainerID string
}

// ErrInvalidOptions reports Options that fail validation.
var ErrInvalidOptions = errors.New("cosmossession: invalid session-state options")

// withDefaults returns a validated copy of o with defaults applied; the
// error lists every problem, each naming its option field.
func (o Options) withDefaults() (Options, error) {
	errs := o.ApplyDefaults(DefaultDatabaseID)
	if o.ContainerID == "" {
		o.ContainerID = DefaultContainerID
	}
	if err := cosmos.CheckContainerID(o.ContainerID); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	return o, nil
}
