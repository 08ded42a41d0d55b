package cosmostxn_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmostest"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
	"github.com/nimbus-go/functions-subscriber/internal/txn/cosmostxn"
	"github.com/nimbus-go/functions-subscriber/internal/txn/txntest"
)

// One local Cosmos server for the package; each test uses databases of
// its own.
var (
	server    *testenv.Process
	serverErr error
	databases atomic.Int64
)

func TestMain(m *testing.M) {
	server, serverErr = testenv.StartNode("cosmos.js", "PORT=0", "COSMOS_CONSISTENCY=Strong")
	if serverErr != nil && testenv.Required() {
		fmt.Fprintf(os.Stderr, "local Cosmos DB stand-in unavailable: %v (%s=1)\n", serverErr, testenv.RequireEnv)
		os.Exit(1)
	}
	code := m.Run()
	server.Stop()
	os.Exit(code)
}

// env is an account on the shared server whose requests are recorded.
type env struct {
	rec     *cosmostest.Recorder
	account *cosmos.Account
	store   *cosmostxn.Store
}

func newEnv(t *testing.T) *env {
	t.Helper()
	if serverErr != nil {
		testenv.Unavailable(t, "local Cosmos DB stand-in unavailable: %v", serverErr)
	}
	rec := cosmostest.NewRecorder()
	cs := fmt.Sprintf("AccountEndpoint=http://127.0.0.1:%d/;AccountKey=%s;", server.Port, testenv.CosmosEmulatorKey)
	acct, err := cosmos.NewAccount(cosmos.Config{ConnectionString: cs, Retry: cosmostest.NoRetry, ClientOptions: cosmostest.ClientOptions(rec)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(acct.Close)
	s, err := cosmostxn.New(acct, cosmostxn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &env{rec: rec, account: acct, store: s}
}

func newTarget(pkPath string) txn.Target {
	return txn.Target{DatabaseID: fmt.Sprintf("txn%d", databases.Add(1)), ContainerID: "orders", PartitionKeyPath: pkPath}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	txntest.Run(t, txntest.Harness{
		New: func(t *testing.T, pkPath string) (txn.Store, txn.Target) {
			return newEnv(t).store, newTarget(pkPath)
		},
		NewTTLOff: func(t *testing.T) (txn.Store, txn.Target) {
			e := newEnv(t)
			tg := newTarget("/tenant")
			ctx := context.Background()
			if _, err := e.account.Client().CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: tg.DatabaseID}, nil); err != nil {
				t.Fatal(err)
			}
			db, _ := e.account.Client().NewDatabase(tg.DatabaseID)
			props := azcosmos.ContainerProperties{ID: tg.ContainerID, PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{tg.PartitionKeyPath}}}
			if _, err := db.CreateContainer(ctx, props, nil); err != nil {
				t.Fatal(err)
			}
			return e.store, tg
		},
		Trials: 5,
	})
}

// TestCreatesContainerWithTTL: a missing container is created with the
// target's partition key path and time to live on without a default.
func TestCreatesContainerWithTTL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := newTarget("/a/b")
	if _, err := txn.HasMarker(context.Background(), e.store, tg, "pk", "e", "m"); err != nil {
		t.Fatal(err)
	}
	c, _ := e.account.Client().NewContainer(tg.DatabaseID, tg.ContainerID)
	props, err := c.Read(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := props.ContainerProperties
	if p.DefaultTimeToLive == nil || *p.DefaultTimeToLive != -1 || len(p.PartitionKeyDefinition.Paths) != 1 || p.PartitionKeyDefinition.Paths[0] != "/a/b" {
		t.Fatalf("container created with ttl %v and paths %v", p.DefaultTimeToLive, p.PartitionKeyDefinition.Paths)
	}
}

