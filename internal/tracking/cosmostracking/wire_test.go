package cosmostracking_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmostest"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/tracking"
	"github.com/nimbus-go/functions-subscriber/internal/tracking/cosmostracking"
)

// These cases port NimBus's CosmosDbClientGuardedWriteTests,
// CosmosDbClientTryCompleteTests and CosmosDbClientRetentionTests: they
// pin the requests each write sends, on the local server, with failures
// injected at the HTTP transport.

var ctx = context.Background()

func row(endpointID, eventID, sessionID string, t message.Type, lastID, parent string) tracking.UnresolvedEvent {
	e := tracking.UnresolvedEvent{
		EventID: eventID, SessionID: sessionID, EndpointID: endpointID, UpdatedAt: time.Now().UTC(),
		EnqueuedTimeUtc: time.Now().UTC(), EndpointRole: tracking.Subscriber, MessageType: t,
		EventTypeID: tracking.Str("OrderPlaced"), LastMessageID: tracking.Str(lastID), MessageContent: &message.Content{},
	}
	if parent != "" {
		e.ParentMessageID = tracking.Str(parent)
	}
	return e
}

// fixture is a store on a fresh local server, with endpoint "billing"
// already initialized so that recorded traffic is the writes' own.
type fixture struct {
	env *cosmostest.Env
	s   *cosmostracking.Store
	raw *azcosmos.ContainerClient
}

func newFixture(t *testing.T, o cosmostracking.Options) *fixture {
	t.Helper()
	e := cosmostest.NewEnv(t, "Strong")
	s := newStore(t, e, o)
	if _, err := s.GetEventByID(ctx, "billing", "warm-up"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetMessage(ctx, "warm-up", "warm-up"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetMessageAudits(ctx, "warm-up"); err != nil {
		t.Fatal(err)
	}
	e.Rec.Reset()
	return &fixture{env: e, s: s, raw: e.Raw(t, e.DB, "billing")}
}

func docs(f *fixture) []cosmostest.Sent {
	var out []cosmostest.Sent
	for _, s := range f.env.Rec.Sent() {
		if cosmostest.IsDocRequest(s) {
			out = append(out, s)
		}
	}
	return out
}

func isWrite(s cosmostest.Sent) bool {
	return cosmostest.IsDocCreate(s) || cosmostest.IsDocUpsert(s) || cosmostest.IsDocReplace(s) || cosmostest.IsDocPatch(s)
}

func count(f *fixture, match func(cosmostest.Sent) bool) int { return f.env.Rec.Count(match) }

// answer makes the recorder answer the nth (1-based) request matching
// match with status, instead of sending it; every=true answers all of them
// from the nth on.
func answer(f *fixture, match func(cosmostest.Sent) bool, n int, every bool, status int, headers map[string]string) *atomic.Int32 {
	var seen atomic.Int32
	f.env.Rec.SetHooks(func(req *http.Request) (*http.Response, error) {
		s := cosmostest.Sent{Method: req.Method, Path: req.URL.Path, Upsert: strings.EqualFold(req.Header.Get("x-ms-documentdb-is-upsert"), "true")}
		if strings.HasPrefix(req.Header.Get("Content-Type"), "application/query+json") {
			s.Query = "query"
		}
		if !match(s) {
			return nil, nil
		}
		k := int(seen.Add(1))
		if k == n || (every && k > n) {
			return cosmostest.Synth(req, status, headers, `{"code":"injected","message":"injected by the test"}`), nil
		}
		return nil, nil
	}, nil)
	return &seen
}

func mustUpload(t *testing.T, s tracking.Store, key tracking.Key, status tracking.ResolutionStatus, r tracking.UnresolvedEvent, want bool) {
	t.Helper()
	got, err := s.Upload(ctx, key, status, r)
	if err != nil {
		t.Fatalf("Upload %s: %v", status, err)
	}
	if got != want {
		t.Fatalf("Upload %s applied=%v, want %v", status, got, want)
	}
}

func TestAStaleRequestCopyIsRefusedWithoutWriting(t *testing.T) {
	t.Parallel()
	f := newFixture(t, cosmostracking.Options{})
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Completed, row("billing", "e1", "s1", message.ResolutionResponse, "rsp-1", "req-1"), true)
	f.env.Rec.Reset()
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Pending, row("billing", "e1", "s1", message.EventRequest, "req-late", ""), false)
	if n := count(f, cosmostest.IsDocRead); n != 1 {
		t.Errorf("%d reads, want 1", n)
	}
	if n := count(f, isWrite); n != 0 {
		t.Errorf("%d writes, want 0", n)
	}
}

