package nimbustest_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/nimbus"
	"github.com/nimbus-go/functions-subscriber/nimbustest"
)

// The two small apps of these tests: Orders publishes OrderAccepted,
// Billing consumes it and publishes InvoiceIssued, which Orders consumes.
type orderAccepted struct {
	OrderID string `json:"OrderId"`
	// Fail: "failed" (a plain error), "transient", "always-failed".
	Fail string `json:"Fail,omitempty"`
}

type invoiceIssued struct {
	OrderID string `json:"OrderId"`
}

var invoices = nimbus.Container{DatabaseID: "Billing", ContainerID: "invoices", PartitionKeyPath: "/orderId"}

type invoiceDoc struct {
	ID      string `json:"id"`
	OrderID string `json:"orderId"`
}

func ordersApp(invoiced *[]string) *nimbus.App {
	a := nimbus.New()
	nimbus.HandleEvent(a, "InvoiceIssued", func(_ context.Context, _ *nimbus.Event, in invoiceIssued) (nimbus.Result, error) {
		*invoiced = append(*invoiced, in.OrderID)
		return nimbus.Completed(), nil
	})
	return a
}

func billingApp() *nimbus.App {
	a := nimbus.New()
	nimbus.HandleEventTx(a, "OrderAccepted", invoices, func(o orderAccepted) (string, error) { return o.OrderID, nil },
		func(_ context.Context, ev *nimbus.Event, tx *nimbus.Tx, o orderAccepted) (nimbus.Result, error) {
			switch {
			case o.Fail == "failed" && ev.Attempt == nimbus.AttemptOriginal, o.Fail == "always-failed":
				return nimbus.Result{}, errors.New("billing refused the order")
			case o.Fail == "transient":
				return nimbus.Result{}, nimbus.Transient(errors.New("billing busy"))
			}
			if err := tx.Create(invoiceDoc{ID: "invoice-" + o.OrderID, OrderID: o.OrderID}); err != nil {
				return nimbus.Result{}, err
			}
			if err := tx.Publish(nimbus.Publication{EventTypeID: "InvoiceIssued", MessageID: "InvoiceIssued-" + o.OrderID,
				Payload: invoiceIssued{OrderID: o.OrderID}}); err != nil {
				return nimbus.Result{}, err
			}
			return nimbus.Completed(), nil
		})
	return a
}

func newWorkflow(t *testing.T, invoiced *[]string, billingSettings ...string) (*nimbustest.Workflow, *nimbus.App) {
	orders := ordersApp(invoiced)
	w := nimbustest.New(t, nimbustest.Options{Endpoints: []nimbustest.Endpoint{
		{Name: "Orders", App: orders, Publishes: map[string][]string{"OrderAccepted": {"Billing"}}},
		{Name: "Billing", App: billingApp(), Settings: billingSettings, Publishes: map[string][]string{"InvoiceIssued": {"Orders"}}},
	}})
	return w, orders
}

func accept(t *testing.T, orders *nimbus.App, o orderAccepted, session string) {
	t.Helper()
	if err := orders.Publish(context.Background(), nimbus.Publication{EventTypeID: "OrderAccepted", MessageID: "OrderAccepted-" + o.OrderID,
		SessionID: session, CorrelationID: "corr-" + o.OrderID, Payload: o}); err != nil {
		t.Fatal(err)
	}
}

func equal(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s:\n got  %q\n want %q", what, got, want)
	}
}

