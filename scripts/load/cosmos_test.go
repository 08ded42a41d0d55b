package main

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

func memClient(t *testing.T, delay Latency) (*memCosmos, *azcosmos.ContainerClient) {
	t.Helper()
	m, err := startMemCosmos(delay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	cred, err := azcosmos.NewKeyCredential(testenv.CosmosEmulatorKey)
	if err != nil {
		t.Fatal(err)
	}
	client, err := azcosmos.NewClientWithKey(m.URL, cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "db"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "db"}, nil); status(err) != http.StatusConflict {
		t.Fatalf("second database create: %v, want 409", err)
	}
	db, _ := client.NewDatabase("db")
	ttl := int32(-1)
	if _, err := db.CreateContainer(ctx, azcosmos.ContainerProperties{
		ID: "ledger", DefaultTimeToLive: &ttl,
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/customerId"}, Kind: azcosmos.PartitionKeyKindHash},
	}, nil); err != nil {
		t.Fatal(err)
	}
	c, _ := db.NewContainer("ledger")
	return m, c
}

func status(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

type ledgerDoc struct {
	ID         string `json:"id"`
	CustomerID string `json:"customerId"`
	Cents      int    `json:"cents"`
	ETag       string `json:"_etag,omitempty"`
}

func body(t *testing.T, d ledgerDoc) []byte {
	t.Helper()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The in-memory account answers the SDK's point operations as Cosmos DB
// does: 201, 409 on a second create, 404 for a missing document, 412 for a
// stale If-Match, 400 for a document outside the header's partition.
func TestMemCosmosPointOperationsAnswerAsCosmosDB(t *testing.T) {
	t.Parallel()
	_, c := memClient(t, Latency{})
	ctx := context.Background()
	pk := azcosmos.NewPartitionKeyString("C-1")

	props, err := c.Read(ctx, nil)
	if err != nil || props.ContainerProperties == nil || props.ContainerProperties.PartitionKeyDefinition.Paths[0] != "/customerId" ||
		props.ContainerProperties.DefaultTimeToLive == nil || *props.ContainerProperties.DefaultTimeToLive != -1 {
		t.Fatalf("container read: %+v, %v", props.ContainerProperties, err)
	}
	if _, err := c.ReadItem(ctx, pk, "balance-C-1", nil); status(err) != http.StatusNotFound {
		t.Fatalf("read of a missing document: %v, want 404", err)
	}
	created, err := c.CreateItem(ctx, pk, body(t, ledgerDoc{ID: "balance-C-1", CustomerID: "C-1", Cents: 100}), nil)
	if err != nil || created.RawResponse.StatusCode != http.StatusCreated || created.ETag == "" {
		t.Fatalf("create: %v, %v", created.RawResponse, err)
	}
	if _, err := c.CreateItem(ctx, pk, body(t, ledgerDoc{ID: "balance-C-1", CustomerID: "C-1"}), nil); status(err) != http.StatusConflict {
		t.Fatalf("second create: %v, want 409", err)
	}
	if _, err := c.CreateItem(ctx, pk, body(t, ledgerDoc{ID: "x", CustomerID: "C-2"}), nil); status(err) != http.StatusBadRequest {
		t.Fatalf("create in another partition than the header's: %v, want 400", err)
	}
	read, err := c.ReadItem(ctx, pk, "balance-C-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	var got ledgerDoc
	if err := json.Unmarshal(read.Value, &got); err != nil || got.Cents != 100 || got.ETag != string(created.ETag) || read.ETag != created.ETag {
		t.Fatalf("read %s (etag %s), want cents 100 and etag %s: %v", read.Value, read.ETag, created.ETag, err)
	}
	stale := azcore.ETag(`"stale"`)
	if _, err := c.ReplaceItem(ctx, pk, "balance-C-1", body(t, ledgerDoc{ID: "balance-C-1", CustomerID: "C-1", Cents: 1}), &azcosmos.ItemOptions{IfMatchEtag: &stale}); status(err) != http.StatusPreconditionFailed {
		t.Fatalf("replace with a stale etag: %v, want 412", err)
	}
	replaced, err := c.ReplaceItem(ctx, pk, "balance-C-1", body(t, ledgerDoc{ID: "balance-C-1", CustomerID: "C-1", Cents: 200}), &azcosmos.ItemOptions{IfMatchEtag: &created.ETag})
	if err != nil || replaced.ETag == created.ETag {
		t.Fatalf("replace under the read etag: %v (etag %s → %s)", err, created.ETag, replaced.ETag)
	}
	if _, err := c.ReplaceItem(ctx, pk, "missing", body(t, ledgerDoc{ID: "missing", CustomerID: "C-1"}), nil); status(err) != http.StatusNotFound {
		t.Fatalf("replace of a missing document: %v, want 404", err)
	}
	if up, err := c.UpsertItem(ctx, pk, body(t, ledgerDoc{ID: "payment-1", CustomerID: "C-1", Cents: 5}), nil); err != nil || up.RawResponse.StatusCode != http.StatusCreated {
		t.Fatalf("upsert of a new document: %v", err)
	}
	if _, err := c.DeleteItem(ctx, pk, "payment-1", nil); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := c.ReadItem(ctx, pk, "payment-1", nil); status(err) != http.StatusNotFound {
		t.Fatalf("read after delete: %v, want 404", err)
	}
	if _, err := c.ReadItem(ctx, azcosmos.NewPartitionKeyString("C-2"), "balance-C-1", nil); status(err) != http.StatusNotFound {
		t.Fatalf("read in another partition: %v, want 404", err)
	}
}

// A transactional batch commits all its operations or none: a failing
// operation answers its own status, every other one 424, and nothing is
// written.
func TestMemCosmosBatchIsAllOrNothing(t *testing.T) {
	t.Parallel()
	_, c := memClient(t, Latency{})
	ctx := context.Background()
	pk := azcosmos.NewPartitionKeyString("C-1")

	b := c.NewTransactionalBatch(pk)
	b.CreateItem(body(t, ledgerDoc{ID: "marker-m1", CustomerID: "C-1"}), nil)
	b.ReplaceItem("balance-C-1", body(t, ledgerDoc{ID: "balance-C-1", CustomerID: "C-1", Cents: 1}), nil)
	resp, err := c.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Success || len(resp.OperationResults) != 2 || resp.OperationResults[0].StatusCode != http.StatusFailedDependency ||
		resp.OperationResults[1].StatusCode != http.StatusNotFound {
		t.Fatalf("failed batch: success %v, results %+v; want 424, 404", resp.Success, resp.OperationResults)
	}
	if _, err := c.ReadItem(ctx, pk, "marker-m1", nil); status(err) != http.StatusNotFound {
		t.Fatalf("the failed batch's create was applied: %v", err)
	}

	b = c.NewTransactionalBatch(pk)
	b.CreateItem(body(t, ledgerDoc{ID: "marker-m1", CustomerID: "C-1"}), nil)
	b.UpsertItem(body(t, ledgerDoc{ID: "balance-C-1", CustomerID: "C-1", Cents: 7}), nil)
	b.ReadItem("balance-C-1", nil)
	if resp, err = c.ExecuteTransactionalBatch(ctx, b, nil); err != nil || !resp.Success {
		t.Fatalf("batch: %v, %+v", err, resp.OperationResults)
	}
	var bal ledgerDoc
	if err := json.Unmarshal(resp.OperationResults[2].ResourceBody, &bal); err != nil || bal.Cents != 7 || resp.OperationResults[1].ETag == "" {
		t.Fatalf("the batch's read of its own upsert: %s, %v", resp.OperationResults[2].ResourceBody, err)
	}

	// A marker that exists fails the batch with 409 on that operation.
	b = c.NewTransactionalBatch(pk)
	b.CreateItem(body(t, ledgerDoc{ID: "marker-m1", CustomerID: "C-1"}), nil)
	b.ReplaceItem("balance-C-1", body(t, ledgerDoc{ID: "balance-C-1", CustomerID: "C-1", Cents: 99}), &azcosmos.TransactionalBatchItemOptions{IfMatchETag: &resp.OperationResults[1].ETag})
	if resp, err = c.ExecuteTransactionalBatch(ctx, b, nil); err != nil || resp.Success || resp.OperationResults[0].StatusCode != http.StatusConflict {
		t.Fatalf("batch over an existing marker: %v, %+v", err, resp.OperationResults)
	}
	read, err := c.ReadItem(ctx, pk, "balance-C-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(read.Value, &bal); err != nil || bal.Cents != 7 {
		t.Fatalf("balance after the refused batch: %s", read.Value)
	}
}

// A batch's patch applies set and remove as the mark of dispatched events
// does, under its ETag condition (a changed ETag is 412).
func TestMemCosmosBatchPatchesMarkDispatched(t *testing.T) {
	t.Parallel()
	_, c := memClient(t, Latency{})
	ctx := context.Background()
	pk := azcosmos.NewPartitionKeyString("C-1")
	run := func(p azcosmos.PatchOperations, etag *azcore.ETag) azcosmos.TransactionalBatchResponse {
		t.Helper()
		b := c.NewTransactionalBatch(pk)
		b.PatchItem("balance-C-1", p, &azcosmos.TransactionalBatchItemOptions{IfMatchETag: etag})
		resp, err := c.ExecuteTransactionalBatch(ctx, b, nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	var incr azcosmos.PatchOperations
	incr.AppendIncrement("/cents", 5)
	if resp := run(incr, nil); resp.Success || resp.OperationResults[0].StatusCode != http.StatusNotFound {
		t.Fatalf("a patch of a missing document: %+v", resp.OperationResults)
	}
	created, err := c.CreateItem(ctx, pk, []byte(`{"id":"balance-C-1","customerId":"C-1","cents":7,"response":"r"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	var p azcosmos.PatchOperations
	p.AppendIncrement("/cents", 5)
	p.AppendSet("/dispatchedAtUtc", "2030-01-01T00:00:00.0000000Z")
	p.AppendRemove("/response")
	if resp := run(p, &created.ETag); !resp.Success {
		t.Fatalf("patch: %+v", resp.OperationResults)
	}
	if resp := run(incr, &created.ETag); resp.Success || resp.OperationResults[0].StatusCode != http.StatusPreconditionFailed {
		t.Fatalf("a patch under a stale ETag: %+v", resp.OperationResults)
	}
	read, err := c.ReadItem(ctx, pk, "balance-C-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(read.Value, &doc); err != nil || doc["cents"] != 12.0 || doc["dispatchedAtUtc"] != "2030-01-01T00:00:00.0000000Z" || doc["response"] != nil {
		t.Fatalf("patched document %s", read.Value)
	}
}

// Each answer is held for its kind's delay, and the client's sequential
// requests reuse one connection.
func TestMemCosmosHoldsAnswersForTheDelayAndCountsConnections(t *testing.T) {
	t.Parallel()
	const read, write = 30 * time.Millisecond, 60 * time.Millisecond
	m, c := memClient(t, Latency{Read: read, Write: write, Batch: write})
	ctx := context.Background()
	pk := azcosmos.NewPartitionKeyString("C-1")
	before := m.conns.stats().Opened
	start := time.Now()
	if _, err := c.CreateItem(ctx, pk, body(t, ledgerDoc{ID: "a", CustomerID: "C-1"}), nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < write {
		t.Errorf("a create answered after %v, before the write delay %v", d, write)
	}
	start = time.Now()
	for range 3 {
		if _, err := c.ReadItem(ctx, pk, "a", nil); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d < 3*read {
		t.Errorf("three reads answered after %v, before 3 × %v", d, read)
	}
	if got := m.Counts(); got.Reads < 3 || got.Writes < 1 {
		t.Errorf("counts %+v, want at least 3 reads and 1 write", got)
	}
	if opened := m.conns.stats().Opened - before; opened != 0 {
		t.Errorf("sequential requests opened %d new connections, want them on the open one", opened)
	}
}

// Requests the load run's paths never send are refused and counted, so a
// run that needs them fails instead of measuring errors.
func TestMemCosmosRefusesQueriesAndCountsThem(t *testing.T) {
	t.Parallel()
	m, c := memClient(t, Latency{})
	pager := c.NewQueryItemsPager("SELECT * FROM c", azcosmos.NewPartitionKeyString("C-1"), nil)
	if _, err := pager.NextPage(context.Background()); err == nil {
		t.Fatal("a query succeeded")
	}
	if m.Counts().Unsupported == 0 || m.LastUnsupported() == "" {
		t.Fatalf("the query was not counted as unsupported: %+v", m.Counts())
	}
}

// A patch in a batch is applied as Cosmos DB applies it (an increment adds
// to the number), and a patch of a missing document fails the batch with
// 404 on that operation: the sample's payments patch the balance.
func TestMemCosmosBatchPatches(t *testing.T) {
	t.Parallel()
	_, c := memClient(t, Latency{})
	ctx := context.Background()
	pk := azcosmos.NewPartitionKeyString("C-2")

	b := c.NewTransactionalBatch(pk)
	b.PatchItem("balance-C-2", patchOf(5), nil)
	resp, err := c.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil || resp.Success || resp.OperationResults[0].StatusCode != http.StatusNotFound {
		t.Fatalf("patch of a missing document: %v, %+v; want 404", err, resp.OperationResults)
	}
	b = c.NewTransactionalBatch(pk)
	b.CreateItem(body(t, ledgerDoc{ID: "balance-C-2", CustomerID: "C-2", Cents: 10}), nil)
	b.PatchItem("balance-C-2", patchOf(5), nil)
	b.PatchItem("balance-C-2", patchOf(-3), nil)
	if resp, err = c.ExecuteTransactionalBatch(ctx, b, nil); err != nil || !resp.Success {
		t.Fatalf("batch: %v, %+v", err, resp.OperationResults)
	}
	read, err := c.ReadItem(ctx, pk, "balance-C-2", nil)
	if err != nil {
		t.Fatal(err)
	}
	var bal ledgerDoc
	if err := json.Unmarshal(read.Value, &bal); err != nil || bal.Cents != 12 || bal.CustomerID != "C-2" {
		t.Fatalf("balance after +5 and -3 on 10: %s (%v), want 12", read.Value, err)
	}
}

func patchOf(by int64) azcosmos.PatchOperations {
	var p azcosmos.PatchOperations
	p.AppendIncrement("/cents", by)
	return p
}