// TestOneCommitIsOneRequest measures a commit of a create, a replace and
// a marker once the container is initialized, and checks that the size
// estimate bounds the body the SDK sent.
func TestOneCommitIsOneRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := newTarget("/tenant")
	ctx := context.Background()
	tx := txn.Begin(e.store, tg, "t", nil)
	if err := tx.Unit().Create(map[string]any{"id": "balance", "tenant": "t", "amount": 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	u := txn.Begin(e.store, tg, "t", nil)
	var doc map[string]any
	_, etag, err := u.Unit().Read(ctx, "balance", &doc)
	if err != nil {
		t.Fatal(err)
	}
	doc["amount"] = 2
	doc["note"] = "<a & b> \u2028"
	if err := u.Unit().Create(map[string]any{"id": "order-1", "tenant": "t", "total": 12.5}); err != nil {
		t.Fatal(err)
	}
	if err := u.Unit().Replace(doc, etag); err != nil {
		t.Fatal(err)
	}
	e.rec.Reset()
	rc, err := u.Commit(ctx, txn.Marker{EndpointID: "billing", MessageID: "m-1", Retention: 3600e9})
	if err != nil {
		t.Fatal(err)
	}
	sent := e.rec.Sent()
	if len(sent) != 1 {
		t.Fatalf("one commit sent %d requests, want 1", len(sent))
	}
	t.Logf("one commit (create + replace + marker): %d request, charge %.2f RU reported, body %d bytes", len(sent), rc.Charge, len(sent[0].Body))

	// The estimate is an upper bound of what the SDK sends.
	ops := []txn.Op{
		{Kind: txn.OpCreate, ID: "x<&>", Body: []byte(`{"id":"x<&>","tenant":"t","s":"<<>>&&\u2028"}`)},
		{Kind: txn.OpReplace, ID: "balance", Body: []byte(`{"id":"balance","tenant":"t","v":"` + strings.Repeat("é", 100) + `"}`), IfMatch: etag},
		{Kind: txn.OpPatch, ID: "balance", Patch: []txn.PatchOp{{Op: txn.PatchSet, Path: "/v", Value: []byte(`"<>"`)}, {Op: txn.PatchIncrement, Path: "/n", Value: []byte(`3`)}}},
		{Kind: txn.OpDelete, ID: "nope", IfMatch: etag},
		{Kind: txn.OpUpsert, ID: "u", Body: []byte(`{"id":"u","tenant":"t"}`)},
	}
	e.rec.Reset()
	if _, err := e.store.Execute(ctx, tg, "t", ops); err != nil {
		t.Fatal(err)
	}
	body := len(e.rec.Sent()[0].Body)
	if est := txn.EstimateRequestBytes(ops); est < body {
		t.Fatalf("estimate %d bytes is below the %d bytes the SDK sent", est, body)
	} else {
		t.Logf("request body %d bytes, estimate %d", body, est)
	}
}

// createContainer creates tg's container with time to live ttl (nil: off).
func createContainer(t *testing.T, e *env, tg txn.Target, ttl *int32) *azcosmos.ContainerClient {
	t.Helper()
	ctx := context.Background()
	if _, err := e.account.Client().CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: tg.DatabaseID}, nil); err != nil {
		t.Fatal(err)
	}
	db, _ := e.account.Client().NewDatabase(tg.DatabaseID)
	props := azcosmos.ContainerProperties{ID: tg.ContainerID, DefaultTimeToLive: ttl,
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{tg.PartitionKeyPath}}}
	if _, err := db.CreateContainer(ctx, props, nil); err != nil {
		t.Fatal(err)
	}
	c, _ := e.account.Client().NewContainer(tg.DatabaseID, tg.ContainerID)
	return c
}

