// Command handler is the sample NimBus subscriber endpoint (BillingEndpoint)
// built on package nimbus, and, with NimBus__App=Resolver, the NimBus
// Resolver. The Azure Functions host starts it, tells it the port in
// FUNCTIONS_CUSTOMHANDLER_PORT, and POSTs each Service Bus and timer
// invocation to it; it also serves the HTTP function PlaceOrder
// (POST /api/orders, orders.go). Its event handlers are in handlers.go.
package main

import "github.com/nimbus-go/functions-subscriber/nimbus"

func main() {
	app := nimbus.New()
	registerHandlers(app)
	app.Main()
}
