// Command nimbus-func sets up, checks, runs, packages and publishes a NimBus
// subscriber endpoint built on this module. Add it to the endpoint's own
// module as a tool, pinned at the library's version, so that the files it
// writes and checks match the library in use:
//
//	go get -tool github.com/nimbus-go/functions-subscriber/cmd/nimbus-func@latest
//	go tool nimbus-func init --endpoint BillingEndpoint
//	go tool nimbus-func check
//	go tool nimbus-func invoke OrderPlaced '{"OrderId":"O-1"}'
//	go tool nimbus-func package
//	go tool nimbus-func publish my-function-app
//
// 'nimbus-func help <command>' (or 'nimbus-func <command> -h') prints a
// command's usage and options; 'nimbus-func version' the version of the
// library it belongs to.
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
