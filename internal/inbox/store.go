package inbox

import (
	"context"
	"errors"
	"time"
)

// Store is the contract every inbox provider implements. Implementations
// must be safe for concurrent use.
//
// Every method returns ctx.Err() (wrapped or not) without touching the
// backing store when ctx is already done. Any other error means the store
// could not answer; callers treat it as transient and never as "not
// processed" or "processed".
type Store interface {
	// HasProcessed reports whether key has been recorded and not purged.
	HasProcessed(ctx context.Context, key Key) (bool, error)
	// RecordProcessed records key. Recording a key that is already recorded
	// succeeds and keeps the first record's timestamp.
	RecordProcessed(ctx context.Context, key Key) error
	// PurgeExpired deletes at most one bounded batch of endpointID's records
	// created strictly before olderThan, and returns how many it deleted.
	// The endpoint matches exactly (case and trailing spaces count). A record
	// that is recreated or removed by someone else meanwhile is not an error.
	PurgeExpired(ctx context.Context, endpointID string, olderThan time.Time) (int, error)
}

// Operations named in failure counters and logs; the only values the
// "operation" tag ever takes.
const (
	OpCheck  = "check"
	OpRecord = "record"
	OpPurge  = "purge"
)

// ErrInvalidKey is returned for a key with a blank endpoint or MessageId;
// such deliveries must bypass the inbox instead.
var ErrInvalidKey = errors.New("inbox: endpoint and message id must not be blank")

func validKey(k Key) error {
	if isBlank(k.EndpointID) || isBlank(k.MessageID) || k.ID == "" {
		return ErrInvalidKey
	}
	return nil
}
