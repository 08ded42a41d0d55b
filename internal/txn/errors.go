package txn

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
)

// Sentinels for errors.Is. Each typed error below matches its sentinel;
// an *AmbiguousError also matches ErrTransient.
var (
	// ErrDuplicate: a marker already existed; another copy of the
	// delivery committed and nothing of this one was applied.
	ErrDuplicate = errors.New("txn: duplicate delivery: the inbox marker already exists")
	// ErrConflict: a handler operation met a 409, 412 or 404; nothing was
	// applied. Transient: a redelivery re-runs the handler on fresh reads.
	ErrConflict = errors.New("txn: a handler operation conflicted")
	// ErrTransient: nothing was applied and retrying later may succeed.
	ErrTransient = errors.New("txn: transient failure")
	// ErrAmbiguous: the batch may or may not have been applied; a
	// redelivery decides by looking for the marker. Transient.
	ErrAmbiguous = errors.New("txn: outcome unknown")
	// ErrLimit: the batch breaks a Cosmos DB batch limit; it was not sent
	// and never will succeed. Permanent.
	ErrLimit = errors.New("txn: batch limit exceeded")
	// ErrRejected: the service refused an operation for a reason a retry
	// does not change (such as a 400 on a patch). Permanent.
	ErrRejected = errors.New("txn: operation rejected")
	// ErrInvalid: a target, marker or call is unusable. Permanent.
	ErrInvalid = errors.New("txn: invalid use")
	// ErrTTLOff: the container has time to live off, so a marker would
	// never expire; nothing is written until an operator turns it on.
	// Commits fail with a *TransientError wrapping it.
	ErrTTLOff = errors.New("txn: container time to live is off")
	// ErrTTLDefault: the container has a default time to live, so the
	// handler's documents would expire while their markers live on;
	// nothing is written until an operator sets it to -1. Commits fail
	// with a *TransientError wrapping it.
	ErrTTLDefault = errors.New("txn: container has a default time to live")
	// ErrNotMarker: a document holds the id of a delivery's inbox marker
	// but is not that marker. The delivery cannot be processed until an
	// operator moves it; HasMarker fails with an operator error wrapping
	// it.
	ErrNotMarker = errors.New("txn: a document that is not the inbox marker holds its id")
	// ErrDone: the unit of work was already committed or abandoned.
	ErrDone = errors.New("txn: unit of work is finished")
)

// DuplicateError reports that marker Index (in the order given to Commit)
// already existed.
type DuplicateError struct{ Marker int }

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("txn: duplicate delivery: inbox marker %d already exists; nothing applied", e.Marker)
}

// Is matches ErrDuplicate.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

// ConflictError reports the handler operation that failed a batch with
// 409 (exists), 412 (ETag or condition) or 404 (missing). Index counts the
// handler's operations from 0 in the order they were queued.
type ConflictError struct {
	Index  int
	Kind   OpKind
	Status int
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("txn: handler operation %d (%s) failed with %d %s; nothing applied", e.Index, e.Kind, e.Status, reason(e.Status))
}

// Is matches ErrConflict and ErrTransient.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict || target == ErrTransient }

// RejectedError reports an operation the service refused for good. Index
// counts the handler's operations (-1: the whole batch was refused);
// Marker is set when a marker was refused.
type RejectedError struct {
	Index  int
	Kind   OpKind
	Marker bool
	Status int
}

func (e *RejectedError) Error() string {
	what := fmt.Sprintf("handler operation %d (%s)", e.Index, e.Kind)
	switch {
	case e.Index < 0:
		what = "the batch"
	case e.Marker:
		what = fmt.Sprintf("inbox marker %d", e.Index)
	}
	return fmt.Sprintf("txn: %s rejected with %d; nothing applied", what, e.Status)
}

// Is matches ErrRejected.
func (e *RejectedError) Is(target error) bool { return target == ErrRejected }

// TransientError reports a batch that was not applied and may succeed
// later: a throttled or unavailable service (Status set), or an operator
// problem (Err set to an error with an OperatorMessage) such as ErrTTLOff,
// ErrTTLDefault or an identity the service refused (401, 403).
type TransientError struct {
	Status int
	Err    error
}

func (e *TransientError) Error() string {
	var oe interface{ OperatorMessage() string }
	if e.Err != nil && (e.Status == 0 || errors.As(e.Err, &oe)) {
		return "txn: transient failure: " + e.Err.Error()
	}
	return fmt.Sprintf("txn: transient failure (%d %s); nothing applied", e.Status, reason(e.Status))
}

// Unwrap returns the cause.
func (e *TransientError) Unwrap() error { return e.Err }

// Is matches ErrTransient.
func (e *TransientError) Is(target error) bool { return target == ErrTransient }

