package txn

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// Txn is one delivery's transaction on (target, partition key value): the
// pipeline begins it, hands its Unit to the handler, and commits it once
// the handler has succeeded. The Unit, the handler's view, cannot commit.
type Txn struct {
	store  Store
	target Target
	pk     string
	now    func() time.Time
	unit   Unit
}

// Begin starts a transaction on partition pk of target. now is the clock
// of the markers' createdAtUtc (nil means time.Now). A bad target, or a
// partition key value Cosmos DB cannot take (CheckPartitionKey), makes
// every later call fail with the reason, before any request.
func Begin(store Store, target Target, pk string, now func() time.Time) *Txn {
	if now == nil {
		now = time.Now
	}
	t := &Txn{store: store, target: target, pk: pk, now: now}
	t.unit.tx = t
	if err := target.Validate(); err != nil {
		t.unit.err = err
	} else if pk == "" {
		t.unit.err = fmt.Errorf("%w: the partition key value is empty", ErrInvalid)
	} else if err := CheckPartitionKey(pk); err != nil {
		t.unit.err = err
	}
	return t
}

// Failed returns a transaction whose every call fails with err and does
// no I/O: the unit of a request that cannot be begun.
func Failed(err error) *Txn {
	t := &Txn{now: time.Now}
	t.unit.tx, t.unit.err = t, err
	return t
}

// Unit returns the handler's view of the transaction.
func (t *Txn) Unit() *Unit { return &t.unit }

// Receipt describes a committed batch.
type Receipt struct {
	// ETags are the handler's operations' new ETags, in order (empty for
	// a delete, and when the store does not report them).
	ETags []string
	// Charge is the request charge the service reported.
	Charge float64
	// Pending is the outbox the commit stored, nil when the handler
	// published no event: send Pending.Messages() (the events in publish
	// order, then the response), then MarkDispatched.
	Pending *Pending
}

// Events returns copies of the events the handler published
// (Unit.Publish), in order.
func (t *Txn) Events() []message.Stored {
	t.unit.mu.Lock()
	defer t.unit.mu.Unlock()
	out := make([]message.Stored, len(t.unit.events))
	for i := range t.unit.events {
		out[i] = cloneStored(&t.unit.events[i])
	}
	return out
}

// Commit executes the handler's queued operations and the creation of
// markers as one transactional batch, after checking every limit. The
// markers come first in the batch, so a copy of the delivery that lost the
// race is told Duplicate even when its own operations would also fail.
//
// When the handler published events (Unit.Publish), the marker with
// Outbox set holds them, with its Response, in the same batch: all or
// nothing with the handler's writes. That marker has no ttl until
// MarkDispatched gives it one, and Receipt.Pending describes it. A commit
// with events needs exactly one such marker (an ErrInvalid error
// otherwise, before any request); the events and the response count
// toward the request's MaxRequestBytes and the marker's MaxItemBytes.
//
// The error is nil (committed) or one of: *DuplicateError, *ConflictError,
// *TransientError, *AmbiguousError, *LimitError, *RejectedError, or an
// ErrInvalid/ErrDone error; Classify maps it to an Outcome. A Txn commits
// at most once; a second Commit fails with ErrDone.
func (t *Txn) Commit(ctx context.Context, markers ...Marker) (Receipt, error) {
	u := &t.unit
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return Receipt{}, ErrDone
	}
	u.done = true
	if u.err != nil {
		return Receipt{}, u.err
	}
	if err := ctx.Err(); err != nil {
		return Receipt{}, err
	}
	if len(u.ops) > MaxHandlerOps || len(u.ops)+len(markers) > MaxOps {
		return Receipt{}, &LimitError{Limit: LimitOperations, Index: -1, Detail: fmt.Sprintf("%d handler operations and %d markers; at most %d and %d in all", len(u.ops), len(markers), MaxHandlerOps, MaxOps)}
	}
	holder, out, err := u.outbox(markers)
	if err != nil {
		return Receipt{}, err
	}
	ops := make([]Op, 0, len(markers)+len(u.ops))
	now := t.now()
	for i, m := range markers {
		var o *outboxDoc
		if i == holder {
			o = out
		}
		op, err := markerDoc(t.target, t.pk, m, now, o)
		if err != nil {
			return Receipt{}, err
		}
		if o != nil {
			if n := len(op.Body) + systemPropertiesBytes; n > MaxItemBytes {
				return Receipt{}, &LimitError{Limit: LimitDocumentBytes, Index: -1, Detail: fmt.Sprintf("the inbox marker holding %d published events would have about %d bytes, over Cosmos DB's item size of %d", len(u.events), n, MaxItemBytes)}
			}
		}
		ops = append(ops, op)
	}
	ops = append(ops, u.ops...)
	if len(ops) == 0 {
		return Receipt{}, nil
	}
	if n := EstimateRequestBytes(ops); n > MaxRequestBytes {
		detail := fmt.Sprintf("about %d bytes, over %d", n, MaxRequestBytes)
		if out != nil {
			detail = fmt.Sprintf("the handler's operations, the markers and %d published events: %s", len(u.events), detail)
		}
		return Receipt{}, &LimitError{Limit: LimitRequestBytes, Index: -1, Detail: detail}
	}
	res, err := t.store.Execute(ctx, t.target, t.pk, ops)
	if err != nil {
		return Receipt{}, err
	}
	rc, err := verdict(res, len(markers), ops)
	if err != nil || out == nil {
		return rc, err
	}
	m := markers[holder]
	p := &Pending{
		Target: t.target, PartitionKey: t.pk, EndpointID: m.EndpointID, MessageID: m.MessageID,
		CreatedAt: now.UTC().Truncate(100 * time.Nanosecond), ETag: res.Ops[holder].ETag,
		Events: make([]message.Stored, len(u.events)), Request: m.Request != nil,
	}
	for i := range u.events {
		p.Events[i] = cloneStored(&u.events[i])
	}
	if m.Response != nil {
		r := cloneStored(m.Response)
		p.Response = &r
	}
	rc.Pending = p
	return rc, nil
}

