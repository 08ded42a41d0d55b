// Package frontdoor starts workflows outside any delivery: it publishes an
// event with NimBus's Publish wire (Door.Publish), and runs a request's
// unit of work on one partition of a Cosmos DB container (Door.Begin):
// the caller's writes, the events it publishes and the request's record
// commit as one transactional batch, then the events are sent and the
// record marked dispatched.
//
// The record is an outbox marker (txn.Marker with Request set) keyed by
// (endpoint, idempotency key) in the request's partition. Its create is
// the request's deduplication: a second commit with the key fails on it
// and writes nothing; the record is then read, once, to tell a retry
// (same fingerprint: answered with the first request's stored answer,
// after sending what the first left undispatched) from another request
// that reuses the key (ErrKeyReused). A fresh commit that publishes costs
// three sequential round trips: the batch, one send, the mark.
//
// Events a failed send left in a record are sent by a retry of the
// request or by the OutboxSweep (package outbox), which finds records as
// it finds a delivery's markers.
package frontdoor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/resolver"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// MaxAnswerBytes bounds the answer a record keeps.
const MaxAnswerBytes = 16 << 10

// DefaultCallTimeout bounds each store or publisher call of a request
// when Door.CallTimeout is 0.
const DefaultCallTimeout = 30 * time.Second

// ErrKeyReused: the idempotency key was committed by a request with
// another fingerprint.
var ErrKeyReused = errors.New("frontdoor: the idempotency key was used by another request")

// ErrInvalid matches the errors of a request that cannot be committed as
// given (a bad key, answer or publication); nothing was sent.
var ErrInvalid = errors.New("frontdoor: invalid request")

// Door is an endpoint's front door. Its fields are set once; it is safe
// for concurrent use.
type Door struct {
	// EndpointID is the publishing endpoint: its topic, the events'
	// OriginatingFrom and the records' endpointId.
	EndpointID string
	// Store is the containers' store; nil when the endpoint has no front
	// door container (Begin's units then fail).
	Store txn.Store
	// Publisher sends to the endpoint's topic (traced).
	Publisher resolver.Publisher
	// Retention is how long a dispatched record, and so its key, is kept.
	Retention time.Duration
	// MaxEventBytes bounds an event's message (0: the default).
	MaxEventBytes int
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// CallTimeout bounds each call a request makes to the store or the
	// publisher once its unit is queued (the commit's batch, the read of
	// a replayed request's record, the send, the mark) and Publish's
	// send, under the caller's context, which may have no deadline: a
	// stalled connection fails that call instead of holding the request.
	// 0 means DefaultCallTimeout.
	CallTimeout time.Duration
}

