package nimbus_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testlog"
	"github.com/nimbus-go/functions-subscriber/nimbus"
)

// With NIMBUS_DESCRIBE set, Run prints the setting names the registrations
// read and the event types, and returns at once: no settings are read (none
// is given here), nothing is served and the listener is closed.
func TestRunDescribesTheAppWhenAsked(t *testing.T) {
	app := nimbus.New()
	app.Handle("OrderPlaced", func(context.Context, *nimbus.Event) (nimbus.Result, error) { return nimbus.Completed(), nil })
	pk := func(*nimbus.Event) (string, error) { return "k", nil }
	tx := func(context.Context, *nimbus.Event, *nimbus.Tx) (nimbus.Result, error) {
		return nimbus.Completed(), nil
	}
	app.HandleTx("PaymentReceived", nimbus.Container{DatabaseID: "Billing", ContainerID: "ledger", PartitionKeyPath: "/customerId",
		DatabaseSetting: "NimBus__Ledger__DatabaseId", ContainerSetting: "LEDGER_CONTAINER"}, pk, tx)
	app.HandleTx("RefundIssued", nimbus.Container{DatabaseID: "Billing", ContainerID: "ledger", PartitionKeyPath: "/customerId",
		DatabaseSetting: "NimBus__Ledger__DatabaseId"}, pk, tx)
	app.HandleHTTP(nimbus.HTTPFunction{Name: "PlaceOrder", Route: "orders", Methods: []string{"post", "PUT"}, Handler: http.NotFoundHandler()})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr testlog.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err = app.Run(ctx, nimbus.Options{Environ: []string{"NIMBUS_DESCRIBE=1"}, Listener: ln, Stdout: &stdout, Stderr: &stderr})
	if err != nil || ctx.Err() != nil {
		t.Fatalf("Run: %v (context: %v), stderr: %s", err, ctx.Err(), stderr.String())
	}
	var d struct {
		Settings, EventTypes []string
		Transactional        []string `json:"transactionalEventTypes"`
		HTTP                 []struct {
			Name, Route string
			Methods     []string
		} `json:"httpFunctions"`
	}
	if err := json.Unmarshal([]byte(stdout.String()), &d); err != nil {
		t.Fatalf("stdout is not the description: %v\n%s", err, stdout.String())
	}
	if got, want := d.Settings, []string{"LEDGER_CONTAINER", "NimBus__Ledger__DatabaseId"}; !slices.Equal(got, want) {
		t.Errorf("settings %q, want %q", got, want)
	}
	if got, want := d.EventTypes, []string{"OrderPlaced", "PaymentReceived", "RefundIssued"}; !slices.Equal(got, want) {
		t.Errorf("event types %q, want %q", got, want)
	}
	if got, want := d.Transactional, []string{"PaymentReceived", "RefundIssued"}; !slices.Equal(got, want) {
		t.Errorf("transactional event types %q, want %q", got, want)
	}
	if len(d.HTTP) != 1 || d.HTTP[0].Name != "PlaceOrder" || d.HTTP[0].Route != "orders" || !slices.Equal(d.HTTP[0].Methods, []string{"POST", "PUT"}) {
		t.Errorf("HTTP functions %+v, want PlaceOrder at orders, POST and PUT", d.HTTP)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the listener is still open: %v", err)
	}
}
