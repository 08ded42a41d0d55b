package txn

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Memory is an in-process Store for tests, demos and local runs, with
// Cosmos DB's batch semantics: all or nothing in one partition, the
// failing operation's status (409 exists, 412 ETag mismatch, 404 missing,
// 400 unusable patch) and 424 for the others, 207 for a failed batch, new
// ETags on every write, and per-item ttl (an expired document reads as
// missing). A container is created on first use with time to live on and
// no default; SetTTL turns it off to exercise the refusal.
type Memory struct {
	now func() time.Time

	mu         sync.Mutex
	containers map[string]*memContainer
	etags      uint64
}

type memContainer struct {
	pkPath     string
	ttlOff     bool
	partitions map[string]map[string]*memDoc
}

type memDoc struct {
	obj     map[string]any // decoded with json.Number; never changed in place
	etag    string
	ts      int64
	expires time.Time // zero: never
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty store; now is its clock for ttl (nil means
// time.Now).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, containers: map[string]*memContainer{}}
}

// SetTTL turns time to live of target's container on or off (on by
// default). With it off, every Execute fails with a *TransientError
// wrapping ErrTTLOff, as the Cosmos adapter does.
func (m *Memory) SetTTL(target Target, on bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, err := m.container(target)
	if err != nil {
		return err
	}
	c.ttlOff = !on
	return nil
}

func (m *Memory) container(t Target) (*memContainer, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	c := m.containers[t.String()]
	if c == nil {
		c = &memContainer{pkPath: t.PartitionKeyPath, partitions: map[string]map[string]*memDoc{}}
		m.containers[t.String()] = c
	}
	if c.pkPath != t.PartitionKeyPath {
		return nil, fmt.Errorf("%w: container %s is partitioned on %s, not %s", ErrInvalid, t, c.pkPath, t.PartitionKeyPath)
	}
	return c, nil
}

// Read implements Store.
func (m *Memory) Read(ctx context.Context, target Target, pk, id string) ([]byte, string, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c, err := m.container(target)
	if err != nil {
		return nil, "", false, err
	}
	d := c.partitions[pk][id]
	if !d.live(m.now(), c) {
		return nil, "", false, nil
	}
	out := make(map[string]any, len(d.obj)+2)
	for k, v := range d.obj {
		out[k] = v
	}
	out["_etag"], out["_ts"] = d.etag, d.ts
	body, err := json.Marshal(out)
	if err != nil {
		return nil, "", false, err
	}
	return body, d.etag, true, nil
}

func (d *memDoc) live(now time.Time, c *memContainer) bool {
	return d != nil && (c.ttlOff || d.expires.IsZero() || now.Before(d.expires))
}

// Execute implements Store.
func (m *Memory) Execute(ctx context.Context, target Target, pk string, ops []Op) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	if len(ops) == 0 || len(ops) > MaxOps {
		return Result{}, fmt.Errorf("%w: a batch holds 1 to %d operations, not %d", ErrInvalid, MaxOps, len(ops))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c, err := m.container(target)
	if err != nil {
		return Result{}, err
	}
	if c.ttlOff {
		return Result{}, &TransientError{Err: &operatorError{fmt.Errorf("%w on container %s: markers would never expire; turn it on (DefaultTimeToLive -1)", ErrTTLOff, target)}}
	}
	// Work on a copy of the partition; documents are never changed in
	// place, so a shallow copy is a snapshot.
	part := make(map[string]*memDoc, len(c.partitions[pk])+len(ops))
	for k, v := range c.partitions[pk] {
		part[k] = v
	}
	now := m.now()
	res := Result{Status: http.StatusOK, Ops: make([]OpResult, len(ops))}
	segs := target.segments()
	for i, op := range ops {
		status := m.apply(part, c, segs, pk, op, now)
		if status >= 300 {
			for j := range res.Ops {
				res.Ops[j] = OpResult{Status: StatusFailedDependency}
			}
			res.Ops[i] = OpResult{Status: status}
			res.Status = StatusMultiStatus
			return res, nil
		}
		res.Ops[i] = OpResult{Status: status}
		if d := part[op.ID]; d != nil && op.Kind != OpDelete {
			res.Ops[i].ETag = d.etag
		}
	}
	c.partitions[pk] = part
	return res, nil
}

// apply runs one operation on part and returns its status.
func (m *Memory) apply(part map[string]*memDoc, c *memContainer, segs []string, pk string, op Op, now time.Time) int {
	cur := part[op.ID]
	if !cur.live(now, c) {
		cur = nil
	}
	if op.IfMatch != "" && op.Kind != OpCreate && cur != nil && cur.etag != op.IfMatch {
		return http.StatusPreconditionFailed
	}
	var obj map[string]any
	status := http.StatusOK
	switch op.Kind {
	case OpCreate, OpUpsert, OpReplace:
		switch {
		case op.Kind == OpCreate && cur != nil:
			return http.StatusConflict
		case op.Kind == OpReplace && cur == nil:
			return http.StatusNotFound
		case cur == nil:
			status = http.StatusCreated
		}
		if err := decodeNumbers(op.Body, &obj); err != nil || obj["id"] != op.ID {
			return http.StatusBadRequest
		}
	case OpPatch:
		if cur == nil {
			return http.StatusNotFound
		}
		var err error
		if obj, err = applyPatch(cur.obj, op.Patch); err != nil {
			return http.StatusBadRequest
		}
	case OpDelete:
		if cur == nil {
			return http.StatusNotFound
		}
		delete(part, op.ID)
		return http.StatusNoContent
	default:
		return http.StatusBadRequest
	}
	if v, ok := getPath(obj, segs); !ok || v != pk {
		return http.StatusBadRequest
	}
	delete(obj, "_etag")
	delete(obj, "_ts")
	m.etags++
	d := &memDoc{obj: obj, etag: fmt.Sprintf("\"%08x-0000-0000-0000-%012x\"", m.etags>>48, m.etags), ts: now.Unix()}
	if ttl, ok := obj["ttl"].(json.Number); ok {
		if s, err := strconv.ParseInt(string(ttl), 10, 32); err == nil && s > 0 {
			d.expires = now.Add(time.Duration(s) * time.Second)
		}
	}
	part[op.ID] = d
	return status
}

func decodeNumbers(b []byte, into any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(into)
}

func getPath(obj map[string]any, segs []string) (any, bool) {
	var cur any = obj
	for _, s := range segs {
		o, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = o[s]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// Documents returns the live documents of target's container (markers
// included), each with its _etag, ordered by partition key value and id:
// a view for tests and local demos.
func (m *Memory) Documents(target Target) ([]json.RawMessage, error) {
	m.mu.Lock()
	c, err := m.container(target)
	if err != nil {
		m.mu.Unlock()
		return nil, err
	}
	now := m.now()
	type entry struct{ pk, id string }
	var keys []entry
	for pk, part := range c.partitions {
		for id, d := range part {
			if d.live(now, c) {
				keys = append(keys, entry{pk, id})
			}
		}
	}
	m.mu.Unlock()
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].pk != keys[j].pk {
			return keys[i].pk < keys[j].pk
		}
		return keys[i].id < keys[j].id
	})
	out := make([]json.RawMessage, 0, len(keys))
	for _, k := range keys {
		body, _, found, err := m.Read(context.Background(), target, k.pk, k.id)
		if err != nil {
			return nil, err
		}
		if found {
			out = append(out, body)
		}
	}
	return out, nil
}

