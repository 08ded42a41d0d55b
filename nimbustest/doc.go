// Package nimbustest tests the handlers of a NimBus endpoint in go test,
// on the real pipeline and without Azure.
//
// A plain handler is a function: build its event with NewEvent, call it
// with the context HandlerContext returns, and read what it published
// (Event.Published) and what it logged (Logs.Records):
//
//	ev := nimbustest.NewEvent("OrderPlaced", OrderPlaced{OrderID: "O-1"})
//	ctx, logs := nimbustest.HandlerContext(context.Background(), ev)
//	res, err := orders.OrderPlaced(ctx, ev)
//	// ev.Published(), logs.Records()
//
// A transactional handler runs in a unit of work that only the pipeline
// can give it: RunTx composes an app with the handler as nimbus.HandleTx
// registers it, over a Container the test seeds, delivers the event to it
// as NimBus's forwarder would, and returns what the delivery did (a
// TxRun): the outcome, how many times the handler ran, the writes the
// commit applied, the events sent after it, the response the Resolver got
// and the handler's logs. ChangeAfterRead changes a document between the
// handler's read and the commit, so a test sees the conflict and the
// handler's re-run:
//
//	c := nimbustest.NewContainer(accounts)
//	_ = c.Seed(Account{ID: "acc-C-1", CustomerID: "C-1", Balance: 100})
//	run, err := nimbustest.RunTx(ctx, c, ev, customerOf, billing.Credit)
//	// run.Outcome, run.Writes, run.Published, c.Read("C-1", "acc-C-1", &acc)
//
// Import it from _test.go files only: nothing in a production binary
// should depend on it.
package nimbustest
