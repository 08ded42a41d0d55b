package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Cleanup defaults.
const (
	// DefaultRetention is how long a record is kept, as NimBus's
	// InboxOptions.RetentionPeriod.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultCleanupBudget bounds one cleanup run. It leaves a minute of
	// the Functions host's default five-minute timeout.
	DefaultCleanupBudget = 4 * time.Minute
)

// OldestExpiredFinder is implemented by stores that can report the oldest
// record of an endpoint created before olderThan. ok is false when there is
// none.
type OldestExpiredFinder interface {
	OldestExpired(ctx context.Context, endpointID string, olderThan time.Time) (oldest time.Time, ok bool, err error)
}

// Cleaner purges one endpoint's expired records. Unlike NimBus's hosted
// service, which purges one batch per tick, a run drains batch after batch
// until a batch deletes nothing or the time budget is spent.
type Cleaner struct {
	// Store holds the records.
	Store Store
	// EndpointID is the endpoint whose records are purged (exact match).
	EndpointID string
	// Retention is how long records are kept; 0 means DefaultRetention.
	Retention time.Duration
	// Budget bounds a run; 0 means DefaultCleanupBudget. It is checked
	// between batches, so a batch started in time runs to its end.
	Budget time.Duration
	// Clock measures the budget; nil means time.Now.
	Clock func() time.Time
}

// CleanupReport describes one run. It is filled in as far as the run got,
// also when Run returns an error.
type CleanupReport struct {
	EndpointID string
	// Cutoff is now − retention: records created before it were purged.
	Cutoff time.Time
	// Purged is the number of records deleted.
	Purged int
	// Batches is the number of purge calls made.
	Batches int
	// Drained reports that the last batch deleted nothing.
	Drained bool
	// StoppedOnBudget reports that the budget ran out before draining.
	StoppedOnBudget bool
	// LagKnown reports whether Lag and Oldest are known: always after a
	// drain; after a budget stop only if the store is an
	// OldestExpiredFinder.
	LagKnown bool
	// Oldest is the creation time of the oldest expired record left (zero
	// when none is left).
	Oldest time.Time
	// Lag is how long the oldest expired record left has been past its
	// retention (Cutoff − Oldest); zero when drained.
	Lag time.Duration
	// Elapsed is the run's duration on Clock.
	Elapsed time.Duration
}

// ErrInvalidCleaner reports a Cleaner that cannot run.
var ErrInvalidCleaner = errors.New("inbox: invalid cleaner")

// Run purges records created before now − Retention. It stops when a batch
// deletes nothing, when the budget is spent, or at the first error; a
// cancelled ctx stops it between (and inside) batches with ctx's error.
// Store errors are returned wrapped; the report says how far it got.
func (c *Cleaner) Run(ctx context.Context, now time.Time) (CleanupReport, error) {
	rep := CleanupReport{EndpointID: c.EndpointID}
	retention, budget := c.Retention, c.Budget
	if retention == 0 {
		retention = DefaultRetention
	}
	if budget == 0 {
		budget = DefaultCleanupBudget
	}
	switch {
	case c.Store == nil:
		return rep, fmt.Errorf("%w: no store", ErrInvalidCleaner)
	case isBlank(c.EndpointID):
		return rep, fmt.Errorf("%w: blank endpoint", ErrInvalidCleaner)
	case retention < 0:
		return rep, fmt.Errorf("%w: negative retention %v", ErrInvalidCleaner, retention)
	case budget < 0:
		return rep, fmt.Errorf("%w: negative budget %v", ErrInvalidCleaner, budget)
	}
	clock := c.Clock
	if clock == nil {
		clock = time.Now
	}
	rep.Cutoff = now.Add(-retention)
	start := clock()

	for {
		if err := ctx.Err(); err != nil {
			rep.Elapsed = clock().Sub(start)
			return rep, err
		}
		if clock().Sub(start) >= budget {
			rep.StoppedOnBudget = true
			break
		}
		n, err := c.Store.PurgeExpired(ctx, c.EndpointID, rep.Cutoff)
		rep.Batches++
		rep.Purged += max(n, 0)
		if err != nil {
			rep.Elapsed = clock().Sub(start)
			if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
				return rep, err
			}
			return rep, fmt.Errorf("inbox: cleanup purge: %w", err)
		}
		if n == 0 {
			rep.Drained = true
			break
		}
	}

	if rep.Drained {
		rep.LagKnown = true
	} else if f, ok := c.Store.(OldestExpiredFinder); ok {
		oldest, found, err := f.OldestExpired(ctx, c.EndpointID, rep.Cutoff)
		if err != nil {
			rep.Elapsed = clock().Sub(start)
			return rep, fmt.Errorf("inbox: cleanup lag: %w", err)
		}
		rep.LagKnown = true
		if found {
			rep.Oldest = oldest
			rep.Lag = max(rep.Cutoff.Sub(oldest), 0)
		}
	}
	rep.Elapsed = clock().Sub(start)
	return rep, nil
}
