// Package txn is the transactional unit of work of a handler whose state
// lives in one Cosmos DB container: point reads run at once in the bound
// partition; creates, upserts, replaces, patches and deletes (with ETag
// conditions) are queued; when the handler has succeeded, the pipeline
// commits the queue together with the creation of inbox markers as ONE
// transactional batch, all or nothing.
//
// A marker is the proof that a delivery's effects were applied: its id is
// the inbox identity hash of (endpoint, MessageId), the same id as the
// inbox document, and it lives in the handler's partition, so it is
// written atomically with the handler's effects. A copy of the delivery
// that commits second finds the marker's create answered 409 and is told
// Duplicate: nothing of it is applied.
//
// The events a handler publishes (Unit.Publish) are the delivery's
// outbox: the commit stores them, in publish order and with the
// delivery's ResolutionResponse, in the marker that has Marker.Outbox set,
// in the same batch as the handler's writes. That marker has no ttl until
// MarkDispatched records that the events were sent (it then keeps only
// their ids and expires after the retention). The pipeline uses it so:
//
//	tx := txn.Begin(store, target, pk, now)   // handler: tx.Unit().Publish(stored event)…
//	rc, err := tx.Commit(ctx, source, txn.Marker{…own MessageId…, Outbox: true, Response: &resp})
//	if rc.Pending != nil {                    // events were stored
//		err = resolver.PublishAll(ctx, pub, rc.Pending.Messages()) // events, then the response
//		_, err = txn.MarkDispatched(ctx, store, rc.Pending, retention, now()) // Marked, AlreadyMarked or MarkerGone
//	}
//
// and a later copy of the delivery reads the marker's state (ReadMarker):
// a Pending outbox is sent and marked the same way. A PendingFinder finds
// the markers no copy finished, for the OutboxSweep (package outbox).
//
// The Store port executes batches; Memory is its in-process
// implementation and cosmostxn the Cosmos DB one. Commit checks every
// limit of a Cosmos batch before sending (the SDK checks none) and turns
// the batch's answer into one typed outcome (see Outcome).
//
// This package imports no Azure SDK.
package txn
