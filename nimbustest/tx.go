package nimbustest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/nimbus-go/functions-subscriber/internal/txn"
	"github.com/nimbus-go/functions-subscriber/nimbus"
)

// Container is an in-memory Cosmos DB container for tests of
// transactional handlers: the test seeds it, RunTx runs a handler's unit
// of work over it on the real pipeline, and the test reads it back. It
// behaves as the in-memory store of NimBus__Inbox__Store=InMemory does
// (Cosmos DB's batch semantics: all or nothing in one partition, ETag
// conditions, a new ETag on every write, per-document ttl), and it also
// holds the inbox markers the commits write, which Documents and Read
// leave out. It is safe for concurrent use.
type Container struct {
	spec   nimbus.Container
	target txn.Target
	store  *txn.Memory
}

// NewContainer returns an empty container with c's ids and partition key
// path (the nimbus.Container the handler is registered with; its
// settings are not read). It panics on a Container HandleTx would refuse
// (missing ids, an unusable partition key path).
func NewContainer(c nimbus.Container) *Container {
	t := txn.Target{DatabaseID: c.DatabaseID, ContainerID: c.ContainerID, PartitionKeyPath: c.PartitionKeyPath}
	if err := t.Validate(); err != nil {
		panic("nimbustest: NewContainer: " + err.Error())
	}
	return &Container{spec: c, target: t, store: txn.NewMemory(nil)}
}

// Seed writes docs, creating or replacing each: every doc must encode as
// a JSON object with a string "id" and a string partition key value at
// the container's partition key path. Nothing is written when one does
// not.
func (c *Container) Seed(docs ...any) error {
	type write struct {
		pk string
		op txn.Op
	}
	writes := make([]write, 0, len(docs))
	for i, d := range docs {
		body, err := json.Marshal(d)
		if err != nil {
			return fmt.Errorf("nimbustest: Seed: document %d: %w", i, err)
		}
		var obj map[string]any
		if err := json.Unmarshal(body, &obj); err != nil {
			return fmt.Errorf("nimbustest: Seed: document %d is not a JSON object", i)
		}
		id, _ := obj["id"].(string)
		pk, ok := c.partitionKeyOf(obj)
		if id == "" || !ok {
			return fmt.Errorf("nimbustest: Seed: document %d needs a string id and a string %s", i, c.target.PartitionKeyPath)
		}
		writes = append(writes, write{pk, txn.Op{Kind: txn.OpUpsert, ID: id, Body: body}})
	}
	for _, w := range writes {
		if err := c.execute(w.pk, w.op); err != nil {
			return fmt.Errorf("nimbustest: Seed %s: %w", w.op.ID, err)
		}
	}
	return nil
}

// partitionKeyOf is obj's partition key value.
func (c *Container) partitionKeyOf(obj map[string]any) (string, bool) {
	var cur any = obj
	for _, s := range strings.Split(c.target.PartitionKeyPath[1:], "/") {
		o, ok := cur.(map[string]any)
		if !ok {
			return "", false
		}
		cur = o[s]
	}
	pk, ok := cur.(string)
	return pk, ok && pk != ""
}

// execute runs one operation as a batch of its own.
func (c *Container) execute(pk string, op txn.Op) error {
	res, err := c.store.Execute(context.Background(), c.target, pk, []txn.Op{op})
	if err != nil {
		return err
	}
	if res.Status != http.StatusOK {
		return fmt.Errorf("the store answered %d", res.Ops[0].Status)
	}
	return nil
}

// Read decodes document id of partition partitionKey into into (a
// pointer; nil reads only whether it exists); found is false for a
// document that does not exist and for an inbox marker.
func (c *Container) Read(partitionKey, id string, into any) (found bool, err error) {
	body, _, found, err := c.store.Read(context.Background(), c.target, partitionKey, id)
	if err != nil || !found || isInboxMarker(body) {
		return false, err
	}
	if into == nil {
		return true, nil
	}
	return true, json.Unmarshal(body, into)
}

// Documents returns the container's documents, inbox markers left out,
// ordered by partition key value and id, each as JSON without the system
// properties _etag and _ts.
func (c *Container) Documents() ([]json.RawMessage, error) {
	all, err := c.store.Documents(c.target)
	if err != nil {
		return nil, err
	}
	out := make([]json.RawMessage, 0, len(all))
	for _, d := range all {
		if !isInboxMarker(d) {
			out = append(out, withoutSystemProps(d))
		}
	}
	return out, nil
}