func TestAGuardedDeferralTakesTheSamePath(t *testing.T) {
	t.Parallel()
	f := newFixture(t, cosmostracking.Options{})
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Completed, row("billing", "e1", "s1", message.ResolutionResponse, "rsp-1", "req-1"), true)
	f.env.Rec.Reset()
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Deferred, row("billing", "e1", "s1", message.DeferralResponse, "def-late", ""), false)
	if r, w := count(f, cosmostest.IsDocRead), count(f, isWrite); r != 1 || w != 0 {
		t.Errorf("%d reads, %d writes; want 1, 0", r, w)
	}
}

func TestARequestStageReplaceCarriesTheReadETag(t *testing.T) {
	t.Parallel()
	f := newFixture(t, cosmostracking.Options{})
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Pending, row("billing", "e1", "s1", message.EventRequest, "m1", ""), true)
	etag := cosmostest.RawDoc(t, f.raw, "e1_s1")["_etag"].(string)
	f.env.Rec.Reset()
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Pending, row("billing", "e1", "s1", message.EventRequest, "m2", ""), true)
	var puts []cosmostest.Sent
	for _, s := range docs(f) {
		if cosmostest.IsDocReplace(s) {
			puts = append(puts, s)
		}
	}
	if len(puts) != 1 {
		t.Fatalf("%d replaces, want 1 (sent %+v)", len(puts), docs(f))
	}
	if puts[0].IfMatch != etag {
		t.Errorf("If-Match %q, want the read ETag %q", puts[0].IfMatch, etag)
	}
	if !strings.Contains(puts[0].Prefer, "return=minimal") {
		t.Errorf("Prefer %q: the content response is not turned off", puts[0].Prefer)
	}
	if n := count(f, func(s cosmostest.Sent) bool { return cosmostest.IsDocCreate(s) || cosmostest.IsDocUpsert(s) }); n != 0 {
		t.Errorf("%d creates/upserts besides the replace", n)
	}
	doc := cosmostest.RawDoc(t, f.raw, "e1_s1")
	if got := doc["event"].(map[string]any)["LastMessageId"]; got != "m2" {
		t.Errorf("event.LastMessageId %v, want m2", got)
	}
}

func TestAMissingRowIsCreated(t *testing.T) {
	t.Parallel()
	f := newFixture(t, cosmostracking.Options{})
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Pending, row("billing", "e1", "s1", message.EventRequest, "m1", ""), true)
	if r, c, o := count(f, cosmostest.IsDocRead), count(f, cosmostest.IsDocCreate), count(f, func(s cosmostest.Sent) bool { return cosmostest.IsDocUpsert(s) || cosmostest.IsDocReplace(s) }); r != 1 || c != 1 || o != 0 {
		t.Errorf("reads %d creates %d upserts/replaces %d; want 1, 1, 0", r, c, o)
	}
}

func TestAConflictingCreateIsReRead(t *testing.T) {
	t.Parallel()
	f := newFixture(t, cosmostracking.Options{})
	// Another writer creates the row between our read (404) and create.
	var once sync.Once
	f.env.Rec.SetHooks(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/docs") && !strings.EqualFold(req.Header.Get("x-ms-documentdb-is-upsert"), "true") &&
			!strings.HasPrefix(req.Header.Get("Content-Type"), "application/query+json") {
			var resp *http.Response
			once.Do(func() {
				cosmostest.PutRaw(t, f.raw, map[string]any{"id": "e1_s1", "status": "Pending", "sessionId": "s1", "deleted": false, "ttl": -1,
					"event": map[string]any{"EventId": "e1", "SessionId": "s1", "MessageType": "EventRequest", "LastMessageId": "m0", "UpdatedAt": "2026-01-01T00:00:00Z", "EnqueuedTimeUtc": "2026-01-01T00:00:00Z"}})
				resp = cosmostest.Synth(req, http.StatusConflict, nil, `{"code":"Conflict"}`)
			})
			return resp, nil
		}
		return nil, nil
	}, nil)
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Pending, row("billing", "e1", "s1", message.EventRequest, "m1", ""), true)
	if r, rp := count(f, cosmostest.IsDocRead), count(f, cosmostest.IsDocReplace); r != 2 || rp != 1 {
		t.Errorf("reads %d replaces %d; want 2, 1", r, rp)
	}
	if got := cosmostest.RawDoc(t, f.raw, "e1_s1")["event"].(map[string]any)["LastMessageId"]; got != "m1" {
		t.Errorf("LastMessageId %v, want m1", got)
	}
}

