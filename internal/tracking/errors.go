package tracking

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrInvalidArgument reports a call the store refuses before touching
// storage: an empty endpoint or event id, a reserved endpoint id, a status
// without an upload.
var ErrInvalidArgument = errors.New("tracking: invalid argument")

// ErrReservedEndpointID reports an endpoint id that names one of the
// store's own containers. It wraps ErrInvalidArgument.
var ErrReservedEndpointID = fmt.Errorf("%w: reserved endpoint id", ErrInvalidArgument)

// ErrConcurrentUpdate reports a guarded write that lost its
// compare-and-swap on every attempt: the row kept changing. It is a
// transient failure (IsTransient), never a refusal.
var ErrConcurrentUpdate = errors.New("tracking: the row changed concurrently on every attempt")

// reservedEndpointIDs are the container ids the NimBus Cosmos store owns
// (compared case-sensitively, as Cosmos compares container ids), plus
// unresolvedevents, which NimBus reserves for its planned single tracking
// container.
var reservedEndpointIDs = []string{
	"subscriptions", "messages", "audits", "eventschemas", "eventreports", "accesscontrol",
	"Metadata", "inbox", "settings", "servicehealth", "heartbeatuptimedays", "heartbeatgaps",
	"unresolvedevents",
}

// ReservedEndpointIDs returns the endpoint ids every store refuses.
func ReservedEndpointIDs() []string { return append([]string(nil), reservedEndpointIDs...) }

// CheckEndpointID refuses an empty endpoint id and one of the store's own
// container ids (case-sensitively: "Messages" is an ordinary endpoint).
func CheckEndpointID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: endpoint id is empty", ErrInvalidArgument)
	}
	for _, r := range reservedEndpointIDs {
		if id == r {
			return fmt.Errorf("%w: %q is reserved by the NimBus message store and cannot be used as an endpoint id; it would share a container with the store's own data (reserved: %s)",
				ErrReservedEndpointID, id, strings.Join(reservedEndpointIDs, ", "))
		}
	}
	return nil
}

// FailureKind says whether retrying a failed store call later may succeed.
type FailureKind int

// Failure kinds.
const (
	// FailurePermanent: retrying the same call fails the same way.
	FailurePermanent FailureKind = iota
	// FailureTransient: the store was unavailable or the row kept
	// changing; retry later.
	FailureTransient
	// FailureThrottled: the store asked to slow down (RetryAfter says for
	// how long, when it said).
	FailureThrottled
)

func (k FailureKind) String() string {
	switch k {
	case FailureTransient:
		return "transient"
	case FailureThrottled:
		return "throttled"
	}
	return "permanent"
}

// StoreError is a provider failure, classified so that callers that import
// no SDK can decide between retrying and giving up.
type StoreError struct {
	// Op names the store operation, e.g. "UploadPendingMessage".
	Op   string
	Kind FailureKind
	// RetryAfter is the wait the store asked for; zero when it did not say.
	RetryAfter time.Duration
	Err        error
}

func (e *StoreError) Error() string {
	return fmt.Sprintf("tracking: %s: %s: %v", e.Op, e.Kind, e.Err)
}

// Unwrap returns the provider's error.
func (e *StoreError) Unwrap() error { return e.Err }

// IsTransient reports a failure worth retrying later: a *StoreError of kind
// FailureTransient or FailureThrottled, or ErrConcurrentUpdate.
func IsTransient(err error) bool {
	var se *StoreError
	if errors.As(err, &se) {
		return se.Kind != FailurePermanent
	}
	return errors.Is(err, ErrConcurrentUpdate)
}

// IsThrottled reports a *StoreError of kind FailureThrottled.
func IsThrottled(err error) bool {
	var se *StoreError
	return errors.As(err, &se) && se.Kind == FailureThrottled
}

// RetryAfter returns the wait a throttled or transient store asked for, or
// zero.
func RetryAfter(err error) time.Duration {
	var se *StoreError
	if errors.As(err, &se) {
		return se.RetryAfter
	}
	return 0
}
