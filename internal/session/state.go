package session

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
)

// Key identifies the state of one session on one endpoint.
type Key struct {
	EndpointID string
	SessionID  string
	// ID is the document id: the inbox's identity hash of (EndpointID,
	// SessionID), the upper-case hex SHA-256 of
	// "<UTF-16 length of endpoint>\x1f<endpoint>\x1f<SessionId>".
	ID string
}

// NewKey builds the key of (endpointID, sessionID).
func NewKey(endpointID, sessionID string) Key {
	return Key{EndpointID: endpointID, SessionID: sessionID, ID: inbox.IdentityHash(endpointID, sessionID)}
}

// ErrInvalidKey reports a key with an empty endpoint or SessionId, or an id
// that is not the identity hash of the two. No store touches storage for
// it.
var ErrInvalidKey = errors.New("session: endpoint and session id must not be empty")

// Check validates k.
func (k Key) Check() error {
	if strings.TrimSpace(k.EndpointID) == "" || strings.TrimSpace(k.SessionID) == "" {
		return ErrInvalidKey
	}
	if k.ID != inbox.IdentityHash(k.EndpointID, k.SessionID) {
		return fmt.Errorf("%w: the key's id is not the identity hash of its endpoint and session (build keys with NewKey)", ErrInvalidKey)
	}
	return nil
}

// State is one session's state. The zero value (Version "") is the state
// of a session without a document: not blocked, nothing parked, no replay
// requested. States are values: transitions return a changed copy, and
// only a Store's Write stores one.
//
// JSON names of the stored fields (the document's "state" object, written
// with nulls as NimBus writes its SessionState) are given per field.
type State struct {
	// BlockedByEventID ("BlockedByEventId", null when not blocked) is the
	// EventId of the failed or pending event that blocks the session.
	BlockedByEventID string
	// BlockedByMessageID ("BlockedByMessageId", null when unknown) is the
	// source MessageId of the delivery that blocked the session.
	BlockedByMessageID string
	// BlockKind ("BlockKind", null when unknown) is why the event blocks
	// the session: BlockFailure or BlockHandoff. A block stored without it
	// (written before the kind was kept) is of unknown kind.
	BlockKind string
	// NextDeferralSequence ("NextDeferralSequence") is the DeferralSequence
	// the next parked copy gets; the first is 0, as in NimBus.
	NextDeferralSequence int64
	// DeferredCount ("DeferredCount") is the number of parked copies not yet
	// replayed: NextDeferralSequence − NextReplaySequence.
	DeferredCount int64
	// LastParkedMessageID ("LastParkedMessageId", null before the first
	// park) and LastParkedSequence ("LastParkedSequence") are the last
	// park: a redelivery of that message parks again under the same
	// sequence.
	LastParkedMessageID string
	LastParkedSequence  int64
	// NextReplaySequence ("NextReplaySequence") is the replay cursor: every
	// parked copy with a lower DeferralSequence has been replayed or passed
	// over, so a copy below it that turns up again is stale.
	NextReplaySequence int64
	// DrainRequestedAt ("DrainRequestedAtUtc", null when none) is when a
	// replay of the parked copies was requested; it is cleared when the
	// replay catches up (Replayed) or stops (FinishDrain).
	DrainRequestedAt time.Time
	// UpdatedAt ("updatedAtUtc", beside "state") is when the state was last
	// written; the store sets it.
	UpdatedAt time.Time
	// Version is the store's version of what was read (a Cosmos ETag);
	// empty when there is no document. Write is conditioned on it.
	Version string
}

// The kinds of block (State.BlockKind).
const (
	// BlockFailure: the event failed (an ErrorResponse was sent).
	BlockFailure = "Failure"
	// BlockHandoff: the event's handler handed it off and the Manager's
	// settlement is awaited (a PendingHandoffResponse was sent).
	BlockHandoff = "PendingHandoff"
)

// Exists reports whether the state was read from a stored document.
func (s State) Exists() bool { return s.Version != "" }

// Blocked reports whether an event blocks the session.
func (s State) Blocked() bool { return s.BlockedByEventID != "" }

// BlockedBy reports whether eventID (non-empty) blocks the session,
// comparing case-insensitively as NimBus does (OrdinalIgnoreCase).
func (s State) BlockedBy(eventID string) bool {
	return eventID != "" && s.BlockedByEventID != "" && strings.EqualFold(s.BlockedByEventID, eventID)
}

// Gated reports whether a new delivery of the session must be parked: the
// session is blocked, or parked copies wait for replay (a delivery handled
// now would overtake them).
func (s State) Gated() bool { return s.Blocked() || s.DeferredCount > 0 }

// Draining reports whether a replay has been requested and has not caught
// up or stopped.
func (s State) Draining() bool { return !s.DrainRequestedAt.IsZero() }

// Empty reports whether the state holds nothing: not blocked, nothing
// waiting, no replay requested. (The sequences still count: an empty
// state's document is kept so they never restart.)
func (s State) Empty() bool { return !s.Blocked() && s.DeferredCount == 0 && !s.Draining() }

// ErrInvalidArgument reports a transition the state refuses.
var ErrInvalidArgument = errors.New("session: invalid argument")

// Block returns the state blocked by eventID, recording messageID (the
// blocking delivery's source MessageId; empty when unknown) as
// BlockedByMessageID. It overwrites another block, as NimBus's
// BlockSession does; the caller decides whether to. Blocking again by the
// same event and message is no change. An empty eventID is refused.
func (s State) Block(eventID, messageID string) (State, bool, error) {
	if eventID == "" {
		return s, false, fmt.Errorf("%w: a session is blocked by an EventId, and it is empty", ErrInvalidArgument)
	}
	if s.BlockedByEventID == eventID && s.BlockedByMessageID == messageID {
		return s, false, nil
	}
	s.BlockedByEventID, s.BlockedByMessageID = eventID, messageID
	return s, true, nil
}