// An event published by Orders reaches Billing through the forwarding
// subscription with NimBus's rule applied; Billing's transactional handler
// commits its invoice and publishes InvoiceIssued, which reaches Orders;
// the Resolver shows both events completed.
func TestWorkflowCarriesAnEventFromEndpointToEndpoint(t *testing.T) {
	var invoiced []string
	w, orders := newWorkflow(t, &invoiced)
	accept(t, orders, orderAccepted{OrderID: "O-1"}, "O-1")
	w.MustRun()

	equal(t, "Billing's outcomes", w.Outcomes("Billing"), []string{"OrderAccepted completed"})
	equal(t, "Orders' outcomes", w.Outcomes("Orders"), []string{"InvoiceIssued completed"})
	equal(t, "invoiced", invoiced, []string{"O-1"})

	// Orders' topic: the publish, then Orders' response to InvoiceIssued,
	// the copy of InvoiceIssued forwarded to it.
	var published, forwarded *nimbustest.Message
	for _, m := range w.Topic("Orders") {
		if m.EventTypeID() == "OrderAccepted" {
			published = &m
		}
	}
	for _, m := range w.Topic("Billing") {
		if m.EventTypeID() == "OrderAccepted" && m.Prop("To") == "Billing" {
			forwarded = &m
		}
	}
	if published == nil || forwarded == nil {
		t.Fatalf("OrderAccepted published %v, forwarded %v", published, forwarded)
	}
	if published.Prop("To") != "OrderAccepted" || published.Prop("From") != "" || published.Prop("EventId") != "" {
		t.Fatalf("the publish: To=%q From=%q EventId=%q, want To=OrderAccepted and no From or EventId", published.Prop("To"), published.Prop("From"), published.Prop("EventId"))
	}
	if forwarded.MessageID != "OrderAccepted-O-1" || forwarded.Prop("From") != "Orders" || forwarded.Prop("EventId") == "" ||
		forwarded.SessionID != "O-1" || forwarded.CorrelationID != "corr-O-1" {
		t.Fatalf("the forwarded copy: %+v", forwarded)
	}
	var invoice *nimbustest.Message
	for _, m := range w.Topic("Orders") {
		if m.EventTypeID() == "InvoiceIssued" && m.Prop("To") == "Orders" {
			invoice = &m
		}
	}
	if invoice == nil || invoice.MessageID != "InvoiceIssued-O-1" || invoice.Prop("From") != "Billing" ||
		invoice.Prop("ParentMessageId") != "OrderAccepted-O-1" || invoice.Prop("OriginatingMessageId") != "OrderAccepted-O-1" ||
		invoice.CorrelationID != "corr-O-1" || invoice.SessionID != "O-1" {
		t.Fatalf("InvoiceIssued forwarded to Orders: %+v", invoice)
	}

	if got := w.Status("Billing", "OrderAccepted-O-1"); got != "Completed" {
		t.Fatalf("the Resolver shows OrderAccepted on Billing %q, want Completed", got)
	}
	if got := w.Status("Orders", "InvoiceIssued-O-1"); got != "Completed" {
		t.Fatalf("the Resolver shows InvoiceIssued on Orders %q, want Completed", got)
	}
	docs := w.Documents("Billing", invoices)
	var found bool
	for _, d := range docs {
		var doc invoiceDoc
		if json.Unmarshal(d, &doc) == nil && doc.ID == "invoice-O-1" {
			found = true
		}
	}
	if !found {
		t.Fatalf("Billing's invoices hold no invoice-O-1: %s", docs)
	}
	if n := len(w.Topic("Resolver")); n == 0 {
		t.Fatal("the Resolver topic is empty")
	}
	if err := w.Skip("Billing", "OrderAccepted-O-1"); err == nil || !strings.Contains(err.Error(), "no ErrorResponse") {
		t.Fatalf("skipping a completed event: %v, want an error", err)
	}
}