func TestALostETagRaceIsReReadAndRetried(t *testing.T) {
	t.Parallel()
	f := newFixture(t, cosmostracking.Options{})
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Pending, row("billing", "e1", "s1", message.EventRequest, "m1", ""), true)
	f.env.Rec.Reset()
	answer(f, cosmostest.IsDocReplace, 1, false, http.StatusPreconditionFailed, nil)
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Pending, row("billing", "e1", "s1", message.EventRequest, "m2", ""), true)
	if r, rp := count(f, cosmostest.IsDocRead), count(f, cosmostest.IsDocReplace); r != 2 || rp != 2 {
		t.Errorf("reads %d replaces %d; want 2, 2", r, rp)
	}
	for _, s := range docs(f) {
		if cosmostest.IsDocReplace(s) && s.IfMatch == "" {
			t.Error("a replace without If-Match")
		}
	}
}

func TestThreeLostRacesAreReportedAsTransient(t *testing.T) {
	t.Parallel()
	f := newFixture(t, cosmostracking.Options{})
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Pending, row("billing", "e1", "s1", message.EventRequest, "m1", ""), true)
	f.env.Rec.Reset()
	answer(f, cosmostest.IsDocReplace, 1, true, http.StatusPreconditionFailed, nil)
	applied, err := f.s.Upload(ctx, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Pending, row("billing", "e1", "s1", message.EventRequest, "m2", ""))
	if applied || !errors.Is(err, tracking.ErrConcurrentUpdate) || !tracking.IsTransient(err) {
		t.Fatalf("applied=%v err=%v; want false, a transient ErrConcurrentUpdate", applied, err)
	}
	if r := count(f, cosmostest.IsDocRead); r != 3 {
		t.Errorf("%d reads, want 3", r)
	}
}

func TestARowThatVanishesBeforeTheReplaceIsCreated(t *testing.T) {
	t.Parallel()
	f := newFixture(t, cosmostracking.Options{})
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Pending, row("billing", "e1", "s1", message.EventRequest, "m1", ""), true)
	f.env.Rec.Reset()
	f.env.Rec.SetHooks(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/docs/") {
			f.env.Rec.SetHooks(nil, nil)
			if _, err := f.raw.DeleteItem(ctx, azcosmos.NewPartitionKeyString("e1_s1"), "e1_s1", nil); err != nil {
				t.Error(err)
			}
		}
		return nil, nil
	}, nil)
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Pending, row("billing", "e1", "s1", message.EventRequest, "m2", ""), true)
	if r, c := count(f, cosmostest.IsDocRead), count(f, cosmostest.IsDocCreate); r != 2 || c != 1 {
		t.Errorf("reads %d creates %d; want 2, 1", r, c)
	}
}

func TestAnUnparseableRowStatusFailsClosed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, cosmostracking.Options{})
	cosmostest.PutRaw(t, f.raw, map[string]any{"id": "e1_s1", "status": "Bogus", "sessionId": "s1", "event": map[string]any{"EventId": "e1"}})
	f.env.Rec.Reset()
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Pending, row("billing", "e1", "s1", message.EventRequest, "m1", ""), false)
	if w := count(f, isWrite); w != 0 {
		t.Errorf("%d writes, want 0", w)
	}
}

func TestAnUnguardedWriteStillUpsertsWithoutReading(t *testing.T) {
	t.Parallel()
	f := newFixture(t, cosmostracking.Options{})
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Completed, row("billing", "e1", "s1", message.ResolutionResponse, "rsp", "req"), true)
	f.env.Rec.Reset()
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Pending, row("billing", "e1", "s1", message.Unknown, "seed", ""), true)
	for _, st := range []tracking.ResolutionStatus{tracking.Failed, tracking.DeadLettered, tracking.Unsupported, tracking.Completed, tracking.Skipped} {
		mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e2", SessionID: "s1"}, st, row("billing", "e2", "s1", message.ErrorResponse, "x", ""), true)
	}
	if r, u, o := count(f, cosmostest.IsDocRead), count(f, cosmostest.IsDocUpsert), count(f, func(s cosmostest.Sent) bool { return cosmostest.IsDocCreate(s) || cosmostest.IsDocReplace(s) }); r != 0 || u != 6 || o != 0 {
		t.Errorf("reads %d upserts %d creates/replaces %d; want 0, 6, 0", r, u, o)
	}
	for _, s := range docs(f) {
		if cosmostest.IsDocUpsert(s) && !strings.Contains(s.Prefer, "return=minimal") {
			t.Errorf("upsert with Prefer %q", s.Prefer)
		}
	}
}

