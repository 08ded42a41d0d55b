// Package apptest serves the endpoint app in-process for the tests of the
// tools that talk to a local app (nimbus-func invoke, package devhost): on
// embedded defaults (endpoint BillingEndpoint, in-memory inbox and Resolver
// sink, no redelivery pause), on a loopback port, until the test ends. Its
// one handler, for OrderPlaced and OrderAccepted, completes the event unless
// the event's "Fail" says otherwise: "failed" returns a plain error (the
// event fails and blocks its session), "permanent" a Permanent one; an
// event it cannot decode fails permanently. An event whose "Publish" names
// event types publishes the first of them onward (MessageId
// "{type}-{OrderId}", the same OrderId and the rest of "Publish"), so that
// a workflow can go from one app to the next.
package apptest

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"testing"

	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

// Serve serves the endpoint app with the embedded defaults overridden by
// settings, on 127.0.0.1, and returns its port.
func Serve(t testing.TB, settings map[string]string) int {
	t.Helper()
	reg := subscriber.NewRegistry()
	handle := func(_ context.Context, ev *subscriber.Event) (subscriber.Result, error) {
		var o struct {
			OrderID string `json:"OrderId"`
			Fail    string
			Publish []string
		}
		if err := ev.Decode(&o); err != nil {
			return subscriber.Result{}, err
		}
		switch o.Fail {
		case "failed":
			return subscriber.Result{}, errors.New("the order cannot be billed")
		case "permanent":
			return subscriber.Result{}, subscriber.Permanent(errors.New("the order can never be billed"))
		}
		if len(o.Publish) > 0 {
			next, err := json.Marshal(map[string]any{"OrderId": o.OrderID, "Publish": o.Publish[1:]})
			if err != nil {
				return subscriber.Result{}, err
			}
			if err := ev.Publish(subscriber.Publication{EventTypeID: o.Publish[0], MessageID: o.Publish[0] + "-" + o.OrderID, JSON: string(next)}); err != nil {
				return subscriber.Result{}, err
			}
		}
		return subscriber.Completed(), nil
	}
	reg.Handle("OrderPlaced", handle)
	reg.Handle("OrderAccepted", handle)
	m := map[string]string{
		config.KeyEndpoint: "BillingEndpoint", config.KeyInboxEnabled: "true", config.KeyInboxStore: "InMemory",
		config.KeyResolverSink: "InMemory", config.KeyRetryBaseDelay: "0",
	}
	for k, v := range settings {
		m[k] = v
	}
	cfg, err := config.Load(config.FromMap(m))
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(cfg, app.Deps{Handlers: reg, Log: zerolog.Nop(), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: a.Handler()}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		_ = a.Close(context.Background())
	})
	return ln.Addr().(*net.TCPAddr).Port
}