// A failed event blocks its session: the next event of the session is
// parked behind it, the Resolver shows the first Failed and the second
// Deferred. The Manager's resubmission runs the handler again; the session
// is unblocked and the parked event replayed, and both show Completed.
func TestWorkflowBlockedSessionResolvedByResubmission(t *testing.T) {
	var invoiced []string
	w, orders := newWorkflow(t, &invoiced)
	accept(t, orders, orderAccepted{OrderID: "O-1", Fail: "failed"}, "customer-7")
	accept(t, orders, orderAccepted{OrderID: "O-2"}, "customer-7")
	w.MustRun()

	equal(t, "Billing's outcomes", w.Outcomes("Billing"), []string{"OrderAccepted event_failed", "OrderAccepted deferred"})
	if a, b := w.Status("Billing", "OrderAccepted-O-1"), w.Status("Billing", "OrderAccepted-O-2"); a != "Failed" || b != "Deferred" {
		t.Fatalf("the Resolver shows O-1 %q and O-2 %q, want Failed and Deferred", a, b)
	}
	if p := w.Parked("Billing"); len(p) != 1 || p[0].Prop("ParentMessageId") != "OrderAccepted-O-2" {
		t.Fatalf("parked on Billing: %+v, want the copy of OrderAccepted-O-2", p)
	}
	equal(t, "invoiced before the resubmission", invoiced, nil)

	if err := w.Resubmit("Billing", "OrderAccepted-O-1", ""); err != nil {
		t.Fatal(err)
	}
	w.MustRun()
	equal(t, "Billing's outcomes", w.Outcomes("Billing"), []string{"OrderAccepted event_failed", "OrderAccepted deferred", "OrderAccepted completed", "OrderAccepted completed"})
	var replays []nimbustest.Delivery
	for _, d := range w.Deliveries("Billing") {
		if d.Function == "DeferredProcessor" {
			replays = append(replays, d)
		}
	}
	if len(replays) != 1 || len(replays[0].Replays) != 1 || replays[0].Replays[0].Outcome != "completed" {
		t.Fatalf("replays: %+v, want one DeferredProcessor invocation replaying one copy", replays)
	}
	equal(t, "invoiced", invoiced, []string{"O-1", "O-2"})
	if a, b := w.Status("Billing", "OrderAccepted-O-1"), w.Status("Billing", "OrderAccepted-O-2"); a != "Completed" || b != "Completed" {
		t.Fatalf("the Resolver shows O-1 %q and O-2 %q, want both Completed", a, b)
	}
	if p := w.Parked("Billing"); len(p) != 0 {
		t.Fatalf("still parked: %+v", p)
	}
	if err := w.Resubmit("Billing", "OrderAccepted-O-9", ""); err == nil || !strings.Contains(err.Error(), "OrderAccepted-O-9") {
		t.Fatalf("resubmitting an event never received: %v", err)
	}
}

// The Manager's skip resolves a blocked session without running the
// handler: the failed event shows Skipped, and the session goes on.
func TestWorkflowBlockedSessionResolvedBySkip(t *testing.T) {
	var invoiced []string
	w, orders := newWorkflow(t, &invoiced)
	accept(t, orders, orderAccepted{OrderID: "O-1", Fail: "always-failed"}, "customer-7")
	accept(t, orders, orderAccepted{OrderID: "O-2"}, "customer-7")
	w.MustRun()
	if err := w.Skip("Billing", "OrderAccepted-O-1"); err != nil {
		t.Fatal(err)
	}
	w.MustRun()
	equal(t, "Billing's outcomes", w.Outcomes("Billing"), []string{"OrderAccepted event_failed", "OrderAccepted deferred", "OrderAccepted skipped", "OrderAccepted completed"})
	if a, b := w.Status("Billing", "OrderAccepted-O-1"), w.Status("Billing", "OrderAccepted-O-2"); a != "Skipped" || b != "Completed" {
		t.Fatalf("the Resolver shows O-1 %q and O-2 %q, want Skipped and Completed", a, b)
	}
	equal(t, "invoiced", invoiced, []string{"O-2"})
}

// A transient failure is redelivered until the endpoint's max delivery
// count; the last delivery reports the dead-letter to the Resolver and the
// broker dead-letters the message.
func TestWorkflowDeadLettersAfterMaxDeliveries(t *testing.T) {
	var invoiced []string
	w, orders := newWorkflow(t, &invoiced, "NimBus__Session__MaxDeliveryCount=4")
	accept(t, orders, orderAccepted{OrderID: "O-1", Fail: "transient"}, "O-1")
	w.MustRun()

	var counts []int
	var last nimbustest.Delivery
	for _, d := range w.Deliveries("Billing") {
		counts = append(counts, d.DeliveryCount)
		last = d
	}
	if len(counts) != 4 || counts[0] != 1 || counts[3] != 4 {
		t.Fatalf("delivery counts %v, want 1..4", counts)
	}
	if !last.DeadLettered || last.Status/100 == 2 || !strings.Contains(last.Line, `"deadLetterReported":true`) {
		t.Fatalf("the last delivery: %+v", last)
	}
	if dl := w.DeadLetters("Billing"); len(dl) != 1 || dl[0].MessageID != "OrderAccepted-O-1" {
		t.Fatalf("dead letters: %+v", dl)
	}
	if got := w.Status("Billing", "OrderAccepted-O-1"); got != "DeadLettered" {
		t.Fatalf("the Resolver shows %q, want DeadLettered", got)
	}
}

