package subscriber

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/sleep"
	"github.com/nimbus-go/functions-subscriber/internal/txn"
)

// A transactional handler (Registry.HandleTx) keeps its state in one
// partition of one Cosmos DB container. For it the pipeline:
//
//   - derives the partition key value from the event before the inbox
//     check, and reads the inbox marker of every key the plain path would
//     check in that partition, alongside the inbox check and the
//     session-state read (one round trip): a marker or an inbox record
//     makes the delivery a duplicate;
//   - runs the handler on a unit of work bound to the partition;
//   - on success commits the handler's queued operations with one marker
//     per key the plain path would record, markers first, as ONE
//     transactional batch; the separate inbox document is not written.
//
// The batch's verdict maps to the outcome table: committed goes on as a
// recorded success; a marker that already exists is a duplicate; a
// handler operation that conflicts (409, 412, 404) is OutcomeTxnConflict;
// throttling, unavailability and a container with time to live off are
// OutcomeTransientFailure; a batch that may have been applied is
// OutcomeTxnAmbiguous (the redelivery's marker read decides); a broken
// limit or a refused operation is OutcomeTxnRejected (dead-letter path).
// The verdict's outcome is decided where every failure's is (outcomeOf).

// Spans of a transactional handler's batch, and of the mark that its
// events were dispatched.
const (
	spanTxnCommit  = "nimbus.txn.commit"
	spanOutboxMark = "nimbus.outbox.mark"
)

// txState is a transactional delivery's partition.
type txState struct {
	// pk is the partition key value; pkErr why it could not be derived
	// (the handler then fails permanently, after the plain inbox check).
	pk    string
	pkErr error

	// mu guards pending, which the marker reads of the lookup set
	// concurrently.
	mu sync.Mutex
	// pending is a marker's outbox whose events are not yet dispatched:
	// this delivery's commit's, or one a marker read found (another copy
	// of the message committed it).
	pending *txn.Pending
	// bare is set when a marker read found a marker that holds no events:
	// nothing in it records whether the delivery that committed it sent its
	// ResolutionResponse.
	bare bool

	// sent: an outbox's events and its ResolutionResponse were sent
	// (dispatchOutbox), so the delivery's answer is sent. Only the job's
	// goroutine reads and writes it.
	sent bool
}

// outboxSent reports whether s (nil for a plain handler's event) sent an
// outbox's events with the ResolutionResponse.
func (s *txState) outboxSent() bool { return s != nil && s.sent }

// keepBare notes a marker found that holds no events.
func (s *txState) keepBare() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bare = true
}

// foundBare reports whether a marker read found a marker without events.
func (s *txState) foundBare() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bare
}

// keepPending keeps p, unless an outbox is kept already.
func (s *txState) keepPending(p *txn.Pending) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		s.pending = p
	}
}

// takePending returns the outbox kept, and forgets it.
func (s *txState) takePending() *txn.Pending {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pending
	s.pending = nil
	return p
}

// prepareTx derives the partition key value of an event of a
// transactional handler, before the inbox check: the first call does, the
// later ones find j.tx set (a plain handler's event has none to derive).
func (j *job) prepareTx() {
	if j.tx != nil || !j.hasHandler || j.h.tx == nil {
		return
	}
	j.tx = &txState{}
	j.tx.pk, j.tx.pkErr = partitionKey(j.h.tx, j.event())
}

// partitionKey evaluates b's partition key function; a panic or an empty
// value is an error.
func partitionKey(b *TxBinding, ev *Event) (pk string, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("the partition key function panicked: %v", v)
		}
	}()
	pk, err = b.PartitionKey(ev)
	switch {
	case err != nil:
		return "", fmt.Errorf("deriving the partition key of %s: %w", b.Target.ContainerID, err)
	case pk == "":
		return "", fmt.Errorf("the partition key of %s is empty", b.Target.ContainerID)
	}
	return pk, txn.CheckPartitionKey(pk)
}

// readsMarkers reports whether the lookup reads markers.
func (j *job) readsMarkers() bool { return j.tx != nil && j.tx.pkErr == nil }

// hasMarker is the marker read of k, in the lookup's parallel step. A
// marker that holds events not yet dispatched is kept (j.tx.pending), for
// the duplicate's answer to finish their dispatch; one that holds no
// events is noted (j.tx.bare), for a redelivery's answer to resolve.
func (j *job) hasMarker(ctx context.Context, k inbox.Key) (bool, error) {
	cctx, span := j.p.o.Tracer.Start(ctx, spanInboxCheck)
	if span.IsRecording() {
		span.SetAttributes(attribute.Bool("nimbus.inbox.marker", true))
	}
	st, err := txn.ReadMarker(cctx, j.p.o.Txn, j.h.tx.Target, j.tx.pk, k.EndpointID, k.MessageID)
	if err != nil {
		err = NewStoreError(opMarkerCheck, err)
		endSpan(span, err)
		return false, err
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.Bool("nimbus.inbox.duplicate", st.Found))
		if st.Pending != nil {
			span.SetAttributes(attribute.Int("nimbus.outbox.pending", len(st.Pending.Events)))
		}
	}
	span.End()
	switch {
	case st.Pending != nil:
		j.tx.keepPending(st.Pending)
	case st.Found && st.OutboxIDs == nil:
		j.tx.keepBare()
	}
	return st.Found, nil
}

