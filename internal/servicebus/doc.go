// Package servicebus is the shared Azure Service Bus adapter: the only
// package of the app that imports azservicebus.
//
// One [Client] serves the whole process. It is built from typed [Options]
// (a connection string, or a fully-qualified namespace with a managed
// identity or DefaultAzureCredential) and does no I/O when built: the SDK
// client is created on first use, and the connection is opened by the first
// operation, so start-up never waits on Azure. A failed creation is returned
// to the callers of that attempt and retried by the next call.
//
// The client offers what NimBus endpoints need from the broker:
//
//   - [Client.Send] and [Client.Schedule] send a [Message] to a topic or
//     queue through one sender per entity, created on first use and reused;
//     [Client.SendBatch] sends several in order in one AMQP batch transfer
//     (consecutive batches when they do not fit in one);
//   - [Client.AcceptSession] and [Client.AcceptNextSession] lock a session
//     on a topic subscription and return a [SessionReceiver] to receive,
//     complete and abandon its messages one at a time (the parked-copy
//     replay reads the Deferred subscription this way);
//   - [ResolverPublisher] implements the Resolver port
//     (resolver.Publisher, resolver.BatchPublisher) by sending each response
//     to the endpoint topic.
//
// Application properties keep their exact AMQP types: NimBus readers expect
// string, int (Go int32) and long (Go int64) values, so [Message] accepts
// only string, int32, int64 and nil and refuses anything else with
// [ErrUnsupportedProperty] before any I/O (the SDK would silently encode a
// Go int as a long, for example). NimBus writes no boolean, floating-point
// or timestamp application properties, so none are accepted.
//
// SDK retries are set explicitly through [Options.Retry]; [DefaultRetry] is
// the recommended setting and its Go doc states the worst-case time one
// operation spends in them.
//
// The package never reads or names app settings; the config package owns
// them, validates them and fills [Options].
package servicebus