// A container whose default time to live is a number of seconds is
// refused like one with time to live off: every marker check and commit
// fails transiently (an operator error naming the container, its time to
// live and the setting to make), nothing is written, and once the
// operator sets -1 the next use goes through without a restart.
func TestDefaultTTLRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := newTarget("/tenant")
	hour := int32(3600)
	c := createContainer(t, e, tg, &hour)
	ctx := context.Background()
	check := func(err error) {
		t.Helper()
		var oe interface{ OperatorMessage() string }
		if !errors.Is(err, txn.ErrTTLDefault) || txn.Classify(err) != txn.Transient || !errors.As(err, &oe) {
			t.Fatalf("got %v, want a transient operator error wrapping ErrTTLDefault", err)
		}
		msg := oe.OperatorMessage()
		for _, want := range []string{tg.ContainerID, tg.DatabaseID, "3600 s", "-1"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%q does not name %q", msg, want)
			}
		}
	}
	for range 2 { // every use, not only the first
		_, err := txn.HasMarker(ctx, e.store, tg, "t", "billing", "m")
		check(err)
		tx := txn.Begin(e.store, tg, "t", nil)
		must(t, tx.Unit().Create(map[string]any{"id": "balance", "tenant": "t"}))
		_, err = tx.Commit(ctx, txn.Marker{EndpointID: "billing", MessageID: "m", Retention: time.Hour})
		check(err)
	}
	if _, err := c.ReadItem(ctx, azcosmos.NewPartitionKeyString("t"), "balance", nil); !cosmos.IsNotFound(err) {
		t.Fatalf("a refused commit wrote: %v", err)
	}
	props, err := c.Read(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	off := int32(-1)
	p := *props.ContainerProperties
	p.DefaultTimeToLive = &off
	if _, err := c.Replace(ctx, p, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := txn.HasMarker(ctx, e.store, tg, "t", "billing", "m"); err != nil {
		t.Fatalf("after the fix: %v", err)
	}
}

// A 401 or 403 on the batch (a read-only data role: reads and the marker
// check succeed) or on a read is an operator error with pauses, as on the
// plain inbox: transient, naming the role to assign, never "rejected".
func TestAccessDeniedIsAnOperatorError(t *testing.T) {
	t.Parallel()
	e, tg := newReadyEnv(t)
	ctx := context.Background()
	for _, tc := range []struct {
		status int
		sub    string
		batch  bool
		want   string
	}{
		{http.StatusForbidden, "5301", true, cosmos.DataContributorRole},
		{http.StatusForbidden, "", false, cosmos.DataContributorRole},
		{http.StatusUnauthorized, "", true, "401 Unauthorized"},
		{http.StatusUnauthorized, "", false, "401 Unauthorized"},
	} {
		t.Run(fmt.Sprint(tc.status, "/", tc.sub, " batch ", tc.batch), func(t *testing.T) {
			e.rec.SetHooks(func(req *http.Request) (*http.Response, error) {
				if testenv.IsBatchRequest(req) == tc.batch && strings.Contains(req.URL.Path, "/docs") {
					return cosmostest.Synth(req, tc.status, map[string]string{"x-ms-substatus": tc.sub}, `{"code":"Forbidden","message":"secret detail"}`), nil
				}
				return nil, nil
			}, nil)
			defer e.rec.SetHooks(nil, nil)
			var err error
			if tc.batch {
				tx := txn.Begin(e.store, tg, "t", nil)
				must(t, tx.Unit().Create(map[string]any{"id": "a", "tenant": "t"}))
				_, err = tx.Commit(ctx, txn.Marker{EndpointID: "billing", MessageID: "m", Retention: time.Hour})
			} else {
				_, err = txn.HasMarker(ctx, e.store, tg, "t", "billing", "m")
			}
			if txn.Classify(err) != txn.Transient || !errors.Is(err, cosmos.ErrAccessDenied) {
				t.Fatalf("got %v (%v), want a transient access error", err, txn.Classify(err))
			}
			line := subscriber.NewStoreError("txn_commit", err).Error()
			if !strings.Contains(line, "misconfigured") || !strings.Contains(line, tc.want) || strings.Contains(line, "secret detail") || strings.Contains(line, "127.0.0.1") {
				t.Fatalf("the pipeline reports %q", line)
			}
		})
	}
}

// A 400 from Cosmos DB on a read is reported as refused, never as the
// service being unavailable.
func TestBadRequestIsNotUnavailable(t *testing.T) {
	t.Parallel()
	e, tg := newReadyEnv(t)
	ctx := context.Background()
	e.rec.SetHooks(func(req *http.Request) (*http.Response, error) {
		if strings.Contains(req.URL.Path, "/docs") {
			return cosmostest.Synth(req, http.StatusBadRequest, nil, `{"code":"BadRequest"}`), nil
		}
		return nil, nil
	}, nil)
	_, err := txn.HasMarker(ctx, e.store, tg, "t", "billing", "m")
	line := subscriber.NewStoreError("marker_check", err).Error()
	if !errors.Is(err, cosmos.ErrRefused) || strings.Contains(line, "unavailable") || !strings.Contains(line, "400") {
		t.Fatalf("error %v reported as %q", err, line)
	}
}

// No partition key value Cosmos DB cannot take reaches it: the marker
// check, a read and a commit fail before any request.
func TestPartitionKeyLimitSendsNothing(t *testing.T) {
	t.Parallel()
	e, tg := newReadyEnv(t)
	ctx := context.Background()
	e.rec.Reset()
	pk := strings.Repeat("\U0001F642", txn.MaxPartitionKeyBytes/4) + "x"
	_, err := txn.HasMarker(ctx, e.store, tg, pk, "billing", "m")
	tx := txn.Begin(e.store, tg, pk, nil)
	_, _, rerr := tx.Unit().Read(ctx, "a", nil)
	_, cerr := tx.Commit(ctx, txn.Marker{EndpointID: "billing", MessageID: "m", Retention: time.Hour})
	for _, err := range []error{err, rerr, cerr} {
		if txn.Classify(err) != txn.Permanent || !strings.Contains(fmt.Sprint(err), "2048") {
			t.Errorf("got %v, want a permanent failure naming the limit", err)
		}
	}
	if n := len(e.rec.Sent()); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

// newReadyEnv is newEnv and a target whose container is initialized, so
// that what a test records or injects concerns its own requests.
func newReadyEnv(t *testing.T) (*env, txn.Target) {
	t.Helper()
	e := newEnv(t)
	tg := newTarget("/tenant")
	if _, err := txn.HasMarker(context.Background(), e.store, tg, "t", "billing", "m"); err != nil {
		t.Fatal(err)
	}
	return e, tg
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestOutboxRequests measures an outbox on Cosmos DB: the commit of a
// write, two published events and the response is one request, the
// dispatched mark one more, and the query is cross-partition with the page
// size sent as MaxItemCount.
func TestOutboxRequests(t *testing.T) {
	t.Parallel()
	e, tg := newReadyEnv(t)
	ctx := context.Background()
	corr := "c-1"
	events := []message.Stored{
		{MessageID: "ev-1", SessionID: "s", CorrelationID: &corr, ApplicationProperties: map[string]any{"To": "A", "RetryCount": int32(0)}, Body: []byte(`{"a":"<&>"}`)},
		{MessageID: "ev-2", SessionID: "s", CorrelationID: &corr, ApplicationProperties: map[string]any{"To": "B", "EventId": nil}, Body: []byte("{\"b\":\"\u2028\"}")},
	}
	resp := &message.Stored{MessageID: "r-1", SessionID: "s", ApplicationProperties: map[string]any{"To": "Resolver"}, Body: []byte(`{}`)}
	tx := txn.Begin(e.store, tg, "t", func() time.Time { return time.Now().Add(-time.Hour) })
	must(t, tx.Unit().Create(map[string]any{"id": "order-1", "tenant": "t"}))
	for _, ev := range events {
		must(t, tx.Unit().Publish(ev))
	}
	e.rec.Reset()
	rc, err := tx.Commit(ctx, txn.Marker{EndpointID: "billing", MessageID: "m-1", Retention: time.Hour, Outbox: true, Response: resp})
	if err != nil {
		t.Fatal(err)
	}
	sent := e.rec.Sent()
	if len(sent) != 1 {
		t.Fatalf("the commit sent %d requests, want 1", len(sent))
	}
	commitBody := len(sent[0].Body)
	if rc.Pending == nil || rc.Pending.ETag == "" {
		t.Fatalf("receipt %+v: want a pending outbox with the marker's ETag", rc.Pending)
	}

	e.rec.Reset()
	page, err := e.store.FindPending(ctx, tg, txn.PendingQuery{EndpointID: "billing", OlderThan: time.Now(), PageSize: 10})
	if err != nil || len(page.Pending) != 1 || page.Unreadable != 0 {
		t.Fatalf("FindPending = %+v, %v", page, err)
	}
	queries := e.rec.Count(func(s cosmostest.Sent) bool { return s.Query != "" })
	for _, s := range e.rec.Sent() {
		if s.Query != "" && (s.MaxItemCount != "10" || !strings.EqualFold(s.CrossPartition, "true")) {
			t.Errorf("query sent with MaxItemCount %q, cross-partition %q", s.MaxItemCount, s.CrossPartition)
		}
	}

	e.rec.Reset()
	if ok, err := txn.MarkDispatched(ctx, e.store, rc.Pending, time.Hour, time.Now()); err != nil || ok != txn.Marked {
		t.Fatalf("MarkDispatched = %v, %v", ok, err)
	}
	if n := len(e.rec.Sent()); n != 1 {
		t.Fatalf("the mark sent %d requests, want 1", n)
	}
	t.Logf("outbox of 2 events and a response: commit 1 request (%d bytes), query %d request(s), mark 1 request (%d bytes)", commitBody, queries, len(e.rec.Sent()[0].Body))
}
