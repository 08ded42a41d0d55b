package subscriber

import (
	"context"
	"errors"
	"fmt"
	"time"

	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/session"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// Deferred reaches the parked copies of a session: the endpoint topic's
// Deferred session subscription.
type Deferred interface {
	// Accept locks the session's parked copies for this replay. It returns
	// an error wrapping ErrSessionLocked when another replay holds them.
	Accept(ctx context.Context, sessionID string) (DeferredSession, error)
}

// DeferredSession is one locked session of parked copies.
type DeferredSession interface {
	// Next returns the next parked copy, locked. It returns an error
	// wrapping ErrNoParked when ctx ends before one arrives.
	Next(ctx context.Context) (*Parked, error)
	// Complete removes p.
	Complete(ctx context.Context, p *Parked) error
	// Abandon returns p for a later replay (its delivery count goes up).
	Abandon(ctx context.Context, p *Parked) error
	// DeadLetter moves p to the dead-letter queue.
	DeadLetter(ctx context.Context, p *Parked, reason, description string) error
	// RenewLock extends the session lock.
	RenewLock(ctx context.Context) error
	// Close releases the session; unsettled copies return to it.
	Close(ctx context.Context) error
}

// Parked is a parked copy as received from the Deferred subscription.
type Parked struct {
	Delivery
	// Handle is the transport's message, for settlement.
	Handle any
}

// ErrSessionLocked: another replay holds the session's parked copies.
var ErrSessionLocked = errors.New("the session's parked messages are locked by another replay")

// ErrNoParked: no parked copy arrived before the wait ended.
var ErrNoParked = errors.New("no parked message arrived")

// Why a replay stopped (Report.DrainStop).
const (
	DrainCaughtUp      = "caught_up"
	DrainBlocked       = "blocked"
	DrainNothingWaits  = "nothing_waiting"
	DrainWaiting       = "waiting_for_parked_copies"
	DrainBudgetSpent   = "budget_spent"
	DrainReplayFailure = "replay_failure"
)

// sweepWait is how long a replay that has caught up (nothing counted as
// waiting: a message arriving from now on is handled at once) still waits
// for a stale copy to remove before it ends.
const sweepWait = 200 * time.Millisecond

// renewEvery is how often the session lock is renewed during a replay
// (the Deferred subscription's lock lasts 30 s in NimBus's topology).
const renewEvery = 10 * time.Second

// Drain handles a ProcessDeferredRequest from the DeferredProcessor
// subscription: it locks the session's parked copies and replays them in
// order, each through the subscriber contract (inbox check of the copy and
// of the source MessageId it carries, handler, record, response), until
// none is left, the session is blocked again, or the replay budget is
// spent (then a new replay request continues it).
//
// The invariant it keeps with the park path: while any parked copy of a
// session has not been replayed (DeferredCount > 0), a new message of that
// session is parked behind it, so nothing overtakes a parked copy; the
// count drops only after a copy is settled, and a park that loses the race
// with the last decrement handles its message instead of parking it.
func (p *Pipeline) Drain(ctx context.Context, d *Delivery) (r Report) {
	start := p.o.Now()
	defer func() { r.Duration = p.o.Now().Sub(start) }()
	r.Inbox = InboxNotReached
	r.MessageID = deref(d.Broker.MessageID)
	r.DeliveryCount = d.Broker.DeliveryCount
	t, res, ok := replayRequestType(d.Properties)
	if t != message.Unknown {
		r.MessageType = t.String()
	}
	if !ok {
		p.finish(&r, res)
		return r
	}
	sid := deref(d.Broker.SessionID)
	if sid == "" {
		sid, _ = message.PropertyString(d.Properties, message.PropSessionID)
	}
	r.SessionID = sid
	if sid == "" {
		r.Outcome, r.Err = OutcomeInvalidMessage, errors.New("the replay request has no SessionId")
		return r
	}
	if p.o.Sessions == nil || p.o.Deferred == nil {
		r.Outcome, r.Err = OutcomeReplayFailed, errors.New("replay is not configured (no session store or Deferred subscription)")
		return r
	}
	key := session.NewKey(p.o.EndpointID, sid)
	if err := key.Check(); err != nil {
		r.Outcome, r.Err = OutcomeInvalidMessage, err
		return r
	}
	trigger := &message.Inbound{Broker: message.Broker{SessionID: &sid}}

	st, err := p.o.Sessions.Read(ctx, key)
	if err != nil {
		p.replayFailed(&r, "read the session state", err)
		return r
	}
	switch {
	case st.Blocked() && (st.DeferredCount == 0 || d.Broker.DeliveryCount <= 1):
		// A retried replay request goes on while copies wait: the head copy
		// may be the one that blocked the session in the failed replay
		// without its answer going out, and is handled again (replayOne
		// leaves any other copy parked).
		r.Outcome, r.DrainStop = OutcomeDrained, DrainBlocked
		return r
	case st.DeferredCount == 0:
		r.Outcome, r.DrainStop = OutcomeDrained, DrainNothingWaits
		return r
	}
	sess, err := p.o.Deferred.Accept(ctx, sid)
	if err != nil {
		if errors.Is(err, ErrSessionLocked) {
			r.Outcome, r.Err = OutcomeDrainBusy, err
			return r
		}
		p.replayFailed(&r, "lock the parked messages", err)
		return r
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.o.SettleTimeout)
		defer cancel()
		_ = sess.Close(cctx)
	}()
	renewCtx, stopRenew := context.WithCancel(ctx)
	defer stopRenew()
	go func() {
		t := time.NewTicker(renewEvery)
		defer t.Stop()
		for {
			select {
			case <-renewCtx.Done():
				return
			case <-t.C:
				_ = sess.RenewLock(renewCtx)
			}
		}
	}()

	deadline := start.Add(p.o.ReplayBudget)
	for {
		if !p.o.Now().Before(deadline) {
			// Hand what is left to a new replay.
			j := &job{p: p, r: &r, in: trigger, hasSession: true}
			if err := j.requestReplay(ctx); err != nil {
				p.finish(&r, failure(err))
				return r
			}
			r.Outcome, r.DrainStop = OutcomeDrained, DrainBudgetSpent
			return r
		}
		wait := p.o.ReplayWait
		if st.DeferredCount == 0 {
			// Caught up: only a last sweep for stale copies (a copy parked
			// twice, or whose removal was lost) before the replay ends.
			wait = min(wait, sweepWait)
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		pc, err := sess.Next(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				r.Outcome, r.Err = OutcomeCanceled, ctx.Err()
				return r
			}
			if !errors.Is(err, ErrNoParked) {
				p.replayFailed(&r, "receive a parked message", err)
				return r
			}
			// Nothing more arrived. A copy whose park is still being sent
			// is followed by its own replay request. (The state last seen
			// only names why the replay stopped.)
			r.Outcome, r.DrainStop = OutcomeDrained, DrainCaughtUp
			if st.DeferredCount > 0 && !st.Blocked() {
				r.DrainStop = DrainWaiting
			}
			return r
		}
		seq, hasSeq := message.DeferralSequenceOf(pc.Properties)
		if hasSeq && st.Stale(seq) {
			// Behind the cursor: replayed already, its removal failed or
			// the process died before it. Remove it without a replay.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.o.SettleTimeout)
			err := sess.Complete(sctx, pc)
			cancel()
			if err != nil {
				p.replayFailed(&r, "complete a stale parked message", err)
				return r
			}
			continue
		}
		rr := p.replayOne(ctx, sid, pc, &st)
		if rr.DrainStop == DrainBlocked {
			// The copy was parked behind a block that came after this
			// replay started: it stays parked (unsettled, Close returns it)
			// until that block is lifted and a new replay is requested.
			r.Outcome, r.DrainStop = OutcomeDrained, DrainBlocked
			return r
		}
		r.Replays = append(r.Replays, rr)

		spec := rr.Outcome.Spec()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.o.SettleTimeout)
		if !spec.Completes() && (spec.Pause || rr.Outcome == OutcomeCanceled) {
			// Transient: give the copy back and let the replay request be
			// redelivered after the pause.
			if pc.Broker.DeliveryCount >= p.o.MaxDeliveryCount {
				p.sendNotice(sctx, &rr, replayInbound(p, sid, pc))
			}
			_ = sess.Abandon(sctx, pc)
			cancel()
			r.Outcome, r.Err, r.DrainStop = OutcomeReplayFailed, rr.Err, DrainReplayFailure
			if rr.Outcome == OutcomeCanceled {
				r.Outcome = OutcomeCanceled
			}
			return r
		}
		// The cursor moves past the copy before the copy is removed: once
		// handled, a copy counts as replayed even if its removal fails (it
		// comes back stale), so the count never stays above what waits.
		p.o.Metrics.Inc(telemetry.DeferredReplayed, "", "")
		j := &job{p: p, r: &r, sk: key, hasSession: true, st: st}
		err = j.change(sctx, "replayed", func(s session.State) (session.State, bool, error) {
			n, changed := s.Replayed(seq)
			return n, changed, nil
		})
		if err != nil {
			cancel()
			p.finish(&r, failure(err))
			r.Outcome, r.DrainStop = OutcomeReplayFailed, DrainReplayFailure
			return r
		}
		st = j.st
		if spec.Completes() {
			if err := sess.Complete(sctx, pc); err != nil {
				cancel()
				p.replayFailed(&r, "complete a replayed message", err)
				return r
			}
		} else {
			// A permanent failure: tell the Resolver, then dead-letter the
			// copy (the replay holds it, so it can).
			p.sendNotice(sctx, &rr, replayInbound(p, sid, pc))
			reason, desc := deadLetterTexts(&rr)
			if err := sess.DeadLetter(sctx, pc, reason, desc); err != nil {
				cancel()
				p.replayFailed(&r, "dead-letter a replayed message", err)
				return r
			}
		}
		cancel()
		if st.Blocked() {
			r.Outcome, r.DrainStop = OutcomeDrained, DrainBlocked
			return r
		}
	}
}

