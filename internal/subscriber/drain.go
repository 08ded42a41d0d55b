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
func (p *Pipeline) Drain(ctx context.Context, d *Delivery) Report {
	start := p.o.Now()
	var t trail
	req, err := readReplayRequest(d.Properties)
	if err == nil {
		t.drainStop, err = p.drain(ctx, d, req, &t, start.Add(p.o.ReplayBudget))
	}
	// A replay that failed on its way stopped there.
	var failed *replayError
	var copyFailed *copyError
	if errors.As(err, &failed) || errors.As(err, &copyFailed) {
		t.drainStop = DrainReplayFailure
	}
	t.duration = p.o.Now().Sub(start)
	return p.report(d, req, &t, ending(OutcomeDrained, err, d.Properties))
}

// readReplayRequest reads a DeferredProcessor delivery as a replay request.
// A MessageType that is missing or unreadable is an invalid message (req is
// nil), any type but ProcessDeferredRequest one the function does not
// take: both take the dead-letter path (the endpoint itself is the only
// sender on that subscription, and it sends nothing else there).
func readReplayRequest(props map[string]any) (req *message.Inbound, err error) {
	raw, ok := message.PropertyString(props, message.PropMessageType)
	if !ok {
		return nil, &message.InvalidMessageError{Property: message.PropMessageType, Reason: "is not defined"}
	}
	t, ok := message.ParseType(raw)
	if !ok {
		return nil, &message.InvalidMessageError{Property: message.PropMessageType, Reason: fmt.Sprintf("cannot be parsed (%d characters)", len(raw))}
	}
	if t != message.Unknown {
		req = &message.Inbound{Type: t}
	}
	if t != message.ProcessDeferredRequest {
		return req, &UnsupportedTypeError{Type: t.String()}
	}
	return req, nil
}

// drain replays the parked copies of req's session, until deadline; it
// returns why it stopped. t receives the session and the replayed copies.
func (p *Pipeline) drain(ctx context.Context, d *Delivery, req *message.Inbound, t *trail, deadline time.Time) (stop string, err error) {
	sid := deref(d.Broker.SessionID)
	if sid == "" {
		sid, _ = message.PropertyString(d.Properties, message.PropSessionID)
	}
	t.sessionID = sid
	switch {
	case sid == "":
		return "", errNoReplaySession
	case p.o.Sessions == nil || p.o.Deferred == nil:
		return "", errReplayOff
	}
	key := session.NewKey(p.o.EndpointID, sid)
	if err := key.Check(); err != nil {
		return "", err
	}
	req.SessionID = &sid
	st, err := p.o.Sessions.Read(ctx, key)
	if err != nil {
		return "", &replayError{step: "read the session state", err: err}
	}
	switch {
	case st.Blocked() && (st.DeferredCount == 0 || d.Broker.DeliveryCount <= 1):
		// A retried replay request goes on while copies wait: the head copy
		// may be the one that blocked the session in the failed replay
		// without its answer going out, and is handled again (replayCopy
		// leaves any other copy parked).
		return DrainBlocked, nil
	case st.DeferredCount == 0:
		return DrainNothingWaits, nil
	}
	sess, err := p.o.Deferred.Accept(ctx, sid)
	switch {
	case errors.Is(err, ErrSessionLocked):
		return "", err
	case err != nil:
		return "", &replayError{step: "lock the parked messages", err: err}
	}
	defer p.release(ctx, sess)
	defer keepLocked(ctx, sess)()
	return p.replayParked(ctx, sess, key, req, st, deadline, t)
}

// release closes sess, also when ctx was cancelled: its unsettled copies
// return to the session.
func (p *Pipeline) release(ctx context.Context, sess DeferredSession) {
	cctx, cancel := p.settleCtx(ctx)
	defer cancel()
	_ = sess.Close(cctx)
}

// keepLocked renews sess's lock every renewEvery until stop is called.
func keepLocked(ctx context.Context, sess DeferredSession) (stop func()) {
	ctx, stop = context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(renewEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = sess.RenewLock(ctx)
			}
		}
	}()
	return stop
}

