// Package inbox is the consumer inbox: the identity of a delivery on an
// endpoint, the Store contract every provider implements, an in-memory
// store, and the cleanup loop that purges an endpoint's expired records.
//
// The key is the (endpoint, MessageId) pair. Durable providers key on the
// NimBus identity hash (see Key), so one physical store can serve many
// endpoints without one endpoint's record turning another's first delivery
// into a duplicate. Identifiers are opaque and byte-exact: case and trailing
// white space are significant.
package inbox