// runTx runs the transactional handler in a new transaction on the
// delivery's partition and, when it succeeded without a handoff, commits
// its queued writes with one marker per key (nil keys are skipped) as one
// batch. The unit is sealed when the handler returns (or panics), so
// nothing its goroutines queue later is committed. A batch another copy's
// marker beat is a duplicate. A batch that conflicted is run again, from
// the handler on, in a new transaction on fresh reads, as long as rerunTx
// allows; the last run's answer is the delivery's. A batch that was not
// committed is the error, a *commitError.
func (j *job) runTx(ctx context.Context, keys []*inbox.Key) (handled, error) {
	j.prepareTx()
	if j.tx.pkErr != nil {
		// The handler cannot run without its partition.
		return handled{}, &handlerStop{err: Permanent(j.tx.pkErr)}
	}
	for {
		a, conflict, err := j.attemptTx(ctx, keys)
		if !conflict || !j.rerunTx(ctx) {
			return a, err
		}
	}
}

// attemptTx is one run of the transactional handler and its batch. Every
// run begins its own transaction: nothing a former run queued (or a
// goroutine of it queues late) is in it. conflict reports a batch that
// was not committed because a handler operation conflicted.
func (j *job) attemptTx(ctx context.Context, keys []*inbox.Key) (a handled, conflict bool, err error) {
	t := txn.Begin(j.p.o.Txn, j.h.tx.Target, j.tx.pk, j.p.o.Now)
	a, err = j.run(ctx, func(ctx context.Context, ev *Event) (Result, error) {
		// The outbox is sealed before the unit: a goroutine's publish that
		// comes as the handler returns is refused by the outbox (to the
		// goroutine alone), never by the sealed unit, whose refusal would
		// fail the delivery.
		defer t.Seal()
		defer j.out.seal()
		return j.h.txh(ctx, ev, t.Unit())
	}, j.queueEvent(t.Unit()))
	if err != nil || a.kind != handledCompleted {
		return a, false, err
	}
	sctx := j.settling(ctx)
	switch verdict, err := j.commit(sctx, t, keys); verdict {
	case txn.Committed:
		// The events go out before anything else follows the commit: in
		// one send with the ResolutionResponse, then the mark.
		return a, false, j.dispatchOutbox(sctx)
	case txn.Duplicate:
		j.did.inbox = InboxDuplicate
		// The copy that committed may not have sent its events yet.
		if err := j.readOwnOutbox(sctx); err != nil {
			return handled{}, false, err
		}
		return handled{kind: handledDuplicate}, false, nil
	default:
		return handled{}, verdict == txn.Conflict, &commitError{verdict: verdict, err: err}
	}
}

// queueEvent returns the outbox's queue of a transactional run: each
// published event goes into u, to be stored in the delivery's own inbox
// marker. A delivery whose inbox is bypassed has no marker to keep events
// in, so it cannot publish.
func (j *job) queueEvent(u *txn.Unit) func(*message.Outgoing) error {
	return func(m *message.Outgoing) error {
		if j.own == nil {
			return fmt.Errorf("%w: the delivery has no inbox marker to keep its events in (its inbox check is bypassed: %s)",
				message.ErrInvalidPublication, j.did.bypassReason)
		}
		st, err := message.StoredOf(m)
		if err != nil {
			return err
		}
		return u.Publish(st)
	}
}

// readOwnOutbox reads the delivery's own marker after its batch lost to
// another copy's, and keeps its outbox when its events are not yet
// dispatched.
func (j *job) readOwnOutbox(ctx context.Context) error {
	if j.own == nil {
		return nil
	}
	_, err := j.hasMarker(ctx, *j.own)
	return err
}

