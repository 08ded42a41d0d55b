package subscriber

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/session"
)

// startFrom starts a replayed copy's job from st, the session state its
// Drain last saw.
func (j *job) startFrom(st session.State) { j.st = st }

// readSessionState reads the delivery's session state (in the lookup's
// parallel step).
func (j *job) readSessionState(ctx context.Context) error {
	sctx, span := j.p.o.Tracer.Start(ctx, spanSessionRead)
	var err error
	j.st, err = j.p.o.Sessions.Read(sctx, j.sk)
	if err != nil {
		endSpan(span, NewStoreError(sessionStoreOp(session.OpRead), err))
	} else {
		span.End()
	}
	return err
}

// change applies one transition to the delivery's session state (see
// changeState) and keeps the state it leaves. Without a session it does
// nothing.
func (j *job) change(ctx context.Context, what string, c session.Change) error {
	if !j.hasSession {
		return nil
	}
	st, err := j.p.changeState(ctx, j.sk, j.st, what, c)
	j.st = st
	return err
}

// changeState applies one transition, named what in its span, to the state
// of session key, last seen as cur: ETag-conditioned, re-read on a lost
// race. It returns the state the change leaves: the one written; the
// fresh one when c ends it with errNotGated, without a write and without
// error; otherwise cur.
func (p *Pipeline) changeState(ctx context.Context, key session.Key, cur session.State, what string, c session.Change) (session.State, error) {
	wctx, span := p.o.Tracer.Start(ctx, spanSessionWrite)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("nimbus.session.change", what))
	}
	st, wrote, err := session.Apply(wctx, p.o.Sessions, key, cur, 0, c)
	switch {
	case errors.Is(err, errNotGated):
		span.End()
		return st, nil
	case err != nil:
		se := NewStoreError(sessionStoreOp(session.OpWrite), err)
		endSpan(span, se)
		return cur, se
	}
	span.End()
	if !wrote {
		return cur, nil
	}
	return st, nil
}

// errNotGated stops a park whose fresh state no longer gates the session.
var errNotGated = errors.New("the session is no longer blocked and nothing waits in it")

// isBlocker reports whether this delivery, of source identity source, is
// the one that blocked the session in state s: same EventId, and source is
// the recorded BlockedByMessageId.
func (j *job) isBlocker(s session.State, source string) bool {
	return s.BlockedBy(j.eventID()) && s.BlockedByMessageID != "" && s.BlockedByMessageID == source
}

// mustWait reports whether this delivery must wait behind the session's
// block or its parked copies. The delivery that blocked the session (its
// own redelivery, after a failure that was not answered) need not: it is
// handled again.
func (j *job) mustWait(source string) bool {
	return j.hasSession && j.st.Gated() && !j.isBlocker(j.st, source)
}

// block blocks the session by this event and source, its source identity,
// for the reason kind (session.BlockFailure or session.BlockHandoff).
func (j *job) block(ctx context.Context, kind, src string) error {
	ev := j.eventID()
	if ev == "" || !j.hasSession {
		return nil
	}
	err := j.change(ctx, "block", func(s session.State) (session.State, bool, error) {
		n, changed, err := s.Block(ev, src)
		if err == nil && n.BlockKind != kind {
			n.BlockKind, changed = kind, true
		}
		return n, changed, err
	})
	if err != nil {
		return err
	}
	if j.st.BlockedBy(ev) {
		j.did.blocked = true
	}
	return nil
}

// unblockAndDrain removes this event's block, when it is the one blocking
// the session, and then asks for the replay of whatever waits (when the
// session is no longer blocked).
func (j *job) unblockAndDrain(ctx context.Context) error {
	if !j.hasSession {
		return nil
	}
	ev := j.eventID()
	if j.st.BlockedBy(ev) {
		now := j.p.o.Now()
		err := j.change(ctx, "unblock", func(s session.State) (session.State, bool, error) {
			if !s.BlockedBy(ev) {
				return s, false, nil
			}
			s, _ = s.Unblock()
			s, _ = s.RequestDrain(now)
			return s, true, nil
		})
		if err != nil {
			return err
		}
		j.did.unblocked = !j.st.Blocked()
	}
	return j.drainIfWaiting(ctx)
}

// drainIfWaiting sends a replay request when the session is not blocked
// and parked copies wait.
func (j *job) drainIfWaiting(ctx context.Context) error {
	if !j.hasSession || j.replaying || j.st.Blocked() || j.st.DeferredCount == 0 {
		return nil
	}
	return j.requestReplay(ctx)
}

// requestReplay sends a replay request for the delivery's session.
func (j *job) requestReplay(ctx context.Context) error {
	if err := j.p.requestReplay(ctx, j.in); err != nil {
		return err
	}
	j.did.replayRequested = true
	return nil
}

// requestReplay sends a replay request (ProcessDeferredRequest) for the
// session of in.
func (p *Pipeline) requestReplay(ctx context.Context, in *message.Inbound) error {
	return p.send(ctx, message.NewProcessDeferredRequest(in))
}