func TestGuardedWriteConcurrencyNeverRefusesARefresh(t *testing.T) {
	t.Parallel()
	f := newFixture(t, cosmostracking.Options{MaxGuardAttempts: 50})
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Pending, row("billing", "e1", "s1", message.EventRequest, "m0", ""), true)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := f.s.Upload(ctx, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Pending, row("billing", "e1", "s1", message.EventRequest, "m"+string(rune('a'+i)), ""))
			if err == nil && !ok {
				err = errors.New("a request-stage refresh was refused")
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestTheLocalServerEnforcesIfMatch(t *testing.T) {
	t.Parallel()
	// The conditional writes' tests rely on it.
	f := newFixture(t, cosmostracking.Options{})
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Failed, row("billing", "e1", "s1", message.ErrorResponse, "m1", ""), true)
	stale := azcore.ETag(`"not-the-etag"`)
	_, err := f.raw.ReplaceItem(ctx, azcosmos.NewPartitionKeyString("e1_s1"), "e1_s1", []byte(`{"id":"e1_s1"}`), &azcosmos.ItemOptions{IfMatchEtag: &stale})
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusPreconditionFailed {
		t.Fatalf("stale If-Match replace: %v, want 412", err)
	}
}

// TryCompletePendingMessage.

func TestAMatchingPendingRowIsReplacedConditionallyOnTheReadETag(t *testing.T) {
	t.Parallel()
	f := newFixture(t, cosmostracking.Options{UnresolvedRetentionDays: 180})
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Pending, row("billing", "e1", "s1", message.EventRequest, "stale", ""), true)
	etag := cosmostest.RawDoc(t, f.raw, "e1_s1")["_etag"].(string)
	f.env.Rec.Reset()
	done := row("billing", "e1", "s1", message.ResolutionResponse, "rsp-1", "stale")
	ok, err := f.s.TryCompletePendingMessage(ctx, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Str("stale"), done)
	if err != nil || !ok {
		t.Fatalf("%v, %v", ok, err)
	}
	var put *cosmostest.Sent
	for _, s := range docs(f) {
		if cosmostest.IsDocReplace(s) {
			put = &s
		}
	}
	if put == nil || put.IfMatch != etag || count(f, cosmostest.IsDocRead) != 1 || count(f, isWrite) != 1 {
		t.Fatalf("requests %+v; want one read and one replace If-Match %s", docs(f), etag)
	}
	doc := cosmostest.RawDoc(t, f.raw, "e1_s1")
	if doc["id"] != "e1_s1" || doc["status"] != "Completed" || doc["deleted"] != true || doc["ttl"] != float64(cosmostracking.TerminalTTL) ||
		doc["event"].(map[string]any)["LastMessageId"] != "rsp-1" {
		t.Errorf("document %v", doc)
	}
}

func TestTryCompleteRefusalsDoNotWrite(t *testing.T) {
	t.Parallel()
	f := newFixture(t, cosmostracking.Options{})
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "other", SessionID: "s1"}, tracking.Pending, row("billing", "other", "s1", message.EventRequest, "actual", ""), true)
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "done", SessionID: "s1"}, tracking.Completed, row("billing", "done", "s1", message.ResolutionResponse, "rsp", ""), true)
	f.env.Rec.Reset()
	for _, c := range []struct{ event, expected string }{{"other", "expected"}, {"done", "rsp"}, {"missing", "x"}} {
		ok, err := f.s.TryCompletePendingMessage(ctx, tracking.Key{EndpointID: "billing", EventID: c.event, SessionID: "s1"}, tracking.Str(c.expected), row("billing", c.event, "s1", message.ResolutionResponse, "new", ""))
		if err != nil || ok {
			t.Errorf("%s: %v, %v; want false, nil", c.event, ok, err)
		}
	}
	if r, w := count(f, cosmostest.IsDocRead), count(f, isWrite); r != 3 || w != 0 {
		t.Errorf("reads %d writes %d; want 3, 0", r, w)
	}
	if g, _ := f.s.GetEventByID(ctx, "billing", "missing_s1"); g != nil {
		t.Error("a missing row was created")
	}
}

