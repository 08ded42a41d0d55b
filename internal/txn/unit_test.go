package txn_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// countingStore counts the requests that reach a Memory store.
type countingStore struct {
	*txn.Memory
	reads, batches atomic.Int64
}

func (s *countingStore) Read(ctx context.Context, t txn.Target, pk, id string) ([]byte, string, bool, error) {
	s.reads.Add(1)
	return s.Memory.Read(ctx, t, pk, id)
}

func (s *countingStore) Execute(ctx context.Context, t txn.Target, pk string, ops []txn.Op) (txn.Result, error) {
	s.batches.Add(1)
	return s.Memory.Execute(ctx, t, pk, ops)
}

type doc struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	N      int64  `json:"n"`
}

func seedDoc(t *testing.T, s txn.Store, tg txn.Target, d doc) {
	t.Helper()
	tx := txn.Begin(s, tg, d.Tenant, nil)
	if err := tx.Unit().Create(d); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

var testMarker = txn.Marker{EndpointID: "e", MessageID: "m", Retention: 3600e9}

// A sealed unit refuses every call without I/O, and what was queued
// before the seal still commits, alone.
func TestSealedUnitRefusesEveryCall(t *testing.T) {
	s, tg := &countingStore{Memory: txn.NewMemory(nil)}, memTarget("/tenant")
	seedDoc(t, s, tg, doc{ID: "a", Tenant: "t"})
	tx := txn.Begin(s, tg, "t", nil)
	u := tx.Unit()
	if err := u.Create(doc{ID: "before", Tenant: "t"}); err != nil {
		t.Fatal(err)
	}
	tx.Seal()
	reads := s.reads.Load()
	var p txn.Patch
	p.Increment("/n", 1)
	calls := map[string]error{
		"Create":  u.Create(doc{ID: "after", Tenant: "t"}),
		"Upsert":  u.Upsert(doc{ID: "after", Tenant: "t"}, ""),
		"Replace": u.Replace(doc{ID: "a", Tenant: "t"}, ""),
		"Patch":   u.Patch("a", p, ""),
		"Delete":  u.Delete("a", ""),
	}
	_, _, calls["Read"] = u.Read(context.Background(), "a", nil)
	for name, err := range calls {
		if !errors.Is(err, txn.ErrDone) {
			t.Errorf("%s after Seal: %v, want ErrDone", name, err)
		}
	}
	if n := s.reads.Load() - reads; n != 0 {
		t.Errorf("a sealed unit sent %d reads", n)
	}
	tx.Seal() // twice is harmless
	if _, err := tx.Commit(context.Background(), testMarker); err != nil {
		t.Fatalf("Commit after Seal: %v", err)
	}
	docs, err := s.Documents(tg)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range docs {
		var v struct{ ID, Type string }
		_ = json.Unmarshal(d, &v)
		if v.Type != txn.MarkerType {
			ids = append(ids, v.ID)
		}
	}
	if strings.Join(ids, ",") != "a,before" {
		t.Fatalf("documents after the commit: %v, want a and before only", ids)
	}
}

// Once a queuing call has failed, the batch can only fail: reads answer
// that failure and send nothing.
func TestFailedUnitDoesNoIO(t *testing.T) {
	s, tg := &countingStore{Memory: txn.NewMemory(nil)}, memTarget("/tenant")
	u := txn.Begin(s, tg, "t", nil).Unit()
	if err := u.Create(doc{ID: "x", Tenant: "other"}); !errors.Is(err, txn.ErrLimit) {
		t.Fatalf("Create in another partition: %v, want a limit", err)
	}
	if _, _, err := u.Read(context.Background(), "x", nil); !errors.Is(err, txn.ErrLimit) {
		t.Errorf("Read after a failed queuing: %v, want the limit error", err)
	}
	if n := s.reads.Load(); n != 0 {
		t.Errorf("%d reads sent after the unit failed", n)
	}
}

// Read decodes only into nil or a non-nil pointer, and refuses anything
// else before sending the request.
func TestReadRefusesAnUnusableTarget(t *testing.T) {
	s, tg := &countingStore{Memory: txn.NewMemory(nil)}, memTarget("/tenant")
	seedDoc(t, s, tg, doc{ID: "a", Tenant: "t", N: 3})
	u := txn.Begin(s, tg, "t", nil).Unit()
	var nilPtr *doc
	for name, into := range map[string]any{"struct value": doc{}, "map value": map[string]any{}, "nil pointer": nilPtr, "int": 3} {
		if _, _, err := u.Read(context.Background(), "a", into); !errors.Is(err, txn.ErrInvalid) {
			t.Errorf("Read into a %s: %v, want ErrInvalid", name, err)
		}
	}
	if n := s.reads.Load(); n != 0 {
		t.Errorf("%d reads sent for unusable targets", n)
	}
	var d doc
	if found, _, err := u.Read(context.Background(), "a", &d); err != nil || !found || d.N != 3 {
		t.Fatalf("Read into a pointer: %+v %v %v", d, found, err)
	}
	if found, etag, err := u.Read(context.Background(), "a", nil); err != nil || !found || etag == "" {
		t.Fatalf("Read into nil: %v %q %v", found, etag, err)
	}
}

// A document that does not fit the handler's type is a *DecodeError whose
// text names the field and types and quotes no value.
func TestReadDecodeErrorQuotesNoValue(t *testing.T) {
	s, tg := txn.NewMemory(nil), memTarget("/tenant")
	seedDoc(t, s, tg, doc{ID: "a", Tenant: "t", N: 9007199254740993})
	u := txn.Begin(s, tg, "t", nil).Unit()
	var into struct {
		N string `json:"n"`
	}
	_, _, err := u.Read(context.Background(), "a", &into)
	var de *txn.DecodeError
	var typ *json.UnmarshalTypeError
	if !errors.As(err, &de) || !errors.As(err, &typ) {
		t.Fatalf("Read of a mismatched document: %v (%T), want a *DecodeError reaching the json error", err, err)
	}
	msg := err.Error()
	if strings.Contains(msg, "9007199254740993") || strings.Contains(msg, "900719925474099") || !strings.Contains(msg, "field n holds a JSON number, which does not fit string") {
		t.Fatalf("decode error text %q", msg)
	}
}