// An operator's retry enqueues the waiting RetryRequest at once; with none
// waiting, Retry refuses and names the resubmission.
func TestWorkflowRetryNow(t *testing.T) {
	var invoiced []string
	w, orders := newWorkflow(t, &invoiced,
		"NimBus__RetryPolicies__Default__MaxRetries=1", "NimBus__RetryPolicies__Default__Backoff=Fixed",
		"NimBus__RetryPolicies__Default__BaseDelay=01:00:00")
	accept(t, orders, orderAccepted{OrderID: "O-1", Fail: "failed"}, "O-1")
	w.MustRun()
	if len(w.Scheduled()) != 1 {
		t.Fatalf("scheduled: %+v, want one RetryRequest", w.Scheduled())
	}
	if err := w.Retry("Billing", "OrderAccepted-O-1"); err != nil {
		t.Fatal(err)
	}
	if len(w.Scheduled()) != 0 {
		t.Fatalf("still scheduled after Retry: %+v", w.Scheduled())
	}
	w.MustRun()
	equal(t, "Billing's outcomes", w.Outcomes("Billing"), []string{"OrderAccepted event_failed", "OrderAccepted completed"})
	equal(t, "invoiced", invoiced, []string{"O-1"})
	if err := w.Retry("Billing", "OrderAccepted-O-1"); err == nil || !strings.Contains(err.Error(), "resubmit") {
		t.Fatalf("Retry with nothing waiting = %v, want an error naming the resubmission", err)
	}
}

// A retry policy schedules a RetryRequest; it is delivered when the
// clock reaches its time, and the retried handler completes.
func TestWorkflowScheduledRetry(t *testing.T) {
	var invoiced []string
	w, orders := newWorkflow(t, &invoiced,
		"NimBus__RetryPolicies__Default__MaxRetries=2", "NimBus__RetryPolicies__Default__Backoff=Fixed",
		"NimBus__RetryPolicies__Default__BaseDelay=00:00:30")
	accept(t, orders, orderAccepted{OrderID: "O-1", Fail: "failed"}, "O-1")
	w.MustRun()
	s := w.Scheduled()
	if len(s) != 1 || s[0].Type() != "RetryRequest" || s[0].At.Sub(w.Now()) != 30*time.Second {
		t.Fatalf("scheduled: %+v, want one RetryRequest in 30 s", s)
	}
	w.Advance(29 * time.Second)
	w.MustRun()
	equal(t, "before its time", w.Outcomes("Billing"), []string{"OrderAccepted event_failed"})
	w.Advance(time.Second)
	w.MustRun()
	equal(t, "Billing's outcomes", w.Outcomes("Billing"), []string{"OrderAccepted event_failed", "OrderAccepted completed"})
	equal(t, "invoiced", invoiced, []string{"O-1"})
	if got := w.Status("Billing", "OrderAccepted-O-1"); got != "Completed" {
		t.Fatalf("the Resolver shows %q, want Completed", got)
	}
}

// An outage of the session store fails two deliveries: the broker
// redelivers and the third completes. A refused send fails the delivery
// after the handler committed; the redelivery finds the commit and sends
// the stored events.
func TestWorkflowInjectedOutages(t *testing.T) {
	var invoiced []string
	w, orders := newWorkflow(t, &invoiced)
	w.Inject(nimbustest.Fault{Endpoint: "Billing", Target: nimbustest.FaultSessions, Calls: 2})
	accept(t, orders, orderAccepted{OrderID: "O-1"}, "O-1")
	w.MustRun()
	ds := w.Deliveries("Billing")
	if len(ds) != 3 || ds[0].Status != 503 || ds[1].Status != 503 || ds[2].Outcome != "completed" || ds[2].DeliveryCount != 3 {
		t.Fatalf("deliveries under a session-store outage: %+v", ds)
	}
	if w.FaultedCalls() != 2 {
		t.Fatalf("the fault failed %d calls, want 2", w.FaultedCalls())
	}
	w.Heal()

	w.Inject(nimbustest.Fault{Endpoint: "Billing", Target: nimbustest.FaultSend, Calls: 1})
	accept(t, orders, orderAccepted{OrderID: "O-2"}, "O-2")
	w.MustRun()
	ds = w.Deliveries("Billing")[3:]
	if len(ds) != 2 || ds[0].Status != 503 || ds[0].Outcome != "outbox_send_failed" || ds[1].Outcome != "outbox_dispatched" {
		t.Fatalf("deliveries with a refused send: %+v", ds)
	}
	equal(t, "invoiced", invoiced, []string{"O-1", "O-2"})
	var copies int
	for _, m := range w.Topic("Orders") {
		if m.MessageID == "InvoiceIssued-O-2" {
			copies++
		}
	}
	if copies != 1 {
		t.Fatalf("InvoiceIssued-O-2 reached Orders %d times, want 1", copies)
	}
	w.Heal()

	w.Inject(nimbustest.Fault{Endpoint: "Billing", Target: nimbustest.ContainerFault(invoices)})
	accept(t, orders, orderAccepted{OrderID: "O-3"}, "O-3")
	w.MustRun()
	ds = w.Deliveries("Billing")[5:]
	if len(ds) != 10 || !ds[9].DeadLettered {
		t.Fatalf("deliveries under a container outage: %d, the last %+v", len(ds), ds[len(ds)-1])
	}
	if got := w.Status("Billing", "OrderAccepted-O-3"); got != "DeadLettered" {
		t.Fatalf("the Resolver shows %q, want DeadLettered", got)
	}
}