func TestALostCompareAndSwapIsRefusedAndNotRetried(t *testing.T) {
	t.Parallel()
	f := newFixture(t, cosmostracking.Options{})
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Pending, row("billing", "e1", "s1", message.EventRequest, "stale", ""), true)
	f.env.Rec.Reset()
	answer(f, cosmostest.IsDocReplace, 1, true, http.StatusPreconditionFailed, nil)
	ok, err := f.s.TryCompletePendingMessage(ctx, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Str("stale"), row("billing", "e1", "s1", message.ResolutionResponse, "rsp", ""))
	if err != nil || ok {
		t.Fatalf("%v, %v; want false, nil", ok, err)
	}
	if r, rp := count(f, cosmostest.IsDocRead), count(f, cosmostest.IsDocReplace); r != 1 || rp != 1 {
		t.Errorf("reads %d replaces %d; want 1, 1", r, rp)
	}
}

// Failures are errors, classified for the caller.

func TestStoreFailuresAreClassifiedErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		status    int
		headers   map[string]string
		transient bool
		throttled bool
		after     time.Duration
	}{
		{"throttled", http.StatusTooManyRequests, map[string]string{"x-ms-retry-after-ms": "1500"}, true, true, 1500 * time.Millisecond},
		{"unavailable", http.StatusServiceUnavailable, nil, true, false, 0},
		{"bad request", http.StatusBadRequest, nil, false, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, cosmostracking.Options{})
			answer(f, cosmostest.IsDocRead, 1, true, c.status, c.headers)
			applied, err := f.s.Upload(ctx, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Pending, row("billing", "e1", "s1", message.EventRequest, "m1", ""))
			if applied || err == nil {
				t.Fatalf("applied=%v err=%v; want an error", applied, err)
			}
			var se *tracking.StoreError
			if !errors.As(err, &se) || tracking.IsTransient(err) != c.transient || tracking.IsThrottled(err) != c.throttled || tracking.RetryAfter(err) != c.after {
				t.Fatalf("err %v: transient %v throttled %v after %v", err, tracking.IsTransient(err), tracking.IsThrottled(err), tracking.RetryAfter(err))
			}
			f.env.Rec.SetHooks(nil, nil)
			answer(f, cosmostest.IsDocUpsert, 1, true, c.status, c.headers)
			if _, err := f.s.Upload(ctx, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Failed, row("billing", "e1", "s1", message.ErrorResponse, "m1", "")); tracking.IsTransient(err) != c.transient || err == nil {
				t.Fatalf("unguarded write: %v", err)
			}
			f.env.Rec.SetHooks(nil, nil)
			answer(f, cosmostest.IsDocRead, 1, true, c.status, c.headers)
			if g, err := f.s.GetPendingEvent(ctx, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}); err == nil || g != nil {
				t.Fatalf("a failed lookup answered %v, %v; want an error, never a missing row", g, err)
			}
		})
	}
}

// Documents, TTLs and containers.

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		if !strings.HasPrefix(k, "_") {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func TestTrackingDocumentShape(t *testing.T) {
	t.Parallel()
	f := newFixture(t, cosmostracking.Options{})
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Failed, row("billing", "e1", "s1", message.ErrorResponse, "m1", "req"), true)
	doc := cosmostest.RawDoc(t, f.raw, "e1_s1")
	if got := strings.Join(keys(doc), ","); got != "deleted,event,eventType,id,sessionId,status,ttl" {
		t.Errorf("document fields %s", got)
	}
	if doc["status"] != "Failed" || doc["eventType"] != "OrderPlaced" || doc["sessionId"] != "s1" || doc["deleted"] != false || doc["ttl"] != float64(-1) {
		t.Errorf("document %v", doc)
	}
	ev := doc["event"].(map[string]any)
	want := "CloudEventId,CloudEventSource,CloudEventSubject,CloudEventType,CorrelationId,DeadLetterErrorDescription,DeadLetterReason,EndpointId,EndpointRole,EnqueuedTimeUtc,EventId,EventTypeId,ExpectedBy,ExternalJobId,From,HandoffReason,LastMessageId,MessageContent,MessageType,OriginatingFrom,OriginatingMessageId,ParentMessageId,PendingSubStatus,ProcessingTimeMs,QueueTimeMs,Reason,ResolutionStatus,RetryCount,RetryLimit,SessionId,To,UpdatedAt"
	if got := strings.Join(keys(ev), ","); got != want {
		t.Errorf("event fields\n got %s\nwant %s", got, want)
	}
	if ev["MessageType"] != "ErrorResponse" || ev["EndpointRole"] != "Subscriber" || ev["CorrelationId"] != nil || !strings.HasSuffix(ev["UpdatedAt"].(string), "Z") {
		t.Errorf("event %v", ev)
	}
	if mc := ev["MessageContent"].(map[string]any); strings.Join(keys(mc), ",") != "ErrorContent,EventContent" {
		t.Errorf("MessageContent %v", mc)
	}
}