// outbox picks the marker that holds the published events (-1 when none
// does) and encodes what it stores: nil when the handler published
// nothing.
func (u *Unit) outbox(markers []Marker) (int, *outboxDoc, error) {
	holder := -1
	for i, m := range markers {
		if !m.Outbox {
			continue
		}
		if holder >= 0 {
			return -1, nil, fmt.Errorf("%w: markers %d and %d both have Outbox set; one marker holds the published events", ErrInvalid, holder, i)
		}
		holder = i
	}
	if len(u.entries) == 0 {
		return holder, nil, nil
	}
	if holder < 0 {
		return -1, nil, fmt.Errorf("%w: the handler published %d events but no marker of the commit holds them (Marker.Outbox)", ErrInvalid, len(u.entries))
	}
	out := &outboxDoc{entries: u.entries}
	if r := markers[holder].Response; r != nil {
		raw, err := json.Marshal(r)
		if err != nil {
			return -1, nil, fmt.Errorf("%w: the response cannot be stored: %w", ErrInvalid, err)
		}
		out.response = raw
	}
	return holder, out, nil
}

// verdict turns a batch's answer into a Receipt or a typed error. The
// cause of a failed batch is its first operation that neither answered
// 424 nor succeeded.
func verdict(res Result, markers int, ops []Op) (Receipt, error) {
	if len(res.Ops) != len(ops) {
		return Receipt{}, &AmbiguousError{Err: fmt.Errorf("the answer has %d operation results for %d operations", len(res.Ops), len(ops))}
	}
	if res.Status != StatusMultiStatus {
		for _, r := range res.Ops {
			if r.Status >= 300 {
				return Receipt{}, &AmbiguousError{Err: fmt.Errorf("batch status %d with an operation status %d", res.Status, r.Status)}
			}
		}
		rc := Receipt{Charge: res.Charge, ETags: make([]string, 0, len(ops)-markers)}
		for _, r := range res.Ops[markers:] {
			rc.ETags = append(rc.ETags, r.ETag)
		}
		return rc, nil
	}
	for i, r := range res.Ops {
		if r.Status == StatusFailedDependency || (r.Status >= 200 && r.Status < 300) {
			// Not the cause: an operation that failed only because
			// another did, or one that succeeded before the batch was
			// rolled back.
			continue
		}
		isMarker, idx := i < markers, i-markers
		if isMarker {
			idx = i
		}
		switch {
		case isMarker && r.Status == http.StatusConflict:
			return Receipt{}, &DuplicateError{Marker: idx}
		case !isMarker && (r.Status == http.StatusConflict || r.Status == http.StatusPreconditionFailed || r.Status == http.StatusNotFound):
			return Receipt{}, &ConflictError{Index: idx, Kind: ops[i].Kind, Status: r.Status}
		case TransientStatus(r.Status):
			return Receipt{}, &TransientError{Status: r.Status}
		}
		return Receipt{}, &RejectedError{Index: idx, Kind: ops[i].Kind, Marker: isMarker, Status: r.Status}
	}
	return Receipt{}, &TransientError{Status: StatusMultiStatus}
}

