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
// The Store port executes batches; Memory is its in-process
// implementation and cosmostxn the Cosmos DB one. Commit checks every
// limit of a Cosmos batch before sending (the SDK checks none) and turns
// the batch's answer into one typed outcome (see Outcome).
//
// This package imports no Azure SDK.
package txn
