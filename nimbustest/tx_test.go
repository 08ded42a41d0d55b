package nimbustest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/nimbus"
	"github.com/nimbus-go/functions-subscriber/nimbustest"
)

var accounts = nimbus.Container{DatabaseID: "Billing", ContainerID: "accounts", PartitionKeyPath: "/customerId"}

type account struct {
	ID         string `json:"id"`
	CustomerID string `json:"customerId"`
	Balance    int64  `json:"balance"`
}

type payment struct {
	CustomerID string
	PaymentID  string
	Amount     int64
}

func customerOf(ev *nimbus.Event) (string, error) {
	var p payment
	if err := ev.Decode(&p); err != nil {
		return "", err
	}
	return p.CustomerID, nil
}

// credit reads the account, credits it with a write conditioned on the
// ETag it read, and publishes PaymentRecorded.
func credit(ctx context.Context, ev *nimbus.Event, tx *nimbus.Tx) (nimbus.Result, error) {
	var p payment
	if err := ev.Decode(&p); err != nil {
		return nimbus.Result{}, err
	}
	var acc account
	etag, err := tx.Read(ctx, "acc-"+p.CustomerID, &acc)
	if err != nil {
		return nimbus.Result{}, err
	}
	if p.Amount <= 0 {
		return nimbus.Result{}, fmt.Errorf("payment %s has amount %d", p.PaymentID, p.Amount)
	}
	acc.Balance += p.Amount
	if err := tx.Replace(acc, &nimbus.WriteOptions{IfMatch: etag}); err != nil {
		return nimbus.Result{}, err
	}
	nimbus.Logger(ctx).Info("credited", "customerId", p.CustomerID, "balance", acc.Balance)
	if err := tx.Publish(nimbus.Publication{EventTypeID: "PaymentRecorded", MessageID: "PaymentRecorded-" + p.PaymentID,
		Payload: map[string]any{"PaymentId": p.PaymentID, "Balance": acc.Balance}}); err != nil {
		return nimbus.Result{}, err
	}
	return nimbus.Completed(), nil
}

func seeded(t *testing.T) *nimbustest.Container {
	t.Helper()
	c := nimbustest.NewContainer(accounts)
	if err := c.Seed(account{ID: "acc-C-1", CustomerID: "C-1", Balance: 100}); err != nil {
		t.Fatal(err)
	}
	return c
}

func balance(t *testing.T, c *nimbustest.Container) int64 {
	t.Helper()
	var acc account
	found, err := c.Read("C-1", "acc-C-1", &acc)
	if err != nil || !found {
		t.Fatalf("read: %v (found %v)", err, found)
	}
	return acc.Balance
}

// A completed unit of work commits its writes and sends its events; the
// run shows both, the outcome, the response and the handler's logs.
func TestRunTxCommitsWritesAndEvents(t *testing.T) {
	c := seeded(t)
	ev := nimbustest.NewEvent("PaymentReceived", payment{CustomerID: "C-1", PaymentID: "P-1", Amount: 25})
	run, err := nimbustest.RunTx(context.Background(), c, ev, customerOf, credit)
	if err != nil {
		t.Fatal(err)
	}
	if run.Outcome != "completed" || !run.Completes || run.Runs != 1 || run.Err != nil || run.Kind != nimbus.KindNone || run.Response != "ResolutionResponse" {
		t.Fatalf("run = %+v", run)
	}
	if len(run.Writes) != 1 || run.Writes[0].Op != "replace" || run.Writes[0].ID != "acc-C-1" || run.Writes[0].PartitionKey != "C-1" ||
		string(run.Writes[0].Document) != `{"balance":125,"customerId":"C-1","id":"acc-C-1"}` {
		t.Fatalf("writes = %+v", run.Writes)
	}
	if len(run.Published) != 1 {
		t.Fatalf("published = %+v", run.Published)
	}
	p := run.Published[0]
	if p.EventTypeID != "PaymentRecorded" || p.MessageID != "PaymentRecorded-P-1" || p.SessionID != ev.SessionID ||
		p.CorrelationID != ev.CorrelationID || string(p.Payload.(json.RawMessage)) != `{"Balance":125,"PaymentId":"P-1"}` {
		t.Fatalf("published = %+v", p)
	}
	if balance(t, c) != 125 {
		t.Fatalf("balance %d", balance(t, c))
	}
	docs, err := c.Documents()
	if err != nil || len(docs) != 1 {
		t.Fatalf("documents (markers left out) = %s, %v", docs, err)
	}
	if len(run.Logs) != 1 || run.Logs[0].Message != "credited" || run.Logs[0].Level != slog.LevelInfo ||
		run.Logs[0].Attrs["balance"] != "125" || run.Logs[0].Attrs["messageId"] != ev.MessageID ||
		run.Logs[0].Attrs["function"] != "Subscriber" || run.Logs[0].Attrs["spanId"] == "" {
		t.Fatalf("logs = %+v", run.Logs)
	}

	// The same message again is a duplicate: the marker the commit wrote
	// is in the container.
	again, err := nimbustest.RunTx(context.Background(), c, ev, customerOf, credit)
	if err != nil {
		t.Fatal(err)
	}
	if again.Outcome != "duplicate" || again.Runs != 0 || len(again.Writes) != 0 || balance(t, c) != 125 {
		t.Fatalf("again = %+v, balance %d", again, balance(t, c))
	}
}