// Unit is a handler's unit of work on one partition of one container:
// reads run at once, writes are queued and applied together, all or
// nothing, after the handler succeeds. A handler cannot execute the batch.
// A Unit is safe for concurrent use. Reads do not see queued writes.
type Unit struct {
	tx *Txn

	mu   sync.Mutex
	ops  []Op
	err  error // the first failed queueing: the commit fails with it
	done bool
	// events are the published events in order, entries their encoded
	// outbox entries, eventIDs their MessageIds (to their index), and
	// entryBytes the entries' estimated size in a request.
	events     []message.Stored
	entries    []json.RawMessage
	eventIDs   map[string]int
	entryBytes int
	// sealed: the handler has returned; every call fails with ErrDone,
	// and only the pipeline's Commit still runs.
	sealed bool
}

// Seal ends the handler's use of the unit: from now on every Read and
// every queuing call fails with ErrDone and does no I/O, so nothing a
// goroutine of the handler queues after the handler returned is ever
// committed. Commit still runs. The pipeline seals the unit as soon as
// the handler returns, whatever it returned. Sealing twice is harmless.
func (t *Txn) Seal() {
	t.unit.mu.Lock()
	t.unit.sealed = true
	t.unit.mu.Unlock()
}

// PartitionKey returns the partition key value the unit is bound to.
func (u *Unit) PartitionKey() string { return u.tx.pk }

// Target returns the container the unit writes to.
func (u *Unit) Target() Target { return u.tx.target }

// Read point-reads document id in the unit's partition and, when found,
// decodes it into into (unless nil). It returns the document's ETag, for
// a condition on a later write.
//
// into must be nil or a non-nil pointer (an ErrInvalid error otherwise).
// A unit that is sealed, committed, or whose batch already failed (a
// broken limit, a bad target) answers with that failure and sends
// nothing. A document that does not decode into into is a *DecodeError.
func (u *Unit) Read(ctx context.Context, id string, into any) (found bool, etag string, err error) {
	u.mu.Lock()
	uerr, done := u.err, u.done || u.sealed
	u.mu.Unlock()
	switch {
	case done:
		return false, "", ErrDone
	case uerr != nil:
		return false, "", uerr
	}
	if err := CheckID(id); err != nil {
		return false, "", err
	}
	if err := checkTarget(into); err != nil {
		return false, "", err
	}
	body, etag, found, err := u.tx.store.Read(ctx, u.tx.target, u.tx.pk, id)
	if err != nil || !found {
		return false, "", err
	}
	if into != nil {
		if err := json.Unmarshal(body, into); err != nil {
			return true, etag, &DecodeError{Target: fmt.Sprintf("%T", into), cause: err}
		}
	}
	return true, etag, nil
}

// checkTarget refuses a decoding target that json.Unmarshal cannot fill:
// anything but nil or a non-nil pointer.
func checkTarget(into any) error {
	if into == nil {
		return nil
	}
	if v := reflect.ValueOf(into); v.Kind() != reflect.Pointer || v.IsNil() {
		return fmt.Errorf("%w: Read into %T: a document decodes only into a non-nil pointer", ErrInvalid, into)
	}
	return nil
}

// Create queues the creation of doc (any JSON object with a string "id"
// and the partition key value at the partition key path). It fails with
// 409 at commit if the id exists.
func (u *Unit) Create(doc any) error { return u.queueDoc(OpCreate, doc, "") }

// Upsert queues the creation or replacement of doc; ifMatch (when not
// empty) must be the current ETag of an existing document.
func (u *Unit) Upsert(doc any, ifMatch string) error { return u.queueDoc(OpUpsert, doc, ifMatch) }

// Replace queues the replacement of the document with doc's id by doc;
// ifMatch (when not empty) must be its current ETag. It fails with 404 at
// commit if the document does not exist.
func (u *Unit) Replace(doc any, ifMatch string) error { return u.queueDoc(OpReplace, doc, ifMatch) }

// Delete queues the deletion of document id; ifMatch (when not empty)
// must be its current ETag.
func (u *Unit) Delete(id, ifMatch string) error {
	return u.queue(func(index int) (Op, error) {
		if err := CheckID(id); err != nil {
			return Op{}, at(err, index)
		}
		return Op{Kind: OpDelete, ID: id, IfMatch: ifMatch}, nil
	})
}

