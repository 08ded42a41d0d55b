package cosmossession_test

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmostest"
	"github.com/nimbus-go/functions-subscriber/internal/session"
	"github.com/nimbus-go/functions-subscriber/internal/session/cosmossession"
	"github.com/nimbus-go/functions-subscriber/internal/session/sessiontest"
)

var ctx = context.Background()

// newStore returns a store on e's account, in the test's database unless o
// names one.
func newStore(t testing.TB, e *cosmostest.Env, o cosmossession.Options) *cosmossession.Store {
	t.Helper()
	if o.DatabaseID == "" {
		o.DatabaseID = e.DB
	}
	s, err := cosmossession.New(e.Account, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fail answers every document request with status (0: a transport error)
// until the returned function is called.
func fail(e *cosmostest.Env, status int, headers map[string]string) func() {
	e.Rec.SetHooks(func(req *http.Request) (*http.Response, error) {
		if !strings.Contains(req.URL.Path, "/docs") {
			return nil, nil
		}
		if status == 0 {
			return nil, errors.New("injected: connection reset")
		}
		return cosmostest.Synth(req, status, headers, `{"code":"injected","message":"injected by the test"}`), nil
	}, nil)
	return func() { e.Rec.SetHooks(nil, nil) }
}

func TestConformance(t *testing.T) {
	t.Parallel()
	e := cosmostest.NewEnv(t, "Strong")
	s := newStore(t, e, cosmossession.Options{})
	// Under -short the concurrent writers are 8 with 15 parks each (the
	// full suite: 16 with 50).
	writers, parks := 0, 0
	if testing.Short() {
		writers, parks = 8, 15
	}
	sessiontest.Run(t, func(*testing.T) sessiontest.Target {
		return sessiontest.Target{
			Store:          s,
			Break:          func(*testing.T) func() { return fail(e, http.StatusServiceUnavailable, nil) },
			Writers:        writers,
			ParksPerWriter: parks,
		}
	})
}

func block(t *testing.T, s session.Store, k session.Key, cur session.State, event, msg string) session.State {
	t.Helper()
	st, _, err := session.Apply(ctx, s, k, cur, 0, func(s session.State) (session.State, bool, error) { return s.Block(event, msg) })
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func parkOne(t *testing.T, s session.Store, k session.Key, cur session.State, msg string) (session.State, int64) {
	t.Helper()
	var seq int64
	st, _, err := session.Apply(ctx, s, k, cur, 0, func(s session.State) (session.State, bool, error) {
		n, q, ok := s.Park(msg)
		seq = q
		return n, ok, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return st, seq
}

func docs(e *cosmostest.Env) []cosmostest.Sent {
	var out []cosmostest.Sent
	for _, s := range e.Rec.Sent() {
		if cosmostest.IsDocRequest(s) {
			out = append(out, s)
		}
	}
	return out
}

// Every change is one request conditioned on what was read: a create (never
// an upsert) for the first, a replace If-Match the ETag read after that; a
// read is one point read.
func TestEveryChangeIsOneConditionedRequest(t *testing.T) {
	t.Parallel()
	e := cosmostest.NewEnv(t, "Strong")
	s := newStore(t, e, cosmossession.Options{})
	k := session.NewKey("billing", "customer-1")
	if _, err := s.Read(ctx, k); err != nil { // initializes the container
		t.Fatal(err)
	}
	e.Rec.Reset()
	cur, err := s.Read(ctx, k)
	if err != nil || cur.Exists() {
		t.Fatalf("missing: %+v %v", cur, err)
	}
	cur = block(t, s, k, cur, "e2", "m2")
	v1 := cur.Version
	cur, _ = parkOne(t, s, k, cur, "m3")
	v2 := cur.Version
	cur, _, err = session.Apply(ctx, s, k, cur, 0, func(s session.State) (session.State, bool, error) { n, ok := s.Unblock(); return n, ok, nil })
	if err != nil {
		t.Fatal(err)
	}
	got := docs(e)
	if len(got) != 4 {
		t.Fatalf("%d document requests, want 4 (read, create, replace, replace): %+v", len(got), got)
	}
	if !cosmostest.IsDocRead(got[0]) || got[0].Status != http.StatusNotFound {
		t.Errorf("read %+v", got[0])
	}
	if !cosmostest.IsDocCreate(got[1]) || got[1].IfMatch != "" || got[1].Status != http.StatusCreated {
		t.Errorf("first change %+v; want a create", got[1])
	}
	for i, want := range []string{v1, v2} {
		r := got[2+i]
		if !cosmostest.IsDocReplace(r) || r.IfMatch != want || want == "" {
			t.Errorf("change %d: %s If-Match %q; want a replace If-Match %q", 2+i, r.Method, r.IfMatch, want)
		}
	}
	for _, r := range got[1:] {
		if r.Prefer != "return=minimal" {
			t.Errorf("write %s sent Prefer %q; want the content response off", r.Method, r.Prefer)
		}
	}
	if cur.Blocked() || cur.DeferredCount != 1 {
		t.Errorf("final %+v", cur)
	}
}

// A lost race is ErrConflict on every path: 412 on a replace, 409 on a
// create, 404 on a replace of a document deleted since it was read.
func TestLostRacesAreConflicts(t *testing.T) {
	t.Parallel()
	e := cosmostest.NewEnv(t, "Strong")
	s := newStore(t, e, cosmossession.Options{})
	raw := e.Raw(t, e.DB, cosmossession.DefaultContainerID)
	k := session.NewKey("billing", "s1")
	cur := block(t, s, k, session.State{}, "e1", "m1")
	next, _ := cur.Unblock()
	if _, err := raw.DeleteItem(ctx, azcosmos.NewPartitionKeyString(k.ID), k.ID, nil); err != nil {
		t.Fatal(err)
	}
	e.Rec.Reset()
	if _, err := s.Write(ctx, k, next); !session.IsConflict(err) {
		t.Fatalf("replace of a deleted document: %v; want ErrConflict", err)
	}
	if r := docs(e); len(r) != 1 || r[0].Status != http.StatusNotFound {
		t.Fatalf("requests %+v", r)
	}
	if got, err := s.Read(ctx, k); err != nil || got.Exists() {
		t.Fatalf("after the conflict: %+v %v", got, err)
	}
	// 412 from the service, however it arises, is a conflict.
	cur = block(t, s, k, session.State{}, "e1", "m1")
	restore := fail(e, http.StatusPreconditionFailed, nil)
	n, _ := cur.Unblock()
	_, err := s.Write(ctx, k, n)
	restore()
	if !session.IsConflict(err) {
		t.Fatalf("412: %v", err)
	}
}

// Outages of every kind are errors from Read and Write, never the zero
// state and never a conflict.
func TestStoreFailuresAreErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		status  int
		headers map[string]string
	}{
		{"unavailable", http.StatusServiceUnavailable, nil},
		{"throttled", http.StatusTooManyRequests, map[string]string{"x-ms-retry-after-ms": "10"}},
		{"internal", http.StatusInternalServerError, nil},
		{"container missing", http.StatusNotFound, map[string]string{"x-ms-substatus": "1003"}},
		{"read session unavailable", http.StatusNotFound, map[string]string{"x-ms-substatus": "1002"}},
		{"forbidden", http.StatusForbidden, nil},
		{"transport", 0, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := cosmostest.NewEnv(t, "Strong")
			s := newStore(t, e, cosmossession.Options{})
			blocked := session.NewKey("billing", "blocked")
			cur := block(t, s, blocked, session.State{}, "e1", "m1")
			restore := fail(e, c.status, c.headers)
			defer restore()
			for _, k := range []session.Key{blocked, session.NewKey("billing", "never")} {
				st, err := s.Read(ctx, k)
				var se *session.StoreError
				if !errors.As(err, &se) || se.Op != session.OpRead || st != (session.State{}) {
					t.Errorf("Read %s: %+v, %v; want a *StoreError and no state", k.SessionID, st, err)
				}
			}
			n, _ := cur.Unblock()
			_, err := s.Write(ctx, blocked, n)
			var se *session.StoreError
			if !errors.As(err, &se) || se.Op != session.OpWrite || session.IsConflict(err) {
				t.Errorf("replace: %v; want a *StoreError, not a conflict", err)
			}
			fresh, _, _ := session.State{}.Block("e9", "m9")
			if _, err := s.Write(ctx, session.NewKey("billing", "new"), fresh); !errors.As(err, &se) || session.IsConflict(err) {
				t.Errorf("create: %v; want a *StoreError, not a conflict", err)
			}
			restore()
			if got, err := s.Read(ctx, blocked); err != nil || got.Version != cur.Version || !got.Blocked() {
				t.Errorf("after the outage: %+v %v; want the state unchanged", got, err)
			}
		})
	}
}

func keys(m map[string]any) string {
	var out []string
	for k := range m {
		if !strings.HasPrefix(k, "_") {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func TestDocumentShape(t *testing.T) {
	t.Parallel()
	e := cosmostest.NewEnv(t, "Strong")
	now := time.Date(2026, 11, 30, 13, 45, 1, 123456789, time.UTC)
	s := newStore(t, e, cosmossession.Options{StoreOptions: cosmos.StoreOptions{Now: func() time.Time { return now }}})
	raw := e.Raw(t, e.DB, cosmossession.DefaultContainerID)
	k := session.NewKey("billing", "customer-1")
	cur := block(t, s, k, session.State{}, "event-2", "msg-2")
	doc := cosmostest.RawDoc(t, raw, k.ID)
	if keys(doc) != "endpointId,id,sessionId,state,updatedAtUtc" || doc["id"] != k.ID || doc["endpointId"] != "billing" || doc["sessionId"] != "customer-1" ||
		doc["updatedAtUtc"] != "2026-11-30T13:45:01.1234567Z" {
		t.Fatalf("document %v", doc)
	}
	if _, ok := doc["ttl"]; ok {
		t.Error("the document carries a ttl")
	}
	st := doc["state"].(map[string]any)
	want := "BlockKind,BlockedByEventId,BlockedByMessageId,DeferredCount,DrainRequestedAtUtc,LastParkedMessageId,LastParkedSequence,NextDeferralSequence,NextReplaySequence"
	if keys(st) != want {
		t.Fatalf("state fields %s\nwant %s", keys(st), want)
	}
	if st["BlockedByEventId"] != "event-2" || st["BlockedByMessageId"] != "msg-2" || st["LastParkedMessageId"] != nil || st["DrainRequestedAtUtc"] != nil ||
		st["NextDeferralSequence"] != float64(0) || st["DeferredCount"] != float64(0) || st["BlockKind"] != nil {
		t.Errorf("state %v; nulls must be written", st)
	}
	cur, _, err := session.Apply(ctx, s, k, cur, 0, func(s session.State) (session.State, bool, error) {
		s.BlockKind = session.BlockHandoff
		return s, true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := cosmostest.RawDoc(t, raw, k.ID)["state"].(map[string]any); st["BlockKind"] != "PendingHandoff" {
		t.Errorf("BlockKind stored as %v", st["BlockKind"])
	}
	if got, err := s.Read(ctx, k); err != nil || got.BlockKind != session.BlockHandoff {
		t.Fatalf("read back %+v %v", got, err)
	}
	cur, _ = parkOne(t, s, k, cur, "msg-3")
	cur, _ = parkOne(t, s, k, cur, "msg-4")
	cur, _, err = session.Apply(ctx, s, k, cur, 0, func(s session.State) (session.State, bool, error) {
		s, _ = s.Unblock()
		n, ok := s.RequestDrain(now)
		return n, ok, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cur, _, err = session.Apply(ctx, s, k, cur, 0, func(s session.State) (session.State, bool, error) { n, ok := s.Replayed(0); return n, ok, nil })
	if err != nil {
		t.Fatal(err)
	}
	st = cosmostest.RawDoc(t, raw, k.ID)["state"].(map[string]any)
	if st["BlockedByEventId"] != nil || st["BlockedByMessageId"] != nil || st["BlockKind"] != nil || st["NextDeferralSequence"] != float64(2) || st["DeferredCount"] != float64(1) ||
		st["LastParkedMessageId"] != "msg-4" || st["LastParkedSequence"] != float64(1) || st["NextReplaySequence"] != float64(1) ||
		st["DrainRequestedAtUtc"] != "2026-11-30T13:45:01.1234567Z" {
		t.Errorf("state %v", st)
	}
	if got, err := s.Read(ctx, k); err != nil || got != cur {
		t.Errorf("read back\n got %+v %v\nwant %+v", got, err, cur)
	}
}

// A document that is not a valid state is an error, never the zero state.
func TestInvalidDocumentsAreErrors(t *testing.T) {
	t.Parallel()
	e := cosmostest.NewEnv(t, "Strong")
	s := newStore(t, e, cosmossession.Options{})
	raw := e.Raw(t, e.DB, cosmossession.DefaultContainerID)
	if _, err := s.Read(ctx, session.NewKey("billing", "init")); err != nil {
		t.Fatal(err)
	}
	inboxDoc := session.NewKey("billing", "looks-like-an-inbox-record")
	cosmostest.PutRaw(t, raw, map[string]any{"id": inboxDoc.ID, "endpointId": "billing", "messageId": "looks-like-an-inbox-record", "createdAtUtc": "2026-11-30T00:00:00.0000000Z"})
	bad := session.NewKey("billing", "bad-count")
	cosmostest.PutRaw(t, raw, map[string]any{"id": bad.ID, "endpointId": "billing", "sessionId": "bad-count", "updatedAtUtc": "2026-11-30T00:00:00.0000000Z",
		"state": map[string]any{"BlockedByEventId": "e1", "NextDeferralSequence": 3, "DeferredCount": 0, "NextReplaySequence": 0}})
	for _, k := range []session.Key{inboxDoc, bad} {
		st, err := s.Read(ctx, k)
		if !errors.Is(err, session.ErrCorrupt) || st.Exists() || st.Blocked() {
			t.Errorf("%s: %+v %v; want ErrCorrupt", k.SessionID, st, err)
		}
	}
}

func TestContainerHasPartitionKeyIDAndNoTTL(t *testing.T) {
	t.Parallel()
	e := cosmostest.NewEnv(t, "Strong")
	s := newStore(t, e, cosmossession.Options{ContainerID: "state-x"})
	if _, err := s.Read(ctx, session.NewKey("billing", "s1")); err != nil {
		t.Fatal(err)
	}
	props, err := e.Raw(t, e.DB, "state-x").Read(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := props.ContainerProperties
	if len(p.PartitionKeyDefinition.Paths) != 1 || p.PartitionKeyDefinition.Paths[0] != "/id" || p.DefaultTimeToLive != nil {
		t.Errorf("paths %v ttl %v; want [/id] and no TTL", p.PartitionKeyDefinition.Paths, p.DefaultTimeToLive)
	}
}

func TestARelaxedAccountIsAnOperatorErrorUnlessAllowed(t *testing.T) {
	t.Parallel()
	e := cosmostest.NewEnv(t, "Session")
	s := newStore(t, e, cosmossession.Options{StoreOptions: cosmos.StoreOptions{RelaxAs: "NimBus__Inbox__Cosmos__AllowRelaxedConsistency"}})
	k := session.NewKey("billing", "s1")
	_, err := s.Read(ctx, k)
	var oe *cosmos.OperatorError
	if !errors.As(err, &oe) || !strings.Contains(err.Error(), "Strong") || !strings.Contains(err.Error(), "session-state") {
		t.Fatalf("relaxed account: %v", err)
	}
	fresh, _, _ := session.State{}.Block("e", "m")
	if _, err := s.Write(ctx, k, fresh); !errors.As(err, &oe) {
		t.Fatalf("write on a relaxed account: %v", err)
	}
	if n := e.Rec.Count(cosmostest.IsDocRequest); n != 0 {
		t.Errorf("%d document requests on a relaxed account", n)
	}
	r := newStore(t, e, cosmossession.Options{StoreOptions: cosmos.StoreOptions{AllowRelaxedConsistency: true}})
	if _, err := r.Write(ctx, k, fresh); err != nil {
		t.Fatal(err)
	}
}

func TestAMissingContainerWithoutAutoCreateIsAnOperatorError(t *testing.T) {
	t.Parallel()
	e := cosmostest.NewEnv(t, "Strong")
	off := false
	s := newStore(t, e, cosmossession.Options{StoreOptions: cosmos.StoreOptions{AutoCreateContainer: &off}, ContainerID: "absent"})
	_, err := s.Read(ctx, session.NewKey("billing", "s1"))
	var oe *cosmos.OperatorError
	if !errors.As(err, &oe) || !errors.Is(err, cosmos.ErrContainer) || !strings.Contains(err.Error(), "/id") {
		t.Fatalf("%v", err)
	}
}

func TestInvalidOptionsAreRejected(t *testing.T) {
	t.Parallel()
	e := cosmostest.NewEnv(t, "Strong")
	_, err := cosmossession.New(e.Account, cosmossession.Options{StoreOptions: cosmos.StoreOptions{DatabaseID: "a/b", InitTimeout: -1}, ContainerID: "c#"})
	if !errors.Is(err, cosmossession.ErrInvalidOptions) {
		t.Fatalf("%v", err)
	}
	for _, want := range []string{"DatabaseID", "ContainerID", "InitTimeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v does not name %s", err, want)
		}
	}
	if _, err := cosmossession.New(nil, cosmossession.Options{}); err == nil {
		t.Error("a nil account was accepted")
	}
}

// The stored ETag is what the SDK answered: Write's Version is usable at
// once for the next change and equals what a read returns.
func TestWriteReturnsTheStoredETag(t *testing.T) {
	t.Parallel()
	e := cosmostest.NewEnv(t, "Strong")
	s := newStore(t, e, cosmossession.Options{})
	raw := e.Raw(t, e.DB, cosmossession.DefaultContainerID)
	k := session.NewKey("billing", "s1")
	cur := block(t, s, k, session.State{}, "e1", "m1")
	resp, err := raw.ReadItem(ctx, azcosmos.NewPartitionKeyString(k.ID), k.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ETag != azcore.ETag(cur.Version) {
		t.Fatalf("Write returned %q, the document has %q", cur.Version, resp.ETag)
	}
}