// dispatchOutbox sends the events of the outbox kept (the delivery's own
// commit's, or another copy's a marker read found), in publish order, and
// then the stored ResolutionResponse, in one send; then it marks the marker
// dispatched. Without an outbox it does nothing. A failed send is an
// *eventsError (committed): the redelivery finds the marker and sends the
// same messages again. A failed mark is tried again within the invocation
// as an inbox record is (retryWrite); one that still fails is a
// *StoreError: the events went out, and the redelivery (or the
// OutboxSweep) sends them again with the same MessageIds before it marks
// them.
func (j *job) dispatchOutbox(ctx context.Context) error {
	p := j.tx.takePending()
	if p == nil {
		return nil
	}
	ms := p.Messages()
	if p.Response == nil {
		// A marker stored without its response: answer as the delivery that
		// committed would have.
		ms = append(ms, message.NewResponse(j.in, message.Resolution, j.timings(), nil))
	}
	if err := j.p.publishAll(ctx, ms); err != nil {
		return &eventsError{n: len(p.Events), committed: true, err: err, canceled: errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)}
	}
	j.did.eventsPublished += len(p.Events)
	j.did.responded = true
	j.tx.sent = true
	cctx, span := j.p.o.Tracer.Start(ctx, spanOutboxMark)
	err := j.p.retryWrite(cctx, &j.did.markRetries, refusedForGood, func() error {
		_, err := txn.MarkDispatched(cctx, j.p.o.Txn, p, j.p.o.MarkerRetention, j.p.o.Now())
		return err
	})
	if err != nil {
		err = NewStoreError(opOutboxDispatched, err)
		endSpan(span, err)
		return err
	}
	span.End()
	return nil
}

// refusedForGood reports a store failure no retry changes: a refused or
// invalid request (txn.Permanent).
func refusedForGood(err error) bool { return txn.Classify(err) == txn.Permanent }

// rerunTx decides whether a batch that conflicted is run again and, if so,
// waits before the re-run: not once TxnConflictReruns re-runs were made,
// nor when the invocation is cancelled before or during the wait (the
// conflict is then answered: 503 after the redelivery pause, which the
// cancellation also ends). The wait is drawn uniformly from zero to
// TxnRerunBackoff·2^n after n re-runs, at most TxnRerunMaxBackoff (full
// jitter: deliveries that conflicted together spread out). The conflicted
// batch's settle context is released: the re-run's batch, and what follows
// it, get a SettleTimeout of their own.
func (j *job) rerunTx(ctx context.Context) bool {
	n := j.did.txnReruns
	if n >= j.p.o.TxnConflictReruns || ctx.Err() != nil {
		return false
	}
	sleep.For(ctx, j.p.txnRerunWait(n))
	if ctx.Err() != nil {
		return false
	}
	j.endSettle()
	j.did.txnReruns++
	return true
}

// txnRerunWait is the wait before re-run n+1 (n re-runs made).
func (p *Pipeline) txnRerunWait(n int) time.Duration {
	bound := p.o.TxnRerunBackoff
	for range n {
		if bound >= p.o.TxnRerunMaxBackoff {
			break
		}
		bound *= 2
	}
	bound = min(bound, p.o.TxnRerunMaxBackoff)
	return time.Duration(p.o.Rand() * float64(bound))
}

// commit commits t's queued writes with one marker per key (nil keys are
// skipped), markers first, as one transactional batch, and returns the
// batch's verdict. The error of a batch that was not committed is the
// txn package's for a conflict or a refusal (its text names operations,
// statuses and limits, never document content; a refusal is Permanent),
// and a *StoreError, which keeps only a class, for a batch that may have
// been applied or may succeed later (the cause is a transport error, whose
// text may name the account).
func (j *job) commit(ctx context.Context, t *txn.Txn, keys []*inbox.Key) (txn.Outcome, error) {
	var markers []txn.Marker
	for _, k := range keys {
		if k == nil {
			continue
		}
		m := txn.Marker{EndpointID: k.EndpointID, MessageID: k.MessageID, Retention: j.p.o.MarkerRetention}
		if k == j.own && j.out != nil && j.out.queued > 0 {
			// The delivery's own marker holds the events, with the
			// ResolutionResponse to send with them (now and on every later
			// send).
			resp, err := message.StoredOf(message.NewResponse(j.in, message.Resolution, j.timings(), nil))
			if err != nil {
				return txn.Permanent, Permanent(err)
			}
			m.Outbox, m.Response = true, &resp
		}
		markers = append(markers, m)
	}
	cctx, span := j.p.o.Tracer.Start(ctx, spanTxnCommit)
	rc, err := t.Commit(cctx, markers...)
	if rc.Pending != nil {
		j.tx.keepPending(rc.Pending)
	}
	verdict := txn.Classify(err)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("nimbus.txn.outcome", verdict.String()))
	}
	switch verdict {
	case txn.Committed, txn.Duplicate:
		err = nil
	case txn.Conflict:
	case txn.Permanent:
		err = Permanent(err)
	default:
		err = NewStoreError(opTxnCommit, err)
	}
	endSpan(span, err)
	return verdict, err
}