// Patch queues the patch p of document id; ifMatch (when not empty) must
// be its current ETag.
func (u *Unit) Patch(id string, p Patch, ifMatch string) error {
	return u.queue(func(index int) (Op, error) {
		if err := CheckID(id); err != nil {
			return Op{}, at(err, index)
		}
		if p.err != nil {
			return Op{}, &LimitError{Limit: LimitPatch, Index: index, Detail: p.err.Error()}
		}
		if len(p.ops) == 0 || len(p.ops) > MaxPatchOps {
			return Op{}, &LimitError{Limit: LimitPatch, Index: index, Detail: fmt.Sprintf("%d patch operations; 1 to %d", len(p.ops), MaxPatchOps)}
		}
		pk := u.tx.target.PartitionKeyPath
		for _, o := range p.ops {
			if o.Path == pk || strings.HasPrefix(pk, o.Path+"/") {
				return Op{}, &LimitError{Limit: LimitPartitionKey, Index: index, Detail: "a patch may not change the partition key"}
			}
		}
		return Op{Kind: OpPatch, ID: id, Patch: append([]PatchOp(nil), p.ops...), IfMatch: ifMatch}, nil
	})
}

// Publish queues m, an event the handler publishes, after the events it
// published before: nothing is sent while the handler runs. The commit
// stores the events in the outbox marker (Marker.Outbox), in the same
// batch as the handler's writes; the pipeline sends them once the batch
// committed. m is copied.
//
// It refuses, with a *LimitError (Permanent) and before any request: an
// empty message id, one that repeats an event published earlier in the
// same delivery (LimitMessageID), and an event that would take the batch
// over MaxRequestBytes or the marker over MaxItemBytes
// (LimitRequestBytes, LimitDocumentBytes), counting the handler's
// operations queued so far; Commit checks the sizes again with the
// response and the markers. A property of a type message.Stored cannot
// keep is an ErrInvalid error. As with every queuing call, the first
// failure also fails the commit. No error quotes the event.
func (u *Unit) Publish(m message.Stored) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done || u.sealed {
		return ErrDone
	}
	if u.err != nil {
		return u.err
	}
	fail := func(err error) error {
		u.err = err
		return err
	}
	index := len(u.events)
	if strings.TrimSpace(m.MessageID) == "" {
		return fail(&LimitError{Limit: LimitMessageID, Index: -1, Detail: fmt.Sprintf("published event %d has an empty message id; a deterministic message id is required", index)})
	}
	if j, dup := u.eventIDs[m.MessageID]; dup {
		return fail(&LimitError{Limit: LimitMessageID, Index: -1, Detail: fmt.Sprintf("published event %d repeats the message id of event %d; every event of a delivery needs its own", index, j)})
	}
	c := cloneStored(&m)
	raw, err := json.Marshal(outboxEntry{MessageID: c.MessageID, Message: &c})
	if err != nil {
		return fail(fmt.Errorf("%w: published event %d cannot be stored: %w", ErrInvalid, index, err))
	}
	n := u.entryBytes + escapedLen(raw) + 1
	if est := markerBytes + n + systemPropertiesBytes; est > MaxItemBytes {
		return fail(&LimitError{Limit: LimitDocumentBytes, Index: -1, Detail: fmt.Sprintf("published event %d takes the inbox marker holding the events to about %d bytes, over Cosmos DB's item size of %d", index, est, MaxItemBytes)})
	}
	if est := EstimateRequestBytes(u.ops) + 1 + opOverhead + markerBytes + n; est > MaxRequestBytes {
		return fail(&LimitError{Limit: LimitRequestBytes, Index: -1, Detail: fmt.Sprintf("published event %d takes the batch (%d operations and %d events) to about %d bytes, over %d", index, len(u.ops), index+1, est, MaxRequestBytes)})
	}
	if u.eventIDs == nil {
		u.eventIDs = map[string]int{}
	}
	u.eventIDs[c.MessageID] = index
	u.events = append(u.events, c)
	u.entries = append(u.entries, raw)
	u.entryBytes = n
	return nil
}

// cloneStored returns a copy of m sharing nothing with it.
func cloneStored(m *message.Stored) message.Stored {
	c, err := message.StoredOf(m.Outgoing())
	if err != nil {
		// Outgoing copies only the value types StoredOf keeps; a property
		// of another type stays as it is and fails when encoded.
		c = *m
	}
	return c
}

// queueDoc queues a Create, Upsert or Replace of doc.
func (u *Unit) queueDoc(kind OpKind, doc any, ifMatch string) error {
	return u.queue(func(index int) (Op, error) {
		body, id, err := u.encode(doc, index)
		if err != nil {
			return Op{}, err
		}
		return Op{Kind: kind, ID: id, Body: body, IfMatch: ifMatch}, nil
	})
}

