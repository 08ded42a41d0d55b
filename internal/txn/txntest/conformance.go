// Package txntest is the conformance suite every txn.Store must pass: a
// batch is all or nothing, each operation kind fails with Cosmos DB's
// status, ETag conditions and patches hold, a marker makes a second copy a
// Duplicate, limits are refused before sending, a container with time to
// live off is refused, concurrent copies of one delivery apply once, and
// published events are stored in the delivery's marker (its outbox),
// marked dispatched and found by the sweep's query.
package txntest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// Harness gives the suite fresh stores.
type Harness struct {
	// New returns a store and a target of its own (an empty container,
	// time to live on) partitioned on pkPath.
	New func(t *testing.T, pkPath string) (txn.Store, txn.Target)
	// NewTTLOff returns a store and a target whose container has time to
	// live off.
	NewTTLOff func(t *testing.T) (txn.Store, txn.Target)
	// Trials is how many times the concurrency test repeats (default 20).
	Trials int
}

const (
	endpoint  = "billing"
	retention = 7 * 24 * time.Hour
)

// account is the business document of the suite.
type account struct {
	ID      string   `json:"id"`
	Tenant  string   `json:"tenant"`
	Balance int64    `json:"balance"`
	Tags    []string `json:"tags,omitempty"`
	Meta    *meta    `json:"meta,omitempty"`
}

type meta struct {
	Owner string `json:"owner"`
	Count int64  `json:"count"`
}

func marker(msg string) txn.Marker {
	return txn.Marker{EndpointID: endpoint, MessageID: msg, Retention: retention}
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	if h.Trials == 0 {
		h.Trials = 20
	}
	t.Run("CommitAppliesEverythingWithTheMarker", func(t *testing.T) { testCommit(t, h) })
	t.Run("NestedPartitionKeyPath", func(t *testing.T) { testNested(t, h) })
	t.Run("FailingOperationLeavesNothing", func(t *testing.T) { testAtomic(t, h) })
	t.Run("StatusPerKind", func(t *testing.T) { testStatuses(t, h) })
	t.Run("ETagConditionsThatHold", func(t *testing.T) { testETagsHold(t, h) })
	t.Run("Patch", func(t *testing.T) { testPatch(t, h) })
	t.Run("MarkerMakesDuplicate", func(t *testing.T) { testDuplicate(t, h) })
	t.Run("Limits", func(t *testing.T) { testLimits(t, h) })
	t.Run("PartitionKeyValues", func(t *testing.T) { testPartitionKeyValues(t, h) })
	t.Run("PartitionKeyValueLimit", func(t *testing.T) { testPartitionKeyValueLimit(t, h) })
	t.Run("NotAMarker", func(t *testing.T) { testNotAMarker(t, h) })
	t.Run("LargestBatchCommits", func(t *testing.T) { testLargest(t, h) })
	t.Run("TTLOffRefused", func(t *testing.T) { testTTLOff(t, h) })
	t.Run("ConcurrentCopiesApplyOnce", func(t *testing.T) { testConcurrent(t, h) })
	runOutbox(t, h)
}

// Document reads document id in partition pk of tg, without its system
// properties ("_…"), for a test to edit and write back (Write): a marker
// corrupted or copied as an operator or a restore might.
func Document(t testing.TB, s txn.Store, tg txn.Target, pk, id string) map[string]any {
	t.Helper()
	body, _, found, err := s.Read(context.Background(), tg, pk, id)
	if err != nil || !found {
		t.Fatalf("reading document %s: found=%v err=%v", id, found, err)
	}
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	for k := range doc {
		if strings.HasPrefix(k, "_") {
			delete(doc, k)
		}
	}
	return doc
}

// Write stores doc (its "id" names it) in partition pk of tg with one
// operation of kind (txn.OpCreate or txn.OpReplace), failing t unless it
// commits.
func Write(t testing.TB, s txn.Store, tg txn.Target, pk string, kind txn.OpKind, doc map[string]any) {
	t.Helper()
	body, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := doc["id"].(string)
	if res, err := s.Execute(context.Background(), tg, pk, []txn.Op{{Kind: kind, ID: id, Body: body}}); err != nil || res.Status >= 300 {
		t.Fatalf("writing document %s: %+v %v", id, res, err)
	}
}

