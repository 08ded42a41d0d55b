package nimbus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/nimbus-go/functions-subscriber/internal/app"
	"github.com/nimbus-go/functions-subscriber/internal/frontdoor"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// ErrNotStarted is the error of a publish or a front door's request made
// before the app (Run, Main) or the Service (Start) has started: the
// settings that name the topic and the stores are read then.
var ErrNotStarted = errors.New("nimbus: the app has not started; publish and commit requests once Run or Start has read the settings")

// ErrKeyReused is FrontDoor.Commit's error when the idempotency key was
// committed by a request with another fingerprint: nothing was written or
// published. An HTTP API answers it 409 Conflict.
var ErrKeyReused = errors.New("nimbus: the idempotency key was already used by a different request")

// ErrConflict is FrontDoor.Commit's error when a condition of the unit's
// writes did not hold (a Create of a document that exists, an ETag that
// changed, a Replace, Patch or Delete of a missing document): nothing was
// written, published or recorded. Begin a new unit on fresh reads, or
// answer 409 Conflict.
var ErrConflict = errors.New("nimbus: a write's condition did not hold; nothing was committed")

// live is what a started app or service lends its publisher and front
// doors.
type live struct {
	door *frontdoor.Door
	app  *app.App
}

// door returns the started app's front door, or ErrNotStarted.
func (a *App) door() (*frontdoor.Door, error) {
	l := a.live.Load()
	if l == nil {
		return nil, ErrNotStarted
	}
	return l.door, nil
}

// Publish sends one event now, outside any delivery: the way a workflow
// starts, from an API or a job. It is NimBus's
// PublisherClient.Publish(event, sessionId, correlationId, messageId):
// the event goes to the endpoint's own topic (the topology forwards it to
// every endpoint that consumes its type) as an EventRequest with
// To = EventTypeId = p.EventTypeID, RetryCount 0, OriginatingFrom the
// endpoint, ParentMessageId and OriginatingMessageId "self", no From and
// a null EventId (the forwarder stamps one on each consumer's copy), the
// SessionId p.SessionID and the CorrelationId p.CorrelationID, and the
// trace context of ctx's span (the send is a producer span under it).
//
// p.MessageID is required, as for a handler's publish: NimBus's default
// id hashes the event's JSON, which matches another publisher's only when
// its JSON is byte for byte the same, and gives two genuinely different
// events with equal content one id; a business key ("OrderPlaced-" +
// orderID) names the step of the workflow on every retry. An empty
// p.SessionID or p.CorrelationID gets a new random UUID, as NimBus gives
// an event without a session key and a publish without a correlation id:
// events in a new session are in no order with any other.
//
// Publish sends once, bounded at 30 seconds whatever ctx's deadline, and
// returns the send's error: a Transient error when Service Bus could not
// be reached or did not answer in time (the event may or may not have
// gone out; publishing again with the same MessageId is safe downstream of
// an inbox), a Permanent one for a publication refused as Event.Publish
// refuses it. To make a write and its event one commit, use a FrontDoor.
// Before Run has started, it returns ErrNotStarted.
func (a *App) Publish(ctx context.Context, p Publication) error {
	d, err := a.door()
	if err != nil {
		return err
	}
	return publishNow(ctx, d, p)
}

func publishNow(ctx context.Context, d *frontdoor.Door, p Publication) error {
	mp, err := startedPublication(p)
	if err != nil {
		return err
	}
	if err := d.Publish(ctx, mp); err != nil {
		if errors.Is(err, message.ErrInvalidPublication) {
			return Permanent(err)
		}
		return Transient(err)
	}
	return nil
}

// startedPublication is p as a workflow's first event, with new session
// and correlation ids where p has none.
func startedPublication(p Publication) (message.Publication, error) {
	raw, err := encodePayload(p.Payload)
	if err != nil {
		return message.Publication{}, Permanent(err)
	}
	mp := message.Publication{EventTypeID: p.EventTypeID, MessageID: p.MessageID, EventJSON: raw, SessionID: p.SessionID, CorrelationID: p.CorrelationID}
	if mp.SessionID == "" {
		mp.SessionID = uuid.NewString()
	}
	if mp.CorrelationID == "" {
		mp.CorrelationID = uuid.NewString()
	}
	return mp, nil
}

// FrontDoor is a Cosmos DB container where the endpoint commits the
// requests that start workflows: an API's write and the events it
// publishes commit as one transactional batch, with a record of the
// request keyed by its idempotency key, so that the events go out if and
// only if the write was made, and a retried request commits nothing twice
// and gets the first one's answer.
//
// Register it before the app starts (App.FrontDoor, Service.FrontDoor):
// the OutboxSweep then covers the container from start-up, sending the
// events a failed send left behind. The container is reached as a
// transactional handler's is (see Container): in the inbox's Cosmos
// account, time to live on without a default, and in memory with
// NimBus__Inbox__Store=InMemory.
type FrontDoor struct {
	c      Container
	target atomic.Pointer[txn.Target]
	live   *atomic.Pointer[live]
}

// FrontDoor registers the container c as a front door of the app and
// returns the handle the app's code commits requests with. It panics
// on a Container without ids or with an unusable partition key path, and
// after the app started.
func (a *App) FrontDoor(c Container) *FrontDoor {
	t := txn.Target{DatabaseID: c.DatabaseID, ContainerID: c.ContainerID, PartitionKeyPath: c.PartitionKeyPath}
	if err := t.Validate(); err != nil {
		panic("nimbus: FrontDoor: " + err.Error())
	}
	f := &FrontDoor{c: c, live: &a.live}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		panic("nimbus: FrontDoor after the app started")
	}
	a.frontDoors = append(a.frontDoors, f)
	return f
}

