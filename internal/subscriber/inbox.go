package subscriber

import (
	"context"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/sleep"
)

// ownKey works out the inbox key of the delivery's own identity (the
// CloudEvents source rule included), or records why the inbox is bypassed.
func (j *job) ownKey() {
	p := j.p
	if p.o.Inbox == nil {
		j.did.inbox = InboxOff
		return
	}
	id := j.in.MessageID
	if j.ce != nil && p.o.DeduplicateCloudEventsBySource {
		s, reason := inbox.CloudEventMessageID(j.ce.Source, j.ce.ID)
		if reason == inbox.BypassNone {
			reason = inbox.BypassReason(p.o.EndpointID, &s)
		}
		if reason != inbox.BypassNone {
			j.bypass(reason)
			return
		}
		id = &s
	}
	if reason := inbox.BypassReason(p.o.EndpointID, id); reason != inbox.BypassNone {
		j.bypass(reason)
		return
	}
	k := inbox.NewKey(p.o.EndpointID, *id)
	j.own = &k
}

func (j *job) bypass(reason string) {
	j.did.inbox, j.did.bypassReason = InboxBypassed, reason
}

// sourceKey is the inbox key of the stand-in's source MessageId
// (InboxMessageId), when it is usable and differs from the own key.
func (j *job) sourceKey() *inbox.Key {
	src := j.in.InboxMessageID
	if j.own == nil || src == nil || *src == j.own.MessageID ||
		inbox.BypassReason(j.p.o.EndpointID, src) != inbox.BypassNone {
		return nil
	}
	k := inbox.NewKey(j.p.o.EndpointID, *src)
	return &k
}

// record makes a plain handler's successful delivery known as processed:
// it writes the inbox records of keys in order (a stand-in's source first,
// its own last); nil keys are skipped.
func (j *job) record(ctx context.Context, keys ...*inbox.Key) error {
	for _, k := range keys {
		if k == nil {
			continue
		}
		rctx, span := j.p.o.Tracer.Start(ctx, spanInboxRecord)
		if err := j.recordOne(rctx, *k); err != nil {
			se := NewStoreError(inbox.OpRecord, err)
			endSpan(span, se)
			return se
		}
		span.End()
	}
	return nil
}

// recordOne writes k, retrying a failure (retryWrite): once the handler
// has succeeded, a failed record means it runs again on redelivery.
func (j *job) recordOne(ctx context.Context, k inbox.Key) error {
	return j.p.retryWrite(ctx, &j.did.recordRetries, nil, func() error {
		return j.p.o.Inbox.RecordProcessed(ctx, k)
	})
}

// retryWrite runs write, a store write that may be repeated, until it
// succeeds: at most RecordAttempts times, waiting RecordBackoff before the
// second attempt and twice as long before each next one. It gives up at
// once when ctx ends, and when final (nil: never) reports a failure that
// another attempt cannot change. retried counts the attempts after a
// failed one. The writes that follow a successful handler use it: the
// inbox record and the dispatched mark of a transactional delivery's
// events, whose failure sends the work back to a redelivery.
func (p *Pipeline) retryWrite(ctx context.Context, retried *int, final func(error) bool, write func() error) error {
	wait := p.o.RecordBackoff
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			*retried++
		}
		err := write()
		if err == nil || attempt == p.o.RecordAttempts || ctx.Err() != nil || (final != nil && final(err)) {
			return err
		}
		sleep.For(ctx, wait)
		if ctx.Err() != nil {
			return err
		}
		wait *= 2
	}
}
