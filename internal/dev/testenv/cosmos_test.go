package testenv_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// cosmosContainer starts the stand-in and creates a container partitioned
// on /pk, with the given default TTL (nil: off).
func cosmosContainer(t *testing.T, ttl *int32) *azcosmos.ContainerClient {
	t.Helper()
	client := testenv.StartCosmos(t, testenv.CosmosOptions{}).Client(t)
	ctx := context.Background()
	if _, err := client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "db"}, nil); err != nil {
		t.Fatal(err)
	}
	db, _ := client.NewDatabase("db")
	props := azcosmos.ContainerProperties{ID: "c", PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}}, DefaultTimeToLive: ttl}
	if _, err := db.CreateContainer(ctx, props, nil); err != nil {
		t.Fatal(err)
	}
	c, _ := db.NewContainer("c")
	return c
}

func doc(id, pk string, n int) []byte {
	b, _ := json.Marshal(map[string]any{"id": id, "pk": pk, "n": n})
	return b
}

func statuses(r azcosmos.TransactionalBatchResponse) []int32 {
	var s []int32
	for _, o := range r.OperationResults {
		s = append(s, o.StatusCode)
	}
	return s
}

// TestCosmosBatchAsCosmos: the stand-in answers transactional batches as
// Cosmos DB does (all or nothing, the failing status and 424 for the rest,
// 207), with the batch's partition key for operations naming an id.
func TestCosmosBatchAsCosmos(t *testing.T) {
	t.Parallel()
	c := cosmosContainer(t, nil)
	ctx := context.Background()
	pk := azcosmos.NewPartitionKeyString("p")
	seed := c.NewTransactionalBatch(pk)
	seed.CreateItem(doc("a", "p", 1), nil)
	seed.CreateItem(doc("b", "p", 1), nil)
	r, err := c.ExecuteTransactionalBatch(ctx, seed, nil)
	if err != nil || !r.Success || r.RawResponse.StatusCode != http.StatusOK {
		t.Fatalf("seed: %v %+v", err, r)
	}
	etagA := r.OperationResults[0].ETag
	stale := azcore.ETag(`"stale"`)
	var inc azcosmos.PatchOperations
	inc.AppendIncrement("/n", 5)

	cases := []struct {
		name  string
		build func(b *azcosmos.TransactionalBatch)
		want  []int32
	}{
		{"create conflict", func(b *azcosmos.TransactionalBatch) {
			b.CreateItem(doc("new", "p", 0), nil)
			b.CreateItem(doc("a", "p", 0), nil)
		}, []int32{424, 409}},
		{"replace missing", func(b *azcosmos.TransactionalBatch) {
			b.ReplaceItem("a", doc("a", "p", 2), nil)
			b.ReplaceItem("zz", doc("zz", "p", 2), nil)
			b.DeleteItem("b", nil)
		}, []int32{424, 404, 424}},
		{"stale delete", func(b *azcosmos.TransactionalBatch) {
			b.PatchItem("a", inc, nil)
			b.DeleteItem("b", &azcosmos.TransactionalBatchItemOptions{IfMatchETag: &stale})
		}, []int32{424, 412}},
		{"stale patch", func(b *azcosmos.TransactionalBatch) {
			b.PatchItem("a", inc, &azcosmos.TransactionalBatchItemOptions{IfMatchETag: &stale})
		}, []int32{412}},
		{"other partition", func(b *azcosmos.TransactionalBatch) {
			b.CreateItem(doc("new", "q", 0), nil)
		}, []int32{400}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := c.NewTransactionalBatch(pk)
			tc.build(&b)
			r, err := c.ExecuteTransactionalBatch(ctx, b, nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.Success || r.RawResponse.StatusCode != http.StatusMultiStatus || !equal(statuses(r), tc.want) {
				t.Fatalf("status %d results %v, want 207 %v", r.RawResponse.StatusCode, statuses(r), tc.want)
			}
			// Nothing applied: a is unchanged, b exists, new does not.
			got, err := c.ReadItem(ctx, pk, "a", nil)
			if err != nil || got.ETag != etagA {
				t.Fatalf("a changed by a failed batch: %v", err)
			}
			if _, err := c.ReadItem(ctx, pk, "b", nil); err != nil {
				t.Fatalf("b deleted by a failed batch: %v", err)
			}
			if _, err := c.ReadItem(ctx, pk, "new", nil); !notFound(err) {
				t.Fatalf("new created by a failed batch: %v", err)
			}
		})
	}

	// Every kind that names an id succeeds with the header's partition key.
	b := c.NewTransactionalBatch(pk)
	b.ReadItem("a", nil)
	b.ReplaceItem("a", doc("a", "p", 10), &azcosmos.TransactionalBatchItemOptions{IfMatchETag: &etagA})
	b.PatchItem("a", inc, nil)
	b.DeleteItem("b", nil)
	b.UpsertItem(doc("c", "p", 3), nil)
	r, err = c.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil || !r.Success || !equal(statuses(r), []int32{200, 200, 200, 204, 201}) {
		t.Fatalf("batch: %v, status %d, results %v", err, r.RawResponse.StatusCode, statuses(r))
	}
	got, err := c.ReadItem(ctx, pk, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	var a struct{ N int }
	_ = json.Unmarshal(got.Value, &a)
	if a.N != 15 {
		t.Fatalf("a.n = %d, want 15 (replaced to 10, patched +5)", a.N)
	}
}

var ttlOnNoDefault int32 = -1

// TestCosmosItemTTL: with time to live on, an item whose ttl ran out reads
// as missing, and an unexpired one still reads.
func TestCosmosItemTTL(t *testing.T) {
	t.Parallel()
	cc := cosmosContainer(t, &ttlOnNoDefault)
	ctx := context.Background()
	pk := azcosmos.NewPartitionKeyString("p")
	for _, body := range []string{`{"id":"short","pk":"p","ttl":1}`, `{"id":"long","pk":"p","ttl":3600}`, `{"id":"never","pk":"p"}`} {
		if _, err := cc.CreateItem(ctx, pk, []byte(body), nil); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitUntil(t, 5*time.Second, func() bool {
		_, err := cc.ReadItem(ctx, pk, "short", nil)
		return notFound(err)
	}, func() string { return "an item with ttl 1 s to read as missing" })
	for _, id := range []string{"long", "never"} {
		if _, err := cc.ReadItem(ctx, pk, id, nil); err != nil {
			t.Fatalf("unexpired item %s is gone: %v", id, err)
		}
	}
}

func notFound(err error) bool {
	var re *azcore.ResponseError
	return err != nil && errors.As(err, &re) && re.StatusCode == http.StatusNotFound
}

func equal(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