// Unblock returns the state without its block; no change when it is not
// blocked. Parked copies stay parked: RequestDrain starts their replay.
func (s State) Unblock() (State, bool) {
	if !s.Blocked() && s.BlockedByMessageID == "" && s.BlockKind == "" {
		return s, false
	}
	s.BlockedByEventID, s.BlockedByMessageID, s.BlockKind = "", "", ""
	return s, true
}

// Park allocates the DeferralSequence of a parked copy of messageID (the
// source MessageId of the parked delivery) and counts the copy. When
// messageID is the last message parked and its copy still waits, it
// returns that copy's sequence and no change: a redelivery of a delivery
// whose park was written but whose copy send failed sends the copy again
// under the same sequence (and the same InboxMessageId), so it cannot
// replay twice. An empty messageID always allocates.
//
// Park does not check that the session is gated; the caller parks because
// the state it read was.
func (s State) Park(messageID string) (State, int64, bool) {
	if messageID != "" && s.LastParkedMessageID == messageID && s.LastParkedSequence >= s.NextReplaySequence && s.LastParkedSequence < s.NextDeferralSequence {
		return s, s.LastParkedSequence, false
	}
	seq := s.NextDeferralSequence
	s.NextDeferralSequence++
	s.LastParkedMessageID, s.LastParkedSequence = messageID, seq
	s.DeferredCount = s.NextDeferralSequence - s.NextReplaySequence
	return s, seq, true
}

// RequestDrain returns the state with a replay requested at now, when
// copies wait and none is requested yet; otherwise no change. The caller
// that changed it sends the replay request (ProcessDeferredRequest).
func (s State) RequestDrain(now time.Time) (State, bool) {
	if s.DeferredCount == 0 || s.Draining() {
		return s, false
	}
	if now.IsZero() {
		now = time.Unix(0, 0)
	}
	s.DrainRequestedAt = now.UTC()
	return s, true
}

// Replayed returns the state after the parked copy seq was replayed (or
// passed over): the cursor moves past seq, DeferredCount drops to what
// still waits, and the replay request clears when nothing waits. A seq
// below the cursor (a stale copy) or not yet allocated is no change; a seq
// above the cursor passes over the copies before it.
func (s State) Replayed(seq int64) (State, bool) {
	if seq < s.NextReplaySequence || seq >= s.NextDeferralSequence {
		return s, false
	}
	s.NextReplaySequence = seq + 1
	s.DeferredCount = s.NextDeferralSequence - s.NextReplaySequence
	if s.DeferredCount == 0 {
		s.DrainRequestedAt = time.Time{}
	}
	return s, true
}

// Stale reports whether the parked copy seq is behind the replay cursor
// (already replayed or passed over).
func (s State) Stale(seq int64) bool { return seq < s.NextReplaySequence }

// FinishDrain returns the state without a replay request (a replay stopped
// before catching up: the session blocked again, or its time ran out); no
// change when none is requested.
func (s State) FinishDrain() (State, bool) {
	if !s.Draining() {
		return s, false
	}
	s.DrainRequestedAt = time.Time{}
	return s, true
}

// Check validates a state read from storage: sequences not negative, the
// cursor not past the next sequence, the count consistent with both, the
// last park within the allocated sequences.
func (s State) Check() error {
	var errs []error
	if s.NextDeferralSequence < 0 || s.NextReplaySequence < 0 || s.DeferredCount < 0 || s.LastParkedSequence < 0 {
		errs = append(errs, errors.New("a sequence or count is negative"))
	}
	if s.NextReplaySequence > s.NextDeferralSequence {
		errs = append(errs, fmt.Errorf("NextReplaySequence %d is past NextDeferralSequence %d", s.NextReplaySequence, s.NextDeferralSequence))
	}
	if s.DeferredCount != s.NextDeferralSequence-s.NextReplaySequence {
		errs = append(errs, fmt.Errorf("DeferredCount %d is not NextDeferralSequence %d − NextReplaySequence %d", s.DeferredCount, s.NextDeferralSequence, s.NextReplaySequence))
	}
	if s.LastParkedMessageID != "" && s.LastParkedSequence >= s.NextDeferralSequence {
		errs = append(errs, fmt.Errorf("LastParkedSequence %d was never allocated (NextDeferralSequence %d)", s.LastParkedSequence, s.NextDeferralSequence))
	}
	if s.BlockedByEventID == "" && s.BlockedByMessageID != "" {
		errs = append(errs, errors.New("BlockedByMessageId is set without BlockedByEventId"))
	}
	switch {
	case s.BlockKind != "" && s.BlockedByEventID == "":
		errs = append(errs, errors.New("BlockKind is set without BlockedByEventId"))
	case s.BlockKind != "" && s.BlockKind != BlockFailure && s.BlockKind != BlockHandoff:
		errs = append(errs, fmt.Errorf("BlockKind is neither %s nor %s", BlockFailure, BlockHandoff))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrCorrupt, errors.Join(errs...))
	}
	return nil
}

// ErrCorrupt reports a stored state that breaks the invariants (edited by
// hand, or not a session-state document). It is an error, never read as
// an empty state.
var ErrCorrupt = errors.New("session: stored state is not valid")
