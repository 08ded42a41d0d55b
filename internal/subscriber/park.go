package subscriber

import (
	"context"
	"fmt"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/session"
)

// park sends this delivery, of source identity src (the copy's
// InboxMessageId), behind the session's block: the state gives
// the copy its DeferralSequence (a redelivery of the same message gets the
// same one), then the copy goes to the Deferred subscription and the
// DeferralResponse to the Resolver at once. When the session is not
// blocked but copies still wait (a replay is running), a replay request
// follows the copy, so the copy is never left behind. parked is false
// when the fresh state no longer makes the delivery wait: the caller then
// handles it.
func (j *job) park(ctx context.Context, src string) (parked bool, err error) {
	var seq int64
	err = j.change(ctx, "park", func(s session.State) (session.State, bool, error) {
		if !s.Gated() || j.isBlocker(s, src) {
			return s, false, errNotGated
		}
		next, n, changed := s.Park(src)
		seq = n
		if !changed {
			// A redelivery of the last park: same sequence, no write.
			return s, false, nil
		}
		return next, true, nil
	})
	if err != nil || !j.mustWait(src) {
		return false, err
	}
	if seq > int64(^uint32(0)>>1) {
		return false, fmt.Errorf("the session's DeferralSequence %d does not fit NimBus's int32", seq)
	}
	j.did.deferralSequence = seq
	body := j.d.Body
	if j.ce != nil && j.in.Content != nil {
		// NimBus parks a MessageContent: the copy is a native message.
		body = j.in.Content.AppendJSON(nil)
	}
	copyMsg := message.NewParkedCopy(j.in, body, int32(seq), src)
	var resp *message.Outgoing
	if j.st.Blocked() {
		resp = message.NewDeferralResponse(j.in, j.st.BlockedByEventID, j.timings())
	} else {
		resp = message.NewDeferralResponse(j.in, fmt.Sprintf("%d parked messages still being replayed", j.st.DeferredCount), j.timings())
	}
	if err := j.respondAll(ctx, copyMsg, resp); err != nil {
		return false, err
	}
	if !j.st.Blocked() {
		if err := j.requestReplay(ctx); err != nil {
			return false, err
		}
	}
	j.did.parked = true
	return true, nil
}