// replayRequestType checks that a DeferredProcessor delivery is a replay
// request: a MessageType that is missing or unreadable is an invalid
// message, any type but ProcessDeferredRequest one the function does not
// take; both take the dead-letter path (the endpoint itself is the only
// sender on that subscription, and it sends nothing else there).
func replayRequestType(props map[string]any) (message.Type, result, bool) {
	raw, ok := message.PropertyString(props, message.PropMessageType)
	if !ok {
		err := &message.InvalidMessageError{Property: message.PropMessageType, Reason: "is not defined"}
		return message.Unknown, result{outcome: OutcomeInvalidMessage, err: err, deadLetter: invalidDeadLetter(err, props)}, false
	}
	t, ok := message.ParseType(raw)
	if !ok {
		err := &message.InvalidMessageError{Property: message.PropMessageType, Reason: fmt.Sprintf("cannot be parsed (%d characters)", len(raw))}
		return message.Unknown, result{outcome: OutcomeInvalidMessage, err: err, deadLetter: invalidDeadLetter(err, props)}, false
	}
	if t != message.ProcessDeferredRequest {
		return t, unsupportedType(t), false
	}
	return t, result{}, true
}

// replayOne runs one parked copy through the subscriber contract as the
// message NimBus's replay would republish: the copy's properties without
// OriginalSessionId, DeferralSequence and To, To = the endpoint.
func (p *Pipeline) replayOne(ctx context.Context, sid string, pc *Parked, st *session.State) (rr Report) {
	start := p.o.Now()
	defer func() { rr.Duration = p.o.Now().Sub(start) }()
	// The copy continues the trace of the event it carries (its
	// traceparent, which NimBus's replay republishes unchanged), not the
	// replay request's; its span links to the replay's.
	if rctx := telemetry.Extract(ctx, pc.Properties); oteltrace.SpanContextFromContext(rctx).IsRemote() {
		var span oteltrace.Span
		ctx, span = p.o.Tracer.Start(rctx, spanReplay, oteltrace.WithSpanKind(oteltrace.SpanKindConsumer),
			oteltrace.WithLinks(oteltrace.LinkFromContext(ctx)))
		defer span.End()
	}
	ctx, rr.Charge = telemetry.WithPartCharge(ctx)
	b := pc.Broker
	b.SessionID = &sid
	d := &Delivery{Broker: b, Properties: message.ReplayedProperties(pc.Properties, p.o.EndpointID), Body: pc.Body}
	j := &job{p: p, r: &rr, d: d, start: start, attempt: AttemptReplay, replaying: true}
	rr.Inbox = InboxNotReached
	rr.MessageID = deref(b.MessageID)
	rr.SessionID = sid
	rr.DeliveryCount = b.DeliveryCount
	rr.DeferralSequence, _ = message.DeferralSequenceOf(pc.Properties)
	j.st = *st
	defer func() { *st = j.st }()
	p.finish(&rr, j.replay(ctx))
	return rr
}