func TestHistoryAndAuditDocumentShape(t *testing.T) {
	t.Parallel()
	f := newFixture(t, cosmostracking.Options{NewID: func() string { return "a-guid" }})
	if err := f.s.StoreMessage(ctx, tracking.MessageEntity{EventID: "e1", MessageID: "m1", EndpointID: "billing", MessageType: message.EventRequest, MessageContent: &message.Content{}}); err != nil {
		t.Fatal(err)
	}
	m := cosmostest.RawDocPK(t, f.env.Raw(t, f.env.DB, "messages"), "e1", "m1")
	if strings.Join(keys(m), ",") != "endpointId,eventId,id,message,ttl" || m["ttl"] != float64(cosmostracking.MessageTTL) || m["endpointId"] != "billing" {
		t.Errorf("history document %v", m)
	}
	if msg := m["message"].(map[string]any); msg["MessageType"] != "EventRequest" || msg["MessageId"] != "m1" || msg["RetryCount"] != nil {
		t.Errorf("message %v", msg)
	}
	if err := f.s.StoreMessageAudit(ctx, tracking.EventKey{EndpointID: "", EventID: "e1"}, tracking.MessageAudit{AuditorName: tracking.Str("Resolver"), AuditType: tracking.AuditComment, Data: tracking.Str("x")}, ""); err != nil {
		t.Fatal(err)
	}
	a := cosmostest.RawDocPK(t, f.env.Raw(t, f.env.DB, "audits"), "e1", "a-guid")
	if strings.Join(keys(a), ",") != "audit,createdAt,eventId,id,ttl" || a["ttl"] != float64(cosmostracking.AuditTTL) {
		t.Errorf("audit document without tags %v", a)
	}
	if au := a["audit"].(map[string]any); au["AuditType"] != float64(4) || au["AuditorName"] != "Resolver" || au["AccessDenied"] != false {
		t.Errorf("audit %v", au)
	}
	f2 := newFixture(t, cosmostracking.Options{NewID: func() string { return "b-guid" }})
	if err := f2.s.StoreMessageAudit(ctx, tracking.EventKey{EndpointID: "billing", EventID: "e1"}, tracking.MessageAudit{AuditType: tracking.AuditRetry}, "OrderPlaced"); err != nil {
		t.Fatal(err)
	}
	b := cosmostest.RawDocPK(t, f2.env.Raw(t, f2.env.DB, "audits"), "e1", "b-guid")
	if b["endpointId"] != "billing" || b["eventTypeId"] != "OrderPlaced" {
		t.Errorf("audit document with tags %v", b)
	}
}

func TestRetention(t *testing.T) {
	t.Parallel()
	cases := []struct {
		days int
		ttl  float64
	}{{0, -1}, {-1, -1}, {1, 86400}, {180, 15552000}, {365, 31536000}}
	for _, c := range cases {
		f := newFixture(t, cosmostracking.Options{UnresolvedRetentionDays: c.days})
		for i, st := range []tracking.ResolutionStatus{tracking.Pending, tracking.Deferred, tracking.Failed, tracking.DeadLettered, tracking.Unsupported} {
			ev := "u" + string(rune('0'+i))
			mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: ev, SessionID: "s1"}, st, row("billing", ev, "s1", message.Unknown, "m", ""), true)
			if got := cosmostest.RawDoc(t, f.raw, ev+"_s1")["ttl"]; got != c.ttl {
				t.Errorf("days %d, %s: ttl %v, want %v", c.days, st, got, c.ttl)
			}
		}
		for _, st := range []tracking.ResolutionStatus{tracking.Completed, tracking.Skipped} {
			ev := "t" + st.String()
			mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: ev, SessionID: "s1"}, st, row("billing", ev, "s1", message.ResolutionResponse, "m", ""), true)
			if d := cosmostest.RawDoc(t, f.raw, ev+"_s1"); d["ttl"] != float64(cosmostracking.TerminalTTL) || d["deleted"] != true {
				t.Errorf("days %d, %s: %v", c.days, st, d)
			}
		}
	}
}