// AmbiguousError reports a batch whose fate is unknown: the request was
// sent and no verdict came back (transport failure, timeout, unreadable
// answer).
type AmbiguousError struct{ Err error }

func (e *AmbiguousError) Error() string {
	return "txn: batch outcome unknown (it may have been applied): " + bounded(e.Err.Error(), 256)
}

// Unwrap returns the cause.
func (e *AmbiguousError) Unwrap() error { return e.Err }

// Is matches ErrAmbiguous and ErrTransient.
func (e *AmbiguousError) Is(target error) bool {
	return target == ErrAmbiguous || target == ErrTransient
}

// operatorError is an error whose text tells an operator what to fix; the
// pipeline logs its OperatorMessage.
type operatorError struct{ err error }

func (e *operatorError) Error() string { return e.err.Error() }

// Unwrap returns the cause.
func (e *operatorError) Unwrap() error { return e.err }

// OperatorMessage is the text to show an operator.
func (e *operatorError) OperatorMessage() string { return e.err.Error() }

// Limits a LimitError names.
const (
	LimitOperations        = "operations"          // more than MaxHandlerOps, or MaxOps with markers
	LimitRequestBytes      = "request_bytes"       // estimated request over MaxRequestBytes
	LimitID                = "id"                  // empty, over MaxIDBytes, or a forbidden character
	LimitPartitionKey      = "partition_key"       // a document without the bound partition key value
	LimitDocument          = "document"            // not a JSON object with a string id
	LimitPatch             = "patch"               // an unusable patch
	LimitPartitionKeyValue = "partition_key_value" // a value Cosmos DB cannot take (CheckPartitionKey)
	LimitMessageID         = "message_id"          // a published event's message id: empty, or repeated in the delivery
	LimitDocumentBytes     = "document_bytes"      // the marker holding the published events over MaxItemBytes
)

// LimitError reports a batch that breaks a limit; it was not sent. Index
// is the handler operation concerned, -1 for the whole batch. Detail is
// bounded and never holds document content.
type LimitError struct {
	Limit  string
	Index  int
	Detail string
}

func (e *LimitError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("txn: batch limit %s: %s", e.Limit, e.Detail)
	}
	return fmt.Sprintf("txn: batch limit %s: operation %d: %s", e.Limit, e.Index, e.Detail)
}

// Is matches ErrLimit.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// Outcome is the class of a Commit's result, for the pipeline's decision.
type Outcome int

// Outcomes.
const (
	// Committed: everything applied.
	Committed Outcome = iota
	// Duplicate: another copy committed; complete without effects.
	Duplicate
	// Conflict: a handler operation lost a race; retry (transient).
	Conflict
	// Transient: nothing applied; retry later.
	Transient
	// Ambiguous: maybe applied; retry, and the marker decides.
	Ambiguous
	// Permanent: a limit, a rejected operation or an invalid use; a retry
	// fails the same way.
	Permanent
)

var outcomeNames = [...]string{"committed", "duplicate", "conflict", "transient", "ambiguous", "permanent"}

func (o Outcome) String() string {
	if o >= 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Classify returns the outcome of a Commit's error (nil is Committed).
// Errors this package did not produce, such as a context cancellation,
// are Transient.
func Classify(err error) Outcome {
	switch {
	case err == nil:
		return Committed
	case errors.Is(err, ErrDuplicate):
		return Duplicate
	case errors.Is(err, ErrConflict):
		return Conflict
	case errors.Is(err, ErrAmbiguous):
		return Ambiguous
	case errors.Is(err, ErrTransient):
		return Transient
	case errors.Is(err, ErrLimit), errors.Is(err, ErrRejected), errors.Is(err, ErrInvalid), errors.Is(err, ErrDone):
		return Permanent
	}
	return Transient
}

// TransientStatus reports a service status worth retrying: 408, 429, 449
// (retry with) and 5xx.
func TransientStatus(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status == 449 || status >= 500
}

func reason(status int) string {
	switch status {
	case http.StatusConflict:
		return "(the document exists)"
	case http.StatusPreconditionFailed:
		return "(the ETag or condition did not match)"
	case http.StatusNotFound:
		return "(the document does not exist)"
	}
	return ""
}

// bounded cuts s to n bytes for error texts.
func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// DecodeError reports a document that Read could not decode into the
// handler's value. Its text says where the JSON did not fit (a field name
// and the Go type, or a byte offset) and never quotes the document.
type DecodeError struct {
	// Target is the Go type decoded into.
	Target string
	cause  error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("decode document into %s: %s", e.Target, logsafe.JSONError("the document", e.cause))
}

// Unwrap returns the encoding/json error (whose text may quote document
// values: do not log it).
func (e *DecodeError) Unwrap() error { return e.cause }