// seed commits doc without a marker.
func seed(t *testing.T, s txn.Store, tg txn.Target, pk string, docs ...any) {
	t.Helper()
	tx := txn.Begin(s, tg, pk, nil)
	for _, d := range docs {
		if err := tx.Unit().Create(d); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Commit(context.Background()); err != nil {
		t.Fatalf("seeding: %v", err)
	}
}

func read(t *testing.T, s txn.Store, tg txn.Target, pk, id string) (account, string, bool) {
	t.Helper()
	var a account
	found, etag, err := txn.Begin(s, tg, pk, nil).Unit().Read(context.Background(), id, &a)
	if err != nil {
		t.Fatalf("reading %s: %v", id, err)
	}
	return a, etag, found
}

func hasMarker(t *testing.T, s txn.Store, tg txn.Target, pk, msg string) bool {
	t.Helper()
	ok, err := txn.HasMarker(context.Background(), s, tg, pk, endpoint, msg)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func testCommit(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	ctx := context.Background()
	if hasMarker(t, s, tg, "t1", "m1") {
		t.Fatal("marker before any commit")
	}
	created := time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.UTC)
	tx := txn.Begin(s, tg, "t1", func() time.Time { return created })
	u := tx.Unit()
	if err := u.Create(account{ID: "a", Tenant: "t1", Balance: 5}); err != nil {
		t.Fatal(err)
	}
	if err := u.Upsert(account{ID: "b", Tenant: "t1", Balance: 7}, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, found := read(t, s, tg, "t1", "a"); found {
		t.Fatal("a queued create is visible before the commit")
	}
	rc, err := tx.Commit(ctx, marker("m1"))
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if len(rc.ETags) != 2 {
		t.Fatalf("receipt has %d ETags, want 2", len(rc.ETags))
	}
	a, etag, found := read(t, s, tg, "t1", "a")
	if !found || a.Balance != 5 || etag == "" {
		t.Fatalf("a = %+v found=%v etag=%q", a, found, etag)
	}
	if rc.ETags[0] != "" && rc.ETags[0] != etag {
		t.Errorf("receipt ETag %q, read ETag %q", rc.ETags[0], etag)
	}
	if _, _, found := read(t, s, tg, "t1", "b"); !found {
		t.Fatal("b missing after commit")
	}
	if !hasMarker(t, s, tg, "t1", "m1") {
		t.Fatal("marker missing after commit")
	}
	if hasMarker(t, s, tg, "t2", "m1") {
		t.Fatal("marker visible in another partition")
	}
	// The marker document, field by field.
	body, _, found, err := s.Read(ctx, tg, "t1", txn.MarkerID(endpoint, "m1"))
	if err != nil || !found {
		t.Fatalf("reading the marker: found=%v err=%v", found, err)
	}
	m := decode(t, body)
	want := map[string]any{
		"id":           txn.MarkerID(endpoint, "m1"),
		"type":         txn.MarkerType,
		"endpointId":   endpoint,
		"messageId":    "m1",
		"createdAtUtc": "2030-01-02T03:04:05.1234567Z",
		"tenant":       "t1",
		"ttl":          float64(retention / time.Second),
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("marker %s = %v, want %v", k, m[k], v)
		}
	}
	if _, err := tx.Commit(ctx); !errors.Is(err, txn.ErrDone) {
		t.Errorf("second Commit: %v, want ErrDone", err)
	}
	if err := u.Create(account{ID: "c", Tenant: "t1"}); !errors.Is(err, txn.ErrDone) {
		t.Errorf("Create after Commit: %v, want ErrDone", err)
	}
}

func decode(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func testNested(t *testing.T, h Harness) {
	s, tg := h.New(t, "/owner/tenant")
	doc := map[string]any{"id": "n1", "owner": map[string]any{"tenant": "x"}, "v": 1}
	tx := txn.Begin(s, tg, "x", nil)
	if err := tx.Unit().Create(doc); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(context.Background(), marker("n")); err != nil {
		t.Fatal(err)
	}
	body, _, found, err := s.Read(context.Background(), tg, "x", txn.MarkerID(endpoint, "n"))
	if err != nil || !found {
		t.Fatalf("marker: found=%v err=%v", found, err)
	}
	owner, _ := decode(t, body)["owner"].(map[string]any)
	if owner["tenant"] != "x" {
		t.Fatalf("marker owner = %v, want tenant x", owner)
	}
	// A document without the value at the nested path is refused.
	err = txn.Begin(s, tg, "x", nil).Unit().Create(map[string]any{"id": "n2", "owner": "x"})
	var le *txn.LimitError
	if !errors.As(err, &le) || le.Limit != txn.LimitPartitionKey {
		t.Fatalf("create without the nested key: %v", err)
	}
}

func testAtomic(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	seed(t, s, tg, "t", account{ID: "x", Tenant: "t", Balance: 1})
	_, etag, _ := read(t, s, tg, "t", "x")
	tx := txn.Begin(s, tg, "t", nil)
	u := tx.Unit()
	must(t, u.Create(account{ID: "y", Tenant: "t"}))
	must(t, u.Replace(account{ID: "x", Tenant: "t", Balance: 2}, etag))
	must(t, u.Create(account{ID: "x", Tenant: "t"})) // 409
	must(t, u.Create(account{ID: "z", Tenant: "t"}))
	_, err := tx.Commit(context.Background(), marker("atomic"))
	var ce *txn.ConflictError
	if !errors.As(err, &ce) || ce.Index != 2 || ce.Kind != txn.OpCreate || ce.Status != http.StatusConflict {
		t.Fatalf("Commit: %v, want a conflict on operation 2 (create, 409)", err)
	}
	if txn.Classify(err) != txn.Conflict || !errors.Is(err, txn.ErrTransient) {
		t.Errorf("Classify = %v; a conflict must be transient", txn.Classify(err))
	}
	for _, id := range []string{"y", "z"} {
		if _, _, found := read(t, s, tg, "t", id); found {
			t.Errorf("%s was created by a failed batch", id)
		}
	}
	x, etag2, _ := read(t, s, tg, "t", "x")
	if x.Balance != 1 || etag2 != etag {
		t.Errorf("x changed by a failed batch: %+v (ETag %q, was %q)", x, etag2, etag)
	}
	if hasMarker(t, s, tg, "t", "atomic") {
		t.Error("marker written by a failed batch")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

const staleETag = `"00000000-0000-0000-0000-000000000000"`

func testStatuses(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	seed(t, s, tg, "t", account{ID: "d", Tenant: "t", Balance: 1})
	var inc txn.Patch
	inc.Increment("/balance", 1)
	cases := []struct {
		name   string
		queue  func(u *txn.Unit) error
		kind   txn.OpKind
		status int
	}{
		{"create existing", func(u *txn.Unit) error { return u.Create(account{ID: "d", Tenant: "t"}) }, txn.OpCreate, 409},
		{"replace missing", func(u *txn.Unit) error { return u.Replace(account{ID: "nope", Tenant: "t"}, "") }, txn.OpReplace, 404},
		{"replace stale", func(u *txn.Unit) error { return u.Replace(account{ID: "d", Tenant: "t"}, staleETag) }, txn.OpReplace, 412},
		{"upsert stale", func(u *txn.Unit) error { return u.Upsert(account{ID: "d", Tenant: "t"}, staleETag) }, txn.OpUpsert, 412},
		{"patch missing", func(u *txn.Unit) error { return u.Patch("nope", inc, "") }, txn.OpPatch, 404},
		{"patch stale", func(u *txn.Unit) error { return u.Patch("d", inc, staleETag) }, txn.OpPatch, 412},
		{"delete missing", func(u *txn.Unit) error { return u.Delete("nope", "") }, txn.OpDelete, 404},
		{"delete stale", func(u *txn.Unit) error { return u.Delete("d", staleETag) }, txn.OpDelete, 412},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tx := txn.Begin(s, tg, "t", nil)
			must(t, tx.Unit().Create(account{ID: fmt.Sprintf("fresh%d", i), Tenant: "t"}))
			must(t, c.queue(tx.Unit()))
			_, err := tx.Commit(context.Background(), marker(c.name))
			var ce *txn.ConflictError
			if !errors.As(err, &ce) || ce.Index != 1 || ce.Kind != c.kind || ce.Status != c.status {
				t.Fatalf("Commit: %v, want operation 1 (%s) failing with %d", err, c.kind, c.status)
			}
			if _, _, found := read(t, s, tg, "t", fmt.Sprintf("fresh%d", i)); found {
				t.Error("the operation before the failing one was applied")
			}
		})
	}
	if d, _, _ := read(t, s, tg, "t", "d"); d.Balance != 1 {
		t.Errorf("d changed: %+v", d)
	}
}

func testETagsHold(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	seed(t, s, tg, "t", account{ID: "r", Tenant: "t", Balance: 1}, account{ID: "u", Tenant: "t"}, account{ID: "p", Tenant: "t"}, account{ID: "d", Tenant: "t"})
	etags := map[string]string{}
	for _, id := range []string{"r", "u", "p", "d"} {
		_, e, _ := read(t, s, tg, "t", id)
		etags[id] = e
	}
	var inc txn.Patch
	inc.Increment("/balance", 3)
	tx := txn.Begin(s, tg, "t", nil)
	u := tx.Unit()
	must(t, u.Replace(account{ID: "r", Tenant: "t", Balance: 2}, etags["r"]))
	must(t, u.Upsert(account{ID: "u", Tenant: "t", Balance: 4}, etags["u"]))
	must(t, u.Patch("p", inc, etags["p"]))
	must(t, u.Delete("d", etags["d"]))
	if _, err := tx.Commit(context.Background(), marker("etags")); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	for id, want := range map[string]int64{"r": 2, "u": 4, "p": 3} {
		a, e, found := read(t, s, tg, "t", id)
		if !found || a.Balance != want {
			t.Errorf("%s = %+v found=%v, want balance %d", id, a, found, want)
		}
		if e == etags[id] {
			t.Errorf("%s kept its ETag after a write", id)
		}
	}
	if _, _, found := read(t, s, tg, "t", "d"); found {
		t.Error("d not deleted")
	}
}

func testPatch(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	seed(t, s, tg, "t", account{ID: "p", Tenant: "t", Balance: 10, Tags: []string{"a"}, Meta: &meta{Owner: "o", Count: 1}})
	var p txn.Patch
	p.Set("/meta/owner", "n")
	p.Increment("/meta/count", 4)
	p.Increment("/balance", -3)
	p.Add("/tags/-", "b")
	p.Add("/tags/0", "z")
	p.Set("/extra", 1)
	p.Remove("/extra")
	tx := txn.Begin(s, tg, "t", nil)
	must(t, tx.Unit().Patch("p", p, ""))
	if _, err := tx.Commit(context.Background(), marker("patch")); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	a, _, _ := read(t, s, tg, "t", "p")
	if a.Balance != 7 || a.Meta == nil || a.Meta.Owner != "n" || a.Meta.Count != 5 || strings.Join(a.Tags, ",") != "z,a,b" {
		t.Fatalf("patched = %+v %+v", a, a.Meta)
	}
	body, _, _, _ := s.Read(context.Background(), tg, "t", "p")
	if _, ok := decode(t, body)["extra"]; ok {
		t.Error("removed property still present")
	}

	// A patch that does not apply (remove an absent property) is refused
	// for good and applies nothing.
	var bad txn.Patch
	bad.Remove("/absent")
	tx = txn.Begin(s, tg, "t", nil)
	must(t, tx.Unit().Create(account{ID: "q", Tenant: "t"}))
	must(t, tx.Unit().Patch("p", bad, ""))
	_, err := tx.Commit(context.Background(), marker("badpatch"))
	var re *txn.RejectedError
	if !errors.As(err, &re) || re.Index != 1 || re.Status != http.StatusBadRequest || txn.Classify(err) != txn.Permanent {
		t.Fatalf("Commit: %v, want operation 1 rejected with 400", err)
	}
	if _, _, found := read(t, s, tg, "t", "q"); found {
		t.Error("q created by a rejected batch")
	}

	// Unusable patches are refused when queued.
	for name, build := range map[string]func(p *txn.Patch){
		"empty":         func(*txn.Patch) {},
		"system":        func(p *txn.Patch) { p.Set("/_etag", "x") },
		"id":            func(p *txn.Patch) { p.Set("/id", "x") },
		"partition key": func(p *txn.Patch) { p.Set("/tenant", "u") },
		"too many": func(p *txn.Patch) {
			for i := 0; i <= txn.MaxPatchOps; i++ {
				p.Increment("/balance", 1)
			}
		},
	} {
		var p txn.Patch
		build(&p)
		err := txn.Begin(s, tg, "t", nil).Unit().Patch("p", p, "")
		if !errors.Is(err, txn.ErrLimit) {
			t.Errorf("%s patch: %v, want a limit error", name, err)
		}
	}
}

func testDuplicate(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	tx := txn.Begin(s, tg, "t", nil)
	must(t, tx.Unit().Create(account{ID: "first", Tenant: "t"}))
	if _, err := tx.Commit(context.Background(), marker("dup")); err != nil {
		t.Fatal(err)
	}
	tx = txn.Begin(s, tg, "t", nil)
	must(t, tx.Unit().Create(account{ID: "second", Tenant: "t"}))
	must(t, tx.Unit().Create(account{ID: "first", Tenant: "t"})) // would conflict too
	_, err := tx.Commit(context.Background(), marker("other"), marker("dup"))
	var de *txn.DuplicateError
	if !errors.As(err, &de) || de.Marker != 1 || txn.Classify(err) != txn.Duplicate {
		t.Fatalf("Commit: %v, want marker 1 duplicate", err)
	}
	if _, _, found := read(t, s, tg, "t", "second"); found {
		t.Error("a duplicate applied its effects")
	}
	if hasMarker(t, s, tg, "t", "other") {
		t.Error("a duplicate wrote its other marker")
	}
}

func testLimits(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	ctx := context.Background()
	limit := func(t *testing.T, err error, want string) {
		t.Helper()
		var le *txn.LimitError
		if !errors.As(err, &le) || le.Limit != want || txn.Classify(err) != txn.Permanent {
			t.Fatalf("got %v, want limit %s", err, want)
		}
	}
	t.Run("handler operations", func(t *testing.T) {
		tx := txn.Begin(s, tg, "t", nil)
		for i := 0; i < txn.MaxHandlerOps; i++ {
			must(t, tx.Unit().Delete(fmt.Sprintf("d%d", i), ""))
		}
		limit(t, tx.Unit().Delete("one-too-many", ""), txn.LimitOperations)
		_, err := tx.Commit(ctx, marker("ops"))
		limit(t, err, txn.LimitOperations)
	})
	t.Run("operations with markers", func(t *testing.T) {
		tx := txn.Begin(s, tg, "t", nil)
		for i := 0; i < txn.MaxHandlerOps; i++ {
			must(t, tx.Unit().Create(account{ID: fmt.Sprintf("c%d", i), Tenant: "t"}))
		}
		_, err := tx.Commit(ctx, marker("m1"), marker("m2"))
		limit(t, err, txn.LimitOperations)
		if _, _, found := read(t, s, tg, "t", "c0"); found {
			t.Error("a refused batch was sent")
		}
	})
	t.Run("request size", func(t *testing.T) {
		tx := txn.Begin(s, tg, "t", nil)
		big := strings.Repeat("x", 700<<10)
		for i := 0; i < 3; i++ {
			must(t, tx.Unit().Create(map[string]any{"id": fmt.Sprintf("big%d", i), "tenant": "t", "blob": big}))
		}
		_, err := tx.Commit(ctx, marker("big"))
		limit(t, err, txn.LimitRequestBytes)
		if _, _, found := read(t, s, tg, "t", "big0"); found {
			t.Error("a refused batch was sent")
		}
	})
	for name, id := range map[string]string{
		"empty id": "", "long id": strings.Repeat("i", txn.MaxIDBytes+1), "slash": "a/b", "backslash": `a\b`,
		"question": "a?b", "hash": "a#b", "quote": `a"b`, "control": "a\nb",
	} {
		t.Run(name, func(t *testing.T) {
			u := txn.Begin(s, tg, "t", nil).Unit()
			limit(t, u.Create(account{ID: id, Tenant: "t"}), txn.LimitID)
			limit(t, txn.Begin(s, tg, "t", nil).Unit().Delete(id, ""), txn.LimitID)
			_, _, err := u.Read(ctx, id, nil)
			limit(t, err, txn.LimitID)
		})
	}
	t.Run("longest id", func(t *testing.T) {
		id := strings.Repeat("i", txn.MaxIDBytes)
		seed(t, s, tg, "t", account{ID: id, Tenant: "t"})
		if _, _, found := read(t, s, tg, "t", id); !found {
			t.Fatal("a 255-byte id did not round-trip")
		}
	})
	t.Run("partition key", func(t *testing.T) {
		tx := txn.Begin(s, tg, "t", nil)
		limit(t, tx.Unit().Create(account{ID: "other", Tenant: "u"}), txn.LimitPartitionKey)
		_, err := tx.Commit(ctx, marker("pk"))
		limit(t, err, txn.LimitPartitionKey)
		limit(t, txn.Begin(s, tg, "t", nil).Unit().Upsert(map[string]any{"id": "nokey"}, ""), txn.LimitPartitionKey)
		limit(t, txn.Begin(s, tg, "t", nil).Unit().Create([]int{1}), txn.LimitDocument)
	})
}

// PartitionKeyValues are partition key values from user data that a
// store must take as they are: characters beyond the Basic Multilingual
// Plane (an emoji, CJK Extension B), every control character, DEL,
// quotes and backslashes, and the longest value Cosmos DB takes
// (MaxPartitionKeyBytes bytes of emoji).
func PartitionKeyValues() map[string]string {
	keys := map[string]string{
		"emoji":           "customer-\U0001F642",
		"cjk-ext-b":       "\U00020000\U0002A6A5",
		"del":             "\x7f",
		"quote-backslash": `a"b\c`,
		"mixed":           "\x00é\u2028\U0001F600\x7f",
		"longest":         strings.Repeat("\U0001F4B8", txn.MaxPartitionKeyBytes/4),
	}
	for c := rune(0); c < 0x20; c++ {
		keys[fmt.Sprintf("control-%02x", c)] = "k" + string(c)
	}
	return keys
}

// testPartitionKeyValues: in every partition PartitionKeyValues names,
// the marker check, a read, a commit with its marker and the duplicate
// check work.
func testPartitionKeyValues(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	ctx := context.Background()
	for name, pk := range PartitionKeyValues() {
		t.Run(name, func(t *testing.T) {
			if hasMarker(t, s, tg, pk, "m") {
				t.Fatal("marker before any commit")
			}
			tx := txn.Begin(s, tg, pk, nil)
			must(t, tx.Unit().Create(account{ID: "a", Tenant: pk, Balance: 1}))
			if _, err := tx.Commit(ctx, marker("m")); err != nil {
				t.Fatalf("Commit: %v", err)
			}
			a, etag, found := read(t, s, tg, pk, "a")
			if !found || a.Tenant != pk || a.Balance != 1 {
				t.Fatalf("a = %+v found=%v", a, found)
			}
			if !hasMarker(t, s, tg, pk, "m") {
				t.Fatal("no marker after the commit")
			}
			var inc txn.Patch
			inc.Increment("/balance", 2)
			again := txn.Begin(s, tg, pk, nil)
			must(t, again.Unit().Patch("a", inc, etag))
			_, err := again.Commit(ctx, marker("m"))
			if txn.Classify(err) != txn.Duplicate {
				t.Fatalf("second copy: %v, want a duplicate", err)
			}
			if a, _, _ := read(t, s, tg, pk, "a"); a.Balance != 1 {
				t.Fatalf("a duplicate applied its patch: balance %d", a.Balance)
			}
		})
	}
}

// testPartitionKeyValueLimit: a partition key value Cosmos DB cannot take
// (over MaxPartitionKeyBytes bytes, or not UTF-8) fails the marker check,
// reads and the commit with a Permanent limit error naming it.
func testPartitionKeyValueLimit(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	ctx := context.Background()
	for name, pk := range map[string]string{
		"one byte over": strings.Repeat("k", txn.MaxPartitionKeyBytes+1),
		"emoji over":    strings.Repeat("\U0001F4B8", txn.MaxPartitionKeyBytes/4) + "k",
		"not UTF-8":     "k\xff",
	} {
		t.Run(name, func(t *testing.T) {
			limit := func(err error) {
				t.Helper()
				var le *txn.LimitError
				if !errors.As(err, &le) || le.Limit != txn.LimitPartitionKeyValue || txn.Classify(err) != txn.Permanent {
					t.Fatalf("got %v, want limit %s (permanent)", err, txn.LimitPartitionKeyValue)
				}
				if strings.Contains(err.Error(), "kkkk") || strings.Contains(err.Error(), "\U0001F4B8") {
					t.Fatalf("the error holds the value: %.80s", err)
				}
			}
			_, err := txn.HasMarker(ctx, s, tg, pk, endpoint, "m")
			limit(err)
			tx := txn.Begin(s, tg, pk, nil)
			_, _, err = tx.Unit().Read(ctx, "a", nil)
			limit(err)
			_, err = tx.Commit(ctx, marker("m"))
			limit(err)
		})
	}
	if err := txn.CheckPartitionKey(strings.Repeat("k", txn.MaxPartitionKeyBytes)); err != nil {
		t.Errorf("a value of exactly %d bytes: %v", txn.MaxPartitionKeyBytes, err)
	}
	if !strings.Contains(txn.CheckPartitionKey(strings.Repeat("k", txn.MaxPartitionKeyBytes+1)).Error(), "2048") {
		t.Error("the limit error does not name the limit")
	}
}

// testNotAMarker: a document that holds a marker's id but is not that
// marker is not taken for it: the marker check fails instead of telling a
// new delivery it is a duplicate.
func testNotAMarker(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	id := txn.MarkerID(endpoint, "m")
	for name, doc := range map[string]map[string]any{
		"no type":        {"id": id, "tenant": "t", "endpointId": endpoint, "messageId": "m"},
		"another type":   {"id": id, "tenant": "t", "type": "balance", "endpointId": endpoint, "messageId": "m"},
		"other delivery": {"id": id, "tenant": "t", "type": txn.MarkerType, "endpointId": endpoint, "messageId": "n"},
	} {
		t.Run(name, func(t *testing.T) {
			pk := "t-" + strings.ReplaceAll(name, " ", "-")
			doc["tenant"] = pk
			seed(t, s, tg, pk, doc)
			found, err := txn.HasMarker(context.Background(), s, tg, pk, endpoint, "m")
			if !errors.Is(err, txn.ErrNotMarker) || found {
				t.Fatalf("HasMarker = %v, %v; want an error wrapping ErrNotMarker", found, err)
			}
			var oe interface{ OperatorMessage() string }
			if !errors.As(err, &oe) {
				t.Errorf("%v is not worded for an operator", err)
			}
		})
	}
}

// testLargest commits the largest batch: 99 handler operations and a marker.
func testLargest(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	tx := txn.Begin(s, tg, "t", nil)
	for i := 0; i < txn.MaxHandlerOps; i++ {
		must(t, tx.Unit().Create(account{ID: fmt.Sprintf("c%d", i), Tenant: "t", Balance: int64(i)}))
	}
	if _, err := tx.Commit(context.Background(), marker("largest")); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if a, _, found := read(t, s, tg, "t", "c98"); !found || a.Balance != 98 {
		t.Fatalf("c98 = %+v found=%v", a, found)
	}
}

func testTTLOff(t *testing.T, h Harness) {
	s, tg := h.NewTTLOff(t)
	for i := 0; i < 2; i++ { // every commit, not only the first
		tx := txn.Begin(s, tg, "t", nil)
		must(t, tx.Unit().Create(account{ID: "a", Tenant: "t"}))
		_, err := tx.Commit(context.Background(), marker("ttl"))
		if !errors.Is(err, txn.ErrTTLOff) || txn.Classify(err) != txn.Transient {
			t.Fatalf("Commit on a container with TTL off: %v (%v), want a transient ErrTTLOff", err, txn.Classify(err))
		}
		if msg := err.Error(); !strings.Contains(msg, tg.ContainerID) || !strings.Contains(msg, tg.DatabaseID) || !strings.Contains(msg, "-1") {
			t.Errorf("error %q should name %s and how to turn TTL on", msg, tg)
		}
	}
}

func testConcurrent(t *testing.T, h Harness) {
	s, tg := h.New(t, "/tenant")
	const copies = 64
	for trial := 0; trial < h.Trials; trial++ {
		id, msg := fmt.Sprintf("bal%d", trial), fmt.Sprintf("msg%d", trial)
		seed(t, s, tg, "t", account{ID: id, Tenant: "t", Balance: 100})
		var (
			wg                               sync.WaitGroup
			mu                               sync.Mutex
			committed, dup, conflict, others int
			firstOther                       error
		)
		start := make(chan struct{})
		for c := 0; c < copies; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				err := creditOnce(s, tg, id, msg, c%2 == 0)
				mu.Lock()
				defer mu.Unlock()
				switch txn.Classify(err) {
				case txn.Committed:
					committed++
				case txn.Duplicate:
					dup++
				case txn.Conflict:
					conflict++
				default:
					others++
					if firstOther == nil {
						firstOther = err
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		if committed != 1 || others != 0 || dup+conflict != copies-1 {
			t.Fatalf("trial %d: %d committed, %d duplicate, %d conflict, %d other (first: %v); want exactly one commit", trial, committed, dup, conflict, others, firstOther)
		}
		if a, _, _ := read(t, s, tg, "t", id); a.Balance != 110 {
			t.Fatalf("trial %d: balance %d, want 110 (credited once)", trial, a.Balance)
		}
		if trial == 0 {
			t.Logf("%d copies: 1 committed, %d duplicate, %d conflict", copies, dup, conflict)
		}
	}
}

// creditOnce is a handler run of one copy: check the marker (when check
// is set: half the copies skip it, so that the commit itself decides),
// read the balance, credit 10 conditioned on the read ETag, commit with
// the marker.
func creditOnce(s txn.Store, tg txn.Target, id, msg string, check bool) error {
	ctx := context.Background()
	if check {
		seen, err := txn.HasMarker(ctx, s, tg, "t", endpoint, msg)
		if err != nil {
			return err
		}
		if seen {
			return txn.ErrDuplicate
		}
	}
	tx := txn.Begin(s, tg, "t", nil)
	var a account
	found, etag, err := tx.Unit().Read(ctx, id, &a)
	if err != nil || !found {
		return fmt.Errorf("read: found=%v err=%w", found, err)
	}
	a.Balance += 10
	if err := tx.Unit().Replace(a, etag); err != nil {
		return err
	}
	_, err = tx.Commit(ctx, marker(msg))
	return err
}