func TestRetentionSlidesOnEveryRewrite(t *testing.T) {
	t.Parallel()
	f := newFixture(t, cosmostracking.Options{UnresolvedRetentionDays: 30})
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Failed, row("billing", "e1", "s1", message.ErrorResponse, "m1", ""), true)
	first := cosmostest.RawDoc(t, f.raw, "e1_s1")
	// Age the stored ttl, as if an older setting had written it.
	first["ttl"] = 5
	for _, k := range []string{"_rid", "_self", "_etag", "_attachments", "_ts"} {
		delete(first, k)
	}
	b, _ := json.Marshal(first)
	if _, err := f.raw.ReplaceItem(ctx, azcosmos.NewPartitionKeyString("e1_s1"), "e1_s1", b, nil); err != nil {
		t.Fatal(err)
	}
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Failed, row("billing", "e1", "s1", message.ErrorResponse, "m2", ""), true)
	if got := cosmostest.RawDoc(t, f.raw, "e1_s1")["ttl"]; got != float64(30*86400) {
		t.Errorf("ttl after a rewrite %v, want %d", got, 30*86400)
	}
	// A guarded rewrite restamps too.
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Pending, row("billing", "e1", "s1", message.ResubmissionRequest, "rs", ""), true)
	if got := cosmostest.RawDoc(t, f.raw, "e1_s1")["ttl"]; got != float64(30*86400) {
		t.Errorf("ttl after a guarded rewrite %v", got)
	}
}

func TestRetentionIssuesNoExtraRequests(t *testing.T) {
	t.Parallel()
	var sent []int
	for _, days := range []int{-1, 365} {
		f := newFixture(t, cosmostracking.Options{UnresolvedRetentionDays: days})
		mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Pending, row("billing", "e1", "s1", message.EventRequest, "m1", ""), true)
		mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Failed, row("billing", "e1", "s1", message.ErrorResponse, "m2", ""), true)
		sent = append(sent, len(docs(f)))
	}
	if sent[0] != sent[1] {
		t.Errorf("requests with unlimited %d, with 365 days %d", sent[0], sent[1])
	}
}

func TestSoftDeleteTTLs(t *testing.T) {
	t.Parallel()
	f := newFixture(t, cosmostracking.Options{UnresolvedRetentionDays: 365})
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "rm", SessionID: "s1"}, tracking.Pending, row("billing", "rm", "s1", message.EventRequest, "m", ""), true)
	mustUpload(t, f.s, tracking.Key{EndpointID: "billing", EventID: "ar", SessionID: "s1"}, tracking.Failed, row("billing", "ar", "s1", message.ErrorResponse, "m", ""), true)
	f.env.Rec.Reset()
	if ok, err := f.s.RemoveMessage(ctx, tracking.Key{EndpointID: "billing", EventID: "rm", SessionID: "s1"}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := f.s.ArchiveFailedEvent(ctx, tracking.Key{EndpointID: "billing", EventID: "ar", SessionID: "s1"}); err != nil {
		t.Fatal(err)
	}
	if p, all := count(f, cosmostest.IsDocPatch), len(docs(f)); p != 2 || all != 2 {
		t.Errorf("%d patches among %d requests; want one patch per soft delete", p, all)
	}
	if ok, err := f.s.RemoveMessage(ctx, tracking.Key{EndpointID: "billing", EventID: "never", SessionID: "s1"}); err != nil || ok {
		t.Errorf("removing a missing row: %v, %v", ok, err)
	}
	if d := cosmostest.RawDoc(t, f.raw, "rm_s1"); d["ttl"] != float64(cosmostracking.SoftDeletedTTL) || d["deleted"] != true || d["status"] != "Pending" {
		t.Errorf("removed %v", d)
	}
	if d := cosmostest.RawDoc(t, f.raw, "ar_s1"); d["ttl"] != float64(cosmostracking.ArchivedTTL) || d["deleted"] != true || d["status"] != "Failed" {
		t.Errorf("archived %v", d)
	}
}

