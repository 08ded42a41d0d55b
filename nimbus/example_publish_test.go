package nimbus_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/nimbus-go/functions-subscriber/nimbus"
)

// OrderAccepted is an event the examples publish.
type OrderAccepted struct {
	OrderID string `json:"OrderId"`
}

// A handler publishes the next event of its workflow through the event it
// handles. The event goes out only when the handler returns Completed, to
// the endpoint's topic, before the Resolver's response, with the
// delivery's session, correlation and lineage. Its message id derives from
// the business key, so a redelivery that runs the handler again publishes
// the same event. Here the app runs with the in-memory sink, which shows
// what the endpoint sent.
func ExampleEvent_Publish() {
	app := nimbus.New()
	nimbus.HandleEvent(app, "OrderPlaced", func(ctx context.Context, ev *nimbus.Event, o Order) (nimbus.Result, error) {
		err := ev.Publish(nimbus.Publication{
			EventTypeID: "OrderAccepted",
			MessageID:   "OrderAccepted-" + o.OrderID,
			Payload:     OrderAccepted{OrderID: o.OrderID},
		})
		if err != nil {
			return nimbus.Result{}, err
		}
		return nimbus.Completed(), nil
	})

	base, stop := serve(app, "NimBus__Endpoint=BillingEndpoint", "NimBus__Resolver__Sink=InMemory")
	defer stop()
	fmt.Println("status", deliver(base, "OrderPlaced", `{"OrderId":"O-1","Amount":10}`))
	for _, m := range sent(base) {
		fmt.Println(m)
	}
	// Output:
	// status 200
	// EventRequest OrderAccepted MessageId=OrderAccepted-O-1 SessionId=s-1 CorrelationId=c-1 ParentMessageId=m-1 EventJson={"OrderId":"O-1"}
	// ResolutionResponse Resolver SessionId=s-1 CorrelationId=m-1
}

// A test of a handler calls it with an Event it builds: Publish checks
// each publication as the pipeline would (apart from what depends on a
// delivery) and keeps it, and Published lists what was kept. Nothing is
// sent.
func ExampleEvent_Published() {
	accept := func(ctx context.Context, ev *nimbus.Event, o Order) (nimbus.Result, error) {
		if err := ev.Publish(nimbus.Publication{EventTypeID: "OrderAccepted", MessageID: "OrderAccepted-" + o.OrderID, Payload: OrderAccepted{o.OrderID}}); err != nil {
			return nimbus.Result{}, err
		}
		return nimbus.Completed(), nil
	}
	ev := &nimbus.Event{EventTypeID: "OrderPlaced", MessageID: "m-1"}
	_, err := accept(context.Background(), ev, Order{OrderID: "O-7"})
	fmt.Println(err)
	for _, p := range ev.Published() {
		fmt.Println(p.EventTypeID, p.MessageID)
	}

	// The same id twice in one delivery is refused.
	err = ev.Publish(nimbus.Publication{EventTypeID: "OrderAccepted", MessageID: "OrderAccepted-O-7"})
	fmt.Println(nimbus.KindOf(err), err)
	// Output:
	// <nil>
	// OrderAccepted OrderAccepted-O-7
	// permanent publish 2: invalid publication: the message id was already published by this delivery; each event needs its own
}

