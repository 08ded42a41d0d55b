package cosmosstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmostest"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/inbox/cosmosstore"
	"github.com/nimbus-go/functions-subscriber/internal/inbox/inboxtest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Session")
	// One container per case: the suite reuses endpoint names across cases
	// and its purges would see other cases' records in a shared container.
	var n atomic.Int32
	inboxtest.Run(t, func(t *testing.T, now func() time.Time) inbox.Store {
		return e.store(t, cosmosstore.Options{StoreOptions: cosmos.StoreOptions{AllowRelaxedConsistency: true, Now: now}, ContainerID: fmt.Sprintf("conf%d", n.Add(1))})
	})
}

func TestConformanceOnStrongAccount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Strong")
	var n atomic.Int32
	inboxtest.Run(t, func(t *testing.T, now func() time.Time) inbox.Store {
		return e.store(t, cosmosstore.Options{StoreOptions: cosmos.StoreOptions{Now: now, DatabaseID: e.DB}, ContainerID: fmt.Sprintf("box%d", n.Add(1))})
	})
}

// Documents match NimBus's InboxDocument for the shared hash vectors.
func TestDocumentShapeAndHashVectors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Session")
	// This test checks the container defaults, so its stores name no
	// database: it is the package's one test in the default database.
	e.DB = cosmosstore.DefaultDatabaseID
	first := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := inboxtest.NewClock(first)
	s := e.storeAsGiven(t, cosmosstore.Options{StoreOptions: cosmos.StoreOptions{AllowRelaxedConsistency: true, Now: clock.Now}})
	ctx := context.Background()
	vectors := inboxtest.HashVectors
	for _, v := range vectors {
		if err := s.RecordProcessed(ctx, inbox.NewKey(v.Endpoint, v.MessageID)); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(90 * time.Minute)
	raw := e.raw(t, cosmosstore.DefaultDatabaseID, cosmosstore.DefaultContainerID)
	for _, v := range vectors {
		// A repeated record keeps the first timestamp.
		if err := s.RecordProcessed(ctx, inbox.NewKey(v.Endpoint, v.MessageID)); err != nil {
			t.Fatal(err)
		}
		doc := cosmostest.RawDoc(t, raw, v.ID)
		want := map[string]any{"id": v.ID, "endpointId": v.Endpoint, "messageId": v.MessageID, "createdAtUtc": "2030-01-01T00:00:00.0000000Z"}
		for k, w := range want {
			if doc[k] != w {
				t.Errorf("%q/%q: %s = %#v, want %#v", v.Endpoint, v.MessageID, k, doc[k], w)
			}
		}
		for k := range doc {
			if _, ok := want[k]; !ok && !strings.HasPrefix(k, "_") {
				t.Errorf("unexpected field %q in %v", k, doc)
			}
		}
	}

	// Sub-second times keep seven fraction digits, truncated to 100 ns.
	clock2 := fixedClock(time.Date(2030, 6, 1, 12, 30, 45, 123456789, time.FixedZone("X", 3600)))
	s2 := e.storeAsGiven(t, cosmosstore.Options{StoreOptions: cosmos.StoreOptions{AllowRelaxedConsistency: true, Now: clock2}})
	k := inbox.NewKey("billing", "fraction")
	if err := s2.RecordProcessed(ctx, k); err != nil {
		t.Fatal(err)
	}
	if got := cosmostest.RawDoc(t, raw, k.ID)["createdAtUtc"]; got != "2030-06-01T11:30:45.1234567Z" {
		t.Errorf("createdAtUtc = %v", got)
	}

	// Container defaults: MessageDatabase/inbox, partition key /id, no TTL.
	props, err := raw.Read(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := props.ContainerProperties
	if p.ID != "inbox" || len(p.PartitionKeyDefinition.Paths) != 1 || p.PartitionKeyDefinition.Paths[0] != "/id" || p.DefaultTimeToLive != nil {
		t.Errorf("container properties %+v", p)
	}
	// Reads and writes address the document by id with partition key = id.
	for _, s := range e.Rec.Sent() {
		if (cosmostest.IsDocRead(s) || cosmostest.IsDocCreate(s)) && !strings.HasPrefix(s.Path, "/dbs/MessageDatabase/colls/inbox/docs") {
			t.Errorf("request to %s", s.Path)
		}
	}
}

func TestConsistencyValidation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		account string
		relaxed bool
		wantErr bool
	}{
		{"Session", false, true},
		{"Eventual", false, true},
		{"BoundedStaleness", false, true},
		{"ConsistentPrefix", false, true},
		{"Strong", false, false},
		{"Session", true, false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s relaxed=%v", tc.account, tc.relaxed), func(t *testing.T) {
			if testing.Short() && tc.account != "Session" && tc.account != "Strong" {
				// Each level is a stand-in of its own; the other relaxed
				// levels take the Session path.
				t.Skip("a stand-in per consistency level: the full suite (without -short) runs it")
			}
			e := newEnv(t, tc.account)
			s := e.store(t, cosmosstore.Options{StoreOptions: cosmos.StoreOptions{AllowRelaxedConsistency: tc.relaxed}})
			ctx := context.Background()
			k := inbox.NewKey("billing", "m-1")
			_, errCheck := s.HasProcessed(ctx, k)
			errRecord := s.RecordProcessed(ctx, k)
			_, errPurge := s.PurgeExpired(ctx, "billing", time.Now().Add(-time.Hour))
			_, _, errOldest := s.OldestExpired(ctx, "billing", time.Now().Add(-time.Hour))
			reads := e.Rec.Count(cosmostest.IsAccountRead)
			if !tc.wantErr {
				if errors.Join(errCheck, errRecord, errPurge, errOldest) != nil {
					t.Fatalf("errors: %v", errors.Join(errCheck, errRecord, errPurge, errOldest))
				}
				if ok, err := s.HasProcessed(ctx, k); err != nil || !ok {
					t.Fatalf("HasProcessed after record = %v, %v", ok, err)
				}
				want := 1
				if tc.relaxed {
					want = 0
				}
				if reads != want {
					t.Fatalf("%d account reads, want %d", reads, want)
				}
				return
			}
			for name, err := range map[string]error{"check": errCheck, "record": errRecord, "purge": errPurge, "oldest": errOldest} {
				if !errors.Is(err, cosmos.ErrRelaxedConsistency) {
					t.Fatalf("%s: err %v, want ErrRelaxedConsistency", name, err)
				}
				msg := err.Error()
				if !strings.Contains(msg, "Strong") || !strings.Contains(msg, "AllowRelaxedConsistency=true") || !strings.Contains(msg, tc.account) {
					t.Fatalf("%s: message %q lacks Strong, the level or the option", name, msg)
				}
			}
			// Rejected before touching the container; retried on each use.
			if n := e.Rec.Count(cosmostest.IsContainerTouch); n != 0 {
				t.Fatalf("%d container requests despite the rejection", n)
			}
			if reads != 4 {
				t.Fatalf("%d account reads, want one per failed use (4)", reads)
			}
		})
	}
}

