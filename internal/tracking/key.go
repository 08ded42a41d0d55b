package tracking

import (
	"fmt"
	"slices"
	"strings"
)

// Key names one tracking row: the endpoint it is tracked under, its event
// and its session. Every method that addresses a row takes a Key, so the
// three ids cannot be passed in the wrong order.
type Key struct {
	EndpointID string
	EventID    string
	SessionID  string
}

// StoredID is the row's id: "{EventId}_{SessionId}".
func (k Key) StoredID() string { return StoredID(k.EventID, k.SessionID) }

// Event is the key's event on its endpoint, across sessions.
func (k Key) Event() EventKey { return EventKey{EndpointID: k.EndpointID, EventID: k.EventID} }

// EventKey names an event on one endpoint, across its sessions.
type EventKey struct {
	EndpointID string
	EventID    string
}

// The rules below are the provider-independent part of the contract; every
// provider applies them through these functions.

// CheckUploadStatus reports a status NimBus has an upload for: Pending,
// Deferred, Failed, DeadLettered, Unsupported, Skipped and Completed.
func CheckUploadStatus(s ResolutionStatus) error {
	switch s {
	case Pending, Deferred, Failed, DeadLettered, Unsupported, Skipped, Completed:
		return nil
	}
	return fmt.Errorf("%w: no upload for status %s", ErrInvalidArgument, s)
}

// WrittenDeleted reports the statuses whose row is written soft-deleted:
// Completed and Skipped.
func WrittenDeleted(s ResolutionStatus) bool { return s == Completed || s == Skipped }

// Visible reports a row GetEvent and GetEventByID may return: one that is
// not soft-deleted, or a Completed or Skipped row (soft-deleted by design).
func Visible(s ResolutionStatus, deleted bool) bool { return !deleted || WrittenDeleted(s) }

// CanCompletePending reports whether TryCompletePendingMessage may replace
// a stored row of status s: it is Pending, not soft-deleted, and its
// LastMessageId equals expected (ordinal; nil equals only nil).
func CanCompletePending(s ResolutionStatus, deleted bool, last, expected *string) bool {
	if s != Pending || deleted {
		return false
	}
	if last == nil || expected == nil {
		return last == nil && expected == nil
	}
	return *last == *expected
}

// NormalizeRow returns r with its times normalized as every provider
// stores them.
func NormalizeRow(r UnresolvedEvent) UnresolvedEvent {
	r.UpdatedAt = NormalizeTime(r.UpdatedAt)
	r.EnqueuedTimeUtc = NormalizeTime(r.EnqueuedTimeUtc)
	if r.ExpectedBy != nil {
		t := NormalizeTime(*r.ExpectedBy)
		r.ExpectedBy = &t
	}
	return r
}

// NewestFailedMessage is GetFailedMessage's rule over an event's history:
// the newest message on the event's endpoint (compared case-insensitively)
// that carries ErrorContent.
func NewestFailedMessage(h []MessageEntity, event EventKey) *MessageEntity {
	return Newest(h, func(m *MessageEntity) bool {
		return strings.EqualFold(m.EndpointID, event.EndpointID) && m.MessageContent != nil && m.MessageContent.ErrorContent != nil
	})
}

// NewestEndpointMessage is GetDeadletteredMessage's rule over an event's
// history: the newest message on the event's endpoint, of any type.
func NewestEndpointMessage(h []MessageEntity, event EventKey) *MessageEntity {
	return Newest(h, func(m *MessageEntity) bool { return strings.EqualFold(m.EndpointID, event.EndpointID) })
}

// EarlierHandoff is GetNextPendingHandoffEvent's rule, one parked handoff
// at a time: it returns e when e is of one of eventTypeIDs (any type when
// empty) and enqueued before best (or best is nil), else best.
func EarlierHandoff(best, e *UnresolvedEvent, eventTypeIDs []string) *UnresolvedEvent {
	if len(eventTypeIDs) > 0 && (e.EventTypeID == nil || !slices.Contains(eventTypeIDs, *e.EventTypeID)) {
		return best
	}
	if best == nil || e.EnqueuedTimeUtc.Before(best.EnqueuedTimeUtc) {
		return e
	}
	return best
}
