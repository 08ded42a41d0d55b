package app

import (
	"context"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/config"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// Transactional handlers get a store only with the inbox on: in memory
// with the inbox in memory, none (an error) with the inbox off, where their
// containers would otherwise be kept in memory without markers.
func TestTransactionalHandlersNeedTheInbox(t *testing.T) {
	reg := subscriber.NewRegistry()
	reg.HandleTx("PaymentReceived", subscriber.TxBinding{
		Target:       txn.Target{DatabaseID: "Billing", ContainerID: "ledger", PartitionKeyPath: "/customerId"},
		PartitionKey: func(*subscriber.Event) (string, error) { return "k", nil },
	}, func(context.Context, *subscriber.Event, *txn.Unit) (subscriber.Result, error) {
		return subscriber.Completed(), nil
	})
	for _, c := range []struct {
		settings map[string]string
		refused  bool
	}{
		{map[string]string{}, true},
		{map[string]string{config.KeyInboxEnabled: "false", config.KeyInboxStore: "InMemory"}, true},
		{map[string]string{config.KeyInboxEnabled: "true", config.KeyInboxStore: "InMemory"}, false},
	} {
		m := map[string]string{config.KeyEndpoint: "BillingEndpoint", config.KeyResolverSink: "InMemory"}
		for k, v := range c.settings {
			m[k] = v
		}
		cfg, err := config.Load(config.FromMap(m))
		if err != nil {
			t.Fatal(err)
		}
		a, err := New(cfg, Deps{Handlers: reg, Log: zerolog.Nop()})
		if refused := err != nil; refused != c.refused || (refused && !strings.Contains(err.Error(), config.KeyInboxEnabled)) {
			t.Errorf("%v: New: %v, want refused=%v naming %s", c.settings, err, c.refused, config.KeyInboxEnabled)
		}
		if a != nil {
			_ = a.Close(context.Background())
		}
	}
}
