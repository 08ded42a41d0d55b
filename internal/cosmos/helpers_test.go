package cosmos_test

import (
	"context"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmostest"
)

// newEnv is a database of the test's own on the shared local Cosmos
// server, with a recorded account.
func newEnv(t testing.TB, consistency string) *cosmostest.Env {
	return cosmostest.NewEnv(t, consistency)
}

// exercise makes a Strong-checked container in databaseID and runs a create, a point
// read, a cross-partition query and a delete on it.
func exercise(t *testing.T, acct *cosmos.Account, databaseID, containerID string) {
	t.Helper()
	ctx := context.Background()
	c, err := acct.Container(cosmos.ContainerOptions{Spec: cosmos.ContainerSpec{
		DatabaseID: databaseID, ContainerID: containerID, PartitionKeyPath: "/id", AutoCreate: true,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	pk := azcosmos.NewPartitionKeyString("doc")
	if _, err := c.Client().CreateItem(ctx, pk, []byte(`{"id":"doc","v":1}`), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client().ReadItem(ctx, pk, "doc", nil); err != nil {
		t.Fatal(err)
	}
	pager := c.Client().NewQueryItemsPager("SELECT c.id FROM c WHERE c.v = 1", azcosmos.NewPartitionKey(), nil)
	n := 0
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Items)
	}
	if n != 1 {
		t.Fatalf("query found %d items", n)
	}
	if _, err := c.Client().DeleteItem(ctx, pk, "doc", nil); err != nil {
		t.Fatal(err)
	}
}
