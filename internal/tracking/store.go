package tracking

import "context"

// Writer is what the Resolver calls for each message it handles. All
// methods are safe for concurrent use.
type Writer interface {
	// StoreMessage writes one history document, idempotent per
	// (EventID, MessageID). It is written before the row's projection, for
	// stale copies too.
	StoreMessage(ctx context.Context, m MessageEntity) error

	// Upload writes the tracking row key names with status (the row's own
	// ResolutionStatus is ignored; reads report the status the row was
	// written with). A status NimBus has no upload for (TooManyRequests,
	// Published, an undefined value) is an ErrInvalidArgument. applied is
	// false only when the stale-write guard (Allows) refused the write:
	// nothing was written and the caller must not retry, the row is
	// correct. Provider failures, including a lost compare-and-swap, are
	// errors, never a refusal. Completed and Skipped, Failed, DeadLettered
	// and Unsupported writes, and rows of MessageType Unknown, are never
	// refused.
	Upload(ctx context.Context, key Key, status ResolutionStatus, row UnresolvedEvent) (applied bool, err error)

	// StoreMessageAudit appends an audit entry for event.EventID (a plain
	// insert: repeating it writes a second entry). event.EndpointID and
	// eventTypeID tag the audit document; "" leaves the tag out.
	StoreMessageAudit(ctx context.Context, event EventKey, audit MessageAudit, eventTypeID string) error

	// GetEventHistory returns every history document of eventID across
	// endpoints, in no particular order; none is an empty slice.
	GetEventHistory(ctx context.Context, eventID string) ([]MessageEntity, error)
}

// Reader holds the single-row lookups and listings the specification names.
// A missing row is (nil, nil), never an error: so is a row in another
// status or session, and a removed or archived row.
type Reader interface {
	GetPendingEvent(ctx context.Context, key Key) (*UnresolvedEvent, error)
	GetFailedEvent(ctx context.Context, key Key) (*UnresolvedEvent, error)
	GetDeferredEvent(ctx context.Context, key Key) (*UnresolvedEvent, error)
	GetDeadletteredEvent(ctx context.Context, key Key) (*UnresolvedEvent, error)
	GetUnsupportedEvent(ctx context.Context, key Key) (*UnresolvedEvent, error)
	// GetEvent returns the most recently updated row of the event across
	// sessions (Completed and Skipped rows included; removed and archived
	// rows not).
	GetEvent(ctx context.Context, event EventKey) (*UnresolvedEvent, error)
	// GetEventByID returns the row whose stored id is id
	// ("{EventId}_{SessionId}", see Key.StoredID).
	GetEventByID(ctx context.Context, endpointID, id string) (*UnresolvedEvent, error)
	// GetPendingHandoffByExternalJobID returns the Pending row parked by a
	// handoff (PendingSubStatus "Handoff") with that ExternalJobId; an
	// empty jobID matches nothing.
	GetPendingHandoffByExternalJobID(ctx context.Context, endpointID, jobID string) (*UnresolvedEvent, error)
	// GetNextPendingHandoffEvent returns the parked handoff with the
	// earliest EnqueuedTimeUtc, limited to eventTypeIDs when not empty.
	GetNextPendingHandoffEvent(ctx context.Context, endpointID string, eventTypeIDs []string) (*UnresolvedEvent, error)
	// DownloadEndpointStateCount counts the endpoint's unresolved rows.
	DownloadEndpointStateCount(ctx context.Context, endpointID string) (EndpointStateCount, error)

	// GetMessage returns one history document.
	GetMessage(ctx context.Context, eventID, messageID string) (*MessageEntity, error)
	// GetLatestEventRequestMessage returns the newest (by EnqueuedTimeUtc)
	// EventRequest or ResubmissionRequest of eventID that carries a
	// non-empty EventJson.
	GetLatestEventRequestMessage(ctx context.Context, eventID string) (*MessageEntity, error)
	// GetFailedMessage returns the newest message of the event on its
	// endpoint (compared case-insensitively) that carries ErrorContent.
	GetFailedMessage(ctx context.Context, event EventKey) (*MessageEntity, error)
	// GetDeadletteredMessage returns the newest message of the event on its
	// endpoint of any type.
	GetDeadletteredMessage(ctx context.Context, event EventKey) (*MessageEntity, error)
	// GetMessageAudits returns eventID's audits, newest first.
	GetMessageAudits(ctx context.Context, eventID string) ([]MessageAudit, error)
}

// Store is the whole message-tracking store: the Resolver's writes, the
// lookups, and the conditional and operator writes.
type Store interface {
	Writer
	Reader

	// TryCompletePendingMessage replaces the row with a Completed
	// projection of content only if the row exists, is Pending, is not
	// soft-deleted, and its LastMessageId equals expectedLastMessageID
	// (ordinal; nil matches only nil, and "" is not nil). It returns true
	// only when it replaced the row, false for every refusal including a
	// lost compare-and-swap; it never retries and never creates. Provider
	// failures are errors.
	TryCompletePendingMessage(ctx context.Context, key Key, expectedLastMessageID *string, content UnresolvedEvent) (bool, error)
	// RemoveMessage soft-deletes the row; false when it does not exist.
	RemoveMessage(ctx context.Context, key Key) (bool, error)
	// ArchiveFailedEvent soft-deletes the row for 30 days whatever its
	// status; a missing row is not an error.
	ArchiveFailedEvent(ctx context.Context, key Key) error
}