// A transactional handler publishes through its unit of work: the event is
// stored in the delivery's inbox marker in the same batch as the handler's
// writes, then sent with the Resolver's response. Here the in-memory sink
// refuses the first send: the delivery fails (503) with the payment
// committed and its event kept in the marker; the redelivery does not run
// the handler again, it sends the stored event and completes.
func ExampleTx_Publish() {
	app := nimbus.New()
	ledger := nimbus.Container{DatabaseID: "Billing", ContainerID: "ledger", PartitionKeyPath: "/customerId"}
	byCustomer := func(p Payment) (string, error) { return p.CustomerID, nil }
	nimbus.HandleEventTx(app, "PaymentReceived", ledger, byCustomer, func(ctx context.Context, ev *nimbus.Event, tx *nimbus.Tx, p Payment) (nimbus.Result, error) {
		fmt.Println("handling", ev.MessageID, "delivery", ev.DeliveryCount)
		if err := tx.Create(map[string]any{"id": "payment-" + p.PaymentID, "customerId": p.CustomerID, "amountCents": p.AmountCents}); err != nil {
			return nimbus.Result{}, err
		}
		return nimbus.Completed(), tx.Publish(nimbus.Publication{
			EventTypeID: "PaymentRecorded",
			MessageID:   "PaymentRecorded-" + p.PaymentID,
			Payload:     map[string]any{"PaymentId": p.PaymentID, "AmountCents": p.AmountCents},
		})
	})

	base, stop := serve(app, "NimBus__Endpoint=BillingEndpoint", "NimBus__Resolver__Sink=InMemory",
		"NimBus__Inbox__Enabled=true", "NimBus__Inbox__Store=InMemory", "NimBus__Retry__BaseDelay=00:00:00")
	defer stop()
	refuse(base, `{"messageType":"EventRequest","count":1}`)
	event := `{"PaymentId":"p-1","CustomerId":"c-7","AmountCents":1250}`
	fmt.Println("status", deliver(base, "PaymentReceived", event))
	fmt.Println("status", deliver(base, "PaymentReceived", event, 2))
	for _, m := range sent(base) {
		fmt.Println(m)
	}
	// Output:
	// handling m-1 delivery 1
	// status 503
	// status 200
	// EventRequest PaymentRecorded MessageId=PaymentRecorded-p-1 SessionId=s-1 CorrelationId=c-1 ParentMessageId=m-1 EventJson={"AmountCents":1250,"PaymentId":"p-1"}
	// ResolutionResponse Resolver SessionId=s-1 CorrelationId=m-1
}

// serve runs app on a loopback listener with settings until stop.
func serve(app *nimbus.App, settings ...string) (base string, stop func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	exit := make(chan error, 1)
	go func() {
		exit <- app.Run(ctx, nimbus.Options{Environ: settings, Listener: ln, Stdout: io.Discard, Stderr: io.Discard})
	}()
	return "http://" + ln.Addr().String(), func() {
		cancel()
		if err := <-exit; err != nil {
			fmt.Println("Run:", err)
		}
	}
}

// deliver sends the Subscriber function an event of type typ (MessageId
// m-1, SessionId s-1, CorrelationId c-1) on delivery count (1 unless
// given), as the Functions host would, and returns the status.
func deliver(base, typ, eventJSON string, count ...int) int {
	n := 1
	if len(count) > 0 {
		n = count[0]
	}
	js, _ := json.Marshal(eventJSON)
	body := `{"EventContent":{"EventTypeId":"` + typ + `","EventJson":` + string(js) + `},"ErrorContent":null}`
	invocation := `{"Data":{"message":"` + base64.StdEncoding.EncodeToString([]byte(body)) + `"},` +
		`"Metadata":{"DeliveryCount":"` + fmt.Sprint(n) + `","MessageId":"\"m-1\"","SessionId":"\"s-1\"","CorrelationId":"\"c-1\"",` +
		`"ApplicationProperties":{"To":"BillingEndpoint","From":"Shop","MessageType":"EventRequest","EventId":"e-1","EventTypeId":"` + typ + `"}}}`
	resp, err := http.Post(base+"/Subscriber", "application/json", strings.NewReader(invocation))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// refuse asks the in-memory sink to refuse sends.
func refuse(base, refusal string) {
	resp, err := http.Post(base+"/_nimbus/resolver/refuse", "application/json", bytes.NewReader([]byte(refusal)))
	if err == nil {
		resp.Body.Close()
	}
}

// sent describes each message the in-memory sink kept, one line each.
func sent(base string) []string {
	resp, err := http.Get(base + "/_nimbus/resolver")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var ms []struct {
		MessageID     string  `json:"messageId"`
		SessionID     string  `json:"sessionId"`
		CorrelationID *string `json:"correlationId"`
		Props         map[string]struct {
			Value any `json:"value"`
		} `json:"applicationProperties"`
		Body string `json:"body"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&ms)
	var out []string
	for _, m := range ms {
		line := fmt.Sprintf("%v %v", m.Props["MessageType"].Value, m.Props["To"].Value)
		if m.MessageID != "" {
			line += " MessageId=" + m.MessageID
		}
		line += " SessionId=" + m.SessionID
		if m.CorrelationID != nil {
			line += " CorrelationId=" + *m.CorrelationID
		}
		if m.MessageID != "" {
			var c struct{ EventContent struct{ EventJson string } }
			_ = json.Unmarshal([]byte(m.Body), &c)
			line += fmt.Sprintf(" ParentMessageId=%v EventJson=%s", m.Props["ParentMessageId"].Value, c.EventContent.EventJson)
		}
		out = append(out, line)
	}
	return out
}
