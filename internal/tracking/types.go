package tracking

import (
	"fmt"
	"strconv"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// ResolutionStatus is NimBus's ResolutionStatus. The numbers are the C#
// ordinals; stores persist the name.
type ResolutionStatus int32

// The ResolutionStatus values, in NimBus's declaration order.
const (
	Pending ResolutionStatus = iota
	Deferred
	Failed
	TooManyRequests
	DeadLettered
	Unsupported
	Published
	Completed
	Skipped
)

var statusNames = [...]string{
	Pending:         "Pending",
	Deferred:        "Deferred",
	Failed:          "Failed",
	TooManyRequests: "TooManyRequests",
	DeadLettered:    "DeadLettered",
	Unsupported:     "Unsupported",
	Published:       "Published",
	Completed:       "Completed",
	Skipped:         "Skipped",
}

// String returns the persisted name, or the decimal ordinal for a value
// NimBus does not define.
func (s ResolutionStatus) String() string {
	if s >= 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return strconv.Itoa(int(s))
}

// ParseResolutionStatus parses a persisted status name (case-sensitive, as
// the Cosmos provider compares the top-level status field ordinally).
func ParseResolutionStatus(s string) (ResolutionStatus, bool) {
	for i, n := range statusNames {
		if n == s {
			return ResolutionStatus(i), true
		}
	}
	return 0, false
}

// MarshalText writes the status name.
func (s ResolutionStatus) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a status name or ordinal.
func (s *ResolutionStatus) UnmarshalText(b []byte) error {
	if v, ok := ParseResolutionStatus(string(b)); ok {
		*s = v
		return nil
	}
	if n, err := strconv.ParseInt(string(b), 10, 32); err == nil {
		*s = ResolutionStatus(n)
		return nil
	}
	return fmt.Errorf("tracking: %q is not a ResolutionStatus", string(b))
}

// EndpointRole is NimBus's EndpointRole; stores persist the name.
type EndpointRole int32

// The EndpointRole values.
const (
	Publisher EndpointRole = iota
	Subscriber
)

// String returns the persisted name.
func (r EndpointRole) String() string {
	switch r {
	case Publisher:
		return "Publisher"
	case Subscriber:
		return "Subscriber"
	}
	return strconv.Itoa(int(r))
}

// MarshalText writes the role name.
func (r EndpointRole) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads a role name or ordinal.
func (r *EndpointRole) UnmarshalText(b []byte) error {
	switch string(b) {
	case "Publisher":
		*r = Publisher
		return nil
	case "Subscriber":
		*r = Subscriber
		return nil
	}
	if n, err := strconv.ParseInt(string(b), 10, 32); err == nil {
		*r = EndpointRole(n)
		return nil
	}
	return fmt.Errorf("tracking: %q is not an EndpointRole", string(b))
}

// AuditType is NimBus's MessageAuditType. Stores persist the number; the
// numbering is append-only.
type AuditType int32

// The MessageAuditType values.
const (
	AuditResubmit                 AuditType = 0
	AuditResubmitWithChanges      AuditType = 1
	AuditSkip                     AuditType = 2
	AuditRetry                    AuditType = 3
	AuditComment                  AuditType = 4
	AuditCompleteHandoff          AuditType = 5
	AuditFailHandoff              AuditType = 6
	AuditSearchEvents             AuditType = 7
	AuditGetEventDetails          AuditType = 8
	AuditGetEndpointDetails       AuditType = 9
	AuditEnableEndpoint           AuditType = 10
	AuditDisableEndpoint          AuditType = 11
	AuditEnableEndpointSend       AuditType = 12
	AuditDisableEndpointSend      AuditType = 13
	AuditPurgeMessages            AuditType = 14
	AuditCompose                  AuditType = 15
	AuditReportEvent              AuditType = 16
	AuditGrantRole                AuditType = 17
	AuditRevokeRole               AuditType = 18
	AuditManageSubscription       AuditType = 19
	AuditUpdateHeartbeatSettings  AuditType = 20
	AuditSendHeartbeatNow         AuditType = 21
	AuditEnableEndpointHeartbeat  AuditType = 22
	AuditDisableEndpointHeartbeat AuditType = 23
	AuditDeleteStorageContainer   AuditType = 24
	AuditReconcileStalePending    AuditType = 25
)

// PendingSubStatusHandoff is the PendingSubStatus of a row parked by a
// PendingHandoffResponse.
const PendingSubStatusHandoff = "Handoff"

// UnresolvedEvent is the tracking row: one per event, session and endpoint,
// NimBus's UnresolvedEvent. Its JSON is the embedded "event" of the Cosmos
// tracking document: PascalCase, nulls written, "" kept as "". Nil string
// pointers are null; optional strings round-trip exactly.
//
// Times are UTC; stores keep them to .NET's 100 ns tick (NormalizeTime).
type UnresolvedEvent struct {
	UpdatedAt                  time.Time        `json:"UpdatedAt"`
	EnqueuedTimeUtc            time.Time        `json:"EnqueuedTimeUtc"`
	EventID                    string           `json:"EventId"`
	SessionID                  string           `json:"SessionId"`
	CorrelationID              *string          `json:"CorrelationId"`
	ResolutionStatus           ResolutionStatus `json:"ResolutionStatus"`
	EndpointRole               EndpointRole     `json:"EndpointRole"`
	EndpointID                 string           `json:"EndpointId"`
	RetryCount                 *int32           `json:"RetryCount"`
	RetryLimit                 *int32           `json:"RetryLimit"`
	MessageType                message.Type     `json:"MessageType"`
	DeadLetterReason           *string          `json:"DeadLetterReason"`
	DeadLetterErrorDescription *string          `json:"DeadLetterErrorDescription"`
	LastMessageID              *string          `json:"LastMessageId"`
	OriginatingMessageID       *string          `json:"OriginatingMessageId"`
	ParentMessageID            *string          `json:"ParentMessageId"`
	Reason                     *string          `json:"Reason"`
	OriginatingFrom            *string          `json:"OriginatingFrom"`
	EventTypeID                *string          `json:"EventTypeId"`
	To                         *string          `json:"To"`
	From                       *string          `json:"From"`
	MessageContent             *message.Content `json:"MessageContent"`
	QueueTimeMs                *int64           `json:"QueueTimeMs"`
	ProcessingTimeMs           *int64           `json:"ProcessingTimeMs"`
	PendingSubStatus           *string          `json:"PendingSubStatus"`
	HandoffReason              *string          `json:"HandoffReason"`
	ExternalJobID              *string          `json:"ExternalJobId"`
	ExpectedBy                 *time.Time       `json:"ExpectedBy"`
	CloudEventID               *string          `json:"CloudEventId"`
	CloudEventSource           *string          `json:"CloudEventSource"`
	CloudEventType             *string          `json:"CloudEventType"`
	CloudEventSubject          *string          `json:"CloudEventSubject"`
}

// MessageEntity is one message in an event's history, NimBus's
// MessageEntity: the "message" of the per-message document. The history
// keeps every copy the Resolver sees, stale ones included.
type MessageEntity struct {
	EventID                    string           `json:"EventId"`
	MessageID                  string           `json:"MessageId"`
	EventTypeID                *string          `json:"EventTypeId"`
	OriginatingMessageID       *string          `json:"OriginatingMessageId"`
	ParentMessageID            *string          `json:"ParentMessageId"`
	From                       *string          `json:"From"`
	To                         *string          `json:"To"`
	OriginatingFrom            *string          `json:"OriginatingFrom"`
	SessionID                  *string          `json:"SessionId"`
	CorrelationID              *string          `json:"CorrelationId"`
	EnqueuedTimeUtc            time.Time        `json:"EnqueuedTimeUtc"`
	MessageContent             *message.Content `json:"MessageContent"`
	MessageType                message.Type     `json:"MessageType"`
	EndpointRole               EndpointRole     `json:"EndpointRole"`
	EndpointID                 string           `json:"EndpointId"`
	RetryCount                 *int32           `json:"RetryCount"`
	RetryLimit                 *int32           `json:"RetryLimit"`
	DeadLetterReason           *string          `json:"DeadLetterReason"`
	DeadLetterErrorDescription *string          `json:"DeadLetterErrorDescription"`
	OriginalSessionID          *string          `json:"OriginalSessionId"`
	DeferralSequence           *int64           `json:"DeferralSequence"`
	QueueTimeMs                *int64           `json:"QueueTimeMs"`
	ProcessingTimeMs           *int64           `json:"ProcessingTimeMs"`
	PendingSubStatus           *string          `json:"PendingSubStatus"`
	HandoffReason              *string          `json:"HandoffReason"`
	ExternalJobID              *string          `json:"ExternalJobId"`
	ExpectedBy                 *time.Time       `json:"ExpectedBy"`
	CloudEventID               *string          `json:"CloudEventId"`
	CloudEventSource           *string          `json:"CloudEventSource"`
	CloudEventType             *string          `json:"CloudEventType"`
	CloudEventSubject          *string          `json:"CloudEventSubject"`
}

// MessageAudit is one audit entry, NimBus's MessageAuditEntity: the "audit"
// of the audit document. AuditType is persisted as its number.
type MessageAudit struct {
	AuditorName       *string   `json:"AuditorName"`
	AuditTimestamp    time.Time `json:"AuditTimestamp"`
	AuditType         AuditType `json:"AuditType"`
	Comment           *string   `json:"Comment"`
	AccessDenied      bool      `json:"AccessDenied"`
	Data              *string   `json:"Data"`
	EventID           *string   `json:"EventId"`
	EndpointID        *string   `json:"EndpointId"`
	CloudEventID      *string   `json:"CloudEventId"`
	CloudEventSource  *string   `json:"CloudEventSource"`
	CloudEventType    *string   `json:"CloudEventType"`
	CloudEventSubject *string   `json:"CloudEventSubject"`
}

// EndpointStateCount counts an endpoint's unresolved rows by status, as
// NimBus's DownloadEndpointStateCount: removed and terminal rows are not
// counted, and a parked handoff counts as Pending.
type EndpointStateCount struct {
	EndpointID        string
	PendingCount      int
	DeferredCount     int
	FailedCount       int
	DeadletteredCount int
	UnsupportedCount  int
	// OldestFailureAt is the oldest UpdatedAt over Failed and DeadLettered
	// rows; nil when there is none.
	OldestFailureAt *time.Time
}

// StoredID is the id of a tracking row: "{eventID}_{sessionID}".
func StoredID(eventID, sessionID string) string { return eventID + "_" + sessionID }

// NormalizeTime returns t in UTC, truncated to .NET's 100 ns tick, the
// precision a NimBus document holds.
func NormalizeTime(t time.Time) time.Time { return t.UTC().Truncate(100 * time.Nanosecond) }

// Str returns a pointer to s, for optional fields.
func Str(s string) *string { return &s }