// replay reads the parked copy and handles it as an original delivery of
// its event would be, unless the session is blocked by another event.
func (j *job) replay(ctx context.Context) result {
	d := j.d
	in, err := message.ReadWith(d.Broker, d.Properties, d.Body, j.p.o.CloudEvents)
	if err != nil {
		return result{outcome: OutcomeInvalidMessage, err: err}
	}
	j.setInbound(in)
	if in.Type != message.EventRequest && in.Type != message.UnsupportedResponse {
		return result{outcome: OutcomeUnsupportedMessageType, err: &UnsupportedTypeError{Type: in.Type.String()}}
	}
	if src := in.InboxMessageID; src != nil && *src != "" {
		j.source = *src
	}
	j.ownKey()
	src := j.sourceKey()
	// The state is read with the inbox checks (no extra round trip): the
	// session may have been blocked again since this replay last saw it.
	dup, err := j.lookup(ctx, []*inbox.Key{j.own, src}, true)
	if err != nil {
		return failure(err)
	}
	if dup {
		return j.duplicate(ctx)
	}
	if j.st.Blocked() && !j.isBlocker(j.st) {
		// Parked behind another event's block: not this replay's to handle.
		j.r.DrainStop = DrainBlocked
		return result{outcome: OutcomeDrained}
	}
	return j.handleEvent(ctx, []*inbox.Key{src, j.own})
}

// replayInbound reads a parked copy leniently, for its dead-letter notice.
func replayInbound(p *Pipeline, sid string, pc *Parked) *message.Inbound {
	b := pc.Broker
	b.SessionID = &sid
	return message.ReadLenient(b, message.ReplayedProperties(pc.Properties, p.o.EndpointID), pc.Body)
}

func (p *Pipeline) replayFailed(r *Report, what string, err error) {
	r.Outcome, r.DrainStop = OutcomeReplayFailed, DrainReplayFailure
	if errors.Is(err, context.Canceled) {
		r.Outcome = OutcomeCanceled
	}
	r.Err = fmt.Errorf("%s: %w", what, err)
}