// queue builds an operation and appends it, or records the first failure.
func (u *Unit) queue(build func(index int) (Op, error)) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done || u.sealed {
		return ErrDone
	}
	if u.err != nil {
		return u.err
	}
	index := len(u.ops)
	if index >= MaxHandlerOps {
		u.err = &LimitError{Limit: LimitOperations, Index: index, Detail: fmt.Sprintf("a handler may queue at most %d operations", MaxHandlerOps)}
		return u.err
	}
	op, err := build(index)
	if err != nil {
		u.err = err
		return err
	}
	u.ops = append(u.ops, op)
	return nil
}

// encode marshals doc and checks that it is an object with a valid string
// id and the bound partition key value at the partition key path.
func (u *Unit) encode(doc any, index int) ([]byte, string, error) {
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, "", &LimitError{Limit: LimitDocument, Index: index, Detail: "the document cannot be encoded as JSON"}
	}
	body, err := compactObject(raw)
	if err != nil {
		return nil, "", &LimitError{Limit: LimitDocument, Index: index, Detail: "the document is not a JSON object"}
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(body, &probe); err != nil {
		return nil, "", &LimitError{Limit: LimitDocument, Index: index, Detail: "the document is not a JSON object"}
	}
	var id string
	if err := json.Unmarshal(probe["id"], &id); err != nil {
		return nil, "", &LimitError{Limit: LimitDocument, Index: index, Detail: "the document has no string id"}
	}
	if err := CheckID(id); err != nil {
		return nil, "", at(err, index)
	}
	if v, ok := lookupString(probe, u.tx.target.segments()); !ok || v != u.tx.pk {
		return nil, "", &LimitError{Limit: LimitPartitionKey, Index: index, Detail: fmt.Sprintf("the document lacks the bound partition key value at %s", u.tx.target.PartitionKeyPath)}
	}
	return body, id, nil
}

// lookupString returns the string at the property path segs of obj.
func lookupString(obj map[string]json.RawMessage, segs []string) (string, bool) {
	for i, s := range segs {
		raw, ok := obj[s]
		if !ok {
			return "", false
		}
		if i == len(segs)-1 {
			var v string
			if json.Unmarshal(raw, &v) != nil {
				return "", false
			}
			return v, true
		}
		obj = nil
		if json.Unmarshal(raw, &obj) != nil || obj == nil {
			return "", false
		}
	}
	return "", false
}

// at sets the operation index of a *LimitError.
func at(err error, index int) error {
	if le, ok := err.(*LimitError); ok {
		c := *le
		c.Index = index
		return &c
	}
	return err
}

// MaxPatchOps is the most operations one patch may hold.
const MaxPatchOps = 10

// Patch is a list of patch operations on one document, built with its
// methods; the zero value is empty. Paths are JSON pointers into the
// document ("/balance", "/tags/-"); system properties ("/_…"), the id and
// the partition key may not be patched.
type Patch struct {
	ops []PatchOp
	err error
}

// Set sets path to v, creating the last property if absent.
func (p *Patch) Set(path string, v any) { p.add(PatchSet, path, v, true) }

// Add inserts v at path: a property, or an array index ("-" appends).
func (p *Patch) Add(path string, v any) { p.add(PatchAdd, path, v, true) }

// Replace replaces the existing value at path by v.
func (p *Patch) Replace(path string, v any) { p.add(PatchReplace, path, v, true) }

// Remove removes the existing value at path.
func (p *Patch) Remove(path string) { p.add(PatchRemove, path, nil, false) }

// Increment adds by to the number at path (a missing property is set to
// by).
func (p *Patch) Increment(path string, by int64) { p.add(PatchIncrement, path, by, true) }

func (p *Patch) add(op, path string, v any, withValue bool) {
	if p.err != nil {
		return
	}
	if len(path) < 2 || path[0] != '/' || strings.HasPrefix(path, "/_") || path == "/id" || strings.ContainsAny(path, "\"\\") {
		p.err = fmt.Errorf("patch path %q is not usable", bounded(path, 64))
		return
	}
	o := PatchOp{Op: op, Path: path}
	if withValue {
		b, err := json.Marshal(v)
		if err != nil {
			p.err = fmt.Errorf("patch value for %q cannot be encoded as JSON", bounded(path, 64))
			return
		}
		o.Value = b
	}
	p.ops = append(p.ops, o)
}
