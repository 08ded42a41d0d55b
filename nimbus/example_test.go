package nimbus_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/nimbus-go/functions-subscriber/nimbus"
)

// Order is the domain event of the examples.
type Order struct {
	OrderID string  `json:"OrderId"`
	Amount  float64 `json:"Amount"`
}

// errBillingDown is a cause the examples wrap.
var errBillingDown = errors.New("billing system unavailable")

// Register one handler per NimBus EventTypeId; a second registration for
// the same id panics at start-up.
func ExampleApp_Handle() {
	app := nimbus.New()
	app.Handle("OrderPlaced", func(ctx context.Context, ev *nimbus.Event) (nimbus.Result, error) {
		var o Order
		if err := ev.Decode(&o); err != nil {
			return nimbus.Result{}, err
		}
		return nimbus.Completed(), nil
	})

	defer func() { fmt.Println(recover()) }()
	app.Handle("OrderPlaced", func(context.Context, *nimbus.Event) (nimbus.Result, error) { return nimbus.Completed(), nil })
	// Output:
	// nimbus: a handler for OrderPlaced is already registered
}

// HandleEvent decodes the event into the handler's Go type before the
// handler runs: an event that does not decode fails permanently, and the
// handler does not run. A unit test calls the handler with the value.
func ExampleHandleEvent() {
	billOrder := func(ctx context.Context, ev *nimbus.Event, o Order) (nimbus.Result, error) {
		if o.OrderID == "" {
			return nimbus.Result{}, nimbus.Permanent(errors.New("OrderPlaced has no OrderId"))
		}
		// Bill the order, idempotently keyed by ev.MessageID or o.OrderID.
		return nimbus.Completed(), nil
	}
	app := nimbus.New()
	nimbus.HandleEvent(app, "OrderPlaced", billOrder)

	_, err := billOrder(context.Background(), &nimbus.Event{EventTypeID: "OrderPlaced"}, Order{OrderID: "O-1", Amount: 10})
	fmt.Println(err)
	// Output:
	// <nil>
}

// A handler's unit test calls it with an Event and looks at the result.
func ExampleCompleted() {
	handle := func(ctx context.Context, ev *nimbus.Event) (nimbus.Result, error) {
		var o Order
		if err := ev.Decode(&o); err != nil {
			return nimbus.Result{}, err
		}
		// Bill the order, idempotently keyed by ev.MessageID or o.OrderID.
		return nimbus.Completed(), nil
	}

	res, err := handle(context.Background(), &nimbus.Event{EventTypeID: "OrderPlaced", JSON: `{"OrderId":"O-1","Amount":10}`})
	_, pending := res.Handoff()
	fmt.Println(err, pending)
	// Output:
	// <nil> false
}

// Work handed to another system is settled later from the NimBus Manager;
// meanwhile the session waits.
func ExamplePendingHandoff() {
	handle := func(ctx context.Context, ev *nimbus.Event) (nimbus.Result, error) {
		var o Order
		if err := ev.Decode(&o); err != nil {
			return nimbus.Result{}, err
		}
		return nimbus.PendingHandoff(nimbus.Handoff{
			Reason:        "ManualApproval",
			ExternalJobID: "approval-" + o.OrderID,
			ExpectedIn:    24 * time.Hour,
		}), nil
	}

	res, _ := handle(context.Background(), &nimbus.Event{EventTypeID: "OrderPlaced", JSON: `{"OrderId":"O-2","Amount":25000}`})
	h, pending := res.Handoff()
	fmt.Println(pending, h.Reason, h.ExternalJobID, h.ExpectedIn)
	// Output:
	// true ManualApproval approval-O-2 24h0m0s
}

// A plain error fails the event: the Resolver gets an ErrorResponse and the
// session is blocked until the event is retried, resubmitted or skipped.
func Example_failed() {
	handle := func(ctx context.Context, ev *nimbus.Event) (nimbus.Result, error) {
		return nimbus.Result{}, fmt.Errorf("bill order: %w", errBillingDown)
	}

	_, err := handle(context.Background(), &nimbus.Event{EventTypeID: "OrderPlaced", JSON: `{}`})
	fmt.Println(nimbus.KindOf(err), errors.Is(err, errBillingDown))
	// Output:
	// failed true
}

// A transient failure asks the broker to deliver the message again.
func ExampleTransient() {
	handle := func(ctx context.Context, ev *nimbus.Event) (nimbus.Result, error) {
		return nimbus.Result{}, nimbus.Transient(errBillingDown)
	}

	_, err := handle(context.Background(), &nimbus.Event{EventTypeID: "OrderPlaced", JSON: `{}`, DeliveryCount: 1})
	fmt.Println(nimbus.KindOf(err), errors.Is(err, errBillingDown))
	// Output:
	// transient true
}

