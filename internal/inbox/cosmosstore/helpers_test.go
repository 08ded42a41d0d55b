package cosmosstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmostest"
	"github.com/nimbus-go/functions-subscriber/internal/inbox/cosmosstore"
)

// env is a database of the test's own on the package's shared local Cosmos
// server, with a recorded account.
type env struct{ *cosmostest.Env }

func newEnv(t testing.TB, consistency string) *env { return &env{cosmostest.NewEnv(t, consistency)} }

// store returns a store on e's account, in the test's database unless
// opts names one; opts.Now defaults to now.
func (e *env) store(t testing.TB, opts cosmosstore.Options) *cosmosstore.Store {
	t.Helper()
	if opts.DatabaseID == "" {
		opts.DatabaseID = e.DB
	}
	return e.storeAsGiven(t, opts)
}

// storeAsGiven returns a store on e's account with opts as they are
// (defaults included).
func (e *env) storeAsGiven(t testing.TB, opts cosmosstore.Options) *cosmosstore.Store {
	t.Helper()
	s, err := cosmosstore.New(e.Account, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// raw returns a container client that bypasses the recorder.
func (e *env) raw(t testing.TB, db, container string) *azcosmos.ContainerClient {
	return e.Raw(t, db, container)
}

// countEndpoint counts an endpoint's documents with a full paged query.
func countEndpoint(t testing.TB, c *azcosmos.ContainerClient, endpointID string) int {
	t.Helper()
	pager := c.NewQueryItemsPager("SELECT c.id FROM c WHERE c.endpointId = @e", azcosmos.NewPartitionKey(), &azcosmos.QueryOptions{
		QueryParameters: []azcosmos.QueryParameter{{Name: "@e", Value: endpointID}},
		PageSizeHint:    1000,
	})
	n := 0
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Items)
	}
	return n
}

// fixedClock returns a clock reading t.
func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

func boolPtr(b bool) *bool { return &b }
