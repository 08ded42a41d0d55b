package cosmos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// ErrContainer reports a container that is missing (with AutoCreate off) or
// does not match its ContainerSpec.
var ErrContainer = errors.New("cosmos: container unusable")

// ErrInvalidSpec reports a ContainerSpec or ContainerOptions that fails
// validation.
var ErrInvalidSpec = errors.New("cosmos: invalid container specification")

// TTL is a container's default time to live, in seconds, as Cosmos DB
// defines it: TTLOff (the zero value) means no default TTL, items never
// expire and their own ttl fields are ignored; TTLOnNoDefault (-1) turns
// expiry on without a default, so only items with a ttl field expire; a
// positive value expires items that many seconds after their last write
// unless their own ttl field says otherwise.
type TTL int32

// TTL values with a name.
const (
	TTLOff         TTL = 0
	TTLOnNoDefault TTL = -1
)

// TTLSeconds returns a default TTL of d, rounded up to whole seconds.
func TTLSeconds(d time.Duration) TTL {
	return TTL((d + time.Second - 1) / time.Second)
}

func (t TTL) String() string {
	switch {
	case t == TTLOff:
		return "no default TTL"
	case t == TTLOnNoDefault:
		return "TTL on without a default (-1)"
	}
	return fmt.Sprintf("default TTL %d s", int32(t))
}

// ContainerSpec describes a container a store uses.
type ContainerSpec struct {
	// DatabaseID and ContainerID name the container; both must pass CheckID.
	DatabaseID  string
	ContainerID string
	// PartitionKeyPath is the single partition key path, e.g. "/id".
	PartitionKeyPath string
	// IndexingPolicy is used when the container is created; nil means the
	// service default (everything indexed). An existing container's policy
	// is not checked.
	IndexingPolicy *azcosmos.IndexingPolicy
	// DefaultTTL is used when the container is created. When it is not
	// TTLOff, an existing container without TTL is refused (items' ttl
	// fields would never take effect); an existing container with another
	// TTL value is accepted unless ExactTTL.
	DefaultTTL TTL
	// ExactTTL refuses an existing container whose default TTL is not
	// DefaultTTL.
	ExactTTL bool
	// AutoCreate creates the database and container when missing. Off, a
	// missing container is an operator error (Entra ID data-plane roles
	// cannot create them).
	AutoCreate bool
}

func (s ContainerSpec) validate() []error {
	var errs []error
	if err := CheckID(s.DatabaseID); err != nil {
		errs = append(errs, fmt.Errorf("DatabaseID: %w", err))
	}
	if err := CheckID(s.ContainerID); err != nil {
		errs = append(errs, fmt.Errorf("ContainerID: %w", err))
	}
	if len(s.PartitionKeyPath) < 2 || s.PartitionKeyPath[0] != '/' {
		errs = append(errs, fmt.Errorf("PartitionKeyPath %q is not a path such as /id", s.PartitionKeyPath))
	}
	if s.DefaultTTL < TTLOnNoDefault {
		errs = append(errs, fmt.Errorf("DefaultTTL %d is below -1", int32(s.DefaultTTL)))
	}
	return errs
}

// EnsureContainer reads the container and checks it against spec; when it
// is missing (any 404) and spec.AutoCreate is set, it creates the database
// (a 409 is fine) and the container, and reads the container back if
// another process created it first. A container partitioned on another
// path, a missing container with AutoCreate off, or one without TTL where
// spec asks for TTL is an *OperatorError wrapping ErrContainer.
func (a *Account) EnsureContainer(ctx context.Context, spec ContainerSpec) error {
	if errs := spec.validate(); len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidSpec, errors.Join(errs...))
	}
	client := a.Client()
	db, err := client.NewDatabase(spec.DatabaseID)
	if err != nil {
		return fmt.Errorf("cosmos: %w", err)
	}
	c, err := db.NewContainer(spec.ContainerID)
	if err != nil {
		return fmt.Errorf("cosmos: %w", err)
	}
	for attempt := 0; ; attempt++ {
		resp, err := c.Read(ctx, nil)
		if err == nil {
			return spec.check(resp.ContainerProperties)
		}
		if StatusCode(err) != http.StatusNotFound {
			return fmt.Errorf("cosmos: reading container %q: %w", spec.ContainerID, err)
		}
		if !spec.AutoCreate {
			return OperatorErrorf("%w: container %q in database %q does not exist and AutoCreateContainer is false; provision it (%s)",
				ErrContainer, spec.ContainerID, spec.DatabaseID, spec.describe())
		}
		if attempt > 0 {
			return fmt.Errorf("%w: container %q missing after a create conflict", ErrContainer, spec.ContainerID)
		}
		if _, err := client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: spec.DatabaseID}, nil); err != nil && StatusCode(err) != http.StatusConflict {
			return fmt.Errorf("cosmos: creating database %q: %w", spec.DatabaseID, err)
		}
		props := azcosmos.ContainerProperties{
			ID: spec.ContainerID,
			// Hash version 2 (large partition keys) takes partition
			// key values up to 2,048 bytes; version 1 only up to 101.
			PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{
				Paths:   []string{spec.PartitionKeyPath},
				Kind:    azcosmos.PartitionKeyKindHash,
				Version: 2,
			},
			IndexingPolicy: spec.IndexingPolicy,
		}
		if spec.DefaultTTL != TTLOff {
			ttl := int32(spec.DefaultTTL)
			props.DefaultTimeToLive = &ttl
		}
		_, err = db.CreateContainer(ctx, props, nil)
		if err == nil {
			return nil
		}
		if StatusCode(err) != http.StatusConflict {
			return fmt.Errorf("cosmos: creating container %q: %w", spec.ContainerID, err)
		}
		// Someone else created it meanwhile: read it back to check it.
	}
}

