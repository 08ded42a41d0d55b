package subscriber

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/session"
)

// lookup runs the inbox checks of keys (nil keys are skipped), for a
// transactional handler the marker reads of the same keys in its
// partition, and, when withState and the delivery has a session, the
// session-state read, all at once: one sequential round trip. dup is true
// when a key was found recorded. A failed inbox check fails the lookup; a
// failed state read does too, unless an original delivery turned out to be
// a duplicate (its answer needs no state).
func (j *job) lookup(ctx context.Context, keys []*inbox.Key, withState bool) (dup bool, err error) {
	p := j.p
	readState := withState && j.hasSession
	if len(keys) > 0 {
		j.prepareTx()
	}
	markers := j.readsMarkers()
	type check struct {
		seen, marked bool
		err, mErr    error
	}
	checks := make([]check, len(keys))
	var stErr error
	// The reads run at once: all but the last on goroutines of their own,
	// the last on this one, whose stack has already grown for the SDK's
	// depth (a new goroutine's grows again on each request).
	var reads []func()
	checked := false
	for i, k := range keys {
		if k == nil {
			continue
		}
		checked = true
		reads = append(reads, func() {
			cctx, span := p.o.Tracer.Start(ctx, spanInboxCheck)
			seen, err := p.o.Inbox.HasProcessed(cctx, *k)
			if err != nil {
				// The span says only what the report says: provider
				// details may carry account names or keys.
				endSpan(span, NewStoreError(inbox.OpCheck, err))
			} else {
				if span.IsRecording() {
					span.SetAttributes(attribute.Bool("nimbus.inbox.duplicate", seen))
				}
				span.End()
			}
			checks[i].seen, checks[i].err = seen, err
		})
		if markers {
			reads = append(reads, func() { checks[i].marked, checks[i].mErr = j.hasMarker(ctx, *k) })
		}
	}
	if readState {
		reads = append(reads, func() { stErr = j.readSessionState(ctx) })
	}
	atOnce(reads)
	for i, c := range checks {
		if keys[i] == nil {
			continue
		}
		if c.err != nil {
			return false, NewStoreError(inbox.OpCheck, c.err)
		}
		if c.mErr != nil {
			return false, c.mErr
		}
		dup = dup || c.seen || c.marked
	}
	if dup {
		j.did.inbox = InboxDuplicate
	} else if checked {
		j.did.inbox = InboxNew
	}
	if stErr != nil && (!dup || j.attempt != AttemptOriginal) {
		return false, NewStoreError(sessionStoreOp(session.OpRead), stErr)
	}
	return dup, nil
}

// atOnce runs fs concurrently and returns when all have returned: the last
// on the calling goroutine, the others on goroutines of their own.
func atOnce(fs []func()) {
	if len(fs) == 0 {
		return
	}
	var wg sync.WaitGroup
	for _, f := range fs[:len(fs)-1] {
		wg.Go(f)
	}
	fs[len(fs)-1]()
	wg.Wait()
}

// readState reads the session state alone (control requests that do not
// touch the inbox).
func (j *job) readState(ctx context.Context) error {
	_, err := j.lookup(ctx, nil, true)
	return err
}