func TestInitializationRunsOnceAndRetriesAfterFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Strong")
	s := e.store(t, cosmosstore.Options{})
	ctx := context.Background()

	// The first account read fails with 503; the use fails, not as a
	// consistency rejection.
	var failed sync.Once
	e.Rec.SetHooks(func(req *http.Request) (*http.Response, error) {
		var resp *http.Response
		if req.URL.Path == "/" && cosmostest.IsAdapterRequest(req) {
			failed.Do(func() {
				resp = cosmostest.Synth(req, http.StatusServiceUnavailable, nil, `{"code":"ServiceUnavailable"}`)
			})
		}
		return resp, nil
	}, nil)
	k := inbox.NewKey("billing", "once")
	if _, err := s.HasProcessed(ctx, k); err == nil || errors.Is(err, cosmos.ErrRelaxedConsistency) {
		t.Fatalf("first use: err %v, want a transient failure", err)
	}

	// Concurrent later uses share one successful attempt.
	gate := e.holdAccountReads()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.RecordProcessed(ctx, inbox.NewKey("billing", fmt.Sprintf("c-%d", i)))
		}()
	}
	// Open the gate only when all 16 callers wait for the one attempt in
	// flight, so a store that did not share it would have sent 16 reads.
	testenv.WaitUntil(t, 10*time.Second, func() bool { return testenv.GoroutinesIn("cosmos.(*Lazy).Do(") >= 16 },
		func() string { return "16 callers waiting for the initialization" })
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		if _, err := s.HasProcessed(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.Rec.Count(cosmostest.IsAccountRead); n != 2 {
		t.Fatalf("%d account reads, want 2 (one failed, one shared success)", n)
	}
	if n := e.Rec.Count(func(s cosmostest.Sent) bool {
		return s.Method == http.MethodGet && strings.HasSuffix(s.Path, "/colls/inbox")
	}); n != 1 {
		t.Fatalf("%d container reads, want 1", n)
	}
}

