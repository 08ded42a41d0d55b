package nimbus

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// Container names the Cosmos DB container a transactional handler keeps
// its state in. It lives in the inbox's Cosmos account and is reached with
// the inbox's credentials; with NimBus__Inbox__Store=InMemory it is an
// in-memory container of the process.
//
// The container must have time to live on (DefaultTimeToLive -1 or a
// value), so that inbox markers expire; with the inbox's auto-create
// setting on, a missing container is created with PartitionKeyPath and
// DefaultTimeToLive -1.
type Container struct {
	// DatabaseID and ContainerID are the ids used when the settings below
	// are not set.
	DatabaseID, ContainerID string
	// DatabaseSetting and ContainerSetting, when not empty, name app
	// settings whose values, when set, replace the ids at Run. A name that
	// starts with NimBus__ becomes a known setting.
	DatabaseSetting, ContainerSetting string
	// PartitionKeyPath is the container's partition key path, such as
	// "/customerId". Every document the handler writes carries its
	// partition key value there.
	PartitionKeyPath string
}

// PartitionKeyFunc derives the partition key value of an event, the one
// partition its handler reads and writes. It runs before the duplicate
// check, so it must give every copy of a message the same value (derive it
// from the event's content, never from the delivery). An error or an empty
// value fails the event permanently.
type PartitionKeyFunc func(ev *Event) (string, error)

// TxHandlerFunc handles one event in a unit of work (see HandleTx). It
// returns as a HandlerFunc does; the queued writes are committed only when
// it returns Completed.
type TxHandlerFunc func(ctx context.Context, ev *Event, tx *Tx) (Result, error)

// HandleTx registers h for eventTypeID as a transactional handler on the
// container c: its effects on the container and the record that the
// message was handled commit together, all or nothing, so they are
// applied exactly once.
//
// For every delivery, pk derives the partition; a point read of the
// delivery's inbox marker in that partition runs alongside the inbox
// check, and a marker (or an inbox record) found is a duplicate: the
// handler does not run. The handler reads documents of the partition at
// once and queues writes on tx. When it returns Completed, the writes and
// the creation of the delivery's inbox marker are executed as one
// transactional batch; the inbox document is not written. When another
// copy of the message committed first, the batch fails on the marker and
// the delivery is a duplicate; when one of the writes fails its condition
// (the document exists, is missing, or its ETag changed), nothing is
// applied and the broker redelivers the message after the redelivery
// pause. A failed event, a PendingHandoff or a panic commits nothing.
//
// Only the container's writes are exactly-once: HTTP calls, sends and
// other side effects of the handler stay at-least-once.
//
// HandleTx panics as Handle does, and on a Container without ids or
// with an unusable partition key path, or a nil pk.
func (a *App) HandleTx(eventTypeID string, c Container, pk PartitionKeyFunc, h TxHandlerFunc) {
	switch {
	case eventTypeID == "":
		panic("nimbus: HandleTx with an empty event type id")
	case h == nil:
		panic("nimbus: HandleTx with a nil handler for " + eventTypeID)
	case pk == nil:
		panic("nimbus: HandleTx with a nil partition key function for " + eventTypeID)
	}
	t := txn.Target{DatabaseID: c.DatabaseID, ContainerID: c.ContainerID, PartitionKeyPath: c.PartitionKeyPath}
	if err := t.Validate(); err != nil {
		panic("nimbus: HandleTx for " + eventTypeID + ": " + err.Error())
	}
	a.register(eventTypeID, registration{tx: &txRegistration{c: c, pk: pk, h: h}})
}

// txRegistration is a transactional handler as registered.
type txRegistration struct {
	c  Container
	pk PartitionKeyFunc
	h  TxHandlerFunc
}

