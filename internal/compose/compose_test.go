package compose_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/compose"
	"github.com/nimbus-go/functions-subscriber/internal/devhost"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/nimbus"
)

var settings = []string{
	"NimBus__Endpoint=BillingEndpoint", "NimBus__Inbox__Enabled=true", "NimBus__Inbox__Store=InMemory",
	"NimBus__Resolver__Sink=InMemory", "NimBus__Retry__BaseDelay=0",
}

// A composed app runs the team's handler on the real pipeline and sends
// through the sink the composition gave it, not the configured one.
func TestComposedAppSendsThroughTheGivenSink(t *testing.T) {
	a := nimbus.New()
	ran := 0
	a.Handle("OrderPlaced", func(context.Context, *nimbus.Event) (nimbus.Result, error) {
		ran++
		return nimbus.Completed(), nil
	})
	sink := &resolver.Memory{}
	var logs bytes.Buffer
	svc, err := compose.App(a, compose.Options{Environ: settings, Stdout: &logs,
		Deps: app.Deps{Publisher: sink, TracerProvider: noop.NewTracerProvider()}})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())

	_, env := devhost.EventInvocation("Subscriber", devhost.Event{Endpoint: "BillingEndpoint", Publisher: "ShopEndpoint",
		EventTypeID: "OrderPlaced", EventJSON: `{"OrderId":"O-1"}`}, 1, time.Now())
	rec := httptest.NewRecorder()
	svc.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/Subscriber", bytes.NewReader(env)))
	if rec.Code != http.StatusOK || ran != 1 {
		t.Fatalf("invocation = %d (handler ran %d times): %s", rec.Code, ran, rec.Body)
	}
	sent := sink.Sent()
	if len(sent) != 1 || sent[0].Type() != "ResolutionResponse" {
		t.Fatalf("sink holds %d messages, want one ResolutionResponse: %+v", len(sent), sent)
	}
	if !strings.Contains(logs.String(), `"outcome":"completed"`) {
		t.Fatalf("no log line names the invocation: %s", logs.String())
	}
}

// Settings are checked as Run checks them, and the app is not composed.
func TestCompositionRefusesBadSettings(t *testing.T) {
	a := nimbus.New()
	a.Handle("OrderPlaced", func(context.Context, *nimbus.Event) (nimbus.Result, error) { return nimbus.Completed(), nil })
	_, err := compose.App(a, compose.Options{Environ: []string{"NimBus__Inbox__Enabled=maybe"},
		Deps: app.Deps{TracerProvider: noop.NewTracerProvider()}})
	var serr *nimbus.SettingsError
	if !errors.As(err, &serr) || !strings.Contains(serr.Error(), "NimBus__Inbox__Enabled") {
		t.Fatalf("err = %v, want a SettingsError naming NimBus__Inbox__Enabled", err)
	}
	if _, err := compose.App("not an app", compose.Options{}); err == nil {
		t.Fatal("a value that is not a *nimbus.App was composed")
	}
}