// Change changes document id of partition partitionKey as another writer
// would: change edits its fields (not its id or partition key value), and
// the document gets a new ETag, so a unit of work that read it before
// conflicts on a write conditioned on the old one.
func (c *Container) Change(partitionKey, id string, change func(doc map[string]any)) error {
	body, _, found, err := c.store.Read(context.Background(), c.target, partitionKey, id)
	switch {
	case err != nil:
		return err
	case !found || isInboxMarker(body):
		return fmt.Errorf("nimbustest: Change: no document %s in partition %s", id, partitionKey)
	}
	var doc map[string]any
	if err := json.Unmarshal(withoutSystemProps(body), &doc); err != nil {
		return err
	}
	change(doc)
	if doc["id"] != id {
		return errors.New("nimbustest: Change: the change altered the document's id")
	}
	if pk, ok := c.partitionKeyOf(doc); !ok || pk != partitionKey {
		return errors.New("nimbustest: Change: the change altered the document's partition key value")
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return c.execute(partitionKey, txn.Op{Kind: txn.OpReplace, ID: id, Body: out})
}

// isInboxMarker reports whether body is an inbox marker.
func isInboxMarker(body []byte) bool {
	var d struct{ Type string }
	return json.Unmarshal(body, &d) == nil && d.Type == txn.MarkerType
}

// withoutSystemProps is body without _etag and _ts.
func withoutSystemProps(body []byte) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) != nil {
		return body
	}
	delete(obj, "_etag")
	delete(obj, "_ts")
	out, err := json.Marshal(obj)
	if err != nil {
		return body
	}
	return out
}

// Write is one write a committed unit of work applied.
type Write struct {
	// Op is "create", "upsert", "replace", "patch" or "delete".
	Op string
	// PartitionKey and ID name the document.
	PartitionKey, ID string
	// Document is the document as the commit left it, without system
	// properties; nil for a delete.
	Document json.RawMessage
}

// txStore is the container's store as RunTx gives it to the app:
// it keeps the writes of committed batches (markers left out) and makes
// the changes a test asked for after the first read of a document.
type txStore struct {
	c *Container

	mu      sync.Mutex
	writes  []Write
	changes []*txReadChange
	err     error
}

// txReadChange is a change to make after the first read of a document.
type txReadChange struct {
	id     string
	change func(doc map[string]any)
	done   bool
}

// The handler's container is the test's whatever ids the app's settings
// gave it: target's ids are not used.
func (s *txStore) Read(ctx context.Context, _ txn.Target, pk, id string) ([]byte, string, bool, error) {
	body, etag, found, err := s.c.store.Read(ctx, s.c.target, pk, id)
	if err != nil || !found {
		return body, etag, found, err
	}
	s.mu.Lock()
	var ch *txReadChange
	for _, c := range s.changes {
		if c.id == id && !c.done {
			c.done, ch = true, c
			break
		}
	}
	s.mu.Unlock()
	if ch != nil {
		if cerr := s.c.Change(pk, id, ch.change); cerr != nil {
			s.mu.Lock()
			s.err = errors.Join(s.err, cerr)
			s.mu.Unlock()
		}
	}
	return body, etag, found, nil
}

func (s *txStore) Execute(ctx context.Context, _ txn.Target, pk string, ops []txn.Op) (txn.Result, error) {
	target := s.c.target
	res, err := s.c.store.Execute(ctx, target, pk, ops)
	if err != nil || res.Status != http.StatusOK {
		return res, err
	}
	for _, op := range ops {
		w := Write{Op: op.Kind.String(), PartitionKey: pk, ID: op.ID}
		if op.Kind != txn.OpDelete {
			body, _, found, rerr := s.c.store.Read(ctx, target, pk, op.ID)
			if rerr != nil || !found || isInboxMarker(body) {
				continue
			}
			w.Document = withoutSystemProps(body)
		}
		s.mu.Lock()
		s.writes = append(s.writes, w)
		s.mu.Unlock()
	}
	return res, nil
}

// TxOption changes how RunTx runs a handler.
type TxOption func(*txOptions)

type txOptions struct {
	changes  []*txReadChange
	settings []string
}

// ChangeAfterRead makes a concurrent change to document id right after
// the handler's first read of it (in any partition), before the commit:
// change edits the stored document, which gets a new ETag. A write the
// handler conditions on the ETag it read then conflicts, and the pipeline
// runs the handler again on fresh reads (TxRun.Runs counts the runs); the
// second read sees the change and is not changed again.
func ChangeAfterRead(id string, change func(doc map[string]any)) TxOption {
	return func(o *txOptions) { o.changes = append(o.changes, &txReadChange{id: id, change: change}) }
}

// TxSettings adds app settings ("key=value") to those RunTx composes
// the app with, or replaces them (NimBus__Endpoint, the retry policy,
// ...). The settings a Container names may change its ids: the handler's
// container is still the test's.
func TxSettings(kv ...string) TxOption {
	return func(o *txOptions) { o.settings = append(o.settings, kv...) }
}