// Request names a request a front door commits.
type Request struct {
	// PartitionKey is the partition the unit of work reads and writes,
	// and where the request's record is kept. Required.
	PartitionKey string
	// Key is the idempotency key: the HTTP Idempotency-Key header, or a
	// business key such as the order id. Required; at most 512
	// characters. A key is unique within the unit's partition: the record
	// lives there, beside the writes it guards, so the same key in another
	// partition is another request (its writes and events commit on their
	// own). Derive the partition from the request's content, so that a
	// retry of it lands in the same one.
	Key string
	// Fingerprint is what makes the request this request (for an HTTP
	// request, its body as the API understood it, normalised): the record
	// keeps its SHA-256, and a later request with the same key and another
	// fingerprint is refused with ErrKeyReused.
	Fingerprint []byte
}

// Begin opens the unit of work of request r on the front door's
// container, in partition r.PartitionKey: the same Tx a transactional
// handler gets. Reads run at once; writes and Publish queue until Commit.
// ctx's span is the trace context the published events carry. A Tx begun
// before the app started fails every call with ErrNotStarted; a bad
// partition key or key fails at Commit.
func (f *FrontDoor) Begin(ctx context.Context, r Request) *Tx {
	l := f.live.Load()
	if l == nil {
		return &Tx{u: txn.Failed(ErrNotStarted).Unit(), err: ErrNotStarted}
	}
	t := f.target.Load()
	sum := sha256.Sum256(r.Fingerprint)
	req := l.door.Begin(ctx, *t, r.PartitionKey, r.Key, hex.EncodeToString(sum[:]))
	return &Tx{u: req.Unit(), req: req}
}

// Committed is a request a front door committed.
type Committed struct {
	// Answer is the answer stored with the commit that made the request:
	// this call's, or, when Replayed, the first one's.
	Answer []byte
	// Replayed: the request had been committed before with this key (a
	// retry, a concurrent copy); this call wrote nothing and published
	// nothing new. An HTTP API answers it as it answered the first time
	// (for example 200 instead of 201, with the same body).
	Replayed bool
	// Sent: the request's events have all been sent. False when a send or
	// its mark failed: the events are kept in the record, and the
	// OutboxSweep or a retry of the request sends them (with the same
	// MessageIds). The request is committed either way.
	Sent bool
}

// Commit commits tx, begun by f.Begin: its writes, its events and the
// request's record (with answer, a JSON value of at most 16 KB, or nil)
// in one transactional batch, all or nothing; then it sends the events
// and marks the record dispatched, in three sequential round trips in
// all. There is no read before the batch: the record's create tells a
// retry apart. When the key was committed before, nothing of tx is
// written: Commit reads the record, sends the events it still holds, and
// returns its answer with Replayed set; ErrKeyReused when the record's
// fingerprint is not this request's. Concurrent requests with one key
// commit once: the others are Replayed.
//
// A send that fails after the commit is not an error (Committed.Sent is
// false). Each call Commit makes to Cosmos DB or Service Bus (the batch,
// the read of a replayed request's record, the send, the mark) is bounded
// at 30 seconds whatever ctx's deadline, so a request against a stalled
// connection is answered: a send or mark that timed out leaves the events
// to the OutboxSweep or a retry and Commit returns the committed answer,
// and a batch that timed out is a Transient error. The errors: ErrKeyReused; ErrConflict; a Transient error when
// the store could not be reached or did not answer (the batch may have
// been applied: retry the same request, which then finds the record); a
// Permanent one for a unit that cannot commit as queued (a limit, a bad
// key or partition key) or an answer that is not JSON.
func (f *FrontDoor) Commit(ctx context.Context, tx *Tx, answer []byte) (Committed, error) {
	if tx == nil || tx.err != nil {
		if tx != nil && errors.Is(tx.err, ErrNotStarted) {
			return Committed{}, ErrNotStarted
		}
		return Committed{}, Permanent(errors.New("nimbus: Commit needs a Tx begun by this FrontDoor"))
	}
	if tx.req == nil {
		return Committed{}, Permanent(errors.New("nimbus: a handler's Tx is committed by the pipeline; Commit takes a FrontDoor's Tx"))
	}
	res, err := tx.req.Commit(ctx, answer)
	switch {
	case err == nil:
		return Committed{Answer: res.Answer, Replayed: res.Replayed, Sent: res.Dispatched}, nil
	case errors.Is(err, frontdoor.ErrKeyReused):
		return Committed{}, ErrKeyReused
	case errors.Is(err, frontdoor.ErrInvalid):
		return Committed{}, Permanent(err)
	}
	switch txn.Classify(err) {
	case txn.Conflict:
		return Committed{}, fmt.Errorf("%w: %w", ErrConflict, err)
	case txn.Permanent:
		return Committed{}, Permanent(err)
	}
	if ctx.Err() != nil {
		return Committed{}, err
	}
	return Committed{}, Transient(err)
}

// bind fixes the front doors' containers under the settings.
func (a *App) bindFrontDoors(setting func(string) string) []txn.Target {
	out := make([]txn.Target, len(a.frontDoors))
	for i, f := range a.frontDoors {
		r := txRegistration{c: f.c}
		t, _, _ := r.target(setting)
		f.target.Store(&t)
		out[i] = t
	}
	return out
}
