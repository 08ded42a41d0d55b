package cosmos

import (
	"context"
	"errors"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// ErrRelaxedConsistency reports an account whose default consistency is
// weaker than Strong where a store requires Strong.
var ErrRelaxedConsistency = errors.New("cosmos: Strong consistency required")

// StrongReason says, for the operator error, why a store needs Strong
// consistency and what relaxing it accepts.
type StrongReason struct {
	// Store names the store, e.g. "the inbox".
	Store string
	// Why says what goes wrong below Strong.
	Why string
	// Accepting says what AllowRelaxedConsistency=true accepts, and when
	// that is reasonable.
	Accepting string
	// RelaxAs is how the operator turns the check off, for example the
	// app setting that maps to AllowRelaxedConsistency; default
	// "AllowRelaxedConsistency".
	RelaxAs string
}

// RequireStrong reads the account's default consistency (one signed
// GET on the account endpoint) and returns nil if it is Strong. Otherwise
// it returns an *OperatorError wrapping ErrRelaxedConsistency that names
// the level found, Strong, and the fix (a Strong account, or the
// AllowRelaxedConsistency option). A failed read is returned wrapped, not
// as an operator error. It does not cache: see Container for once-only
// use.
func (a *Account) RequireStrong(ctx context.Context, r StrongReason) error {
	level, err := a.DefaultConsistency(ctx)
	if err != nil {
		return fmt.Errorf("cosmos: validating consistency: %w", err)
	}
	if level == azcosmos.ConsistencyLevelStrong {
		return nil
	}
	store := r.Store
	if store == "" {
		store = "this store"
	}
	why := r.Why
	if why == "" {
		why = "reads must see every write acknowledged to any process, which only Strong guarantees"
	}
	accepting := r.Accepting
	if accepting == "" {
		accepting = "stale reads"
	}
	relax := r.RelaxAs
	if relax == "" {
		relax = "AllowRelaxedConsistency"
	}
	return OperatorErrorf("%w by %s: the account's default consistency is %s; %s. Use a Strong account, or set %s=true to accept %s",
		ErrRelaxedConsistency, store, level, why, relax, accepting)
}