// TxRun is what the pipeline did with one delivery to a transactional
// handler.
type TxRun struct {
	// Outcome is the pipeline's outcome of the delivery, as its log line
	// and the nimbus.outcome metric tag name it: "completed", "duplicate",
	// "event_failed" (a plain error), "handler_failed" (a Transient one),
	// "permanent_failure", "discarded", "txn_conflict" (every re-run
	// conflicted), "pending_handoff", ... (docs/observability.md lists
	// them all).
	Outcome string
	// Completes reports whether the host would complete the message (a
	// 2xx answer); a transient failure is answered so that the broker
	// redelivers it.
	Completes bool
	// Runs is how many times the handler ran: more than one after
	// conflicts, 0 for a duplicate.
	Runs int
	// Result and Err are what the handler's last run returned, and Kind
	// is nimbus.KindOf(Err).
	Result nimbus.Result
	Err    error
	Kind   nimbus.FailureKind
	// Response is the MessageType of the response the Resolver got
	// ("ResolutionResponse", "ErrorResponse", "SkipResponse", ...); ""
	// when none was sent (a transient failure, before its last delivery).
	Response string
	// ErrorText is the error the pipeline reported: the ErrorResponse's
	// ErrorText when it sent one, else the error on its log line.
	ErrorText string
	// Writes are the writes the commit applied, in order (inbox markers
	// left out); none when the handler failed or no run committed.
	Writes []Write
	// Published are the events the delivery sent after the commit, in
	// order, as they went out: the delivery's CorrelationID and, unless
	// the handler named another, its SessionID; Payload is the event's
	// JSON as a json.RawMessage.
	Published []nimbus.Publication
	// Logs are the handler's records of every run.
	Logs []LogRecord
}

// RunTx registers h with pk for ev's event type on c's nimbus.Container
// in a new app, as nimbus.App.HandleTx does, composes the app as Run
// would (inbox, session state and Resolver sink in memory, the
// container's store c, no redelivery pause nor wait before a re-run), and
// delivers ev to it once as NimBus's forwarder delivers an event: an
// EventRequest from ev.From with ev's MessageID, SessionID,
// CorrelationID, EventID, JSON and DeliveryCount, on the real pipeline
// (inbox check, marker read, session state, unit of work, commit,
// publish). It returns what the delivery did; an error only when the app
// could not be composed or the delivery could not be made (a
// *nimbus.SettingsError lists bad settings).
//
// The app's endpoint is "TestEndpoint" unless TxSettings names
// another. Running a second event on the same Container sees what the
// first committed, its inbox marker included: the same MessageID again is
// a duplicate.
func RunTx(ctx context.Context, c *Container, ev *nimbus.Event, pk nimbus.PartitionKeyFunc, h nimbus.TxHandlerFunc, opts ...TxOption) (*TxRun, error) {
	if h == nil {
		return nil, errors.New("nimbustest: RunTx with a nil handler")
	}
	var o txOptions
	for _, f := range opts {
		f(&o)
	}
	var rec txRecorder
	a := nimbus.New()
	a.HandleTx(ev.EventTypeID, c.spec, pk, func(ctx context.Context, ev *nimbus.Event, tx *nimbus.Tx) (nimbus.Result, error) {
		res, err := h(ctx, ev, tx)
		rec.ran(res, err)
		return res, err
	})
	return runTxOn(ctx, a, c, ev, &rec, o)
}

// RunEventTx is RunTx for a handler registered with
// nimbus.HandleEventTx: the event decoded into a T gives the partition
// key and is h's payload (an event that does not decode fails
// permanently, and h does not run).
func RunEventTx[T any](ctx context.Context, c *Container, ev *nimbus.Event, pk func(payload T) (string, error),
	h func(ctx context.Context, ev *nimbus.Event, tx *nimbus.Tx, payload T) (nimbus.Result, error), opts ...TxOption) (*TxRun, error) {
	if h == nil {
		return nil, errors.New("nimbustest: RunEventTx with a nil handler")
	}
	var o txOptions
	for _, f := range opts {
		f(&o)
	}
	var rec txRecorder
	a := nimbus.New()
	nimbus.HandleEventTx(a, ev.EventTypeID, c.spec, pk, func(ctx context.Context, ev *nimbus.Event, tx *nimbus.Tx, payload T) (nimbus.Result, error) {
		res, err := h(ctx, ev, tx, payload)
		rec.ran(res, err)
		return res, err
	})
	return runTxOn(ctx, a, c, ev, &rec, o)
}

// txRecorder keeps what the handler's runs returned.
type txRecorder struct {
	mu   sync.Mutex
	runs int
	res  nimbus.Result
	err  error
}

func (r *txRecorder) ran(res nimbus.Result, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs++
	r.res, r.err = res, err
}
