package cosmosstore_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmostest"
	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/inbox/cosmosstore"
	"github.com/nimbus-go/functions-subscriber/internal/inbox/inboxtest"
)

var forbiddenSQL = []string{"TOP ", "ORDER BY", "DISTINCT", "GROUP BY", "COUNT(", "MIN(", "MAX(", "SUM(", "AVG(", "OFFSET"}

func mustGatewayServable(t *testing.T, q string) {
	t.Helper()
	up := strings.ToUpper(q)
	for _, kw := range forbiddenSQL {
		if strings.Contains(up, kw) {
			t.Fatalf("query %q contains %s, which the gateway cannot serve cross-partition", q, kw)
		}
	}
}

// recordMany records n keys of endpoint with 16 workers.
func recordMany(t testing.TB, s inbox.Store, endpoint, prefix string, n int) []inbox.Key {
	t.Helper()
	keys := make([]inbox.Key, n)
	for i := range keys {
		keys[i] = inbox.NewKey(endpoint, fmt.Sprintf("%s-%d", prefix, i))
	}
	var wg sync.WaitGroup
	var failed atomic.Value
	next := atomic.Int64{}
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := s.RecordProcessed(context.Background(), keys[i]); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		t.Fatalf("recording: %v", err)
	}
	return keys
}

// One purge reads one bounded page with a gateway-servable query and
// deletes its rows with their ETags.
func TestPurgeReadsOneBoundedPageWithAGatewayServableQuery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Session")
	clock := inboxtest.NewClock(inboxtest.Epoch.Add(123 * time.Millisecond))
	s := e.store(t, cosmosstore.Options{StoreOptions: cosmos.StoreOptions{AllowRelaxedConsistency: true, Now: clock.Now}, PurgeBatchSize: 3})
	recordMany(t, s, "billing", "old", 7)
	recordMany(t, s, "shipping", "old", 2)
	clock.Advance(time.Hour)
	e.Rec.Reset()

	n, err := s.PurgeExpired(context.Background(), "billing", clock.Now())
	if err != nil || n != 3 {
		t.Fatalf("PurgeExpired = %d, %v; want 3", n, err)
	}
	var queries, deletes []cosmostest.Sent
	for _, x := range e.Rec.Sent() {
		switch {
		case cosmostest.IsQuery(x):
			queries = append(queries, x)
		case cosmostest.IsDocDelete(x):
			deletes = append(deletes, x)
		}
	}
	if len(queries) != 1 {
		t.Fatalf("%d query requests, want one page", len(queries))
	}
	q := queries[0]
	mustGatewayServable(t, q.Query)
	if q.MaxItemCount != "3" || q.CrossPartition != "true" || !strings.Contains(q.Query, "c.endpointId = @endpointId") || !strings.Contains(q.Query, "c._etag") {
		t.Fatalf("query %+v", q)
	}
	if len(deletes) != 3 {
		t.Fatalf("%d deletes, want 3", len(deletes))
	}
	for _, d := range deletes {
		if d.IfMatch == "" || d.Status != http.StatusNoContent {
			t.Fatalf("delete %+v lacks an If-Match ETag or failed", d)
		}
	}

	// OldestExpired's queries are gateway-servable too.
	e.Rec.Reset()
	if _, ok, err := s.OldestExpired(context.Background(), "billing", clock.Now()); err != nil || !ok {
		t.Fatalf("OldestExpired: %v %v", ok, err)
	}
	for _, x := range e.Rec.Sent() {
		if cosmostest.IsQuery(x) {
			mustGatewayServable(t, x.Query)
		}
	}
}

