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

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/inbox/cosmosstore"
	"github.com/nimbus-go/functions-subscriber/internal/inbox/inboxtest"
)

func TestConformance(t *testing.T) {
	e := newEnv(t, "Session")
	// One container per case: the suite reuses endpoint names across cases
	// and its purges would see other cases' records in a shared container.
	var n atomic.Int32
	inboxtest.Run(t, func(t *testing.T, now func() time.Time) inbox.Store {
		return e.store(t, cosmosstore.Options{AllowRelaxedConsistency: true, Now: now, ContainerID: fmt.Sprintf("conf%d", n.Add(1))})
	})
}

func TestConformanceOnStrongAccount(t *testing.T) {
	e := newEnv(t, "Strong")
	var n atomic.Int32
	inboxtest.Run(t, func(t *testing.T, now func() time.Time) inbox.Store {
		return e.store(t, cosmosstore.Options{Now: now, DatabaseID: "strongdb", ContainerID: fmt.Sprintf("box%d", n.Add(1))})
	})
}

// Documents match NimBus's InboxDocument for the research hash vectors.
func TestDocumentShapeAndHashVectors(t *testing.T) {
	e := newEnv(t, "Session")
	first := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := inboxtest.NewClock(first)
	s := e.store(t, cosmosstore.Options{AllowRelaxedConsistency: true, Now: clock.Now})
	ctx := context.Background()
	vectors := []struct{ endpoint, message, id string }{
		{"billing", `orders/one?#\customer`, "1159040A9607A8F0686169BA21981998EB32D6279CC5A0CFBE80CBF530B4F0D5"},
		{"shipping", `orders/one?#\customer`, "79E8E63EE69B5EB478E0CB6733E735458D84894A87033799C9703FE369B41160"},
		{"billing", "m-1", "52B03B3F613F2E7313454206FE3C2E51EC71F873F869B828F906B8FDF32A9835"},
		{"billing", "message-1", "BB9FE4FA580EE1BA93E391AF9212CFB2DF1B81B577A0262E26509017537F5E20"},
		{"Billing", "ext-1", "6CE9FA9C5FC44547A023415D0FE3C05FF630BBF4126B8109609AC46034FA9B08"},
		{"Shipping", "ext-1", "8F3691A2E0043E46AD9B6E9D7DCDDB663BB15BE6DAE3FC031E98941ACC8294B2"},
		{"billing", "m1", "7E32AD0C6310C4DD12292DB0B6FB46F7EB8684F507D30C9211D203518F2F99D2"},
		{"billing", "m1 ", "7E1114E64F522BF42307A410D9E4FD72B75B681836BA2A487A0A9F77ED9BD612"},
		{"billing ", "m1", "1CADFF8DDEAB7183392077F0BC598CF7F3E7C85C9C86E84608D7A82F78834BCF"},
		{"Billing", "m1", "8BB0CC5D62FDD6E68160C4E750CAE959C3844D9F3C43831508F16D0954A386FB"},
		{"12", "3", "D94D6714F4E464123A1A19409B536560A396C38132DE1264EC3E01ED9F0E4690"},
		{"1", "23", "0FB57BC0B55A1AFAB01465CE3D3A67DAD9576AB588295BAC06A0B3101AE7308B"},
		{"café", "m", "C64C38F474B0CE5222817BC865E76F4DB94A5B56D78AC3EA38E196C7CA429D39"},
		{"😀ep", "m", "8AA69D0F44F594087DB8CD247034BEC654E1C7F0F3D453015B9B9CD710A63442"},
	}
	for _, v := range vectors {
		if err := s.RecordProcessed(ctx, inbox.NewKey(v.endpoint, v.message)); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(90 * time.Minute)
	raw := e.raw(t, cosmosstore.DefaultDatabaseID, cosmosstore.DefaultContainerID)
	for _, v := range vectors {
		// A repeated record keeps the first timestamp.
		if err := s.RecordProcessed(ctx, inbox.NewKey(v.endpoint, v.message)); err != nil {
			t.Fatal(err)
		}
		doc := rawDoc(t, raw, v.id)
		want := map[string]any{"id": v.id, "endpointId": v.endpoint, "messageId": v.message, "createdAtUtc": "2030-01-01T00:00:00.0000000Z"}
		for k, w := range want {
			if doc[k] != w {
				t.Errorf("%q/%q: %s = %#v, want %#v", v.endpoint, v.message, k, doc[k], w)
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
	s2 := e.store(t, cosmosstore.Options{AllowRelaxedConsistency: true, Now: clock2})
	k := inbox.NewKey("billing", "fraction")
	if err := s2.RecordProcessed(ctx, k); err != nil {
		t.Fatal(err)
	}
	if got := rawDoc(t, raw, k.ID)["createdAtUtc"]; got != "2030-06-01T11:30:45.1234567Z" {
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
	for _, s := range e.rec.sent() {
		if (isDocRead(s) || isDocCreate(s)) && !strings.HasPrefix(s.Path, "/dbs/MessageDatabase/colls/inbox/docs") {
			t.Errorf("request to %s", s.Path)
		}
	}
}

func TestConsistencyValidation(t *testing.T) {
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
			e := newEnv(t, tc.account)
			s := e.store(t, cosmosstore.Options{AllowRelaxedConsistency: tc.relaxed})
			ctx := context.Background()
			k := inbox.NewKey("billing", "m-1")
			_, errCheck := s.HasProcessed(ctx, k)
			errRecord := s.RecordProcessed(ctx, k)
			_, errPurge := s.PurgeExpired(ctx, "billing", time.Now().Add(-time.Hour))
			_, _, errOldest := s.OldestExpired(ctx, "billing", time.Now().Add(-time.Hour))
			reads := e.rec.count(isAccountRead)
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
				if !errors.Is(err, cosmosstore.ErrRelaxedConsistency) {
					t.Fatalf("%s: err %v, want ErrRelaxedConsistency", name, err)
				}
				msg := err.Error()
				if !strings.Contains(msg, "Strong") || !strings.Contains(msg, cosmosstore.SettingAllowRelaxedConsistency) || !strings.Contains(msg, tc.account) {
					t.Fatalf("%s: message %q lacks Strong, the level or the setting", name, msg)
				}
			}
			// Rejected before touching the container; retried on each use.
			if n := e.rec.count(isContainerTouch); n != 0 {
				t.Fatalf("%d container requests despite the rejection", n)
			}
			if reads != 4 {
				t.Fatalf("%d account reads, want one per failed use (4)", reads)
			}
		})
	}
}

func TestInitializationRunsOnceAndRetriesAfterFailure(t *testing.T) {
	e := newEnv(t, "Strong")
	s := e.store(t, cosmosstore.Options{})
	ctx := context.Background()

	// The first account read fails with 503; the use fails, not as a
	// consistency rejection.
	var failed sync.Once
	e.rec.setHooks(func(req *http.Request) (*http.Response, error) {
		var resp *http.Response
		if req.URL.Path == "/" && strings.Contains(req.Header.Get("User-Agent"), "cosmosstore") {
			failed.Do(func() { resp = synth(req, http.StatusServiceUnavailable, nil, `{"code":"ServiceUnavailable"}`) })
		}
		return resp, nil
	}, nil)
	k := inbox.NewKey("billing", "once")
	if _, err := s.HasProcessed(ctx, k); err == nil || errors.Is(err, cosmosstore.ErrRelaxedConsistency) {
		t.Fatalf("first use: err %v, want a transient failure", err)
	}

	// Concurrent later uses share one successful attempt.
	gate := make(chan struct{})
	e.rec.setHooks(func(req *http.Request) (*http.Response, error) {
		if req.URL.Path == "/" && strings.Contains(req.Header.Get("User-Agent"), "cosmosstore") {
			<-gate
		}
		return nil, nil
	}, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.RecordProcessed(ctx, inbox.NewKey("billing", fmt.Sprintf("c-%d", i)))
		}()
	}
	time.Sleep(100 * time.Millisecond)
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
	if n := e.rec.count(isAccountRead); n != 2 {
		t.Fatalf("%d account reads, want 2 (one failed, one shared success)", n)
	}
	if n := e.rec.count(func(s sent) bool { return s.Method == http.MethodGet && strings.HasSuffix(s.Path, "/colls/inbox") }); n != 1 {
		t.Fatalf("%d container reads, want 1", n)
	}
}