// call runs f under ctx bounded by the door's call timeout.
func (d *Door) call(ctx context.Context, f func(context.Context) error) error {
	timeout := d.CallTimeout
	if timeout <= 0 {
		timeout = DefaultCallTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return f(ctx)
}

func (d *Door) now() time.Time {
	if d.Now == nil {
		return time.Now()
	}
	return d.Now()
}

// Publish sends one event now, in one round trip: p with NimBus's Publish
// wire (NewStartedEvent). The send runs in a producer span under ctx's,
// bounded by CallTimeout.
func (d *Door) Publish(ctx context.Context, p message.Publication) error {
	p.Endpoint, p.MaxBytes = d.EndpointID, d.MaxEventBytes
	out, err := message.NewStartedEvent(p)
	if err != nil {
		return err
	}
	return d.call(ctx, func(ctx context.Context) error { return d.Publisher.Publish(ctx, out) })
}

// Request is one request's unit of work, begun by Door.Begin.
type Request struct {
	d           *Door
	tx          *txn.Txn
	key         string
	fingerprint string
	trace       [2]string
	err         error
}

// Begin opens the unit of work of the request with idempotency key key
// and fingerprint on partition pk of target. ctx's span is the trace
// context of the events the request publishes.
func (d *Door) Begin(ctx context.Context, target txn.Target, pk, key, fingerprint string) *Request {
	r := &Request{d: d, tx: txn.Begin(d.Store, target, pk, d.Now), key: key, fingerprint: fingerprint}
	props := telemetry.Inject(ctx, nil)
	r.trace[0], _ = props[telemetry.PropTraceParent].(string)
	r.trace[1], _ = props[telemetry.PropTraceState].(string)
	switch {
	case d.Store == nil:
		r.err = fmt.Errorf("%w: the endpoint has no store for its front doors", ErrInvalid)
	case key == "":
		r.err = fmt.Errorf("%w: the idempotency key is empty", ErrInvalid)
	}
	return r
}

// Unit returns the request's unit of work.
func (r *Request) Unit() *txn.Unit { return r.tx.Unit() }

// Publish queues p in the unit: built as Door.Publish builds it, with
// the trace context of Begin's span, and stored in the record at commit.
func (r *Request) Publish(p message.Publication) error {
	p.Endpoint, p.MaxBytes = r.d.EndpointID, r.d.MaxEventBytes
	p.TraceParent, p.TraceState = r.trace[0], r.trace[1]
	out, err := message.NewStartedEvent(p)
	if err != nil {
		return err
	}
	s, err := message.StoredOf(out)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return r.tx.Unit().Publish(s)
}

// Result is a committed request.
type Result struct {
	// Replayed: an earlier request with the key had committed; this one
	// wrote and published nothing.
	Replayed bool
	// Answer is the answer the committing request stored.
	Answer json.RawMessage
	// Events is how many events the record holds undispatched when this
	// call found it (0 once dispatched).
	Events int
	// Dispatched: the events found were sent and the record marked.
	Dispatched bool
	// DispatchErr is why they were not (nil when there were none, or
	// they were): the sweep or a retry sends them.
	DispatchErr error
}

// Commit commits the unit with the request's record holding the
// published events and answer, in one transactional batch, then sends
// the events and marks the record dispatched. A second commit with the
// key writes nothing: it reads the record and answers its Answer with
// Replayed set, after sending any events the record still holds, or
// fails with ErrKeyReused when the record's fingerprint differs. A
// failed send or mark is not an error (Result.DispatchErr): the commit
// stands. Each of these calls is bounded by the door's CallTimeout, so a
// stalled connection makes Commit return within four of them at most: a
// batch that timed out is a *txn.AmbiguousError (it may have committed;
// retry the request), a send or mark that timed out a DispatchErr. The
// error is a txn error (Classify) or ErrInvalid, ErrKeyReused.
func (r *Request) Commit(ctx context.Context, answer json.RawMessage) (Result, error) {
	if r.err != nil {
		return Result{}, r.err
	}
	if len(answer) > MaxAnswerBytes || (answer != nil && !json.Valid(answer)) {
		return Result{}, fmt.Errorf("%w: the answer must be JSON of at most %d bytes", ErrInvalid, MaxAnswerBytes)
	}
	d := r.d
	var rc txn.Receipt
	err := d.call(ctx, func(ctx context.Context) (err error) {
		rc, err = r.tx.Commit(ctx, txn.Marker{
			EndpointID: d.EndpointID, MessageID: r.key, Retention: d.Retention, Outbox: true,
			Request: &txn.Request{Fingerprint: r.fingerprint, Answer: answer},
		})
		return err
	})
	var dup *txn.DuplicateError
	switch {
	case err == nil:
		res := Result{Answer: answer}
		d.finish(ctx, &res, rc.Pending)
		return res, nil
	case !errors.As(err, &dup):
		return Result{}, err
	}
	u := r.tx.Unit()
	var st txn.MarkerState
	err = d.call(ctx, func(ctx context.Context) (err error) {
		st, err = txn.ReadRequest(ctx, d.Store, u.Target(), u.PartitionKey(), d.EndpointID, r.key)
		return err
	})
	switch {
	case err != nil:
		return Result{}, err
	case !st.Found || st.Request == nil:
		// The record expired between the batch and the read.
		return Result{}, &txn.TransientError{Status: 404}
	case st.Request.Fingerprint != r.fingerprint:
		return Result{}, ErrKeyReused
	}
	res := Result{Replayed: true, Answer: st.Request.Answer}
	d.finish(ctx, &res, st.Pending)
	return res, nil
}

// finish sends p's events and marks the record, recording the outcome in
// res; p nil means nothing is left to send.
func (d *Door) finish(ctx context.Context, res *Result, p *txn.Pending) {
	if p == nil {
		res.Dispatched = true
		return
	}
	res.Events = len(p.Events)
	if err := d.call(ctx, func(ctx context.Context) error { return resolver.PublishAll(ctx, d.Publisher, p.Messages()) }); err != nil {
		res.DispatchErr = err
		return
	}
	if err := d.call(ctx, func(ctx context.Context) error {
		_, err := txn.MarkDispatched(ctx, d.Store, p, d.Retention, d.now())
		return err
	}); err != nil {
		res.DispatchErr = err
		return
	}
	res.Dispatched = true
}
