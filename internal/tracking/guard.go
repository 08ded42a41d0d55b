package tracking

import "github.com/nimbus-go/functions-subscriber/internal/message"

// The stale-write guard. A copy of a message can reach the Resolver after
// the outcome it belongs to (auto-forward lag, a scheduled re-send, a
// dead-letter replay, a double deferred drain); without the guard its
// Pending projection would replace the settled row. Every provider applies
// Allows inside its non-terminal status write, atomically against the row
// it is about to replace. It decides from three fields of the stored row:
// ResolutionStatus (as stored, not as embedded), the MessageType that last
// wrote it, and its ParentMessageId. The soft-delete flag is not an input.
//
// Decision table for guarded incoming writes ("ancestor hit": the row's
// ParentMessageId equals the incoming LastMessageId, both non-empty — the
// row already holds this message's outcome):
//
//	incoming \ row        absent  Pending/Deferred by   Pending by control   Failed/DeadLettered/  Completed/
//	                              EventRequest,         request or handoff   Unsupported           Skipped
//	                              DeferralResponse,     park
//	                              Unknown
//	EventRequest,         apply   apply (refresh)       refuse               refuse                refuse
//	DeferralResponse
//	PendingHandoffResp.   apply   apply                 apply                apply                 refuse
//	control request       apply   apply                 apply                apply (reopen)        apply (reopen)
//	ancestor hit          apply   refuse                refuse               refuse                refuse
//	terminal write or     apply   apply                 apply                apply                 apply
//	unguarded type                                                                                 (last writer wins)

// IsTerminal reports the settled statuses: Completed, Skipped, Failed,
// DeadLettered and Unsupported.
func IsTerminal(s ResolutionStatus) bool {
	switch s {
	case Completed, Skipped, Failed, DeadLettered, Unsupported:
		return true
	}
	return false
}

// IsRequestStage reports the message types whose row a request copy may
// refresh: EventRequest, DeferralResponse, and Unknown (CLI and test seeds
// write rows without a type and must stay refreshable).
func IsRequestStage(t message.Type) bool {
	switch t {
	case message.EventRequest, message.DeferralResponse, message.Unknown:
		return true
	}
	return false
}

// IsControlRequest reports operator and manager intent: ResubmissionRequest,
// SkipRequest, RetryRequest, ContinuationRequest, HandoffCompletedRequest
// and HandoffFailedRequest.
func IsControlRequest(t message.Type) bool {
	switch t {
	case message.ResubmissionRequest, message.SkipRequest, message.RetryRequest,
		message.ContinuationRequest, message.HandoffCompletedRequest, message.HandoffFailedRequest:
		return true
	}
	return false
}

// IsGuarded reports whether a write of status by a message of type t must
// consult the stored row: a non-terminal write by EventRequest,
// DeferralResponse, PendingHandoffResponse or a control request. Terminal
// writes and other types (Unknown included) skip the read entirely.
func IsGuarded(status ResolutionStatus, t message.Type) bool {
	if IsTerminal(status) {
		return false
	}
	switch t {
	case message.EventRequest, message.DeferralResponse, message.PendingHandoffResponse:
		return true
	}
	return IsControlRequest(t)
}

// Allows decides whether incoming, written with status, may replace
// current, the stored row with its stored status (nil when there is no
// row). It is the whole stale-write rule; see the decision table above.
func Allows(status ResolutionStatus, incoming *UnresolvedEvent, current *UnresolvedEvent) bool {
	if incoming == nil {
		panic("tracking.Allows: incoming row is nil")
	}
	if current == nil || !IsGuarded(status, incoming.MessageType) {
		return true
	}
	// Ancestor check: responses stamp ParentMessageId with the message
	// they answer, settlement requests with the handoff response's id,
	// original requests carry "self"; re-sends keep their MessageId.
	if p, id := current.ParentMessageID, incoming.LastMessageID; p != nil && id != nil && *p != "" && *p == *id {
		return false
	}
	switch incoming.MessageType {
	case message.EventRequest, message.DeferralResponse:
		return !IsTerminal(current.ResolutionStatus) && IsRequestStage(current.MessageType)
	case message.PendingHandoffResponse:
		return current.ResolutionStatus != Completed && current.ResolutionStatus != Skipped
	}
	return true // control requests: operator intent
}