// replayParked replays the parked copies of session key, locked in sess
// and last seen in state st, one by one in order, until none is left, the
// session is blocked again, or deadline passes: then a new replay request
// for req's session continues the replay. It returns why it stopped; each
// replayed copy's report goes to t.
func (p *Pipeline) replayParked(ctx context.Context, sess DeferredSession, key session.Key, req *message.Inbound, st session.State,
	deadline time.Time, t *trail) (stop string, err error) {
	for {
		if !p.o.Now().Before(deadline) {
			// Hand what is left to a new replay.
			if err := p.requestReplay(ctx, req); err != nil {
				return "", err
			}
			t.replayRequested = true
			return DrainBudgetSpent, nil
		}
		pc, err := p.nextParked(ctx, sess, st.DeferredCount == 0)
		switch {
		case err != nil:
			return "", err
		case pc == nil && st.DeferredCount > 0 && !st.Blocked():
			// Nothing more arrived. A copy whose park is still being sent
			// is followed by its own replay request. (The state last seen
			// only names why the replay stopped.)
			return DrainWaiting, nil
		case pc == nil:
			return DrainCaughtUp, nil
		}
		if seq, ok := message.DeferralSequenceOf(pc.Properties); ok && st.Stale(seq) {
			// Behind the cursor: replayed already, its removal failed or
			// the process died before it. Remove it without a replay.
			if err := p.complete(ctx, sess, pc); err != nil {
				return "", &replayError{step: "complete a stale parked message", err: err}
			}
			continue
		}
		c, end := p.replayCopy(ctx, key.SessionID, pc, st)
		if c.behindBlock {
			// The copy was parked behind a block that came after this
			// replay started: it stays parked (unsettled, Close returns it)
			// until that block is lifted and a new replay is requested.
			return DrainBlocked, nil
		}
		st, err = p.settleCopy(ctx, sess, key, pc, c, end)
		t.replays = append(t.replays, p.report(c.d, c.in, &c.did, end))
		switch {
		case err != nil:
			return "", err
		case st.Blocked():
			return DrainBlocked, nil
		}
	}
}

// nextParked waits for the next parked copy: up to ReplayWait, or, once
// the replay has caught up (nothing counted as waiting: a message arriving
// from now on is handled at once), only a last sweep for stale copies (a
// copy parked twice, or whose removal was lost). It returns nil when none
// arrived.
func (p *Pipeline) nextParked(ctx context.Context, sess DeferredSession, caughtUp bool) (*Parked, error) {
	wait := p.o.ReplayWait
	if caughtUp {
		wait = min(wait, sweepWait)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	pc, err := sess.Next(wctx)
	switch {
	case err == nil:
		return pc, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, ErrNoParked):
		return nil, nil
	}
	return nil, &replayError{step: "receive a parked message", err: err}
}

// complete removes pc from sess, also when ctx was cancelled.
func (p *Pipeline) complete(ctx context.Context, sess DeferredSession, pc *Parked) error {
	cctx, cancel := p.settleCtx(ctx)
	defer cancel()
	return sess.Complete(cctx, pc)
}

// replayCopy runs one parked copy of session sid, last seen in state st,
// through the subscriber contract as the message NimBus's replay would
// republish: the copy's properties without OriginalSessionId,
// DeferralSequence and To, To = the endpoint. It returns the copy's job
// and how it ended, for Drain to settle the copy.
func (p *Pipeline) replayCopy(ctx context.Context, sid string, pc *Parked, st session.State) (*job, result) {
	start := p.o.Now()
	// The copy continues the trace of the event it carries (its
	// traceparent, which NimBus's replay republishes unchanged), not the
	// replay request's; its span links to the replay's.
	if rctx := telemetry.Extract(ctx, pc.Properties); oteltrace.SpanContextFromContext(rctx).IsRemote() {
		var span oteltrace.Span
		ctx, span = p.o.Tracer.Start(rctx, spanReplay, oteltrace.WithSpanKind(oteltrace.SpanKindConsumer),
			oteltrace.WithLinks(oteltrace.LinkFromContext(ctx)))
		defer span.End()
	}
	b := pc.Broker
	b.SessionID = &sid
	j := p.newJob(&Delivery{Broker: b, Properties: message.ReplayedProperties(pc.Properties, p.o.EndpointID), Body: pc.Body}, start)
	defer j.endSettle()
	ctx, j.did.charge = telemetry.WithPartCharge(ctx)
	j.startFrom(st)
	j.did.deferralSequence, _ = message.DeferralSequenceOf(pc.Properties)
	o, err := j.replay(ctx)
	j.did.duration = p.o.Now().Sub(start)
	return j, ending(o, err, j.d.Properties)
}