// A caller whose context ends while initialization runs gets its context
// error; the attempt goes on for the others.
func TestInitializationSurvivesACancelledFirstCaller(t *testing.T) {
	e := newEnv(t, "Strong")
	s := e.store(t, cosmosstore.Options{})
	gate := make(chan struct{})
	e.rec.setHooks(func(req *http.Request) (*http.Response, error) {
		if req.URL.Path == "/" && strings.Contains(req.Header.Get("User-Agent"), "cosmosstore") {
			<-gate
		}
		return nil, nil
	}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.HasProcessed(ctx, inbox.NewKey("billing", "x")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want DeadlineExceeded", err)
	}
	close(gate)
	if _, err := s.HasProcessed(context.Background(), inbox.NewKey("billing", "x")); err != nil {
		t.Fatal(err)
	}
	if n := e.rec.count(isAccountRead); n != 1 {
		t.Fatalf("%d account reads, want 1", n)
	}
}

func TestContainerProvisioning(t *testing.T) {
	e := newEnv(t, "Session")
	ctx := context.Background()
	k := inbox.NewKey("billing", "m")

	// Off: a missing container fails every use, naming the setting...
	s := e.store(t, cosmosstore.Options{AllowRelaxedConsistency: true, AutoCreateContainer: boolPtr(false), DatabaseID: "pre", ContainerID: "provisioned"})
	_, err := s.HasProcessed(ctx, k)
	if !errors.Is(err, cosmosstore.ErrContainer) || !strings.Contains(err.Error(), cosmosstore.SettingAutoCreateContainer) {
		t.Fatalf("err %v", err)
	}
	if n := e.rec.count(func(s sent) bool { return s.Method == http.MethodPost }); n != 0 {
		t.Fatalf("%d creates with AutoCreateContainer off", n)
	}
	// ...until it is provisioned, then the next use succeeds.
	if _, err := e.account.Client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "pre"}, nil); err != nil {
		t.Fatal(err)
	}
	db, _ := e.account.Client.NewDatabase("pre")
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
	w := e.store(t, cosmosstore.Options{AllowRelaxedConsistency: true, DatabaseID: "pre", ContainerID: "wrongpk"})
	if _, err := w.HasProcessed(ctx, k); !errors.Is(err, cosmosstore.ErrContainer) || !strings.Contains(err.Error(), "/endpointId") {
		t.Fatalf("err %v", err)
	}
}

// Pre-cancelled operations return the context error before any request.
func TestPreCancelledOperationsSendNothing(t *testing.T) {
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
	if n := len(e.rec.sent()); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

func TestInvalidKeysAreRejected(t *testing.T) {
	e := newEnv(t, "Session")
	s := e.store(t, cosmosstore.Options{AllowRelaxedConsistency: true})
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
	if n := len(e.rec.sent()); n != 0 {
		t.Fatalf("%d requests for invalid keys", n)
	}
}