// Rows that change between the purge query and their delete are benign:
// a recreated record survives (412), a vanished one is not counted (404).
func TestPurgeToleratesRacesBetweenQueryAndDelete(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name         string
		recreate     bool
		wantStatus   int
		wantSurvives bool
	}{
		{"recreated record is spared by its ETag", true, http.StatusPreconditionFailed, true},
		{"record deleted meanwhile", false, http.StatusNotFound, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "Session")
			clock := inboxtest.NewClock(inboxtest.Epoch)
			s := e.store(t, cosmosstore.Options{StoreOptions: cosmos.StoreOptions{AllowRelaxedConsistency: true, Now: clock.Now}})
			keys := recordMany(t, s, "billing", "m", 3)
			clock.Advance(time.Hour)
			raw := e.raw(t, e.DB, cosmosstore.DefaultContainerID)
			victim := keys[1]
			recreatedAt := clock.Now().Format("2006-01-02T15:04:05.0000000Z")
			var once sync.Once
			e.Rec.SetHooks(nil, func(req *http.Request, _ *http.Response) {
				if req.Header.Get("Content-Type") != "application/query+json" {
					return
				}
				once.Do(func() {
					ctx := context.Background()
					pk := azcosmos.NewPartitionKeyString(victim.ID)
					if _, err := raw.DeleteItem(ctx, pk, victim.ID, nil); err != nil {
						t.Errorf("raw delete: %v", err)
					}
					if tc.recreate {
						cosmostest.PutRaw(t, raw, map[string]any{"id": victim.ID, "endpointId": victim.EndpointID, "messageId": victim.MessageID, "createdAtUtc": recreatedAt})
					}
				})
			})
			n, err := s.PurgeExpired(context.Background(), "billing", clock.Now())
			if err != nil || n != 2 {
				t.Fatalf("PurgeExpired = %d, %v; want 2", n, err)
			}
			statuses := map[int]int{}
			for _, x := range e.Rec.Sent() {
				if cosmostest.IsDocDelete(x) {
					statuses[x.Status]++
				}
			}
			if statuses[http.StatusNoContent] != 2 || statuses[tc.wantStatus] != 1 {
				t.Fatalf("delete statuses %v", statuses)
			}
			e.Rec.SetHooks(nil, nil)
			ok, err := s.HasProcessed(context.Background(), victim)
			if err != nil || ok != tc.wantSurvives {
				t.Fatalf("victim present = %v (%v), want %v", ok, err, tc.wantSurvives)
			}
			if tc.recreate {
				if got := cosmostest.RawDoc(t, raw, victim.ID)["createdAtUtc"]; got != recreatedAt {
					t.Fatalf("recreated record has createdAtUtc %v", got)
				}
			}
		})
	}
}

// Records NimBus's .NET writer stored with trimmed fractions are purged
// exactly, including in the cutoff's own second.
func TestPurgeHandlesTrimmedTimestampsInTheCutoffSecond(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Session")
	s := e.store(t, cosmosstore.Options{StoreOptions: cosmos.StoreOptions{AllowRelaxedConsistency: true}})
	ctx := context.Background()
	if _, err := s.HasProcessed(ctx, inbox.NewKey("init", "m")); err != nil { // creates the container
		t.Fatal(err)
	}
	raw := e.raw(t, e.DB, cosmosstore.DefaultContainerID)
	stored := []string{
		"2029-12-31T23:59:59.9Z",
		"2030-01-01T00:00:00Z",
		"2030-01-01T00:00:00.2Z",
		"2030-01-01T00:00:00.25Z",
		"2030-01-01T00:00:00.4999999Z",
		"2030-01-01T00:00:00.5Z",
		"2030-01-01T00:00:00.5000000Z",
		"2030-01-01T00:00:00.5000001Z",
		"2030-01-01T00:00:00.6Z",
		"2030-01-01T00:00:01Z",
	}
	cases := []struct {
		endpoint string
		cutoff   time.Time
		expired  int // the first n of stored
	}{
		{"ep-half", time.Date(2030, 1, 1, 0, 0, 0, 500_000_000, time.UTC), 5},
		{"ep-half-plus-tick", time.Date(2030, 1, 1, 0, 0, 0, 500_000_100, time.UTC), 7},
		{"ep-second", time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), 1},
		{"ep-after", time.Date(2030, 1, 1, 0, 0, 1, 1, time.UTC), 10},
	}
	for _, tc := range cases {
		t.Run(tc.endpoint, func(t *testing.T) {
			keys := make([]inbox.Key, len(stored))
			for i, ts := range stored {
				keys[i] = inbox.NewKey(tc.endpoint, fmt.Sprint(i))
				cosmostest.PutRaw(t, raw, map[string]any{"id": keys[i].ID, "endpointId": tc.endpoint, "messageId": keys[i].MessageID, "createdAtUtc": ts})
			}
			oldest, ok, err := s.OldestExpired(ctx, tc.endpoint, tc.cutoff)
			if err != nil || !ok || !oldest.Equal(time.Date(2029, 12, 31, 23, 59, 59, 900_000_000, time.UTC)) {
				t.Fatalf("OldestExpired = %v, %v, %v", oldest, ok, err)
			}
			n, err := s.PurgeExpired(ctx, tc.endpoint, tc.cutoff)
			if err != nil || n != tc.expired {
				t.Fatalf("PurgeExpired = %d, %v; want %d", n, err, tc.expired)
			}
			for i, k := range keys {
				ok, err := s.HasProcessed(ctx, k)
				if err != nil || ok != (i >= tc.expired) {
					t.Errorf("%s present = %v (%v), want %v", stored[i], ok, err, i >= tc.expired)
				}
			}
			if _, ok, err := s.OldestExpired(ctx, tc.endpoint, tc.cutoff); err != nil || ok {
				t.Fatalf("OldestExpired after the purge = %v, %v", ok, err)
			}
		})
	}
}

