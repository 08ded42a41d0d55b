// Package tracking is the NimBus message-tracking store: the contract the
// Resolver writes through (Writer), the lookups (Reader), the conditional
// and operator writes (Store), the stale-write guard in one function
// (Allows), and an in-memory provider (Memory). It imports no Azure SDK;
// the Cosmos DB provider is package cosmostracking, and package
// trackingtest is the conformance suite every provider passes.
//
// The store keeps, per endpoint, one tracking row per event and session
// (UnresolvedEvent, stored id "{EventId}_{SessionId}"), the per-message
// history (MessageEntity) and audits (MessageAudit). Field names and JSON
// casing are NimBus's, so a Go Resolver and NimBus's .NET tools read the
// same documents.
//
// The rules, as the specification states them:
//
//   - applied is false only when the stale-write guard refuses; nothing is
//     written then and the caller must not retry. Provider failures,
//     including a lost compare-and-swap, are errors (*StoreError,
//     ErrConcurrentUpdate), never a refusal.
//   - TryCompletePendingMessage replaces a row with a Completed projection
//     only if the row exists, is Pending, is not soft-deleted and its
//     LastMessageId equals the expected one (ordinal; nil matches nil);
//     true only when it replaced; no retry.
//   - Lookups: a missing row is nil, never an error (a row in another
//     status or session, removed or archived, is missing); optional
//     strings round-trip exactly (nil stays nil, "" stays ""); GetEvent is
//     the most recently updated row across sessions; GetEventByID matches
//     "{EventId}_{SessionId}"; GetFailedMessage is the newest message with
//     ErrorContent; GetDeadletteredMessage the newest of any type.
//   - Endpoint ids naming the store's own containers are refused,
//     case-sensitively, before any storage is touched (CheckEndpointID).
package tracking