// check compares an existing container's properties with spec.
func (s ContainerSpec) check(p *azcosmos.ContainerProperties) error {
	var paths []string
	if p != nil {
		paths = p.PartitionKeyDefinition.Paths
	}
	if len(paths) != 1 || paths[0] != s.PartitionKeyPath {
		return OperatorErrorf("%w: container %q has partition key paths %v, want [%s]", ErrContainer, s.ContainerID, paths, s.PartitionKeyPath)
	}
	var have *int32
	if p != nil {
		have = p.DefaultTimeToLive
	}
	switch {
	case s.DefaultTTL != TTLOff && have == nil:
		return OperatorErrorf("%w: %w", ErrContainer, &TTLError{DatabaseID: s.DatabaseID, ContainerID: s.ContainerID, Want: s.DefaultTTL})
	case s.ExactTTL && s.DefaultTTL != TTLOff && TTL(*have) != s.DefaultTTL:
		h := TTL(*have)
		return OperatorErrorf("%w: %w", ErrContainer, &TTLError{DatabaseID: s.DatabaseID, ContainerID: s.ContainerID, Have: &h, Want: s.DefaultTTL})
	}
	return nil
}

// TTLError reports an existing container whose default time to live is
// not the one its ContainerSpec asks for: off (Have nil) where the spec
// wants time to live on, or another value where the spec is ExactTTL.
type TTLError struct {
	DatabaseID, ContainerID string
	// Have is the container's default TTL; nil means time to live off.
	Have *TTL
	Want TTL
}

func (e *TTLError) Error() string {
	if e.Have == nil {
		return fmt.Sprintf("container %q has TTL off, want %s (its items would never expire)", e.ContainerID, e.Want)
	}
	return fmt.Sprintf("container %q has %s, want %s", e.ContainerID, *e.Have, e.Want)
}

// describe says how to provision the container, for operator errors.
func (s ContainerSpec) describe() string {
	d := []string{"partition key " + s.PartitionKeyPath, s.DefaultTTL.String()}
	if s.IndexingPolicy != nil {
		d = append(d, "the store's indexing policy")
	}
	return strings.Join(d, ", ")
}

// ContainerOptions configures a Container.
type ContainerOptions struct {
	Spec ContainerSpec
	// AllowRelaxedConsistency skips the Strong check.
	AllowRelaxedConsistency bool
	// Strong words the operator error of the Strong check.
	Strong StrongReason
	// InitTimeout bounds the first-use initialization; zero means
	// DefaultInitTimeout.
	InitTimeout time.Duration
}

// Container is a store's container with its first-use initialization: the
// Strong check (unless AllowRelaxedConsistency) and EnsureContainer, run
// once through a Lazy. Its Client can be used at once; call Ready before
// each operation.
type Container struct {
	account *Account
	opts    ContainerOptions
	init    Lazy
}

// Container validates o and returns the container. It does no I/O.
func (a *Account) Container(o ContainerOptions) (*Container, error) {
	if a == nil || a.clients == nil {
		return nil, errors.New("cosmos: account is required")
	}
	errs := o.Spec.validate()
	if o.InitTimeout < 0 {
		errs = append(errs, fmt.Errorf("InitTimeout %v is negative", o.InitTimeout))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSpec, errors.Join(errs...))
	}
	if _, err := a.clients.current().container(o.Spec.DatabaseID, o.Spec.ContainerID); err != nil {
		return nil, fmt.Errorf("cosmos: %w", err)
	}
	return &Container{account: a, opts: o, init: Lazy{Timeout: o.InitTimeout}}, nil
}

// Client returns the SDK client of the container's items, on the
// account's current client: take it for each operation (see
// Account.Client).
func (c *Container) Client() *azcosmos.ContainerClient {
	cc, err := c.account.clients.current().container(c.opts.Spec.DatabaseID, c.opts.Spec.ContainerID)
	if err != nil {
		// Container checked the ids; the SDK refuses only empty ones.
		panic(err)
	}
	return cc
}

// Spec returns the container's specification.
func (c *Container) Spec() ContainerSpec { return c.opts.Spec }

// Ready runs the first-use initialization unless it has succeeded: the
// Strong check first (a relaxed account fails here, before any container
// request), then EnsureContainer. Concurrent first uses share one attempt;
// a failed attempt is retried by the next call; afterwards Ready costs one
// atomic load and sends nothing.
//
// A refused request comes back explained (Explain).
func (c *Container) Ready(ctx context.Context) error {
	return c.init.Do(ctx, func(ctx context.Context) error {
		if !c.opts.AllowRelaxedConsistency {
			if err := c.account.RequireStrong(ctx, c.opts.Strong); err != nil {
				return Explain(err)
			}
		}
		return Explain(c.account.EnsureContainer(ctx, c.opts.Spec))
	})
}