// A caller whose context ends while initialization runs gets its context
// error; the attempt goes on for the others.
func TestInitializationSurvivesACancelledFirstCaller(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Strong")
	s := e.store(t, cosmosstore.Options{})
	gate := e.holdAccountReads()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.HasProcessed(ctx, inbox.NewKey("billing", "x")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want DeadlineExceeded", err)
	}
	close(gate)
	if _, err := s.HasProcessed(context.Background(), inbox.NewKey("billing", "x")); err != nil {
		t.Fatal(err)
	}
	if n := e.Rec.Count(cosmostest.IsAccountRead); n != 1 {
		t.Fatalf("%d account reads, want 1", n)
	}
}

func TestContainerProvisioning(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Session")
	ctx := context.Background()
	k := inbox.NewKey("billing", "m")

	// Off: a missing container fails every use, naming the option...
	s := e.store(t, cosmosstore.Options{StoreOptions: cosmos.StoreOptions{AllowRelaxedConsistency: true, AutoCreateContainer: boolPtr(false)}, ContainerID: "provisioned"})
	_, err := s.HasProcessed(ctx, k)
	if !errors.Is(err, cosmos.ErrContainer) || !strings.Contains(err.Error(), "AutoCreateContainer is false") {
		t.Fatalf("err %v", err)
	}
	if n := e.Rec.Count(func(s cosmostest.Sent) bool { return s.Method == http.MethodPost }); n != 0 {
		t.Fatalf("%d creates with AutoCreateContainer off", n)
	}
	// ...until it is provisioned, then the next use succeeds.
	if _, err := e.Account.Client().CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: e.DB}, nil); err != nil {
		t.Fatal(err)
	}
	db, _ := e.Account.Client().NewDatabase(e.DB)
	if _, err := db.CreateContainer(ctx, azcosmos.ContainerProperties{ID: "provisioned", PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/id"}}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordProcessed(ctx, k); err != nil {
		t.Fatal(err)
	}

	// A container partitioned on another path is refused: point reads by
	// id would silently miss.
	if _, err := db.CreateContainer(ctx, azcosmos.ContainerProperties{ID: "wrongpk", PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/endpointId"}}}, nil); err != nil {
		t.Fatal(err)
	}
	w := e.store(t, cosmosstore.Options{StoreOptions: cosmos.StoreOptions{AllowRelaxedConsistency: true}, ContainerID: "wrongpk"})
	if _, err := w.HasProcessed(ctx, k); !errors.Is(err, cosmos.ErrContainer) || !strings.Contains(err.Error(), "/endpointId") {
		t.Fatalf("err %v", err)
	}
}

// Pre-cancelled operations return the context error before any request.
func TestPreCancelledOperationsSendNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Strong")
	s := e.store(t, cosmosstore.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	k := inbox.NewKey("billing", "m")
	_, e1 := s.HasProcessed(ctx, k)
	e2 := s.RecordProcessed(ctx, k)
	_, e3 := s.PurgeExpired(ctx, "billing", time.Now())
	_, _, e4 := s.OldestExpired(ctx, "billing", time.Now())
	for i, err := range []error{e1, e2, e3, e4} {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("op %d: err %v", i, err)
		}
	}
	if n := len(e.Rec.Sent()); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

func TestInvalidKeysAreRejected(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Session")
	s := e.store(t, cosmosstore.Options{StoreOptions: cosmos.StoreOptions{AllowRelaxedConsistency: true}})
	ctx := context.Background()
	for _, k := range []inbox.Key{inbox.NewKey("", "m"), inbox.NewKey("billing", " "), {EndpointID: "billing", MessageID: "m"}} {
		if _, err := s.HasProcessed(ctx, k); !errors.Is(err, inbox.ErrInvalidKey) {
			t.Errorf("HasProcessed(%+v): %v", k, err)
		}
		if err := s.RecordProcessed(ctx, k); !errors.Is(err, inbox.ErrInvalidKey) {
			t.Errorf("RecordProcessed(%+v): %v", k, err)
		}
	}
	if _, err := s.PurgeExpired(ctx, " ", time.Now()); !errors.Is(err, inbox.ErrInvalidKey) {
		t.Errorf("PurgeExpired(blank): %v", err)
	}
	if n := len(e.Rec.Sent()); n != 0 {
		t.Fatalf("%d requests for invalid keys", n)
	}
}
