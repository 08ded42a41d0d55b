// Package resolverapp is the NimBus Resolver app's handling of each message
// from the Resolver subscription, as NimBus's ResolverService does it:
// Service writes the history, projects the status and uploads the tracking
// row through the stale-write guard of the tracking store, writes the
// audits, and spends the store-failure budget with scheduled same-MessageId
// re-sends; its outcome table decides how each invocation is answered. It
// imports no Azure SDK: the tracking store and the Scheduler are ports.
package resolverapp