// A workflow that never ends stops at the step limit with an error.
func TestWorkflowRunIsBounded(t *testing.T) {
	ping := func() *nimbus.App {
		a := nimbus.New()
		nimbus.HandleEvent(a, "Ping", func(_ context.Context, ev *nimbus.Event, n struct{ N int }) (nimbus.Result, error) {
			return nimbus.Completed(), ev.Publish(nimbus.Publication{EventTypeID: "Ping", MessageID: ev.MessageID + "+", Payload: n})
		})
		return a
	}
	a, b := ping(), ping()
	w := nimbustest.New(t, nimbustest.Options{MaxSteps: 50, Endpoints: []nimbustest.Endpoint{
		{Name: "A", App: a, Publishes: map[string][]string{"Ping": {"B"}}},
		{Name: "B", App: b, Publishes: map[string][]string{"Ping": {"A"}}},
	}})
	if err := a.Publish(context.Background(), nimbus.Publication{EventTypeID: "Ping", MessageID: "Ping-0", Payload: struct{ N int }{}}); err != nil {
		t.Fatal(err)
	}
	err := w.Run()
	if err == nil || !strings.Contains(err.Error(), "after 50 deliveries") {
		t.Fatalf("Run = %v, want the step limit", err)
	}
}

// An outage of the Resolver's tracking store: the Resolver retries each
// write within the invocation (pauses that take no time here), then
// re-sends the message to itself five seconds later; once the store is
// back, the re-sent copies are written and the event shows Completed.
func TestWorkflowTrackingOutage(t *testing.T) {
	var invoiced []string
	w, orders := newWorkflow(t, &invoiced)
	w.Inject(nimbustest.Fault{Endpoint: "Resolver", Target: nimbustest.FaultTracking})
	accept(t, orders, orderAccepted{OrderID: "O-1"}, "O-1")
	w.MustRun()
	equal(t, "Billing's outcomes", w.Outcomes("Billing"), []string{"OrderAccepted completed"})
	if got := w.Status("Billing", "OrderAccepted-O-1"); got != "" {
		t.Fatalf("the Resolver shows %q during the outage, want no row", got)
	}
	s := w.Scheduled()
	if len(s) != 4 || s[0].Topic != "Resolver" || s[0].At.Sub(w.Now()) != 5*time.Second {
		t.Fatalf("scheduled during the outage: %+v, want the four messages re-sent to the Resolver in 5 s", s)
	}
	if w.Paused() < 4*500*time.Millisecond {
		t.Fatalf("paused %v, want the Resolver's quick retries (0.1 s and 0.4 s) for each of the four messages", w.Paused())
	}
	for _, d := range w.Deliveries("Resolver") {
		if d.Outcome != "rescheduled" {
			t.Fatalf("a Resolver invocation during the outage: %+v", d)
		}
	}
	w.Heal()
	w.Advance(5 * time.Second)
	w.MustRun()
	if got := w.Status("Billing", "OrderAccepted-O-1"); got != "Completed" {
		t.Fatalf("after the outage the Resolver shows %q, want Completed", got)
	}
}
