package cosmossession

import (
	"errors"
	"fmt"
	"time"

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
	// DatabaseID is the database; default "MessageDatabase".
	DatabaseID string
	// ContainerID is the container; default "sessionstate". It must not be
	// the inbox's container: both key documents by the same identity hash.
	ContainerID string
	// AutoCreateContainer creates the database and container (partition key
	// /id, no TTL) when absent; nil means true. Set false when the identity
	// cannot create them (Entra data-plane RBAC).
	AutoCreateContainer *bool
	// AllowRelaxedConsistency skips the check that the account's default
	// consistency is Strong.
	AllowRelaxedConsistency bool
	// RelaxAs names, in the operator error of a relaxed account, how the
	// operator sets AllowRelaxedConsistency; default
	// "AllowRelaxedConsistency".
	RelaxAs string
	// InitTimeout bounds the first-use initialization (consistency check
	// and container ensure); default 30s.
	InitTimeout time.Duration
	// Now is the clock for updatedAtUtc; default time.Now.
	Now func() time.Time
}

// ErrInvalidOptions reports Options that fail validation.
var ErrInvalidOptions = errors.New("cosmossession: invalid session-state options")

// withDefaults returns a validated copy of o with defaults applied; the
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
	if o.InitTimeout < 0 {
		errs = append(errs, fmt.Errorf("InitTimeout: %v is negative", o.InitTimeout))
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	return o, nil
}
