package subscriber

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// A transactional handler (Registry.HandleTx) keeps its state in one
// partition of one Cosmos DB container. For it the pipeline:
//
//   - derives the partition key value from the event before the inbox
//     check, and reads the inbox marker of every key the plain path would
//     check in that partition, alongside the inbox check and the
//     session-state read (one round trip): a marker or an inbox record
//     makes the delivery a duplicate;
//   - runs the handler on a unit of work bound to the partition;
//   - on success commits the handler's queued operations with one marker
//     per key the plain path would record, markers first, as ONE
//     transactional batch; the separate inbox document is not written.
//
// The batch's verdict maps to the outcome table: committed goes on as a
// recorded success; a marker that already exists is a duplicate; a
// handler operation that conflicts (409, 412, 404) is OutcomeTxnConflict;
// throttling, unavailability and a container with time to live off are
// OutcomeTransientFailure; a batch that may have been applied is
// OutcomeTxnAmbiguous (the redelivery's marker read decides); a broken
// limit or a refused operation is OutcomeTxnRejected (dead-letter path).

// Store operations of a transactional handler, as StoreError names them.
const (
	opMarkerCheck = "marker_check"
	opTxnCommit   = "txn_commit"
)

// spanTxnCommit is the span of a transactional handler's batch.
const spanTxnCommit = "nimbus.txn.commit"

// txState is a transactional delivery's binding and partition.
type txState struct {
	binding *TxBinding
	h       TxHandlerFunc
	// pk is the partition key value; pkErr why it could not be derived
	// (the handler then fails permanently, after the plain inbox check).
	pk    string
	pkErr error
	// t is the transaction the handler ran in.
	t *txn.Txn
}

// prepareTx looks the event type up and, for a transactional handler,
// derives the partition key value. It runs once, before the inbox check.
func (j *job) prepareTx() {
	if j.txPrepared {
		return
	}
	j.txPrepared = true
	e, ok := j.p.o.Handlers.lookup(j.eventTypeID)
	if !ok || e.tx == nil {
		return
	}
	j.tx = &txState{binding: e.tx, h: e.txh}
	j.tx.pk, j.tx.pkErr = partitionKey(e.tx, j.event())
}

// partitionKey evaluates b's partition key function; a panic or an empty
// value is an error.
func partitionKey(b *TxBinding, ev *Event) (pk string, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("the partition key function panicked: %v", v)
		}
	}()
	pk, err = b.PartitionKey(ev)
	switch {
	case err != nil:
		return "", fmt.Errorf("deriving the partition key of %s: %w", b.Target.ContainerID, err)
	case pk == "":
		return "", fmt.Errorf("the partition key of %s is empty", b.Target.ContainerID)
	}
	return pk, txn.CheckPartitionKey(pk)
}

// readsMarkers reports whether the lookup reads markers.
func (j *job) readsMarkers() bool { return j.tx != nil && j.tx.pkErr == nil }

// hasMarker is the marker read of k, in the lookup's parallel step.
func (j *job) hasMarker(ctx context.Context, k inbox.Key) (bool, error) {
	cctx, span := j.p.o.Tracer.Start(ctx, spanInboxCheck)
	if span.IsRecording() {
		span.SetAttributes(attribute.Bool("nimbus.inbox.marker", true))
	}
	b := j.tx.binding
	seen, err := txn.HasMarker(cctx, j.p.o.Txn, b.Target, j.tx.pk, k.EndpointID, k.MessageID)
	if err != nil {
		err = NewStoreError(opMarkerCheck, err)
		endSpan(span, err)
		return false, err
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.Bool("nimbus.inbox.duplicate", seen))
	}
	span.End()
	return seen, nil
}

// runTx runs the transactional handler in a new transaction on the
// delivery's partition. The unit is sealed when the handler returns (or
// panics), so nothing its goroutines queue later is committed.
func (j *job) runTx(ctx context.Context, ev *Event) (Result, error) {
	j.tx.t = txn.Begin(j.p.o.Txn, j.tx.binding.Target, j.tx.pk, j.p.o.Now)
	defer j.tx.t.Seal()
	return j.tx.h(ctx, ev, j.tx.t.Unit())
}

// save makes a successful handler's delivery known as processed under
// keys (nil keys are skipped): the inbox records of a plain handler, or
// the transactional handler's batch with one marker per key. done is true
// when the delivery ends here, with end: a failure, or the answer dup
// gives when the batch found another copy's marker.
func (j *job) save(ctx context.Context, keys []*inbox.Key, dup func(inbox.Key) result) (end result, done bool) {
	if j.tx == nil || j.tx.t == nil {
		if err := j.record(ctx, keys...); err != nil {
			return failure(err), true
		}
		return result{}, false
	}
	var markers []txn.Marker
	var marked []inbox.Key
	for _, k := range keys {
		if k == nil {
			continue
		}
		markers = append(markers, txn.Marker{EndpointID: k.EndpointID, MessageID: k.MessageID, Retention: j.p.o.MarkerRetention})
		marked = append(marked, *k)
	}
	cctx, span := j.p.o.Tracer.Start(ctx, spanTxnCommit)
	_, err := j.tx.t.Commit(cctx, markers...)
	o := txn.Classify(err)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("nimbus.txn.outcome", o.String()))
	}
	switch o {
	case txn.Committed:
		span.End()
		return result{}, false
	case txn.Duplicate:
		span.End()
		var de *txn.DuplicateError
		i := 0
		if errors.As(err, &de) && de.Marker >= 0 && de.Marker < len(marked) {
			i = de.Marker
		}
		j.r.Inbox = InboxDuplicate
		return dup(marked[i]), true
	}
	end = txFailure(o, err)
	endSpan(span, end.err)
	return end, true
}

// txFailure is the result of a batch that was not committed. Its error
// text is the txn package's, which names operations, statuses and limits
// but never document content.
func txFailure(o txn.Outcome, err error) result {
	switch o {
	case txn.Conflict:
		return result{outcome: OutcomeTxnConflict, err: err}
	case txn.Ambiguous:
		// The cause is a transport error, whose text may name the account:
		// reported as a store error, which keeps only a class.
		return result{outcome: OutcomeTxnAmbiguous, err: NewStoreError(opTxnCommit, err), storeOp: opTxnCommit}
	case txn.Permanent:
		return result{outcome: OutcomeTxnRejected, err: Permanent(err)}
	}
	return failure(NewStoreError(opTxnCommit, err))
}
