// Package session keeps NimBus's per-session state off the broker. A custom
// handler cannot read or write Service Bus session state (the Functions host
// owns the session lock and settlement), so what NimBus's
// StrictMessageHandler keeps in the broker session lives in a store, one
// document per (endpoint, SessionId):
//
//   - the block: BlockedByEventId (the EventId of the failed or pending
//     event that blocks the session) and BlockedByMessageId (the source
//     MessageId of the delivery that blocked it, which a resubmission that
//     resolves the event records in the inbox);
//   - parking: NextDeferralSequence (the next DeferralSequence handed to a
//     parked copy) and DeferredCount (parked copies not yet replayed), plus
//     the last park (LastParkedMessageId and LastParkedSequence), which makes
//     a redelivered park reuse its sequence instead of taking a new one;
//   - the drain: NextReplaySequence (the replay cursor: every parked copy
//     with a lower DeferralSequence has been replayed or passed over) and
//     DrainRequestedAtUtc (a replay has been requested and has not caught
//     up).
//
// The package holds the Store port (Read and a compare-and-swap Write), the
// State and its transitions (pure functions: Block, Unblock, Park,
// RequestDrain, Replayed, FinishDrain), Apply (one transition written with
// a bounded re-read on a lost race) and an in-memory store for the demo and
// tests. It imports no Azure SDK; the Cosmos DB store is
// internal/session/cosmossession and the conformance suite both pass is
// internal/session/sessiontest.
//
// Invariants every store keeps:
//
//   - a missing document reads as the zero State (not blocked, nothing
//     parked, no replay requested) with an empty Version; any failure to
//     read is an error, never that zero State;
//   - every change is conditioned on the Version the caller read: a create
//     when it read nothing, a replace If-Match otherwise; a lost race is
//     ErrConflict and changes nothing, so two writers never lose each
//     other's update;
//   - DeferredCount = NextDeferralSequence − NextReplaySequence, and both
//     sequences only grow: a DeferralSequence is never handed out twice.
package session
