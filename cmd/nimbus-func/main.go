// Command nimbus-func sets up, checks, packages and publishes a NimBus
// subscriber endpoint built on this module: run it from the endpoint's own
// module, which requires this one, so that the files it writes match the
// library version in use:
//
//	go run github.com/nimbus-go/functions-subscriber/cmd/nimbus-func init --endpoint BillingEndpoint
//	go run github.com/nimbus-go/functions-subscriber/cmd/nimbus-func check
//	go run github.com/nimbus-go/functions-subscriber/cmd/nimbus-func package
//	go run github.com/nimbus-go/functions-subscriber/cmd/nimbus-func publish my-function-app
//
// Run it without arguments for the options of each command.
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/nimbus-go/functions-subscriber/internal/scaffold"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := scaffold.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
