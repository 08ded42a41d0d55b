package txn

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// Target is a container a transactional handler writes to.
type Target struct {
	DatabaseID  string
	ContainerID string
	// PartitionKeyPath is the container's single partition key path, such
	// as "/customerId" or "/tenant/id". The partition key value is a
	// string.
	PartitionKeyPath string
}

// String names the target as database/container, for errors.
func (t Target) String() string { return t.DatabaseID + "/" + t.ContainerID }

// segments returns the partition key path's property names.
func (t Target) segments() []string { return strings.Split(t.PartitionKeyPath[1:], "/") }

// Validate checks the partition key path: "/" followed by non-empty
// property names, none a system property ("_…"), and not a property the
// marker document itself sets (id, type, endpointId, messageId,
// createdAtUtc, ttl), since a marker must carry the partition key value
// at the path.
func (t Target) Validate() error {
	if t.DatabaseID == "" || t.ContainerID == "" {
		return fmt.Errorf("%w: target %q needs a database and a container", ErrInvalid, t.String())
	}
	p := t.PartitionKeyPath
	if len(p) < 2 || p[0] != '/' || len(p) > 256 {
		return fmt.Errorf("%w: partition key path %q is not a path such as /customerId", ErrInvalid, bounded(p, 64))
	}
	for i, s := range t.segments() {
		switch {
		case s == "" || strings.ContainsAny(s, "\"\\~[]") || strings.HasPrefix(s, "_"):
			return fmt.Errorf("%w: partition key path %q has an unusable property name", ErrInvalid, p)
		case i == 0 && markerFields[s]:
			return fmt.Errorf("%w: partition key path %q uses %q, a property of the inbox marker", ErrInvalid, p, s)
		}
	}
	return nil
}

// OpKind is the kind of a queued operation.
type OpKind int

// Operation kinds.
const (
	OpCreate OpKind = iota + 1
	OpUpsert
	OpReplace
	OpPatch
	OpDelete
)

var opNames = [...]string{"", "create", "upsert", "replace", "patch", "delete"}

func (k OpKind) String() string {
	if k > 0 && int(k) < len(opNames) {
		return opNames[k]
	}
	return fmt.Sprintf("OpKind(%d)", int(k))
}

// Op is one operation of a batch.
type Op struct {
	Kind OpKind
	// ID is the document id (for Create and Upsert, the body's id).
	ID string
	// Body is the compact JSON document of Create, Upsert and Replace.
	Body []byte
	// Patch holds the operations of a Patch, in order.
	Patch []PatchOp
	// IfMatch is the ETag the document must have (Upsert, Replace, Patch,
	// Delete); empty means unconditional.
	IfMatch string
}

// Patch operation names, as Cosmos DB spells them.
const (
	PatchSet       = "set"
	PatchAdd       = "add"
	PatchReplace   = "replace"
	PatchRemove    = "remove"
	PatchIncrement = "incr"
)

// PatchOp is one patch operation on a JSON path ("/a/b", "/list/0",
// "/list/-" to append with add).
type PatchOp struct {
	Op   string
	Path string
	// Value is the compact JSON value (absent for remove; an integer for
	// incr).
	Value json.RawMessage
}

// Store executes reads and transactional batches in one partition of a
// target. Implementations must be safe for concurrent use.
type Store interface {
	// Read point-reads document id in partition pk. A document that does
	// not exist (or has expired) answers found == false and no error.
	Read(ctx context.Context, target Target, pk, id string) (body []byte, etag string, found bool, err error)
	// Execute runs ops in order as one transactional batch in partition
	// pk. A batch the service answered, committed or not, is a Result
	// and no error; an error means no verdict: a *TransientError (the
	// batch was not applied) or an *AmbiguousError (it may have been).
	Execute(ctx context.Context, target Target, pk string, ops []Op) (Result, error)
}

// Result is the service's answer to a batch.
type Result struct {
	// Status is the batch status: 200 committed, 207 not committed.
	Status int
	// Ops are the operations' results, in order. In a failed batch the
	// failing operation carries its own status and every other one 424.
	Ops []OpResult
	// Charge is the request charge the service reported (request units).
	Charge float64
}

// OpResult is one operation's result.
type OpResult struct {
	Status int
	ETag   string
}

// StatusFailedDependency is the status of the operations of a failed
// batch that did not fail themselves.
const StatusFailedDependency = 424

// StatusMultiStatus is the status of a batch that did not commit.
const StatusMultiStatus = 207
