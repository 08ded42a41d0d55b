// Package nimbus is what a team imports to write a NimBus subscriber
// endpoint that runs as an Azure Functions custom handler.
//
// An endpoint registers one handler per NimBus EventTypeId and hands control
// to the App:
//
//	func main() {
//		app := nimbus.New()
//		nimbus.HandleEvent(app, "OrderPlaced", handleOrderPlaced)
//		app.Main()
//	}
//
//	func handleOrderPlaced(ctx context.Context, ev *nimbus.Event, o OrderPlaced) (nimbus.Result, error) { … }
//
// HandleEvent decodes the event into the handler's Go type first; Handle
// registers a handler of the raw Event, which decodes it itself.
//
// The Functions host starts the binary, gives it a port, and POSTs each
// Service Bus and timer invocation to it. For every delivery the App runs the
// NimBus subscriber contract: the consumer inbox drops duplicates, the
// handler registered for the event type runs, the delivery is recorded only
// after the handler succeeded, and the outcome is reported to the NimBus
// Resolver. Messages of a session are handled in order: a failed event blocks
// its session and later messages are parked behind it until it is resolved.
//
// A handler whose state lives in one Cosmos DB container can be registered
// with HandleEventTx or HandleTx instead: its writes, queued on a Tx bound
// to one partition, and the record that the message was handled commit in
// one transactional batch, so its effect on the container is applied
// exactly once.
//
// A handler continues the workflow by publishing the next event through the
// event it handles (Event.Publish) or its unit of work (Tx.Publish), with a
// Publication that names the event type and a message id derived from the
// business key. The events go out only when the handler returns Completed,
// in order, before the Resolver hears that the event completed; a
// transactional handler's events commit with its writes and are sent from
// its inbox marker, whatever fails after the commit.
//
// A handler returns Completed when it is done, or PendingHandoff when another
// system settles the outcome later. An error fails the event; Transient,
// Permanent and Discard choose another failure kind (see KindOf). A panic is
// a plain failure.
//
// Main reads the app settings (NimBus__*) and the OpenTelemetry settings
// (OTEL_*) from the environment, serves the host on 127.0.0.1, shuts down
// gracefully on SIGTERM and exits with a status code: 0 clean, 1 when the
// server failed or shutdown cut invocations off, 2 when a setting is wrong.
// Run does the same under a context and returns an error instead (a
// *SettingsError listing every problem with the settings), for tests and
// for programs that own their process. With NimBus__App=Resolver the same
// binary serves the NimBus Resolver instead, and registered handlers are
// not used.
package nimbus
