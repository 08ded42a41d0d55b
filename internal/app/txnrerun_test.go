package app

import (
	"context"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testlog"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// A transactional handler whose batch conflicted and was run again within
// the invocation completes at once, and its invocation says how often it
// ran again: txnReruns on the JSON line and in the Logs summary, and the
// counter nimbus.txn.reruns tagged with the outcome.
func TestTxnRerunsAreReported(t *testing.T) {
	target := txn.Target{DatabaseID: "Billing", ContainerID: "ledger", PartitionKeyPath: "/customerId"}
	store := txn.NewMemory(nil)
	// bump changes the balance as another writer of the partition does.
	bump := func() {
		tx := txn.Begin(store, target, "customer-1", nil)
		if err := tx.Unit().Upsert(map[string]any{"id": "balance", "customerId": "customer-1", "n": 1}, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	bump()
	runs := 0
	reg := subscriber.NewRegistry()
	reg.HandleTx("OrderPlaced", subscriber.TxBinding{
		Target:       target,
		PartitionKey: func(*subscriber.Event) (string, error) { return "customer-1", nil },
	}, func(ctx context.Context, _ *subscriber.Event, u *txn.Unit) (subscriber.Result, error) {
		runs++
		_, etag, err := u.Read(ctx, "balance", nil)
		if err != nil {
			return subscriber.Result{}, err
		}
		if runs <= 2 {
			bump() // between the read and the batch
		}
		return subscriber.Completed(), u.Replace(map[string]any{"id": "balance", "customerId": "customer-1", "n": 2}, etag)
	})
	cfg, err := config.Load(config.FromMap(map[string]string{
		config.KeyEndpoint: "BillingEndpoint", config.KeyInboxEnabled: "true", config.KeyInboxStore: "InMemory",
		config.KeyResolverSink: "InMemory", config.KeyRetryBaseDelay: "0",
	}))
	if err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	a, err := New(cfg, Deps{Handlers: reg, Log: zerolog.New(logs), Txn: store, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	ta := &testApp{App: a, logs: logs}
	status, body := ta.post(t, FuncSubscriber, envelope(msg{id: "m-1"}))
	if status != 200 || runs != 3 {
		t.Fatalf("status %d after %d runs, want 200 after 3", status, runs)
	}
	lines := logs.Lines(t)
	last := lines[len(lines)-1]
	if last["outcome"] != "completed" || last["txnReruns"] != float64(2) {
		t.Fatalf("invocation line %v, want outcome completed and txnReruns 2", last)
	}
	if !strings.Contains(body, "txnReruns=2") {
		t.Fatalf("the Logs summary does not say txnReruns=2: %s", body)
	}
	if got := a.Metrics().Get(telemetry.TxnReruns, telemetry.TagOutcome+"=completed"); got != 2 {
		t.Fatalf("%s{completed} = %v, want 2", telemetry.TxnReruns, got)
	}

	// A first run that commits says nothing of re-runs.
	if status, _ := ta.post(t, FuncSubscriber, envelope(msg{id: "m-2"})); status != 200 {
		t.Fatalf("m-2: status %d", status)
	}
	lines = logs.Lines(t)
	if last := lines[len(lines)-1]; last["outcome"] != "completed" || last["txnReruns"] != nil {
		t.Fatalf("invocation line %v, want no txnReruns", last)
	}
}
