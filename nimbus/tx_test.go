package nimbus

import (
	"context"
	"strings"
	"testing"
)

func nopTx(context.Context, *Event, *Tx) (Result, error) { return Completed(), nil }

func byFixedKey(*Event) (string, error) { return "k", nil }

var ledgerContainer = Container{DatabaseID: "Billing", ContainerID: "ledger", PartitionKeyPath: "/customerId"}

func TestHandleTxPanicsOnProgrammingErrors(t *testing.T) {
	cases := []struct {
		name  string
		setup func(a *App)
		c     Container
		pk    PartitionKeyFunc
		h     TxHandlerFunc
		want  string
	}{
		{"nil handler", nil, ledgerContainer, byFixedKey, nil, "nil handler for PaymentReceived"},
		{"nil partition key function", nil, ledgerContainer, nil, nopTx, "nil partition key function"},
		{"no container id", nil, Container{DatabaseID: "Billing", PartitionKeyPath: "/customerId"}, byFixedKey, nopTx, "needs a database and a container"},
		{"no partition key path", nil, Container{DatabaseID: "Billing", ContainerID: "ledger"}, byFixedKey, nopTx, "partition key path"},
		{"a marker property as the path", nil, Container{DatabaseID: "Billing", ContainerID: "ledger", PartitionKeyPath: "/id"}, byFixedKey, nopTx, "a property of the inbox marker"},
		{"registered plain before", func(a *App) { a.Handle("PaymentReceived", nopHandler) }, ledgerContainer, byFixedKey, nopTx, "PaymentReceived is already registered"},
		{"after start", func(a *App) { a.registry(func(string) string { return "" }) }, ledgerContainer, byFixedKey, nopTx, "after the app started"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := New()
			if c.setup != nil {
				c.setup(a)
			}
			wantPanic(t, c.want, func() { a.HandleTx("PaymentReceived", c.c, c.pk, c.h) })
		})
	}
}

// The settings a Container names replace its ids when set, and become
// known setting names.
func TestContainerSettingsReplaceTheIds(t *testing.T) {
	c := ledgerContainer
	c.DatabaseSetting, c.ContainerSetting = "NimBus__Ledger__Db", "NimBus__Ledger__Container"
	settings := map[string]string{"NimBus__Ledger__Db": "Payments"}
	a := New()
	a.HandleTx("PaymentReceived", c, byFixedKey, nopTx)
	if got := strings.Join(a.settingNames(), ","); got != "NimBus__Ledger__Db,NimBus__Ledger__Container" {
		t.Fatalf("setting names %s", got)
	}
	targets := a.registry(func(n string) string { return settings[n] }).Targets()
	if len(targets) != 1 || targets[0].DatabaseID != "Payments" || targets[0].ContainerID != "ledger" || targets[0].PartitionKeyPath != "/customerId" {
		t.Fatalf("targets %+v", targets)
	}
}