// settings returns the app setting names the registration reads.
func (r *txRegistration) settings() []string {
	var out []string
	for _, s := range []string{r.c.DatabaseSetting, r.c.ContainerSetting} {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// binding is the pipeline's binding of r, its ids read from settings.
func (r *txRegistration) binding(setting func(string) string) subscriber.TxBinding {
	t := txn.Target{DatabaseID: r.c.DatabaseID, ContainerID: r.c.ContainerID, PartitionKeyPath: r.c.PartitionKeyPath}
	if v := setting(r.c.DatabaseSetting); r.c.DatabaseSetting != "" && v != "" {
		t.DatabaseID = v
	}
	if v := setting(r.c.ContainerSetting); r.c.ContainerSetting != "" && v != "" {
		t.ContainerID = v
	}
	pk := r.pk
	return subscriber.TxBinding{Target: t, PartitionKey: func(in *subscriber.Event) (string, error) { return pk(newEvent(in)) }}
}

// adaptTx turns h into the pipeline's transactional handler.
func adaptTx(h TxHandlerFunc) subscriber.TxHandlerFunc {
	return func(ctx context.Context, in *subscriber.Event, u *txn.Unit) (subscriber.Result, error) {
		res, err := h(ctx, newEvent(in), &Tx{u: u})
		return toResult(res, err)
	}
}

// Tx is a transactional handler's unit of work, bound to one container and
// one partition of it. Reads run at once; Create, Upsert, Replace, Patch
// and Delete are queued and applied together, all or nothing, after the
// handler returns Completed. Reads do not see queued writes. The handler
// never executes the batch. A Tx is safe for concurrent use and is not
// usable after the handler returned.
//
// A document is a value that encodes as a JSON object with a string "id"
// and the partition key value at the container's partition key path. The
// batch's limits are checked as operations are queued and before the
// batch is sent: at most 99 operations (the inbox markers take the rest
// of Cosmos DB's 100), at most 2 MB of request, ids of at most 255 bytes
// without /, \, ?, #, " or control characters, every document in the
// bound partition. A broken limit is returned as a Permanent error, and
// the batch fails permanently even if the handler ignores it.
//
// ifMatch, when not empty, is the ETag the document must have (as Read
// returned it); when it does not match, or a Create meets an existing
// document, or a Replace, Patch or Delete a missing one, nothing is
// applied and the message is redelivered (a conflict).
type Tx struct{ u *txn.Unit }

// PartitionKey returns the partition key value the unit is bound to.
func (tx *Tx) PartitionKey() string { return tx.u.PartitionKey() }

// Read point-reads document id in the unit's partition and, when found,
// decodes it into into (unless nil; system properties such as _etag are
// there too). It returns the document's ETag for a condition on a later
// write. An unavailable store gives a Transient error, a bad id or an
// undecodable document a Permanent one.
func (tx *Tx) Read(ctx context.Context, id string, into any) (found bool, etag string, err error) {
	found, etag, err = tx.u.Read(ctx, id, into)
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case err == nil, ctx.Err() != nil:
	case errors.Is(err, txn.ErrLimit), errors.Is(err, txn.ErrInvalid), errors.Is(err, txn.ErrDone),
		errors.As(err, &syn), errors.As(err, &typ):
		err = Permanent(err)
	default:
		err = Transient(err)
	}
	return found, etag, err
}

// Create queues the creation of doc.
func (tx *Tx) Create(doc any) error { return queued(tx.u.Create(doc)) }

// Upsert queues the creation or replacement of doc.
func (tx *Tx) Upsert(doc any, ifMatch string) error { return queued(tx.u.Upsert(doc, ifMatch)) }

// Replace queues the replacement of document id by doc, whose id must be
// id.
func (tx *Tx) Replace(id string, doc any, ifMatch string) error {
	return queued(tx.u.Replace(id, doc, ifMatch))
}

// Patch queues the patch p of document id. A patch may not change the
// partition key.
func (tx *Tx) Patch(id string, p *Patch, ifMatch string) error {
	if p == nil {
		p = &Patch{}
	}
	return queued(tx.u.Patch(id, p.p, ifMatch))
}

// Delete queues the deletion of document id.
func (tx *Tx) Delete(id, ifMatch string) error { return queued(tx.u.Delete(id, ifMatch)) }

// queued marks a queuing failure Permanent: a retry queues the same.
func queued(err error) error { return Permanent(err) }

// Patch is a list of at most 10 patch operations on one document, applied
// in order. Paths are JSON pointers such as "/balance" or "/tags/-".
type Patch struct{ p txn.Patch }

// Set sets the value at path, creating the last property.
func (p *Patch) Set(path string, v any) *Patch { p.p.Set(path, v); return p }

// Add inserts v at path: a property, or an array index ("-" appends).
func (p *Patch) Add(path string, v any) *Patch { p.p.Add(path, v); return p }

// Replace replaces the existing value at path by v.
func (p *Patch) Replace(path string, v any) *Patch { p.p.Replace(path, v); return p }

// Remove removes the existing value at path.
func (p *Patch) Remove(path string) *Patch { p.p.Remove(path); return p }

// Increment adds by to the number at path (a missing property is set to
// by).
func (p *Patch) Increment(path string, by int64) *Patch { p.p.Increment(path, by); return p }
