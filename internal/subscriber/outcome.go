package subscriber

import (
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/outcome"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// Outcome is what happened to a delivery. Its value is a bounded label used
// in logs and counters.
type Outcome string

// Outcomes. Everything that follows from one (the HTTP status the host sees,
// whether the pause before answering applies, the log level and message) is
// declared once, in the outcomes table below.
const (
	OutcomeCompleted      Outcome = "completed"
	OutcomeDuplicate      Outcome = "duplicate"
	OutcomeUnsupported    Outcome = "unsupported"
	OutcomePendingHandoff Outcome = "pending_handoff"
	OutcomeHeartbeat      Outcome = "heartbeat"
	// OutcomeEventFailed: the handler failed; ErrorResponse sent, the
	// session blocked by the event, a RetryRequest scheduled when a policy
	// applies; the message completes.
	OutcomeEventFailed Outcome = "event_failed"
	// OutcomeDeferred: the session is blocked (or its parked messages are
	// being replayed); the message was parked and DeferralResponse sent.
	OutcomeDeferred Outcome = "deferred"
	// OutcomeDiscarded: the handler discarded the event; SkipResponse sent.
	OutcomeDiscarded Outcome = "discarded"
	// OutcomeSkipped: the Manager's SkipRequest; SkipResponse sent and the
	// session unblocked when this event blocked it.
	OutcomeSkipped Outcome = "skipped"
	// OutcomeSkippedNotBlocking: the Manager's SkipRequest for an event
	// that does not block its session; SkipResponse sent, nothing
	// unblocked.
	OutcomeSkippedNotBlocking Outcome = "skipped_not_blocking"
	OutcomeHandoffCompleted   Outcome = "handoff_completed"
	OutcomeHandoffFailed      Outcome = "handoff_failed"
	// OutcomeHandoffUnmatched: a HandoffFailedRequest for an event that does
	// not block its session; completed without a response, as NimBus does.
	OutcomeHandoffUnmatched Outcome = "handoff_unmatched"
	// OutcomeHandoffNotPending: a HandoffCompletedRequest for an event that
	// is not pending a handoff (it failed, or it may wait parked); completed
	// without a response, the session unchanged.
	OutcomeHandoffNotPending Outcome = "handoff_not_pending"
	// OutcomeRetryObsolete: a RetryRequest for an event that no longer
	// blocks its session; ResolutionResponse sent, the handler not run.
	OutcomeRetryObsolete Outcome = "retry_obsolete"
	// OutcomeDrained: a replay request was handled (see Report.DrainStop).
	OutcomeDrained Outcome = "drained"

	OutcomeTransientFailure Outcome = "transient_failure"
	// OutcomeSessionWriteFailed: a change of the session state (a block, a
	// park, an unblock) could not be written; the delivery fails, and its
	// redelivery reads the state again.
	OutcomeSessionWriteFailed Outcome = "session_write_failed"
	OutcomeHandlerFailed      Outcome = "handler_failed"
	OutcomePermanentFailure   Outcome = "permanent_failure"
	OutcomePublishFailed      Outcome = "publish_failed"
	// OutcomeEventsSendFailed: the events a plain handler published could
	// not be sent; the delivery is not recorded, and its redelivery runs
	// the handler again, which publishes them again under the same ids.
	OutcomeEventsSendFailed Outcome = "events_send_failed"
	// OutcomeOutboxSendFailed: a transactional handler's batch committed
	// its effects and published events, and the send of the events (with
	// the ResolutionResponse) failed; the redelivery finds the marker and
	// sends them.
	OutcomeOutboxSendFailed Outcome = "outbox_send_failed"
	// OutcomeOutboxDispatched: a copy of a delivery another copy committed
	// found its published events not yet dispatched, and sent them with the
	// ResolutionResponse that copy stored, instead of answering a
	// duplicate.
	OutcomeOutboxDispatched Outcome = "outbox_dispatched"
	// OutcomeDuplicateResolved: a redelivery of a message whose
	// transactional batch committed found its inbox marker, which holds no
	// events and so keeps no record that the ResolutionResponse went out
	// (the delivery that committed may have stopped, or lost the batch's
	// answer, before sending it); the handler is skipped and the
	// ResolutionResponse is sent instead of a SkipResponse.
	OutcomeDuplicateResolved      Outcome = "duplicate_resolved"
	OutcomeInvalidMessage         Outcome = "invalid_message"
	OutcomeUnsupportedMessageType Outcome = "unsupported_message_type"
	OutcomeInvalidCloudEvent      Outcome = "invalid_cloudevent"
	OutcomeCanceled               Outcome = "canceled"
	OutcomeMalformed              Outcome = "malformed_invocation"
	OutcomeOverloaded             Outcome = "overloaded"
	// OutcomeUnauthorized: a Manager request not from the Manager.
	OutcomeUnauthorized Outcome = "unauthorized"
	// OutcomeDrainBusy: another replay holds the session's parked messages.
	OutcomeDrainBusy Outcome = "drain_busy"
	// OutcomeReplayFailed: the replay of parked messages failed.
	OutcomeReplayFailed Outcome = "replay_failed"
	// OutcomeTxnConflict: an operation of a transactional handler's batch
	// failed with 409, 412 or 404 (another copy or writer changed the
	// partition) on the first run and on every re-run within the
	// invocation (Options.TxnConflictReruns); nothing was applied, and the
	// redelivery runs the handler again on fresh reads (or finds the other
	// copy's marker).
	OutcomeTxnConflict Outcome = "txn_conflict"
	// OutcomeTxnAmbiguous: the batch was sent and no verdict came back; it
	// may have been applied. The redelivery's marker read decides.
	OutcomeTxnAmbiguous Outcome = "txn_ambiguous"
	// OutcomeTxnRejected: the batch breaks a Cosmos DB batch limit (checked
	// before sending) or the service refused an operation for good;
	// nothing was applied. The dead-letter path.
	OutcomeTxnRejected Outcome = "txn_rejected"
)

// outcomes is the one table of outcomes. TestEveryOutcomeHasARow fails when
// a constant above has no row here.
var outcomes = outcome.Table[Outcome]{Rows: map[Outcome]outcome.Spec{
	OutcomeCompleted:      outcome.Row(http.StatusOK, false, zerolog.InfoLevel, "invocation completed"),
	OutcomeDuplicate:      outcome.Row(http.StatusOK, false, zerolog.InfoLevel, "inbox duplicate detected; handler skipped and SkipResponse sent"),
	OutcomeUnsupported:    outcome.Row(http.StatusOK, false, zerolog.InfoLevel, "no handler for the event type; UnsupportedResponse sent"),
	OutcomePendingHandoff: outcome.Row(http.StatusOK, false, zerolog.InfoLevel, "handler handed the event off; PendingHandoffResponse sent, not recorded"),
	OutcomeHeartbeat:      outcome.Row(http.StatusOK, false, zerolog.InfoLevel, "heartbeat answered"),
	OutcomeEventFailed: outcome.Row(http.StatusOK, false, zerolog.WarnLevel,
		"handler failed; ErrorResponse sent, the session is blocked by this event (RetryRequest scheduled when a retry policy applies)"),
	OutcomeDeferred:           outcome.Row(http.StatusOK, false, zerolog.InfoLevel, "session is blocked; the message was parked and DeferralResponse sent"),
	OutcomeDiscarded:          outcome.Row(http.StatusOK, false, zerolog.WarnLevel, "handler discarded the event; SkipResponse sent, the session is not blocked"),
	OutcomeSkipped:            outcome.Row(http.StatusOK, false, zerolog.InfoLevel, "Manager skipped the event; SkipResponse sent and its block lifted"),
	OutcomeSkippedNotBlocking: outcome.Row(http.StatusOK, false, zerolog.WarnLevel, "Manager skipped an event that does not block its session; SkipResponse sent, nothing unblocked"),
	OutcomeHandoffCompleted:   outcome.Row(http.StatusOK, false, zerolog.InfoLevel, "handoff completed; ResolutionResponse sent, and the event's block lifted when it held one (sessionUnblocked)"),
	OutcomeHandoffFailed:      outcome.Row(http.StatusOK, false, zerolog.WarnLevel, "handoff failed; ErrorResponse sent, the session stays blocked"),
	OutcomeHandoffUnmatched:   outcome.Row(http.StatusOK, false, zerolog.WarnLevel, "HandoffFailedRequest for an event that does not block its session; completed without a response"),
	OutcomeHandoffNotPending:  outcome.Row(http.StatusOK, false, zerolog.WarnLevel, "HandoffCompletedRequest for an event that is not pending a handoff; completed without a response, the session unchanged"),
	OutcomeRetryObsolete:      outcome.Row(http.StatusOK, false, zerolog.InfoLevel, "RetryRequest for an event that no longer blocks its session; ResolutionResponse sent, handler not run"),
	OutcomeDrained:            outcome.Row(http.StatusOK, false, zerolog.InfoLevel, "parked messages replayed"),

	OutcomeTransientFailure:   outcome.Row(http.StatusServiceUnavailable, true, zerolog.ErrorLevel, "inbox store operation failed; the message will be retried"),
	OutcomeSessionWriteFailed: outcome.Row(http.StatusServiceUnavailable, true, zerolog.ErrorLevel, "session state write failed; the message will be retried"),
	OutcomeHandlerFailed:      outcome.Row(http.StatusServiceUnavailable, true, zerolog.ErrorLevel, "handler failed; the message will be retried"),
	OutcomePublishFailed:      outcome.Row(http.StatusServiceUnavailable, true, zerolog.ErrorLevel, "Resolver response could not be sent; the message will be retried"),
	OutcomeEventsSendFailed: outcome.Row(http.StatusServiceUnavailable, true, zerolog.ErrorLevel,
		"the events the handler published could not be sent; nothing recorded; the message will be retried and the handler runs again"),
	OutcomeOutboxSendFailed: outcome.Row(http.StatusServiceUnavailable, true, zerolog.ErrorLevel,
		"the handler's effects and published events were committed, and sending the events failed; the message will be retried and its redelivery sends them"),
	OutcomeOutboxDispatched: outcome.Row(http.StatusOK, false, zerolog.InfoLevel,
		"inbox duplicate whose committed events were not yet dispatched; handler skipped, the stored events and ResolutionResponse sent"),
	OutcomeDuplicateResolved: outcome.Row(http.StatusOK, false, zerolog.InfoLevel,
		"redelivery of a committed transactional delivery; handler skipped and its ResolutionResponse sent, as the delivery that committed may not have sent it"),
	OutcomePermanentFailure: outcome.Row(http.StatusUnprocessableEntity, false, zerolog.ErrorLevel, "handler failed permanently; failing at once so the broker dead-letters the message after its last delivery"),
	OutcomeInvalidMessage:   outcome.Row(http.StatusUnprocessableEntity, false, zerolog.ErrorLevel, "message is not a valid NimBus message; failing at once so the broker dead-letters it after its last delivery"),
	OutcomeUnsupportedMessageType: outcome.Row(http.StatusUnprocessableEntity, false, zerolog.ErrorLevel,
		"message type is not handled by this subscriber; failing at once so the broker dead-letters it after its last delivery"),
	OutcomeInvalidCloudEvent: outcome.Row(http.StatusUnprocessableEntity, false, zerolog.ErrorLevel,
		"CloudEvent rejected (a required attribute is missing, the specversion is not 1.0, or its type maps to no handler); failing at once so the broker dead-letters it after its last delivery"),
	OutcomeCanceled:   outcome.Row(http.StatusServiceUnavailable, false, zerolog.WarnLevel, "invocation cancelled; the message will be retried"),
	OutcomeMalformed:  outcome.Row(http.StatusBadRequest, false, zerolog.ErrorLevel, "malformed invocation envelope; failing so the broker redelivers and finally dead-letters it"),
	OutcomeOverloaded: outcome.Row(http.StatusServiceUnavailable, false, zerolog.WarnLevel, "too many invocation bytes in flight; the message will be retried"),
	OutcomeUnauthorized: outcome.Row(http.StatusUnprocessableEntity, false, zerolog.ErrorLevel,
		"Manager request not sent by the Manager; failing at once so the broker dead-letters it after its last delivery"),
	OutcomeDrainBusy:    outcome.Row(http.StatusServiceUnavailable, true, zerolog.WarnLevel, "another replay holds the session's parked messages; the replay request will be retried"),
	OutcomeReplayFailed: outcome.Row(http.StatusServiceUnavailable, true, zerolog.ErrorLevel, "replay of parked messages failed; the replay request will be retried"),
	OutcomeTxnConflict: outcome.Row(http.StatusServiceUnavailable, true, zerolog.WarnLevel,
		"an operation of the handler's transactional batch conflicted (409, 412 or 404) on every run within the invocation; nothing applied; the message will be retried on fresh reads"),
	OutcomeTxnAmbiguous: outcome.Row(http.StatusServiceUnavailable, true, zerolog.WarnLevel,
		"the handler's transactional batch got no verdict and may have been applied; the message will be retried and its inbox marker decides"),
	OutcomeTxnRejected: outcome.Row(http.StatusUnprocessableEntity, false, zerolog.ErrorLevel,
		"the handler's transactional batch breaks a batch limit or was refused; nothing applied; failing at once so the broker dead-letters the message after its last delivery"),
}, Unknown: outcome.Row(http.StatusServiceUnavailable, false, zerolog.ErrorLevel, "invocation ended with an unknown outcome")}

// Spec returns what follows from o: its row of the outcome table.
func (o Outcome) Spec() outcome.Spec { return outcomes.Spec(o) }

// Completes reports whether the host completes the message (a 2xx answer).
func (o Outcome) Completes() bool { return o.Spec().Completes() }

// InboxState says what the inbox did for a delivery.
type InboxState string

// Inbox states.
const (
	InboxNew       InboxState = "new"
	InboxDuplicate InboxState = "duplicate"
	InboxBypassed  InboxState = "bypassed"
	InboxOff       InboxState = "off"
	// InboxNotReached: the delivery failed or ended before the inbox.
	InboxNotReached InboxState = "not_reached"
)

// Report describes one processed delivery for the invocation log line. It
// never holds the payload: every string comes from the broker's or the
// message's application properties, and the caller bounds them.
type Report struct {
	Outcome   Outcome
	Inbox     InboxState
	MessageID string
	SessionID string
	EventID   string
	// EventTypeID is the EventTypeId application property; it is empty
	// when the type came from the body (EventTypeFromBody), which is payload
	// and is not logged.
	EventTypeID       string
	EventTypeFromBody bool
	MessageType       string
	// CloudEvent is the content mode (binary or structured) of a detected
	// CloudEvent; "" for a native message.
	CloudEvent string
	// BypassReason is set when Inbox is InboxBypassed.
	BypassReason string
	// StoreOp names the failed store operation (check, record,
	// session_read or session_write).
	StoreOp string
	// RecordRetries counts record attempts after a failed one.
	RecordRetries int
	// MarkRetries counts attempts of a transactional delivery's dispatched
	// mark after a failed one.
	MarkRetries int
	// HandlerRan is true when the application handler was invoked.
	HandlerRan bool
	// TxnReruns counts the runs of a transactional handler after its batch
	// conflicted, each in a new unit of work on fresh reads (at most
	// Options.TxnConflictReruns); 0 when the first run's batch decided.
	TxnReruns int
	// Published is true when a Resolver response was sent.
	Published bool
	// EventsPublished counts the events the handler published that this
	// delivery sent (for a copy that found its transactional outbox
	// undispatched, the stored events it sent again). EventsDropped counts
	// those the handler published and the delivery dropped, because the
	// handler did not return Completed (a failure of any kind, a panic, a
	// pending handoff, a discard).
	EventsPublished, EventsDropped int
	// DeliveryCount is the broker's delivery count of the message.
	DeliveryCount int
	// Parked: the message was parked behind its session's block, under
	// DeferralSequence.
	Parked           bool
	DeferralSequence int64
	// Blocked and Unblocked: this delivery blocked its session, or lifted
	// its event's block.
	Blocked, Unblocked bool
	// DrainRequested: a replay request (ProcessDeferredRequest) was sent.
	DrainRequested bool
	// SourceIgnored: a RetryRequest's InboxMessageId was not the id of the
	// delivery that blocked its session, so it was not recorded.
	SourceIgnored bool
	// RetryScheduled: a RetryRequest was scheduled RetryDelay from now.
	RetryScheduled bool
	RetryDelay     time.Duration
	// DeadLetterNotice: the dead-letter ErrorResponse was sent (last
	// delivery); NoticeErr is why it could not be.
	DeadLetterNotice bool
	NoticeErr        error
	// Charge is the Cosmos request charge of replaying one parked copy (its
	// inbox check, session-state and record requests; part of its Drain's);
	// nil for a delivery, whose charge is its invocation's.
	Charge *telemetry.Charge
	// Replays are the parked copies a Drain replayed, and DrainStop why it
	// stopped.
	Replays   []Report
	DrainStop string
	// deadLetter is what the dead-letter notice reports, when the failure
	// named NimBus's exact case.
	deadLetter *message.DeadLetter
	// Err is why the delivery did not complete; for a delivery that
	// completed by answering its handler's failure (event_failed,
	// discarded), that failure; otherwise nil.
	Err error
	// Stack is the goroutine stack of a handler panic.
	Stack []byte
	// Duration is the time spent in the pipeline.
	Duration time.Duration
}
