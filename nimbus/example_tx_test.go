package nimbus_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/nimbus-go/functions-subscriber/nimbus"
)

// Payment is the domain event of the transactional example.
type Payment struct {
	PaymentID   string `json:"PaymentId"`
	CustomerID  string `json:"CustomerId"`
	AmountCents int64  `json:"AmountCents"`
}

// Balance is a document of the example's container.
type Balance struct {
	ID           string `json:"id"`
	CustomerID   string `json:"customerId"`
	BalanceCents int64  `json:"balanceCents"`
}

// A transactional handler reads its partition at once and queues writes;
// they commit with the record of the message in one batch, so a redelivery
// of the same message is a duplicate and changes nothing. Here the
// container is in memory (NimBus__Inbox__Store=InMemory); the example
// sends one message twice and reads the balance back. Adding to a number
// is also a Patch with Increment, which needs no ETag.
func ExampleHandleEventTx() {
	app := nimbus.New()
	ledger := nimbus.Container{DatabaseID: "Billing", ContainerID: "ledger", PartitionKeyPath: "/customerId"}
	byCustomer := func(p Payment) (string, error) { return p.CustomerID, nil }
	nimbus.HandleEventTx(app, "PaymentReceived", ledger, byCustomer, func(ctx context.Context, ev *nimbus.Event, tx *nimbus.Tx, p Payment) (nimbus.Result, error) {
		fmt.Println("handling", ev.MessageID)
		id := "balance-" + p.CustomerID
		var b Balance
		etag, err := tx.Read(ctx, id, &b)
		switch {
		case errors.Is(err, nimbus.ErrNotFound):
			return nimbus.Completed(), tx.Create(Balance{ID: id, CustomerID: p.CustomerID, BalanceCents: p.AmountCents})
		case err != nil:
			return nimbus.Result{}, err
		}
		b.BalanceCents += p.AmountCents
		// Applied only if the balance is still the one read; otherwise
		// nothing is, and the message is redelivered.
		return nimbus.Completed(), tx.Replace(b, &nimbus.WriteOptions{IfMatch: etag})
	})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	exit := make(chan error)
	go func() {
		exit <- app.Run(ctx, nimbus.Options{
			Environ: []string{"NimBus__Endpoint=BillingEndpoint", "NimBus__Resolver__Sink=InMemory",
				"NimBus__Inbox__Enabled=true", "NimBus__Inbox__Store=InMemory"},
			Listener: ln, Stdout: io.Discard, Stderr: io.Discard,
		})
	}()
	base := "http://" + ln.Addr().String()

	body := `{"EventContent":{"EventTypeId":"PaymentReceived","EventJson":"{\"PaymentId\":\"p-1\",\"CustomerId\":\"c-7\",\"AmountCents\":1250}"},"ErrorContent":null}`
	invocation := `{"Data":{"message":"` + base64.StdEncoding.EncodeToString([]byte(body)) + `"},` +
		`"Metadata":{"DeliveryCount":"1","MessageId":"\"m-1\"","SessionId":"\"s-1\"",` +
		`"ApplicationProperties":{"To":"BillingEndpoint","From":"Shop","MessageType":"EventRequest","EventId":"e-1","EventTypeId":"PaymentReceived"}}}`
	for range 2 {
		resp, err := http.Post(base+"/Subscriber", "application/json", strings.NewReader(invocation))
		if err != nil {
			fmt.Println(err)
			continue
		}
		resp.Body.Close()
		fmt.Println("status", resp.StatusCode)
	}

	resp, err := http.Get(base + "/_nimbus/txn?database=Billing&container=ledger")
	if err == nil {
		var docs []struct {
			ID           string `json:"id"`
			Type         string `json:"type"`
			BalanceCents int64  `json:"balanceCents"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&docs)
		resp.Body.Close()
		for _, d := range docs {
			if d.Type == "nimbus.inbox" {
				fmt.Println("inbox marker")
				continue
			}
			fmt.Println(d.ID, d.BalanceCents)
		}
	}
	stop()
	fmt.Println("Run:", <-exit)
	// Output:
	// handling m-1
	// status 200
	// status 200
	// inbox marker
	// balance-c-7 1250
	// Run: <nil>
}
