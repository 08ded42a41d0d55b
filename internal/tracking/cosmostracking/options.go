package cosmostracking

import (
	"errors"
	"fmt"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
)

// Defaults and the document TTLs, as NimBus's Cosmos message store has
// them.
const (
	DefaultDatabaseID = "MessageDatabase"
	// MessagesContainerID holds the per-message history (partition key
	// /eventId); AuditsContainerID the audits (partition key /eventId).
	MessagesContainerID = "messages"
	AuditsContainerID   = "audits"

	// UnlimitedRetentionDays keeps unresolved rows until they are
	// rewritten or removed (ttl -1).
	UnlimitedRetentionDays = -1
	// MaxRetentionDays is the product bound of UnresolvedRetentionDays: a
	// payload-bearing row never outlives the one-year audits describing
	// it.
	MaxRetentionDays = 365

	// TerminalTTL is the ttl of Completed and Skipped rows (30 days).
	TerminalTTL = 30 * 24 * 60 * 60
	// SoftDeletedTTL is the ttl of a removed row (60 s).
	SoftDeletedTTL = 60
	// ArchivedTTL is the ttl of an archived row (30 days).
	ArchivedTTL = 30 * 24 * 60 * 60
	// MessageTTL is the ttl of a history document (90 days).
	MessageTTL = 90 * 24 * 60 * 60
	// AuditTTL is the ttl of an audit document (1 year).
	AuditTTL = 365 * 24 * 60 * 60
	// UnlimitedTTL is the ttl written on an unresolved row when retention
	// is unlimited: the row never expires.
	UnlimitedTTL = -1
)

// Options configures a Store. Zero values mean the defaults.
type Options struct {
	// StoreOptions holds the options every Cosmos store shares: DatabaseID
	// (default "MessageDatabase"), AutoCreateContainer (nil means true:
	// the database, the endpoint containers, partition key /id, and the
	// messages and audits containers, partition key /eventId, all with TTL
	// on without a default, are created when absent; set false and
	// provision them beforehand when the identity cannot create them),
	// AllowRelaxedConsistency, RelaxAs, InitTimeout (one container's
	// first-use initialization, default 30s) and Now (the clock for the
	// audits' createdAt).
	cosmos.StoreOptions
	// UnresolvedRetentionDays is how long a Pending, Deferred, Failed,
	// DeadLettered or Unsupported row lives after its last write:
	// UnlimitedRetentionDays (-1) or 1..365 whole days. Zero means the
	// default, unlimited. The window slides: every rewrite stamps it
	// again. It applies to rows written from now on.
	UnresolvedRetentionDays int
	// MaxGuardAttempts bounds the read + conditional replace rounds of a
	// guarded write that keeps losing its compare-and-swap; default 3, as
	// NimBus.
	MaxGuardAttempts int
	// NewID returns a fresh audit document id; default a random GUID.
	NewID func() string
}

// ErrInvalidOptions reports Options that fail validation.
var ErrInvalidOptions = errors.New("cosmostracking: invalid options")

// CheckRetentionDays reports whether days is a valid
// UnresolvedRetentionDays: -1 (unlimited) or 1..365.
func CheckRetentionDays(days int) error {
	if days == UnlimitedRetentionDays || (days >= 1 && days <= MaxRetentionDays) {
		return nil
	}
	return fmt.Errorf("UnresolvedRetentionDays must be -1 (unlimited) or between 1 and %d days; was %d", MaxRetentionDays, days)
}

// RetentionTTL returns the ttl, in seconds, of an unresolved row under
// days of retention: -1 for unlimited, else days × 86400.
func RetentionTTL(days int) int {
	if days == UnlimitedRetentionDays {
		return UnlimitedTTL
	}
	return days * 86400
}

func (o Options) withDefaults() (Options, error) {
	errs := o.ApplyDefaults(DefaultDatabaseID)
	if o.UnresolvedRetentionDays == 0 {
		o.UnresolvedRetentionDays = UnlimitedRetentionDays
	}
	if o.MaxGuardAttempts == 0 {
		o.MaxGuardAttempts = 3
	}
	if o.NewID == nil {
		o.NewID = newGUID
	}
	if err := CheckRetentionDays(o.UnresolvedRetentionDays); err != nil {
		errs = append(errs, err)
	}
	if o.MaxGuardAttempts < 1 {
		errs = append(errs, fmt.Errorf("MaxGuardAttempts: %d is below 1", o.MaxGuardAttempts))
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	return o, nil
}