// replay reads the parked copy and handles it as an original delivery of
// its event would be, unless the session is blocked by another event.
func (j *job) replay(ctx context.Context) (Outcome, error) {
	in, err := j.read(readAs{replaying: true})
	if err != nil {
		return "", err
	}
	if in.Type != message.EventRequest && in.Type != message.UnsupportedResponse {
		return "", &UnsupportedTypeError{Type: in.Type.String()}
	}
	// The source identity is the MessageId of the delivery that parked the
	// copy, which it carries as its InboxMessageId.
	source := deref(in.MessageID)
	if src := in.InboxMessageID; src != nil && *src != "" {
		source = *src
	}
	j.ownKey()
	src := j.sourceKey()
	// The state is read with the inbox checks (no extra round trip): the
	// session may have been blocked again since this replay last saw it.
	switch dup, err := j.lookup(ctx, []*inbox.Key{j.own, src}, true); {
	case err != nil:
		return "", err
	case dup:
		return j.duplicate(ctx)
	}
	if j.st.Blocked() && !j.isBlocker(j.st, source) {
		// Parked behind another event's block: not this replay's to handle.
		j.behindBlock = true
		return OutcomeDrained, nil
	}
	return j.handleEvent(ctx, []*inbox.Key{src, j.own}, source)
}

// settleCopy settles the parked copy pc after its replay c ended with end.
// A failure that may pass gives the copy back and ends the replay (the
// replay request is redelivered after the pause). Otherwise the replay
// cursor of session key moves past the copy, and the copy is removed or,
// after a permanent failure, reported to the Resolver and dead-lettered.
// It returns the session state the copy left.
func (p *Pipeline) settleCopy(ctx context.Context, sess DeferredSession, key session.Key, pc *Parked, c *job, end result) (session.State, error) {
	sctx, cancel := p.settleCtx(ctx)
	defer cancel()
	spec := end.outcome.Spec()
	if !spec.Completes() && (spec.Pause || end.outcome == OutcomeCanceled) {
		if pc.Broker.DeliveryCount >= p.o.MaxDeliveryCount {
			p.notice(sctx, &c.did, readLenient(c.d), end)
		}
		_ = sess.Abandon(sctx, pc)
		return c.st, &copyError{end: end}
	}
	// The cursor moves past the copy before the copy is removed: once
	// handled, a copy counts as replayed even if its removal fails (it
	// comes back stale), so the count never stays above what waits.
	c.did.replayed = true
	seq := c.did.deferralSequence
	st, err := p.changeState(sctx, key, c.st, "replayed", func(s session.State) (session.State, bool, error) {
		n, changed := s.Replayed(seq)
		return n, changed, nil
	})
	if err != nil {
		return st, &replayError{err: err}
	}
	if spec.Completes() {
		if err := sess.Complete(sctx, pc); err != nil {
			return st, &replayError{step: "complete a replayed message", err: err}
		}
		return st, nil
	}
	// A permanent failure: tell the Resolver, then dead-letter the copy
	// (the replay holds it, so it can).
	p.notice(sctx, &c.did, readLenient(c.d), end)
	dl := deadLetterOf(end)
	if err := sess.DeadLetter(sctx, pc, dl.Reason, dl.Description); err != nil {
		return st, &replayError{step: "dead-letter a replayed message", err: err}
	}
	return st, nil
}