var _ PendingFinder = (*Memory)(nil)

// FindPending implements PendingFinder: the markers of q.EndpointID in
// target's container, across its partitions, created before q.OlderThan
// (or with a createdAtUtc of another form) whose events are not
// dispatched (an outbox, and a dispatchedAtUtc that is not a string), in
// (partition key value, id) order. The cursor is the last marker
// returned, so markers dispatched meanwhile do not shift the pages.
func (m *Memory) FindPending(ctx context.Context, target Target, q PendingQuery) (PendingPage, error) {
	if err := ctx.Err(); err != nil {
		return PendingPage{}, err
	}
	if err := q.check(); err != nil {
		return PendingPage{}, err
	}
	var after *[2]string
	if q.Cursor != "" {
		var c [2]string
		if err := json.Unmarshal([]byte(q.Cursor), &c); err != nil {
			return PendingPage{}, fmt.Errorf("%w: the cursor of pending markers is not one this store returned", ErrInvalid)
		}
		after = &c
	}
	cutoff := PendingCutoff(q)
	m.mu.Lock()
	c, err := m.container(target)
	if err != nil {
		m.mu.Unlock()
		return PendingPage{}, err
	}
	now := m.now()
	var keys [][2]string
	for pk, part := range c.partitions {
		for id, d := range part {
			if !d.live(now, c) || !pendingDoc(d.obj, q.EndpointID, cutoff) {
				continue
			}
			k := [2]string{pk, id}
			if after == nil || k[0] > after[0] || (k[0] == after[0] && k[1] > after[1]) {
				keys = append(keys, k)
			}
		}
	}
	m.mu.Unlock()
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	var page PendingPage
	if len(keys) > q.PageSize {
		keys = keys[:q.PageSize]
		next, _ := json.Marshal(keys[len(keys)-1])
		page.Next = string(next)
	}
	for _, k := range keys {
		body, _, found, err := m.Read(ctx, target, k[0], k[1])
		if err != nil {
			return PendingPage{}, err
		}
		if !found {
			continue
		}
		page.Add(target, q, body)
	}
	return page, nil
}

// pendingDoc is the filter of FindPending, the Cosmos DB query's: a
// marker of endpointID with an outbox and a dispatchedAtUtc that is not a
// string, created before cutoff (a createdAtUtc string) or with a
// createdAtUtc not in the fixed form.
func pendingDoc(obj map[string]any, endpointID, cutoff string) bool {
	if obj["type"] != MarkerType || obj["endpointId"] != endpointID {
		return false
	}
	if _, ok := obj[fieldOutbox]; !ok {
		return false
	}
	if _, dispatched := obj[fieldDispatchedAt].(string); dispatched {
		return false
	}
	created, ok := obj["createdAtUtc"].(string)
	return !ok || created < cutoff || !createdAtForm.MatchString(created)
}