// An event a retry cannot fix goes to the dead-letter path. Decode's
// errors are already permanent, and never quote the payload.
func ExamplePermanent() {
	handle := func(ctx context.Context, ev *nimbus.Event) (nimbus.Result, error) {
		var o Order
		if err := ev.Decode(&o); err != nil {
			return nimbus.Result{}, err
		}
		if o.OrderID == "" {
			return nimbus.Result{}, nimbus.Permanent(errors.New("OrderPlaced has no OrderId"))
		}
		return nimbus.Completed(), nil
	}

	for _, event := range []string{`{"Amount":10}`, `{"OrderId":"O-3","Amount":"ten"}`} {
		_, err := handle(context.Background(), &nimbus.Event{EventTypeID: "OrderPlaced", JSON: event})
		fmt.Printf("%s: %v\n", nimbus.KindOf(err), err)
	}
	// Output:
	// permanent: OrderPlaced has no OrderId
	// permanent: decode OrderPlaced event into *nimbus_test.Order: field Amount holds a JSON string, which does not fit float64
}

// A discarded event is skipped on purpose: the Resolver gets a
// SkipResponse and the session goes on.
func ExampleDiscard() {
	handle := func(ctx context.Context, ev *nimbus.Event) (nimbus.Result, error) {
		if ev.Attempt == nimbus.AttemptReplay {
			return nimbus.Result{}, nimbus.Discard(errors.New("orders are not billed on replay"))
		}
		return nimbus.Completed(), nil
	}

	_, err := handle(context.Background(), &nimbus.Event{EventTypeID: "OrderPlaced", JSON: `{}`, Attempt: nimbus.AttemptReplay})
	fmt.Println(nimbus.KindOf(err), err)
	// Output:
	// discard orders are not billed on replay
}

// Run serves the app until its context ends. Here it serves a loopback
// listener and gets one invocation, as the Functions host would send it;
// Main does the same on the host's port and stops on SIGTERM.
func ExampleApp_Run() {
	app := nimbus.New()
	app.Handle("OrderPlaced", func(ctx context.Context, ev *nimbus.Event) (nimbus.Result, error) {
		var o Order
		if err := ev.Decode(&o); err != nil {
			return nimbus.Result{}, err
		}
		fmt.Printf("billing %s (%s delivery %d)\n", o.OrderID, ev.Attempt, ev.DeliveryCount)
		return nimbus.Completed(), nil
	})

	settings := []string{
		"NimBus__Endpoint=BillingEndpoint",
		"NimBus__Resolver__Sink=InMemory", // responses stay in the process
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	exit := make(chan error)
	go func() {
		exit <- app.Run(ctx, nimbus.Options{
			Environ:  settings,
			Listener: ln,
			Stdout:   io.Discard,
			Stderr:   io.Discard,
		})
	}()

	body := `{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1\",\"Amount\":10}"},"ErrorContent":null}`
	invocation := `{"Data":{"message":"` + base64.StdEncoding.EncodeToString([]byte(body)) + `"},` +
		`"Metadata":{"DeliveryCount":"1","MessageId":"\"m-1\"","SessionId":"\"s-1\"",` +
		`"ApplicationProperties":{"To":"BillingEndpoint","From":"Shop","MessageType":"EventRequest","EventId":"e-1","EventTypeId":"OrderPlaced"}}}`
	resp, err := http.Post("http://"+ln.Addr().String()+"/Subscriber", "application/json", strings.NewReader(invocation))
	if err != nil {
		fmt.Println(err)
	} else {
		resp.Body.Close()
		fmt.Println("status", resp.StatusCode)
	}

	stop()
	fmt.Println("Run:", <-exit)
	// Output:
	// billing O-1 (original delivery 1)
	// status 200
	// Run: <nil>
}

// Wrong settings stop Run before it serves: the *SettingsError lists every
// problem (Main exits with code 2 on it).
func ExampleSettingsError() {
	app := nimbus.New()
	err := app.Run(context.Background(), nimbus.Options{
		Environ: []string{"NimBus__Resolver__Sink=InMemory", "NimBus__Inbox__PurgeBatchSize=0"},
		Stdout:  io.Discard,
		Stderr:  io.Discard,
	})
	var settings *nimbus.SettingsError
	if errors.As(err, &settings) {
		for _, p := range settings.Problems {
			fmt.Println(strings.SplitN(p, " ", 2)[0])
		}
	}
	// Output:
	// NimBus__Endpoint
	// NimBus__Inbox__PurgeBatchSize="0"
}
