package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv/handlerproc"
	"github.com/nimbus-go/functions-subscriber/internal/devhost"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
	"github.com/nimbus-go/functions-subscriber/internal/sleep"
)

// frontDoor shows the sample's PlaceOrder HTTP function: an order and its
// OrderPlaced event committed as one, a client's retry answered from the
// request's record, a conflicting reuse of the key and a bad body refused,
// and an event whose send failed finished by the OutboxSweep timer.
func (s *script) frontDoor(d *proc) error {
	s.section("Starting a workflow: the PlaceOrder HTTP function (POST /api/orders; orders in memory)")
	s.println("The Functions host forwards POST /api/orders to the app as it came (enableForwardingHttpRequest). PlaceOrder")
	s.println("commits the order document and its OrderPlaced event in one unit of work with a record keyed by the")
	s.println("Idempotency-Key header (the OrderId without one), then sends the event and marks the record dispatched.")
	const order = `{"OrderId":"O-500","CustomerId":"C-500","Amount":99.5}`
	d.order("An order posted: committed with its record, OrderPlaced sent (SessionId O-500, the request's X-Correlation-Id)",
		order, 201, "EventRequest→OrderPlaced")
	d.order("The client retries it (its first answer timed out): answered from the record, the same body; nothing written, nothing sent",
		order, 200)
	d.order("The same key with another amount: a conflict; nothing written",
		`{"OrderId":"O-500","CustomerId":"C-500","Amount":5}`, 409)
	d.order("A body without CustomerId: refused naming the field (no value quoted); nothing written",
		`{"OrderId":"O-501","Amount":5}`, 400)

	s.println("\nThe send after a commit fails: the in-memory sink is asked to refuse the next send holding an event.")
	if err := d.host.Refuse(context.Background(), devhost.Refusal{MessageType: "EventRequest", Count: 1}); err != nil {
		return err
	}
	d.order("An order whose send is refused: committed all the same (201); its event waits in the record", `{"OrderId":"O-502","CustomerId":"C-500","Amount":12}`, 201)
	// The sweep takes records older than NimBus__Outbox__MinimumAge (one
	// second in the demo).
	sleep.For(context.Background(), 1200*time.Millisecond)
	d.title("The OutboxSweep timer fires: it finds the record whose event was not dispatched, sends OrderPlaced and marks it")
	now := time.Now().UTC()
	env := hostwire.BuildTimer(hostwire.Timer{FunctionName: app.FuncOutboxSweep, Last: now.Add(-5 * time.Minute), Next: now,
		LastUpdated: now.Add(-5 * time.Minute), UtcNow: now, RandGUID: "c4d3b2a1-6f5e-4b7a-9c8d-000000000501"})
	exp := expect{status: 200, outcome: "swept", sends: []string{"EventRequest→OrderPlaced"}}
	d.s.check(d.invoke(app.FuncOutboxSweep, env, exp), exp)
	return nil
}

// order POSTs body to /api/orders as the host forwards a request, prints
// the answer, the request's log line and what the app sent, and checks the
// status and the sends.
func (d *proc) order(title, body string, status int, sends ...string) {
	d.title(title)
	d.s.printf("   POST /api/orders %s\n", body)
	id := fmt.Sprintf("demo-request-%04d", d.s.step)
	req, err := http.NewRequest(http.MethodPost, d.proc.BaseURL()+"/api/orders", strings.NewReader(body))
	if err != nil {
		d.s.fail("%v", err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Correlation-Id", "demo-correlation-500")
	req.Header.Set("X-Azure-Functions-InvocationId", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.s.fail("request failed: %v", err)
		return
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	line, err := d.proc.WaitLine(ctx, func(l handlerproc.Line) bool { return l.Str("invocationId") == id })
	cancel()
	d.s.printf("   → HTTP %d %s\n", resp.StatusCode, strings.TrimSpace(string(answer)))
	if err != nil {
		d.s.fail("no log line for request %s: %v", id, err)
	} else {
		d.s.printf("   log: %s function=%s status=%v\n", line.Str("message"), line.Str("function"), line.Fields["status"])
	}
	d.printStderr("")
	r := result{status: resp.StatusCode, line: line, sent: d.printSent()}
	exp := expect{status: status, outcome: line.Str("outcome"), sends: sends}
	d.s.check(r, exp)
}
