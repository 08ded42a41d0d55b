package nimbustest_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

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
}
