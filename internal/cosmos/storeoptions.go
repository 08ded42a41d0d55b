package cosmos

import (
	"fmt"
	"time"
)

// StoreOptions are the options every Cosmos-backed store shares; a store
// embeds it in its own Options next to its store-specific fields, so
// opts.DatabaseID and the rest read as the store's own. Zero values mean
// the defaults.
type StoreOptions struct {
	// DatabaseID is the database; the store names its default.
	DatabaseID string
	// AutoCreateContainer creates the database and the store's containers
	// when absent; nil means true. Set false when the identity cannot
	// create them (Entra data-plane RBAC): the first use then fails if a
	// container is missing.
	AutoCreateContainer *bool
	// AllowRelaxedConsistency skips the check that the account's default
	// consistency is Strong, accepting what the store's StrongReason says.
	AllowRelaxedConsistency bool
	// RelaxAs names, in the operator error of a relaxed account, how the
	// operator sets AllowRelaxedConsistency (the app passes its setting
	// name); default "AllowRelaxedConsistency".
	RelaxAs string
	// InitTimeout bounds a container's first-use initialization
	// (consistency check and container ensure), which runs detached from
	// any one caller's context; default DefaultInitTimeout (30s).
	InitTimeout time.Duration
	// Now is the store's clock for the times it writes; default time.Now.
	Now func() time.Time
}

// ApplyDefaults fills o's zero values, with defaultDatabaseID for an empty
// DatabaseID, gives o its own copy of AutoCreateContainer (so a caller
// changing its bool later changes nothing), and returns every problem,
// each naming its option field. The store adds its own problems and wraps
// them in its invalid-options error.
func (o *StoreOptions) ApplyDefaults(defaultDatabaseID string) []error {
	if o.DatabaseID == "" {
		o.DatabaseID = defaultDatabaseID
	}
	auto := true
	if o.AutoCreateContainer != nil {
		auto = *o.AutoCreateContainer
	}
	o.AutoCreateContainer = &auto
	if o.InitTimeout == 0 {
		o.InitTimeout = DefaultInitTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	var errs []error
	if err := CheckID(o.DatabaseID); err != nil {
		errs = append(errs, fmt.Errorf("DatabaseID %q: %w", o.DatabaseID, err))
	}
	if o.InitTimeout < 0 {
		errs = append(errs, fmt.Errorf("InitTimeout: %v is negative", o.InitTimeout))
	}
	return errs
}

// CheckContainerID returns the problem of a store's container id option,
// naming the field as ContainerID, or nil.
func CheckContainerID(id string) error {
	if err := CheckID(id); err != nil {
		return fmt.Errorf("ContainerID %q: %w", id, err)
	}
	return nil
}

// ContainerOptions returns the options of the container spec names in o's
// database: spec's DatabaseID and AutoCreate are taken from o (the store
// sets the container id, partition key, indexing policy and TTL), the
// Strong check is worded by strong with o's RelaxAs, and o's
// AllowRelaxedConsistency and InitTimeout apply. Call it on options that
// went through ApplyDefaults.
func (o StoreOptions) ContainerOptions(spec ContainerSpec, strong StrongReason) ContainerOptions {
	spec.DatabaseID = o.DatabaseID
	spec.AutoCreate = o.AutoCreateContainer == nil || *o.AutoCreateContainer
	strong.RelaxAs = o.RelaxAs
	return ContainerOptions{
		Spec:                    spec,
		AllowRelaxedConsistency: o.AllowRelaxedConsistency,
		Strong:                  strong,
		InitTimeout:             o.InitTimeout,
	}
}