// A failed handler commits nothing and publishes nothing; the run shows
// the kind and the text the Resolver got.
func TestRunTxFailureCommitsNothing(t *testing.T) {
	c := seeded(t)
	run, err := nimbustest.RunTx(context.Background(), c, nimbustest.NewEvent("PaymentReceived", payment{CustomerID: "C-1", PaymentID: "P-2", Amount: -5}), customerOf, credit)
	if err != nil {
		t.Fatal(err)
	}
	if run.Outcome != "event_failed" || !run.Completes || run.Kind != nimbus.KindFailed || run.Response != "ErrorResponse" ||
		!strings.Contains(run.ErrorText, "payment P-2 has amount -5") || len(run.Writes) != 0 || len(run.Published) != 0 {
		t.Fatalf("run = %+v", run)
	}
	if balance(t, c) != 100 {
		t.Fatalf("balance %d", balance(t, c))
	}

	// A transient error: not completed, nothing reported yet.
	flaky := func(context.Context, *nimbus.Event, *nimbus.Tx) (nimbus.Result, error) {
		return nimbus.Result{}, nimbus.Transient(errors.New("ledger busy"))
	}
	run, err = nimbustest.RunTx(context.Background(), c, nimbustest.NewEvent("PaymentReceived", payment{CustomerID: "C-1", PaymentID: "P-3"}), customerOf, flaky)
	if err != nil {
		t.Fatal(err)
	}
	if run.Outcome != "handler_failed" || run.Completes || run.Kind != nimbus.KindTransient || run.Response != "" ||
		!strings.Contains(run.ErrorText, "ledger busy") || len(run.Writes) != 0 {
		t.Fatalf("run = %+v", run)
	}
}

// A document changed between the handler's read and the commit makes
// the conditioned write conflict: the pipeline runs the handler again on
// fresh reads, and the second run's effect is the one committed.
func TestRunTxConflictReRunsTheHandler(t *testing.T) {
	c := seeded(t)
	ev := nimbustest.NewEvent("PaymentReceived", payment{CustomerID: "C-1", PaymentID: "P-4", Amount: 10})
	run, err := nimbustest.RunTx(context.Background(), c, ev, customerOf, credit,
		nimbustest.ChangeAfterRead("acc-C-1", func(doc map[string]any) { doc["balance"] = 500 }))
	if err != nil {
		t.Fatal(err)
	}
	if run.Outcome != "completed" || run.Runs != 2 || len(run.Writes) != 1 || len(run.Published) != 1 {
		t.Fatalf("run = %+v", run)
	}
	if balance(t, c) != 510 || !strings.Contains(string(run.Writes[0].Document), `"balance":510`) {
		t.Fatalf("balance %d, writes %+v", balance(t, c), run.Writes)
	}
	if len(run.Logs) != 2 || run.Logs[0].Attrs["balance"] != "110" || run.Logs[1].Attrs["balance"] != "510" {
		t.Fatalf("logs of both runs = %+v", run.Logs)
	}
}

// A typed transactional handler decodes the event once for the key and
// the handler; one that does not decode fails permanently without
// running.
func TestRunEventTx(t *testing.T) {
	c := seeded(t)
	h := func(ctx context.Context, ev *nimbus.Event, tx *nimbus.Tx, p payment) (nimbus.Result, error) {
		return nimbus.Completed(), tx.Create(account{ID: "acc-" + p.PaymentID, CustomerID: p.CustomerID})
	}
	pk := func(p payment) (string, error) { return p.CustomerID, nil }
	run, err := nimbustest.RunEventTx(context.Background(), c, nimbustest.NewEvent("PaymentReceived", payment{CustomerID: "C-1", PaymentID: "P-5"}), pk, h)
	if err != nil {
		t.Fatal(err)
	}
	if run.Outcome != "completed" || len(run.Writes) != 1 || run.Writes[0].Op != "create" {
		t.Fatalf("run = %+v", run)
	}
	if found, _ := c.Read("C-1", "acc-P-5", nil); !found {
		t.Fatal("the created document is missing")
	}
	run, err = nimbustest.RunEventTx(context.Background(), c, nimbustest.NewEvent("PaymentReceived", json.RawMessage(`{"CustomerID":7}`)), pk, h)
	if err != nil {
		t.Fatal(err)
	}
	if run.Outcome != "permanent_failure" || run.Runs != 0 || run.Completes {
		t.Fatalf("run = %+v", run)
	}
}