func TestContainersAreCreatedWithTheirPartitionKeysAndTTL(t *testing.T) {
	t.Parallel()
	f := newFixture(t, cosmostracking.Options{})
	for _, c := range []struct{ id, pk string }{{"billing", "/id"}, {"messages", "/eventId"}, {"audits", "/eventId"}} {
		props, err := f.env.Raw(t, f.env.DB, c.id).Read(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		p := props.ContainerProperties
		if len(p.PartitionKeyDefinition.Paths) != 1 || p.PartitionKeyDefinition.Paths[0] != c.pk || p.DefaultTimeToLive == nil || *p.DefaultTimeToLive != -1 {
			t.Errorf("%s: paths %v ttl %v", c.id, p.PartitionKeyDefinition.Paths, p.DefaultTimeToLive)
		}
	}
}

func TestReservedEndpointIDsAreRefusedBeforeAnyRequest(t *testing.T) {
	t.Parallel()
	e := cosmostest.NewEnv(t, "Strong")
	s := newStore(t, e, cosmostracking.Options{})
	for _, id := range tracking.ReservedEndpointIDs() {
		if _, err := s.Upload(ctx, tracking.Key{EndpointID: id, EventID: "e1", SessionID: "s1"}, tracking.Failed, row(id, "e1", "s1", message.ErrorResponse, "m", "")); !errors.Is(err, tracking.ErrReservedEndpointID) {
			t.Errorf("%q: %v", id, err)
		}
		if _, err := s.GetPendingEvent(ctx, tracking.Key{EndpointID: id, EventID: "e1", SessionID: "s1"}); !errors.Is(err, tracking.ErrReservedEndpointID) {
			t.Errorf("%q lookup: %v", id, err)
		}
		if _, err := s.TryCompletePendingMessage(ctx, tracking.Key{EndpointID: id, EventID: "e1", SessionID: "s1"}, nil, row(id, "e1", "s1", message.ResolutionResponse, "m", "")); !errors.Is(err, tracking.ErrReservedEndpointID) {
			t.Errorf("%q TryComplete: %v", id, err)
		}
	}
	if n := len(e.Rec.Sent()); n != 0 {
		t.Errorf("%d requests sent for reserved ids, want 0: %+v", n, e.Rec.Sent())
	}
	// Differently cased ids are their own endpoint containers.
	for _, id := range []string{"Messages", "INBOX", "metadata"} {
		mustUpload(t, s, tracking.Key{EndpointID: id, EventID: "e1", SessionID: "s1"}, tracking.Failed, row(id, "e1", "s1", message.ErrorResponse, "m", ""), true)
	}
}

func TestInvalidOptionsAreRejected(t *testing.T) {
	t.Parallel()
	e := cosmostest.NewEnv(t, "Strong")
	for _, days := range []int{-2, 366, 1 << 30} {
		if _, err := cosmostracking.New(e.Account, cosmostracking.Options{UnresolvedRetentionDays: days}); !errors.Is(err, cosmostracking.ErrInvalidOptions) ||
			!strings.Contains(err.Error(), "UnresolvedRetentionDays") {
			t.Errorf("days %d: %v", days, err)
		}
	}
	if _, err := cosmostracking.New(e.Account, cosmostracking.Options{StoreOptions: cosmos.StoreOptions{DatabaseID: "a/b"}}); !errors.Is(err, cosmostracking.ErrInvalidOptions) {
		t.Errorf("database id: %v", err)
	}
}

func TestARelaxedAccountIsAnOperatorErrorUnlessAllowed(t *testing.T) {
	t.Parallel()
	e := cosmostest.NewEnv(t, "Session")
	s := newStore(t, e, cosmostracking.Options{})
	if _, err := s.Upload(ctx, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Failed, row("billing", "e1", "s1", message.ErrorResponse, "m", "")); err == nil || !strings.Contains(err.Error(), "Strong") {
		t.Fatalf("relaxed account: %v", err)
	}
	r := newStore(t, e, cosmostracking.Options{StoreOptions: cosmos.StoreOptions{AllowRelaxedConsistency: true}})
	mustUpload(t, r, tracking.Key{EndpointID: "billing", EventID: "e1", SessionID: "s1"}, tracking.Failed, row("billing", "e1", "s1", message.ErrorResponse, "m", ""), true)
}