// A 2,500-record backlog of one endpoint drains completely through the
// Cleaner while another endpoint's expired records and the endpoint's fresh
// ones stay.
func TestCleanerDrainsABacklogBesideAnotherEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Session")
	clock := inboxtest.NewClock(inboxtest.Epoch)
	// 2,500 expired records in pages of the default 100; under -short 250
	// in pages of 10: the same 25 full pages and an empty one.
	backlog, opts := 2500, cosmosstore.Options{StoreOptions: cosmos.StoreOptions{AllowRelaxedConsistency: true, Now: clock.Now}}
	if testing.Short() {
		backlog, opts.PurgeBatchSize = 250, 10
	}
	s := e.store(t, opts)
	recordMany(t, s, "billing", "old", backlog)
	recordMany(t, s, "shipping", "old", 300)
	recordMany(t, s, "billing ", "old", 10)
	clock.Advance(8 * 24 * time.Hour)
	recordMany(t, s, "billing", "fresh", 20)
	e.Rec.Reset()

	c := inbox.Cleaner{Store: s, EndpointID: "billing", Retention: 7 * 24 * time.Hour}
	rep, err := c.Run(context.Background(), clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Purged != backlog || rep.Batches != 26 || !rep.Drained || rep.StoppedOnBudget || !rep.LagKnown || rep.Lag != 0 {
		t.Fatalf("report %+v", rep)
	}
	raw := e.raw(t, e.DB, cosmosstore.DefaultContainerID)
	for ep, want := range map[string]int{"billing": 20, "shipping": 300, "billing ": 10} {
		if got := countEndpoint(t, raw, ep); got != want {
			t.Errorf("%q has %d records, want %d", ep, got, want)
		}
	}
	for _, x := range e.Rec.Sent() {
		if cosmostest.IsQuery(x) {
			mustGatewayServable(t, x.Query)
		}
	}
	if q := e.Rec.Count(cosmostest.IsQuery); q != 26 {
		t.Errorf("%d query requests for 26 batches", q)
	}
}

// A Cleaner stopped by its budget reports the lag from OldestExpired.
func TestCleanerBudgetStopReportsLagFromCosmos(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Session")
	clock := inboxtest.NewClock(inboxtest.Epoch)
	s := e.store(t, cosmosstore.Options{StoreOptions: cosmos.StoreOptions{AllowRelaxedConsistency: true, Now: clock.Now}, PurgeBatchSize: 10})
	var created []time.Time
	for i := range 6 {
		recordMany(t, s, "billing", fmt.Sprintf("t%d", i), 10)
		created = append(created, clock.Now())
		clock.Advance(37 * time.Minute)
	}
	now := clock.Now().Add(24 * time.Hour)
	budget := &struct{ now time.Time }{now: time.Unix(0, 0)}
	var mu sync.Mutex
	e.Rec.SetHooks(func(req *http.Request) (*http.Response, error) {
		if req.Header.Get("Content-Type") == "application/query+json" {
			mu.Lock()
			budget.now = budget.now.Add(time.Minute)
			mu.Unlock()
		}
		return nil, nil
	}, nil)
	c := inbox.Cleaner{Store: s, EndpointID: "billing", Retention: time.Hour, Budget: 2 * time.Minute, Clock: func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return budget.now
	}}
	rep, err := c.Run(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.StoppedOnBudget || rep.Purged != 20 || !rep.LagKnown {
		t.Fatalf("report %+v", rep)
	}
	// The oldest left is one of the creation instants; which one depends on
	// the (unordered) purge, so find it independently.
	raw := e.raw(t, e.DB, cosmosstore.DefaultContainerID)
	oldest := time.Time{}
	for i, at := range created {
		for j := range 10 {
			k := inbox.NewKey("billing", fmt.Sprintf("t%d-%d", i, j))
			if _, err := raw.ReadItem(context.Background(), azcosmos.NewPartitionKeyString(k.ID), k.ID, nil); err == nil && (oldest.IsZero() || at.Before(oldest)) {
				oldest = at
			}
		}
	}
	if !rep.Oldest.Equal(oldest) || rep.Lag != rep.Cutoff.Sub(oldest) {
		t.Fatalf("oldest %v lag %v, want %v and %v", rep.Oldest, rep.Lag, oldest, rep.Cutoff.Sub(oldest))
	}
}

func TestOldestExpiredIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Session")
	first := inboxtest.Epoch.Add(1234567 * time.Microsecond)
	clock := inboxtest.NewClock(first)
	s := e.store(t, cosmosstore.Options{StoreOptions: cosmos.StoreOptions{AllowRelaxedConsistency: true, Now: clock.Now}})
	for i := range 12 {
		recordMany(t, s, "billing", fmt.Sprint(i), 3)
		clock.Advance(time.Duration(i+1) * 41 * time.Minute)
	}
	ctx := context.Background()
	cases := []struct {
		cutoff time.Time
		want   time.Time
		ok     bool
	}{
		{first, time.Time{}, false},
		{first.Add(100 * time.Nanosecond), first.Truncate(100 * time.Nanosecond), true},
		{clock.Now().Add(30 * 24 * time.Hour), first.Truncate(100 * time.Nanosecond), true},
	}
	for _, tc := range cases {
		e.Rec.Reset()
		got, ok, err := s.OldestExpired(ctx, "billing", tc.cutoff)
		if err != nil || ok != tc.ok || !got.Equal(tc.want) {
			t.Fatalf("OldestExpired(%v) = %v, %v, %v; want %v, %v", tc.cutoff, got, ok, err, tc.want, tc.ok)
		}
		age := tc.cutoff.Sub(tc.want)
		bound := 1
		if tc.ok {
			bound = int(2*math.Ceil(math.Log2(max(age.Minutes(), 1)))) + 9
		}
		if q := e.Rec.Count(cosmostest.IsQuery); q > bound {
			t.Fatalf("cutoff %v: %d queries, bound %d", tc.cutoff, q, bound)
		}
	}
}

// A cross-partition query may answer an empty page with a continuation
// (a partition without matches); the purge reads on to the first page with
// rows instead of reporting 0, which would end a Cleaner run early.
func TestPurgeReadsPastEmptyCrossPartitionPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Session")
	clock := inboxtest.NewClock(inboxtest.Epoch)
	s := e.store(t, cosmosstore.Options{StoreOptions: cosmos.StoreOptions{AllowRelaxedConsistency: true, Now: clock.Now}, PurgeBatchSize: 5})
	recordMany(t, s, "billing", "m", 3)
	clock.Advance(time.Hour)
	var queries atomic.Int32
	e.Rec.SetHooks(func(req *http.Request) (*http.Response, error) {
		if req.Header.Get("Content-Type") != "application/query+json" {
			return nil, nil
		}
		switch queries.Add(1) {
		case 1, 2: // two empty partitions
			return cosmostest.Synth(req, http.StatusOK, map[string]string{"x-ms-continuation": "partition-token", "x-ms-item-count": "0"}, `{"Documents":[],"_count":0}`), nil
		default: // the server knows nothing of the synthetic token
			if req.Header.Get("x-ms-continuation") != "partition-token" {
				t.Errorf("page request without the previous page's continuation")
			}
			req.Header.Del("x-ms-continuation")
			return nil, nil
		}
	}, nil)
	n, err := s.PurgeExpired(context.Background(), "billing", clock.Now())
	if err != nil || n != 3 {
		t.Fatalf("PurgeExpired = %d, %v; want 3", n, err)
	}
	if q := queries.Load(); q != 3 {
		t.Fatalf("%d page requests, want 3", q)
	}
}