// Seed refuses documents it cannot place, and writes none of a batch that
// holds one; Change refuses to move a document.
func TestContainerSeedAndChange(t *testing.T) {
	c := nimbustest.NewContainer(accounts)
	if err := c.Seed(account{ID: "a", CustomerID: "C-1"}, map[string]any{"id": "b"}); err == nil || !strings.Contains(err.Error(), "/customerId") {
		t.Fatalf("err = %v", err)
	}
	if docs, _ := c.Documents(); len(docs) != 0 {
		t.Fatalf("documents after a refused seed: %s", docs)
	}
	if err := c.Seed(account{ID: "a", CustomerID: "C-1"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Change("C-1", "a", func(d map[string]any) { d["customerId"] = "C-2" }); err == nil {
		t.Fatal("a change moved the document")
	}
	if err := c.Change("C-1", "missing", func(map[string]any) {}); err == nil {
		t.Fatal("changed a missing document")
	}
	if found, err := c.Read("C-2", "a", nil); found || err != nil {
		t.Fatalf("found %v, %v", found, err)
	}
}

// BenchmarkRunTx is one RunTx: an app composed, one delivery through the
// pipeline with a read, a conditioned replace and one event.
func BenchmarkRunTx(b *testing.B) {
	c := nimbustest.NewContainer(accounts)
	if err := c.Seed(account{ID: "acc-C-1", CustomerID: "C-1", Balance: 100}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ev := nimbustest.NewEvent("PaymentReceived", payment{CustomerID: "C-1", PaymentID: fmt.Sprint("P-", i), Amount: 1})
		run, err := nimbustest.RunTx(context.Background(), c, ev, customerOf, credit)
		if err != nil || run.Outcome != "completed" {
			b.Fatalf("run %+v, %v", run, err)
		}
	}
}

// TxSettings sets the app's settings, replacing RunTx's own: the
// endpoint follows NimBus__Endpoint (a message is a duplicate per
// endpoint), bad settings are refused as Run refuses them, and a
// container id from a setting still reaches the test's container.
func TestRunTxSettings(t *testing.T) {
	c := seeded(t)
	ev := nimbustest.NewEvent("PaymentReceived", payment{CustomerID: "C-1", PaymentID: "P-6", Amount: 1})
	billing := nimbustest.TxSettings("NimBus__Endpoint=Billing")
	for i, want := range []string{"completed", "duplicate"} {
		run, err := nimbustest.RunTx(context.Background(), c, ev, customerOf, credit, billing)
		if err != nil || run.Outcome != want {
			t.Fatalf("run %d as Billing: %+v, %v", i, run, err)
		}
	}
	run, err := nimbustest.RunTx(context.Background(), c, ev, customerOf, credit)
	if err != nil || run.Outcome != "completed" {
		t.Fatalf("the same message to TestEndpoint: %+v, %v", run, err)
	}
	_, err = nimbustest.RunTx(context.Background(), c, ev, customerOf, credit, nimbustest.TxSettings("NimBus__Inbox__Enabled=maybe"))
	var serr *nimbus.SettingsError
	if !errors.As(err, &serr) || !strings.Contains(err.Error(), "NimBus__Inbox__Enabled") {
		t.Fatalf("err = %v, want a SettingsError", err)
	}

	named := accounts
	named.ContainerSetting = "Billing__Container"
	c2 := nimbustest.NewContainer(named)
	if err := c2.Seed(account{ID: "acc-C-1", CustomerID: "C-1", Balance: 100}); err != nil {
		t.Fatal(err)
	}
	run, err = nimbustest.RunTx(context.Background(), c2, nimbustest.NewEvent("PaymentReceived", payment{CustomerID: "C-1", PaymentID: "P-7", Amount: 5}),
		customerOf, credit, nimbustest.TxSettings("Billing__Container=ledger2"))
	if err != nil || run.Outcome != "completed" || balance(t, c2) != 105 {
		t.Fatalf("run %+v, %v; balance %d", run, err, balance(t, c2))
	}
}
