package txn

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// stubStore answers every batch with a fixed result or error.
type stubStore struct {
	res Result
	err error
}

func (s stubStore) Read(context.Context, Target, string, string) ([]byte, string, bool, error) {
	return nil, "", false, nil
}

func (s stubStore) Execute(_ context.Context, _ Target, _ string, ops []Op) (Result, error) {
	return s.res, s.err
}

func failed(n, at, status int) Result {
	r := Result{Status: StatusMultiStatus, Ops: make([]OpResult, n)}
	for i := range r.Ops {
		r.Ops[i].Status = StatusFailedDependency
	}
	r.Ops[at].Status = status
	return r
}

// TestCommitOutcomes: a batch of one marker and two handler operations
// (markers come first), answered in every way a store can answer.
func TestCommitOutcomes(t *testing.T) {
	ok := Result{Status: 200, Ops: []OpResult{{Status: 201}, {Status: 201, ETag: "e1"}, {Status: 200, ETag: "e2"}}}
	cases := []struct {
		name  string
		store stubStore
		want  Outcome
		check func(t *testing.T, err error)
	}{
		{"committed", stubStore{res: ok}, Committed, nil},
		{"marker 409", stubStore{res: failed(3, 0, 409)}, Duplicate, nil},
		{"handler 412", stubStore{res: failed(3, 2, 412)}, Conflict, func(t *testing.T, err error) {
			var ce *ConflictError
			if !errors.As(err, &ce) || ce.Index != 1 || ce.Kind != OpReplace || ce.Status != 412 {
				t.Errorf("%v: want handler operation 1 (replace) 412", err)
			}
		}},
		{"handler 404", stubStore{res: failed(3, 1, 404)}, Conflict, nil},
		{"operation 429", stubStore{res: failed(3, 1, 429)}, Transient, nil},
		{"operation 503", stubStore{res: failed(3, 0, 503)}, Transient, nil},
		{"handler 400", stubStore{res: failed(3, 1, 400)}, Permanent, nil},
		{"marker 400", stubStore{res: failed(3, 0, 400)}, Permanent, func(t *testing.T, err error) {
			var re *RejectedError
			if !errors.As(err, &re) || !re.Marker {
				t.Errorf("%v: want a rejected marker", err)
			}
		}},
		{"207 all 424", stubStore{res: failed(3, 0, 424)}, Transient, nil},
		// An operation that succeeded before the failing one (the batch
		// was rolled back) is not the cause: the first operation that
		// neither succeeded nor answered 424 is.
		{"207, 2xx before a handler 412", stubStore{res: Result{Status: StatusMultiStatus, Ops: []OpResult{{Status: 201}, {Status: 201}, {Status: 412}}}}, Conflict, func(t *testing.T, err error) {
			var ce *ConflictError
			if !errors.As(err, &ce) || ce.Index != 1 || ce.Status != 412 {
				t.Errorf("%v: want handler operation 1 412", err)
			}
		}},
		{"207, the marker's 201 before a handler 409", stubStore{res: Result{Status: StatusMultiStatus, Ops: []OpResult{{Status: 201}, {Status: 409}, {Status: 424}}}}, Conflict, func(t *testing.T, err error) {
			var ce *ConflictError
			if !errors.As(err, &ce) || ce.Index != 0 || ce.Kind != OpCreate {
				t.Errorf("%v: want handler operation 0 (create) 409", err)
			}
		}},
		{"207, 2xx then 424 then 429", stubStore{res: Result{Status: StatusMultiStatus, Ops: []OpResult{{Status: 201}, {Status: 424}, {Status: 429}}}}, Transient, nil},
		{"207, 200 and 204 before a handler 404", stubStore{res: Result{Status: StatusMultiStatus, Ops: []OpResult{{Status: 201}, {Status: 200}, {Status: 404}}}}, Conflict, nil},
		{"207, every operation 2xx", stubStore{res: Result{Status: StatusMultiStatus, Ops: []OpResult{{Status: 201}, {Status: 201}, {Status: 200}}}}, Transient, nil},
		{"results missing", stubStore{res: Result{Status: 200}}, Ambiguous, nil},
		{"200 with a failed operation", stubStore{res: Result{Status: 200, Ops: []OpResult{{Status: 201}, {Status: 409}, {Status: 200}}}}, Ambiguous, nil},
		{"transient", stubStore{err: &TransientError{Status: 429}}, Transient, nil},
		{"ambiguous", stubStore{err: &AmbiguousError{Err: errors.New("connection reset")}}, Ambiguous, nil},
		{"canceled", stubStore{err: context.Canceled}, Transient, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tx := Begin(c.store, Target{DatabaseID: "d", ContainerID: "c", PartitionKeyPath: "/pk"}, "p", nil)
			if err := tx.Unit().Create(map[string]any{"id": "a", "pk": "p"}); err != nil {
				t.Fatal(err)
			}
			if err := tx.Unit().Replace(map[string]any{"id": "b", "pk": "p"}, "e"); err != nil {
				t.Fatal(err)
			}
			rc, err := tx.Commit(context.Background(), Marker{EndpointID: "e", MessageID: "m", Retention: time.Hour})
			if got := Classify(err); got != c.want {
				t.Fatalf("Classify(%v) = %v, want %v", err, got, c.want)
			}
			if c.want == Committed && (len(rc.ETags) != 2 || rc.ETags[1] != "e2") {
				t.Errorf("receipt ETags %v, want the handler's two", rc.ETags)
			}
			if c.check != nil {
				c.check(t, err)
			}
		})
	}
}

func TestTargetAndMarkerValidation(t *testing.T) {
	for _, path := range []string{"", "/", "pk", "/a//b", "/_ts", "/id", "/ttl", "/type", "/endpointId", "/a/\"b"} {
		if err := (Target{DatabaseID: "d", ContainerID: "c", PartitionKeyPath: path}).Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("path %q: %v, want ErrInvalid", path, err)
		}
	}
	for _, path := range []string{"/pk", "/a/b", "/tenant/id"} {
		if err := (Target{DatabaseID: "d", ContainerID: "c", PartitionKeyPath: path}).Validate(); err != nil {
			t.Errorf("path %q: %v", path, err)
		}
	}
	tg := Target{DatabaseID: "d", ContainerID: "c", PartitionKeyPath: "/pk"}
	for name, m := range map[string]Marker{
		"blank message": {EndpointID: "e", MessageID: " ", Retention: time.Hour},
		"no endpoint":   {MessageID: "m", Retention: time.Hour},
		"no retention":  {EndpointID: "e", MessageID: "m"},
		"too long":      {EndpointID: "e", MessageID: "m", Retention: 100 * 365 * 24 * time.Hour},
	} {
		_, err := Begin(NewMemory(nil), tg, "p", nil).Commit(context.Background(), m)
		if !errors.Is(err, ErrInvalid) || Classify(err) != Permanent {
			t.Errorf("%s: %v, want a permanent ErrInvalid", name, err)
		}
	}
	op, err := markerDoc(tg, "p", Marker{EndpointID: "e", MessageID: "m", Retention: 1500 * time.Millisecond}, time.Unix(0, 0), nil)
	if err != nil || !contains(op.Body, `"ttl":2`) {
		t.Errorf("retention 1.5 s: %s %v, want ttl 2", op.Body, err)
	}
	if op.ID != MarkerID("e", "m") || len(op.ID) != 64 {
		t.Errorf("marker id %q", op.ID)
	}
}

func contains(b []byte, s string) bool { return strings.Contains(string(b), s) }
